//! The key-value commands: `firn put`, `get`, `history`, `snapshot`, `watch` and `del`, each
//! one request to the node at --addr over RESP (or, for a large value, `put --file` and
//! `get --output` streamed over its HTTP API), and how their answers are printed.
//!
//! The args structs carry no doc comments of their own: the `Command` variant's doc comment
//! is the subcommand's `--help` text.

use std::path::PathBuf;

use clap::Args;
use firn_client::PutOptions;
use firn_model::time::{micros_to_rfc3339, parse_micros, parse_read_time};
use firn_model::{Key, ReadAt, ReadConsistency, SnapshotOf, VersionInfo, WatchFrom};

use crate::{Target, connect, file, http, show};

#[derive(Args)]
pub struct PutArgs {
    /// The key to write.
    key: String,
    /// The value, as text (or give --file).
    #[arg(required_unless_present = "file")]
    value: Option<String>,
    /// Stream the value from this file over HTTP (any size up to 16 GiB).
    #[arg(long, conflicts_with = "value")]
    file: Option<PathBuf>,
    #[command(flatten)]
    http: http::HttpTarget,
    /// Write only if the key's latest version is N (0: only if it does not exist).
    #[arg(long)]
    if_version: Option<u64>,
    /// The writer's own time for the value: microseconds since the epoch or RFC 3339.
    #[arg(long)]
    event_time: Option<String>,
    #[command(flatten)]
    target: Target,
}

#[derive(Args)]
pub struct GetArgs {
    /// The key to read.
    key: String,
    /// This version of the key (default: the newest).
    #[arg(long, conflicts_with_all = ["as_of", "event_time"])]
    version: Option<u64>,
    /// Newest version committed at or before this time (µs, RFC 3339, or WALL-LOGICAL);
    /// the replica waits until it has closed that time, so every replica answers alike.
    /// With --event-time: the value at that event time as it was known at this time.
    #[arg(long, visible_alias = "at")]
    as_of: Option<String>,
    /// The version with the greatest event time at or before this time.
    #[arg(long)]
    event_time: Option<String>,
    /// With --event-time: the final value at that event time — wait (up to 10 s) until the
    /// key's keyspace watermark has passed it, then read as of the moment it did.
    #[arg(long, requires = "event_time", conflicts_with_all = ["as_of", "output"])]
    complete: bool,
    /// Read locally: the newest value from the shared-memory region of the node on this
    /// host when it holds the key (a LOCAL keyspace), else the node's replica as it is
    /// (possibly stale); says on stderr how fresh the answer is. With --version, --as-of or
    /// --event-time: the node's replica as it is.
    #[arg(long, conflicts_with = "lease")]
    local: bool,
    /// A linearizable read that trusts the leader's lease (no quorum round trip).
    #[arg(long)]
    lease: bool,
    /// Print version, commit time and event time before the value.
    #[arg(long)]
    meta: bool,
    /// Stream the value into this file over HTTP (a large value).
    #[arg(long, conflicts_with_all = ["local", "lease", "meta"])]
    output: Option<PathBuf>,
    #[command(flatten)]
    http: http::HttpTarget,
    #[command(flatten)]
    target: Target,
}

#[derive(Args)]
pub struct HistoryArgs {
    /// The key whose versions to list.
    key: String,
    /// The first version to list.
    #[arg(long, default_value_t = 1)]
    from: u64,
    /// The last version to list (default: the newest).
    #[arg(long)]
    to: Option<u64>,
    /// Most versions to list (1 to 10000).
    #[arg(long, default_value_t = 100)]
    limit: usize,
    /// Only the versions committed at or before this time (RFC 3339, µs, or a commit
    /// stamp).
    #[arg(long, visible_alias = "as-of")]
    at: Option<String>,
    #[command(flatten)]
    target: Target,
}

#[derive(Args)]
pub struct SnapshotArgs {
    /// Keys to read (or give --prefix).
    keys: Vec<String>,
    /// Read the live keys under this prefix instead (first --limit of them).
    #[arg(long, conflicts_with = "keys")]
    prefix: Option<String>,
    /// Most keys to read under --prefix (1 to 10000).
    #[arg(long, default_value_t = 100)]
    limit: usize,
    /// The time (µs, RFC 3339, or WALL-LOGICAL).
    #[arg(long)]
    at: Option<String>,
    #[command(flatten)]
    target: Target,
}

#[derive(Args)]
pub struct WatchArgs {
    /// The key to follow (a prefix with --prefix).
    key: String,
    /// Treat KEY as a prefix.
    #[arg(long)]
    prefix: bool,
    /// Replay from this version first.
    #[arg(long, conflicts_with = "from_time")]
    from_version: Option<u64>,
    /// Replay versions committed at or after this time first.
    #[arg(long)]
    from_time: Option<String>,
    /// Stop after this many events.
    #[arg(long)]
    count: Option<usize>,
    #[command(flatten)]
    target: Target,
}

#[derive(Args)]
pub struct DelArgs {
    /// The key to delete (a tombstone version).
    key: String,
    #[command(flatten)]
    target: Target,
}

/// `firn put`: one new version over RESP, or the whole of `--file` streamed over HTTP.
pub async fn put(args: PutArgs) -> Result<(), String> {
    let PutArgs {
        key,
        value,
        file,
        http,
        if_version,
        event_time,
        target,
    } = args;
    if let Some(path) = file {
        // The file transfer is blocking I/O: off the runtime's worker threads.
        let line = tokio::task::spawn_blocking(move || {
            file::put_file(&http, &key, &path, if_version, event_time.as_deref())
        })
        .await
        .map_err(|e| e.to_string())??;
        println!("{line}");
        return Ok(());
    }
    let value = value.unwrap_or_default();
    let event_time_us = event_time
        .map(|t| parse_micros(&t))
        .transpose()
        .map_err(|e| e.to_string())?;
    let options = PutOptions {
        if_version,
        event_time_us,
    };
    let ack = connect(&target)
        .await?
        .put(key.as_bytes(), value.as_bytes(), options)
        .await
        .map_err(show)?;
    println!("version {}  commit {}", ack.version, ack.commit_ts);
    Ok(())
}

/// `firn get`: one version of a key, printed, or streamed into `--output` over HTTP.
pub async fn get(args: GetArgs) -> Result<(), String> {
    if let Some(path) = args.output.clone() {
        return get_into_file(args, path).await;
    }
    let at = match read_at(args.version, args.as_of, args.event_time)? {
        ReadAt::EventTime(e) if args.complete => ReadAt::EventTimeComplete(e),
        at => at,
    };
    if args.local && at == ReadAt::Latest {
        return get_local(connect(&args.target).await?, &args.key, args.meta).await;
    }
    let consistency = if args.local {
        ReadConsistency::Local
    } else if args.lease {
        ReadConsistency::Lease
    } else {
        ReadConsistency::Linearizable
    };
    let key = args.key;
    match connect(&args.target)
        .await?
        .get(key.as_bytes(), at, consistency)
        .await
        .map_err(show)?
    {
        Some(info) => {
            print_version(&info, args.meta);
            Ok(())
        }
        None => Err(format!("{key}: not found")),
    }
}

/// `firn get --local` of the newest version: from the shared-memory region of the node on
/// this host when it can answer (a `LOCAL` keyspace's value), else from the node; says on
/// stderr how fresh the answer is, so that the value alone goes to stdout.
async fn get_local(client: firn_client::Client, key: &str, meta: bool) -> Result<(), String> {
    use firn_client::{LocalClient, ReadBound};
    let (info, said) = match LocalClient::open(client.clone()).await {
        Ok(local) => {
            let got = local.get(key.as_bytes()).await.map_err(show)?;
            let said = match got.bound {
                ReadBound::Linearizable => {
                    "read from shared memory under the leader's lease: linearizable".to_string()
                }
                ReadBound::Stale {
                    at_least,
                    staleness_us_max,
                } => format!(
                    "read from shared memory: every write up to {at_least}, at most {staleness_us_max} µs stale"
                ),
                ReadBound::Remote(why) => format!(
                    "read from the node (linearizable): shared memory could not answer ({})",
                    why_remote(why)
                ),
            };
            let info = (got.version > 0).then(|| VersionInfo {
                version: got.version,
                commit_ts: got.commit_ts,
                event_time_us: None,
                deleted: got.value.is_none(),
                value: got.value,
                blob: None,
                kind: firn_model::KeyKind::String,
            });
            (info, said)
        }
        Err(why) => {
            let info = client
                .get(key.as_bytes(), ReadAt::Latest, ReadConsistency::Local)
                .await
                .map_err(show)?;
            let said = format!(
                "read the node's replica as it is (possibly stale): no shared-memory region here ({})",
                show(why)
            );
            (info, said)
        }
    };
    eprintln!("firn: {said}");
    match info.filter(|i| !i.deleted) {
        Some(info) => {
            print_version(&info, meta);
            Ok(())
        }
        None => Err(format!("{key}: not found")),
    }
}

/// Why the shared-memory region sent a read to the node, in words.
fn why_remote(why: firn_local::RemoteReason) -> String {
    use firn_local::RemoteReason::*;
    match why {
        NotPublished => "the key is not in a LOCAL keyspace, or not published yet".into(),
        ShardNotHere => "this node holds no replica of the key's shard".into(),
        Stale => "its entry was published before its shard was reset".into(),
        NotLocal => "its value is larger than an entry of the region holds".into(),
        BehindToken { has } => format!("the replica has only up to {has}, behind this client"),
        Contended => "its entry kept changing while it was read".into(),
        Retired => "the node replaced its region".into(),
    }
}

/// `firn get --output PATH`: the same choice of version, as HTTP query parameters.
async fn get_into_file(args: GetArgs, path: PathBuf) -> Result<(), String> {
    let GetArgs {
        key,
        version,
        as_of,
        event_time,
        http,
        ..
    } = args;
    let query: Vec<(&str, String)> = [
        version.map(|v| ("version", v.to_string())),
        as_of.map(|t| ("as_of", t)),
        event_time.map(|t| ("event_time", t)),
    ]
    .into_iter()
    .flatten()
    .collect();
    // The file transfer is blocking I/O: off the runtime's worker threads.
    let line = tokio::task::spawn_blocking(move || file::get_file(&http, &key, &query, &path))
        .await
        .map_err(|e| e.to_string())??;
    println!("{line}");
    Ok(())
}

/// Which version `get` reads: clap lets at most one of the three through.
fn read_at(
    version: Option<u64>,
    as_of: Option<String>,
    event_time: Option<String>,
) -> Result<ReadAt, String> {
    let as_of = as_of
        .map(|t| parse_read_time(&t).map_err(|e| e.to_string()))
        .transpose()?;
    let event_time = event_time
        .map(|t| parse_micros(&t).map_err(|e| e.to_string()))
        .transpose()?;
    Ok(match (version, as_of, event_time) {
        (Some(v), _, _) => ReadAt::Version(v),
        // The value at that event time as it was known then.
        (_, Some(as_of), Some(event_us)) => ReadAt::EventTimeAsOf { event_us, as_of },
        (_, Some(t), _) => ReadAt::AsOf(t),
        (_, _, Some(t)) => ReadAt::EventTime(t),
        _ => ReadAt::Latest,
    })
}

/// `firn history`: a key's versions, oldest first, each with its metadata.
pub async fn history(args: HistoryArgs) -> Result<(), String> {
    let as_of = args
        .at
        .map(|t| parse_read_time(&t).map_err(|e| e.to_string()))
        .transpose()?;
    for info in connect(&args.target)
        .await?
        .history(args.key.as_bytes(), args.from, args.to, args.limit, as_of)
        .await
        .map_err(show)?
    {
        print_version(&info, true);
    }
    Ok(())
}

/// `firn snapshot`: keys, or the keys under a prefix, read as of one time across shards.
pub async fn snapshot(args: SnapshotArgs) -> Result<(), String> {
    let of = match args.prefix {
        Some(p) => SnapshotOf::Prefix {
            prefix: p.into(),
            cursor: None,
            limit: args.limit,
        },
        None if args.keys.is_empty() => return Err("give keys or --prefix".into()),
        None => SnapshotOf::Keys(
            args.keys
                .iter()
                .map(|k| Key::new(k.clone().into_bytes()).map_err(|e| e.to_string()))
                .collect::<Result<_, _>>()?,
        ),
    };
    let at = args
        .at
        .map(|t| parse_read_time(&t).map_err(|e| e.to_string()))
        .transpose()?;
    let (at, items) = connect(&args.target)
        .await?
        .snapshot(&of, at)
        .await
        .map_err(show)?;
    println!("at {at} ({})", micros_to_rfc3339(at.wall_us));
    for (key, found) in items {
        let key = String::from_utf8_lossy(&key);
        match found.and_then(|i| i.value.map(|v| (i.version, v))) {
            Some((version, v)) => println!("{key}  v{version}  {}", String::from_utf8_lossy(&v)),
            None => println!("{key}  (none)"),
        }
    }
    Ok(())
}

/// `firn watch`: one line per version as it commits, until `--count` of them (or forever).
pub async fn watch(args: WatchArgs) -> Result<(), String> {
    let from = match (args.from_version, args.from_time) {
        (Some(v), _) => WatchFrom::Version(v),
        (_, Some(t)) => WatchFrom::Time(parse_read_time(&t).map_err(|e| e.to_string())?),
        _ => WatchFrom::Now,
    };
    let client = connect(&args.target).await?;
    let mut watcher = client
        .watch(args.key.as_bytes(), args.prefix, from)
        .map_err(show)?;
    let count = args.count;
    // The watcher blocks on each event: off the runtime's worker threads.
    tokio::task::spawn_blocking(move || {
        let mut seen = 0;
        while count.is_none_or(|c| seen < c) {
            let e = watcher.next_event().map_err(show)?;
            let value = e.info.value.as_ref().map_or("(deleted)".into(), |v| {
                String::from_utf8_lossy(v).into_owned()
            });
            println!(
                "{} v{} {} {}",
                String::from_utf8_lossy(&e.key),
                e.info.version,
                e.info.commit_ts,
                value
            );
            seen += 1;
        }
        Ok(())
    })
    .await
    .map_err(|e| e.to_string())?
}

/// `firn del`: a tombstone version, or a note that the key was not there.
pub async fn delete(args: DelArgs) -> Result<(), String> {
    let key = args.key;
    match connect(&args.target)
        .await?
        .delete(key.as_bytes())
        .await
        .map_err(show)?
    {
        Some(ack) => println!("deleted: version {}  commit {}", ack.version, ack.commit_ts),
        None => println!("{key}: did not exist"),
    }
    Ok(())
}

/// A version's value, after a line of its metadata when `meta` (a tombstone has no value:
/// without `meta` it prints nothing). The value alone goes out as its exact bytes, so that
/// `firn get k > file` holds the value, followed by a newline only on a terminal; after
/// metadata lines it is shown as text.
fn print_version(info: &VersionInfo, meta: bool) {
    if !meta {
        if let Some(v) = &info.value {
            use std::io::{IsTerminal, Write};
            let mut out = std::io::stdout().lock();
            let wrote = out.write_all(v).and_then(|()| match out.is_terminal() {
                true => out.write_all(b"\n"),
                false => Ok(()),
            });
            if let Err(e) = wrote.and_then(|()| out.flush()) {
                eprintln!("firn: writing the value: {e}");
                std::process::exit(1);
            }
        }
        return;
    }
    if meta {
        println!(
            "version {}  commit {} ({}){}{}",
            info.version,
            info.commit_ts,
            micros_to_rfc3339(info.commit_ts.wall_us),
            info.event_time_us.map_or(String::new(), |t| format!(
                "  event {}",
                micros_to_rfc3339(t)
            )),
            if info.deleted { "  deleted" } else { "" }
        );
    }
    if let Some(v) = &info.value {
        println!("{}", String::from_utf8_lossy(v));
    }
}
