//! `firn backup FILE [--at T]` and `firn restore FILE`: one consistent cut of the store —
//! every key's value, every log record and stream entry at one closed time T, read across
//! all shards — with the keyspace definitions and the consumer groups, written to a file and
//! loaded into a new cluster.
//!
//! The file is lines of JSON, each record's bytes right after its line:
//!
//! ```text
//! {"firn_backup":2,"at":"W-L","at_time":"…","keyspaces":[…]}
//! {"key":"sensor/1","event_time":null,"size":4}                 then 4 bytes and "\n"
//! {"stream":"orders","id":"1795-0","size":N}                     then the entry's fields
//! {"log":"audit","seq":"1795-65536","tags":[{"name":"a"}],"size":N}  then the payload
//! {"group":"g","stream":"orders","last_delivered":"1795-0","options":{…},"consumers":[…]}
//! {"pending":"1795-0","consumer":"c","deliveries":1,"delivered_ms":…}
//! {"end":true,"keys":1,"bytes":4,"stream_entries":…,"log_records":…,"log_bytes":…,
//!  "groups":…,"pending":…,"crc32c":…}
//! ```
//!
//! A name that is not UTF-8 is `{field}_base64`. Keys come first, then each log (a stream's
//! entries, then its other records, in seq order; a record once however many tags it has;
//! `held` when a trim took it from some of its tags), then the groups, each followed by its
//! pending entries. The end line counts each kind and carries a CRC-32C of everything between
//! the first line and itself: `restore` reads the whole file and checks it before it changes
//! anything, so a cut-short or damaged file changes nothing. Format 1 (keys only) is still
//! read. Values and payloads stream through (a large value is never whole in memory).
//!
//! What a backup holds is the cut: each live key's value and event time at T, every record
//! and entry committed at or before T, and — read just after, since group state is not kept
//! as versions — the groups (see [`groups`]). Not older versions. A restore is new writes:
//! keys start again at version 1, log records get new seqs (in their old order), stream
//! entries keep their ids.

mod groups;
mod keys;
mod logs;

use std::fs::File;
use std::io::{self, BufRead, BufReader, IsTerminal, Read};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use firn_client::backup_file as file;
use firn_model::{KeyspaceDef, SnapshotOf};
use indicatif::{ProgressBar, ProgressStyle};

use self::file::{Counts, Line, check_file, read_header};
use crate::Target;
use crate::http::HttpTarget;

#[derive(Args)]
pub struct BackupArgs {
    /// The file to write (refused if it exists; written as FILE.partial, then renamed).
    file: PathBuf,
    /// The time of the cut (µs, RFC 3339, or WALL-LOGICAL); default: the newest time every
    /// shard has closed.
    #[arg(long)]
    at: Option<String>,
    #[command(flatten)]
    http: HttpTarget,
    #[command(flatten)]
    target: Target,
}

#[derive(Args)]
pub struct RestoreArgs {
    /// A file `firn backup` wrote.
    file: PathBuf,
    /// Puts in flight at once.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=1024))]
    parallel: u64,
    #[command(flatten)]
    http: HttpTarget,
    #[command(flatten)]
    target: Target,
}

fn progress(len: Option<u64>, template: &str) -> ProgressBar {
    if !io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = len.map_or_else(ProgressBar::new_spinner, ProgressBar::new);
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

pub async fn backup(args: BackupArgs) -> Result<(), String> {
    let client = crate::connect(&args.target).await?;
    let keyspaces = client.keyspace_list().await.map_err(crate::show)?;
    let path = args.file.clone();
    if path.exists() {
        return Err(format!(
            "{}: exists; a backup never overwrites a file",
            path.display()
        ));
    }
    let partial = PathBuf::from(format!("{}.partial", path.display()));
    let written = write_partial(&args, &client, &keyspaces, &partial).await;
    if written.is_err() {
        // A backup that failed leaves no file that could pass for one.
        let _ = std::fs::remove_file(&partial);
    }
    println!("{}", written?);
    Ok(())
}

/// Writes the backup to `partial`, then renames it to the backup's file.
async fn write_partial(
    args: &BackupArgs,
    client: &firn_client::Client,
    keyspaces: &[KeyspaceDef],
    partial: &Path,
) -> Result<String, String> {
    let failed = |e: io::Error| format!("{}: {e}", partial.display());
    let file = File::create(partial).map_err(failed)?;
    let bar = progress(None, "{spinner} {pos} keys, records, groups  {elapsed}");
    let (http, at, defs, in_bar) = (
        args.http.clone(),
        args.at.clone(),
        keyspaces.to_vec(),
        bar.clone(),
    );
    // Keys, then logs and streams, all read at the first snapshot page's time.
    let (mut out, cut, streams) = tokio::task::spawn_blocking(move || {
        let (mut out, cut) = keys::write_keys(&http, at, &defs, file, &in_bar)?;
        let streams = logs::write_logs(&http, &mut out, &cut.stamp, &in_bar)?;
        Ok::<_, String>((out, cut, streams))
    })
    .await
    .map_err(|e| e.to_string())??;
    groups::write_groups(client, &mut out, &streams, &bar).await?;
    let (file, counts) = out.finish().map_err(failed)?;
    file.sync_all().map_err(failed)?;
    let path = &args.file;
    std::fs::rename(partial, path).map_err(failed)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    bar.finish_and_clear();
    Ok(format!(
        "backed up {} keys ({} bytes of values) at {} ({}), {} log records and {} stream entries ({} bytes), {} consumer groups ({} pending entries) to {}",
        counts.keys,
        counts.bytes,
        cut.stamp,
        cut.time,
        counts.log_records,
        counts.stream_entries,
        counts.log_bytes,
        counts.groups,
        counts.pending,
        path.display()
    ))
}

pub async fn restore(args: RestoreArgs) -> Result<(), String> {
    let path = args.file.clone();
    let checked = tokio::task::spawn_blocking(move || check_file(&path))
        .await
        .map_err(|e| e.to_string())??;
    let client = crate::connect(&args.target).await?;
    refuse_unless_empty(&args, &client).await?;
    let keyspaces: Vec<KeyspaceDef> =
        serde_json::from_value(checked.header["keyspaces"].clone())
            .map_err(|e| format!("{}: its keyspaces: {e}", args.file.display()))?;
    let existing = client.keyspace_list().await.map_err(crate::show)?;
    for def in keyspaces.iter().filter(|d| !existing.contains(d)) {
        client
            .keyspace_create(def)
            .await
            .map_err(|e| format!("creating keyspace '{}': {e}", def.spec.prefix))?;
    }
    let done = load(&args, &client, &checked.counts).await?;
    println!(
        "restored {} keys ({} bytes of values) and {} keyspaces from the cut at {} ({}), {} log records, {} stream entries, {} consumer groups and {} pending entries{}",
        checked.counts.keys,
        checked.counts.bytes,
        keyspaces.len(),
        checked.header["at"].as_str().unwrap_or("?"),
        checked.header["at_time"].as_str().unwrap_or("?"),
        done.records_appended,
        done.entries_added,
        done.groups,
        done.pending,
        match done.pending_left_out {
            0 => String::new(),
            n => format!(" ({n} pending entries left out: their entries are not in the backup)"),
        },
    );
    Ok(())
}

/// Into a new cluster only: a restore never mixes with keys or logs already there.
async fn refuse_unless_empty(
    args: &RestoreArgs,
    client: &firn_client::Client,
) -> Result<(), String> {
    let (_, present) = client
        .snapshot(
            &SnapshotOf::Prefix {
                prefix: Default::default(),
                cursor: None,
                limit: 1,
            },
            None,
        )
        .await
        .map_err(crate::show)?;
    if let Some((key, _)) = present.first() {
        return Err(format!(
            "the cluster at {} already holds keys ({} among them); restore loads a backup into a new, empty cluster",
            args.target.addr,
            String::from_utf8_lossy(key)
        ));
    }
    let http = args.http.clone();
    let held = tokio::task::spawn_blocking(move || logs::logs_held(&http))
        .await
        .map_err(|e| e.to_string())??;
    if let Some(log) = held {
        return Err(format!(
            "the cluster at {} already holds logs or streams ({log} among them); restore loads a backup into a new, empty cluster",
            args.target.addr
        ));
    }
    Ok(())
}

/// What a restore wrote besides keys.
struct Loaded {
    records_appended: u64,
    entries_added: u64,
    groups: u64,
    pending: u64,
    pending_left_out: u64,
}

/// Writes every line of the checked file, in order.
async fn load(
    args: &RestoreArgs,
    client: &firn_client::Client,
    counts: &Counts,
) -> Result<Loaded, String> {
    let total = counts.keys + counts.log_records + counts.stream_entries + counts.groups;
    let bar = progress(
        Some(total),
        "{bar:40} {pos}/{len} keys, records, groups  eta {eta}",
    );
    let file = File::open(&args.file).map_err(|e| format!("{}: {e}", args.file.display()))?;
    let mut input = BufReader::with_capacity(1 << 20, file);
    read_header(&mut input)?;
    let mut in_flight = tokio::task::JoinSet::new();
    let mut logs = logs::LogRestore::default();
    let mut groups = groups::GroupRestore::default();
    let lines =
        counts.keys + counts.stream_entries + counts.log_records + counts.groups + counts.pending;
    let mut text = String::new();
    for _ in 0..lines {
        text.clear();
        input.read_line(&mut text).map_err(|e| e.to_string())?;
        let line = Line::parse(text.trim_end())?;
        let (has_bytes, counted) = (line.size().is_some(), !matches!(line, Line::Pending(_)));
        if !matches!(line, Line::Key(_)) {
            // Keys first, all of them written before the logs begin.
            keys::drain(&mut in_flight).await?;
        }
        match line {
            Line::Key(head) => {
                keys::restore_key(
                    head,
                    &mut input,
                    client,
                    &args.http,
                    &mut in_flight,
                    args.parallel,
                )
                .await?;
            }
            Line::Entry(head) => {
                let payload = payload(&mut input, head.size)?;
                logs.entry(client, &head, payload).await?;
            }
            Line::Record(head) => {
                let payload = payload(&mut input, head.size)?;
                logs.record(client, &head, payload).await?;
            }
            Line::Group(g) => {
                logs.flush(client).await?;
                groups.group(client, &g).await?;
            }
            Line::Pending(p) => groups.pending(client, &p).await?,
        }
        if has_bytes {
            let mut newline = [0u8; 1];
            input.read_exact(&mut newline).map_err(|e| e.to_string())?;
        }
        if counted {
            bar.inc(1);
        }
    }
    keys::drain(&mut in_flight).await?;
    logs.flush(client).await?;
    groups.flush(client).await?;
    bar.finish_and_clear();
    Ok(Loaded {
        records_appended: logs.records_appended,
        entries_added: logs.entries_added,
        groups: groups.groups,
        pending: groups.pending,
        pending_left_out: groups.pending_left_out,
    })
}

fn payload(input: &mut impl Read, size: u64) -> Result<Vec<u8>, String> {
    let mut bytes = vec![0u8; size as usize];
    input.read_exact(&mut bytes).map_err(|e| e.to_string())?;
    Ok(bytes)
}
