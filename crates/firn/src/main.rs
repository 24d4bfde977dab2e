//! `firn`: run a node (`firn serve`) or talk to one (`put`, `get`, `history`, `watch`, `del`,
//! `keyspace`, `cluster`, `backup`, `restore`, and `log` for the shared log).

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

mod backup;
mod config;
mod file;
mod followed;
mod group;
mod http;
mod keyspace;
mod log;
mod request;
mod serve;

use followed::followed_line;
use group::{GroupAction, run_group};
use keyspace::{KeyspaceAction, run_keyspace};
use log::{LogAction, run_log};
use request::{RequestArgs, run_request};
use serve::{ServeArgs, serve};

/// mimalloc instead of glibc's malloc: the hot paths allocate small buffers on many threads,
/// where glibc's per-thread arenas cost time and hold memory.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use firn_client::{Client, ClientError, PutOptions};
use firn_model::time::{micros_to_rfc3339, parse_micros, parse_read_time};
use firn_model::{Key, ReadAt, ReadConsistency, SnapshotOf, VersionInfo, WatchFrom};

#[derive(Parser)]
#[command(
    name = "firn",
    version,
    about = "A consistent, temporal state store that speaks the Redis protocol"
)]
struct Cli {
    /// The CA (PEM) that signs the node's certificate: the client subcommands then reach a
    /// node started with --tls-cert over TLS, RESP and HTTP alike (before the subcommand:
    /// `firn --ca ca.pem get k`).
    #[arg(long, env = "FIRN_CA", value_name = "PATH")]
    ca: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Args)]
struct Target {
    /// RESP address of the node to talk to.
    #[arg(
        long,
        env = "FIRN_ADDR",
        default_value = "127.0.0.1:7379",
        global = true
    )]
    addr: String,
}

#[derive(Subcommand)]
enum Command {
    /// Run a node (with no flags: a single node on loopback, data in ./firn-data).
    Serve(Box<ServeArgs>),
    /// Write a new version of a key.
    Put {
        key: String,
        #[arg(required_unless_present = "file")]
        value: Option<String>,
        /// Stream the value from this file over HTTP (any size up to 16 GiB).
        #[arg(long, conflicts_with = "value")]
        file: Option<std::path::PathBuf>,
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
    },
    /// Read a key: latest, an exact version, as of a commit time, or by event time.
    Get {
        key: String,
        #[arg(long, conflicts_with_all = ["as_of", "event_time"])]
        version: Option<u64>,
        /// Newest version committed at or before this time (µs, RFC 3339, or WALL-LOGICAL);
        /// the replica waits until it has closed that time, so every replica answers alike.
        #[arg(long, visible_alias = "at", conflicts_with = "event_time")]
        as_of: Option<String>,
        /// The version with the greatest event time at or before this time.
        #[arg(long)]
        event_time: Option<String>,
        /// Read this replica as it is (fastest, possibly stale).
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
        output: Option<std::path::PathBuf>,
        #[command(flatten)]
        http: http::HttpTarget,
        #[command(flatten)]
        target: Target,
    },
    /// List a key's versions, oldest first.
    History {
        key: String,
        #[arg(long, default_value_t = 1)]
        from: u64,
        #[arg(long)]
        to: Option<u64>,
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// Only the versions committed at or before this time (RFC 3339, µs, or a commit
        /// stamp).
        #[arg(long, visible_alias = "as-of")]
        at: Option<String>,
        #[command(flatten)]
        target: Target,
    },
    /// Read keys, or the keys under a prefix, as of one time across every shard: one
    /// consistent cut. Without --at, the newest time every shard involved has closed.
    Snapshot {
        /// Keys to read (or give --prefix).
        keys: Vec<String>,
        /// Read the live keys under this prefix instead (first --limit of them).
        #[arg(long, conflicts_with = "keys")]
        prefix: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// The time (µs, RFC 3339, or WALL-LOGICAL).
        #[arg(long)]
        at: Option<String>,
        #[command(flatten)]
        target: Target,
    },
    /// Print every new version of a key (or of every key under a prefix) as it commits.
    Watch {
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
    },
    /// Delete a key (writes a tombstone version).
    Del {
        key: String,
        #[command(flatten)]
        target: Target,
    },
    /// Write one consistent cut of every key (at one closed time) to a file.
    Backup(backup::BackupArgs),
    /// Load a backup into a new, empty cluster.
    Restore(backup::RestoreArgs),
    /// Manage keyspaces.
    Keyspace {
        #[command(subcommand)]
        action: KeyspaceAction,
    },
    /// The tagged shared log (over the node's HTTP API: --http-addr).
    Log {
        #[command(subcommand)]
        action: LogAction,
    },
    /// Consumer groups of streams (over the node's HTTP API: --http-addr).
    Group {
        #[command(subcommand)]
        action: GroupAction,
    },
    /// Send one request to a service's workers and print the reply (FIRN.REQUEST).
    Request(RequestArgs),
    /// Inspect the cluster.
    Cluster {
        #[command(subcommand)]
        action: ClusterAction,
    },
}

#[derive(Subcommand)]
enum ClusterAction {
    /// Nodes, shards, leaders and replica lag, as the node at --addr sees them.
    Status {
        /// Print the raw JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Remove a node: its replicas move to the other nodes first, then it leaves the
    /// cluster (stop its process afterwards). Waits until it is gone unless --no-wait.
    Remove {
        node_id: u64,
        #[arg(long)]
        no_wait: bool,
        /// Longest wait for the move.
        #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
        timeout: Duration,
        #[command(flatten)]
        target: Target,
    },
}

fn main() -> ExitCode {
    let cli = config::parse_firn();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("firn: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("firn: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn connect(target: &Target) -> Result<Client, String> {
    Client::connect_with(&target.addr, http::client_tls())
        .await
        .map_err(|e| format!("cannot reach {}: {e}", target.addr))
}

fn show(e: ClientError) -> String {
    e.to_string()
}

fn print_version(info: &VersionInfo, meta: bool) {
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

async fn run(cli: Cli) -> Result<(), String> {
    if let Some(path) = &cli.ca {
        http::set_client_tls(firn_client::TlsCa::load(path).map_err(show)?);
    }
    match cli.command {
        Command::Serve(args) => serve(*args).await,
        Command::Log { action } => run_log(action).await,
        Command::Group { action } => run_group(action).await,
        Command::Request(args) => run_request(args).await,
        Command::Put {
            key,
            value,
            file,
            http,
            if_version,
            event_time,
            target,
        } => {
            if let Some(path) = file {
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
            let ack = connect(&target)
                .await?
                .put(
                    key.as_bytes(),
                    value.as_bytes(),
                    PutOptions {
                        if_version,
                        event_time_us,
                    },
                )
                .await
                .map_err(show)?;
            println!("version {}  commit {}", ack.version, ack.commit_ts);
            Ok(())
        }
        Command::Get {
            key,
            version,
            as_of,
            event_time,
            local,
            lease,
            meta,
            output,
            http,
            target,
        } => {
            if let Some(path) = output {
                let query: Vec<(&str, String)> = [
                    version.map(|v| ("version", v.to_string())),
                    as_of.map(|t| ("as_of", t)),
                    event_time.map(|t| ("event_time", t)),
                ]
                .into_iter()
                .flatten()
                .collect();
                let line =
                    tokio::task::spawn_blocking(move || file::get_file(&http, &key, &query, &path))
                        .await
                        .map_err(|e| e.to_string())??;
                println!("{line}");
                return Ok(());
            }
            let at = match (version, as_of, event_time) {
                (Some(v), _, _) => ReadAt::Version(v),
                (_, Some(t), _) => ReadAt::AsOf(parse_read_time(&t).map_err(|e| e.to_string())?),
                (_, _, Some(t)) => ReadAt::EventTime(parse_micros(&t).map_err(|e| e.to_string())?),
                _ => ReadAt::Latest,
            };
            let consistency = if local {
                ReadConsistency::Local
            } else if lease {
                ReadConsistency::Lease
            } else {
                ReadConsistency::Linearizable
            };
            match connect(&target)
                .await?
                .get(key.as_bytes(), at, consistency)
                .await
                .map_err(show)?
            {
                Some(info) => {
                    print_version(&info, meta);
                    Ok(())
                }
                None => Err(format!("{key}: not found")),
            }
        }
        Command::History {
            key,
            from,
            to,
            limit,
            at,
            target,
        } => {
            let as_of = at
                .map(|t| parse_read_time(&t).map_err(|e| e.to_string()))
                .transpose()?;
            for info in connect(&target)
                .await?
                .history(key.as_bytes(), from, to, limit, as_of)
                .await
                .map_err(show)?
            {
                print_version(&info, true);
            }
            Ok(())
        }
        Command::Snapshot {
            keys,
            prefix,
            limit,
            at,
            target,
        } => {
            let of = match prefix {
                Some(p) => SnapshotOf::Prefix {
                    prefix: p.into(),
                    cursor: None,
                    limit,
                },
                None if keys.is_empty() => return Err("give keys or --prefix".into()),
                None => SnapshotOf::Keys(
                    keys.iter()
                        .map(|k| Key::new(k.clone().into_bytes()).map_err(|e| e.to_string()))
                        .collect::<Result<_, _>>()?,
                ),
            };
            let at = at
                .map(|t| parse_read_time(&t).map_err(|e| e.to_string()))
                .transpose()?;
            let (at, items) = connect(&target)
                .await?
                .snapshot(&of, at)
                .await
                .map_err(show)?;
            println!("at {at} ({})", micros_to_rfc3339(at.wall_us));
            for (key, found) in items {
                let key = String::from_utf8_lossy(&key);
                match found.and_then(|i| i.value.map(|v| (i.version, v))) {
                    Some((version, v)) => {
                        println!("{key}  v{version}  {}", String::from_utf8_lossy(&v))
                    }
                    None => println!("{key}  (none)"),
                }
            }
            Ok(())
        }
        Command::Watch {
            key,
            prefix,
            from_version,
            from_time,
            count,
            target,
        } => {
            let from = match (from_version, from_time) {
                (Some(v), _) => WatchFrom::Version(v),
                (_, Some(t)) => WatchFrom::Time(parse_read_time(&t).map_err(|e| e.to_string())?),
                _ => WatchFrom::Now,
            };
            let client = connect(&target).await?;
            let mut watcher = client.watch(key.as_bytes(), prefix, from).map_err(show)?;
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
        Command::Del { key, target } => {
            match connect(&target)
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
        Command::Cluster {
            action: ClusterAction::Status { json, target },
        } => {
            let raw = connect(&target)
                .await?
                .raw(&redis::cmd("FIRN.CLUSTER"))
                .await
                .map_err(show)?;
            let text: String = redis::from_redis_value(raw).map_err(|e| e.to_string())?;
            if json {
                println!("{text}");
                return Ok(());
            }
            let view: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
            println!(
                "{:<6} {:<22} {:<22} {:<5} {:<10} note",
                "node", "resp", "http", "up", "meta"
            );
            let leaving: Vec<u64> = view["leaving"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|n| n.as_u64())
                .collect();
            for n in view["nodes"].as_array().into_iter().flatten() {
                let note = if n["node_id"]
                    .as_u64()
                    .is_some_and(|id| leaving.contains(&id))
                {
                    "leaving: its replicas are moving"
                } else {
                    ""
                };
                println!(
                    "{:<6} {:<22} {:<22} {:<5} {:<10} {note}",
                    n["node_id"].as_u64().unwrap_or(0),
                    n["resp_addr"].as_str().unwrap_or("-"),
                    n["http_addr"].as_str().unwrap_or("-"),
                    n["up"].as_bool().unwrap_or(false),
                    n["meta"].as_str().unwrap_or("-"),
                );
            }
            println!();
            println!(
                "{:<6} {:<14} {:<10} {:<8} {:<12} replica lag (entries)",
                "shard", "slots", "durability", "leader", "replicas"
            );
            for s in view["shards"].as_array().into_iter().flatten() {
                println!(
                    "{:<6} {:<14} {:<10} {:<8} {:<12} {}",
                    s["shard_id"].as_u64().unwrap_or(0),
                    format!("{}-{}", s["slots"][0], s["slots"][1]),
                    s["durability"].as_str().unwrap_or("disk"),
                    s["leader"]
                        .as_u64()
                        .map_or("none".into(), |l| l.to_string()),
                    s["replicas"]
                        .as_array()
                        .map(|r| r
                            .iter()
                            .map(|x| x.to_string())
                            .collect::<Vec<_>>()
                            .join(","))
                        .unwrap_or_default(),
                    s["replica_lag"]
                );
                if let Some(m) = s["moving"].as_object() {
                    println!(
                        "       moving a replica: add {} remove {}",
                        m["add"], m["remove"]
                    );
                }
                if let Some(f) = s["followed"].as_object() {
                    println!("       {}", followed_line(f));
                }
            }
            if view["shards"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|s| s["leader"].is_null())
            {
                return Err("some shards have no leader".into());
            }
            Ok(())
        }
        Command::Cluster {
            action:
                ClusterAction::Remove {
                    node_id,
                    no_wait,
                    timeout,
                    target,
                },
        } => {
            let client = connect(&target).await?;
            client
                .raw(redis::cmd("FIRN.CLUSTER").arg("REMOVE").arg(node_id))
                .await
                .map_err(show)?;
            println!("removing node {node_id}: its replicas move to the other nodes");
            if no_wait {
                return Ok(());
            }
            let deadline = std::time::Instant::now() + timeout;
            loop {
                let raw = client
                    .raw(&redis::cmd("FIRN.CLUSTER"))
                    .await
                    .map_err(show)?;
                let text: String = redis::from_redis_value(raw).map_err(|e| e.to_string())?;
                let view: serde_json::Value =
                    serde_json::from_str(&text).map_err(|e| e.to_string())?;
                let listed = view["nodes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|n| n["node_id"].as_u64() == Some(node_id));
                if !listed {
                    println!("node {node_id} has left the cluster; its process can be stopped");
                    return Ok(());
                }
                let held = view["shards"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|s| {
                        s["replicas"]
                            .as_array()
                            .is_some_and(|r| r.iter().any(|x| x.as_u64() == Some(node_id)))
                    })
                    .count();
                if std::time::Instant::now() > deadline {
                    return Err(format!(
                        "node {node_id} still holds {held} replicas after {timeout:?}; the move goes on"
                    ));
                }
                eprintln!("  node {node_id} still holds {held} replicas");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
        Command::Keyspace { action } => run_keyspace(action).await,
        Command::Backup(args) => backup::backup(args).await,
        Command::Restore(args) => backup::restore(args).await,
    }
}
