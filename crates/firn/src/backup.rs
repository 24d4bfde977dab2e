//! `firn backup FILE [--at T]` and `firn restore FILE`: one consistent cut of every key —
//! each key's value at one closed time T, read across all shards as a snapshot — written to
//! a file, and loaded into a new cluster.
//!
//! The file is lines of JSON, each record's value right after its line as raw bytes:
//!
//! ```text
//! {"firn_backup":1,"at":"W-L","at_time":"…","keyspaces":[…]}
//! {"key":"sensor/1","event_time":null,"size":4}
//! 21.5
//! {"end":true,"keys":1,"bytes":4,"crc32c":…}
//! ```
//!
//! A key that is not UTF-8 is `key_base64`. The end line counts the records and carries a
//! CRC-32C of everything between the first line and itself: `restore` reads the whole file
//! and checks it before it changes anything, so a cut-short or damaged file changes nothing.
//! Values stream through (a large value is never whole in memory). What a backup holds is
//! the cut: each live key's value and event time at T, and the keyspace definitions — not
//! older versions, not the shared log or streams; a restored key starts again at version 1.

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use clap::Args;
use crc::{CRC_32_ISCSI, Crc, Digest};
use firn_client::{Client, PutOptions, retry_transient};
use firn_model::{KeyspaceDef, SnapshotOf};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value as Json, json};

use crate::Target;
use crate::http::HttpTarget;

const FORMAT: u64 = 1;
const CRC32C: Crc<u32> = Crc::<u32>::new(&CRC_32_ISCSI);
/// Keys per snapshot page while backing up.
const PAGE: usize = 1_000;
/// Values up to this size are restored over RESP, several at once; larger ones stream over
/// HTTP one at a time (the server's default inline limit).
const INLINE_BYTES: u64 = 1 << 20;
/// The largest value RESP carries: a larger one under a key that is not UTF-8 (which HTTP's
/// path cannot carry) cannot be restored.
const RESP_VALUE_BYTES: u64 = firn_model::limits::RESP_VALUE_BYTES_MAX as u64;

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

/// One record's line.
struct RecordHead {
    key: Vec<u8>,
    event_time_us: Option<u64>,
    size: u64,
}

impl RecordHead {
    fn line(&self) -> String {
        let mut j = json!({ "event_time": self.event_time_us, "size": self.size });
        match std::str::from_utf8(&self.key) {
            Ok(text) => j["key"] = json!(text),
            Err(_) => j["key_base64"] = json!(b64().encode(&self.key)),
        }
        j.to_string()
    }

    fn parse(line: &str) -> Result<Self, String> {
        let j: Json = serde_json::from_str(line).map_err(|e| format!("a record line: {e}"))?;
        Self::of(&j, line)
    }

    fn of(j: &Json, line: &str) -> Result<Self, String> {
        let key = match (j["key"].as_str(), j["key_base64"].as_str()) {
            (Some(k), None) => k.as_bytes().to_vec(),
            (None, Some(b)) => b64().decode(b).map_err(|e| format!("key_base64: {e}"))?,
            _ => return Err(format!("a record line without its key: {line}")),
        };
        Ok(RecordHead {
            key,
            event_time_us: j["event_time"].as_u64(),
            size: j["size"]
                .as_u64()
                .ok_or_else(|| format!("a record line without its size: {line}"))?,
        })
    }

    fn key_text(&self) -> String {
        String::from_utf8_lossy(&self.key).into_owned()
    }
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
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

/// Writes through to the file and into the CRC.
struct Summing<'a, W> {
    out: W,
    digest: Digest<'a, u32>,
}

impl<W: Write> Write for Summing<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.out.write(buf)?;
        self.digest.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

pub async fn backup(args: BackupArgs) -> Result<(), String> {
    let keyspaces = crate::connect(&args.target)
        .await?
        .keyspace_list()
        .await
        .map_err(crate::show)?;
    let line = tokio::task::spawn_blocking(move || write_backup(&args, &keyspaces))
        .await
        .map_err(|e| e.to_string())??;
    println!("{line}");
    Ok(())
}

fn write_backup(args: &BackupArgs, keyspaces: &[KeyspaceDef]) -> Result<String, String> {
    let path = &args.file;
    if path.exists() {
        return Err(format!(
            "{}: exists; a backup never overwrites a file",
            path.display()
        ));
    }
    let partial = PathBuf::from(format!("{}.partial", path.display()));
    let written = write_partial(args, keyspaces, &partial);
    if written.is_err() {
        // A backup that failed leaves no file that could pass for one.
        let _ = std::fs::remove_file(&partial);
    }
    written
}

/// Writes the backup to `partial`, then renames it to the backup's file.
fn write_partial(
    args: &BackupArgs,
    keyspaces: &[KeyspaceDef],
    partial: &Path,
) -> Result<String, String> {
    let path = &args.file;
    let failed = |e: io::Error| format!("{}: {e}", partial.display());
    let file = File::create(partial).map_err(failed)?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let bar = progress(None, "{spinner} {pos} keys  {bytes}  {bytes_per_sec}");

    // The first page picks the time (unless given); every later page reads at that time.
    let mut at = args.at.clone();
    let mut cursor: Option<String> = None;
    let mut body = Summing {
        out: &mut out,
        digest: CRC32C.digest(),
    };
    let (mut keys, mut value_bytes) = (0u64, 0u64);
    let mut cut = None;
    loop {
        let mut query = vec![("prefix", String::new()), ("limit", PAGE.to_string())];
        query.extend(at.clone().map(|t| ("at", t)));
        query.extend(cursor.clone().map(|c| ("cursor", c)));
        let page = args.http.get_json("/v1/snapshot", &query)?;
        if cut.is_none() {
            let stamp = page["at"]
                .as_str()
                .ok_or("a snapshot page without its time")?;
            let header = json!({
                "firn_backup": FORMAT,
                "at": stamp,
                "at_time": page["at_time"],
                "keyspaces": keyspaces,
            });
            // The first line is outside the CRC: it is checked by being parsed.
            writeln!(body.out, "{header}").map_err(failed)?;
            at = Some(stamp.to_string());
            cut = Some((
                stamp.to_string(),
                page["at_time"].as_str().unwrap_or("").to_string(),
            ));
        }
        for entry in page["keys"]
            .as_array()
            .ok_or("a snapshot page without keys")?
        {
            if entry["deleted"].as_bool() == Some(true) {
                continue;
            }
            let key = match (entry["key"].as_str(), entry["key_base64"].as_str()) {
                (Some(k), _) => k.as_bytes().to_vec(),
                (None, Some(b)) => b64().decode(b).map_err(|e| format!("key_base64: {e}"))?,
                _ => return Err(format!("a snapshot entry without its key: {entry}")),
            };
            let head = RecordHead {
                key,
                event_time_us: entry["event_time"].as_u64(),
                size: entry["size"]
                    .as_u64()
                    .ok_or("a snapshot entry without its size")?,
            };
            writeln!(body, "{}", head.line()).map_err(failed)?;
            if entry["large"].as_bool() == Some(true) {
                // Stored beside the log: stream that exact version.
                let key = std::str::from_utf8(&head.key).map_err(|_| {
                    format!(
                        "a large value under a key that is not UTF-8 ({}) cannot be read over HTTP",
                        head.key_text()
                    )
                })?;
                let version = entry["version"].as_u64().unwrap_or(0).to_string();
                let copied = args
                    .http
                    .get_value(key, &[("version", version)], &mut body)?;
                if copied != head.size {
                    return Err(format!("{key}: read {copied} bytes of {}", head.size));
                }
            } else {
                let value = match (entry["value"].as_str(), entry["value_base64"].as_str()) {
                    (Some(v), _) => v.as_bytes().to_vec(),
                    (None, Some(b)) => b64().decode(b).map_err(|e| format!("value_base64: {e}"))?,
                    _ => return Err(format!("a snapshot entry without its value: {entry}")),
                };
                body.write_all(&value).map_err(failed)?;
            }
            body.write_all(b"\n").map_err(failed)?;
            keys += 1;
            value_bytes += head.size;
            bar.set_position(keys);
        }
        cursor = page["next_cursor"].as_str().map(str::to_string);
        if cursor.is_none() {
            break;
        }
    }
    let crc = body.digest.finalize();
    let end = json!({ "end": true, "keys": keys, "bytes": value_bytes, "crc32c": crc });
    writeln!(out, "{end}").map_err(failed)?;
    let file = out.into_inner().map_err(|e| failed(e.into_error()))?;
    file.sync_all().map_err(failed)?;
    std::fs::rename(partial, path).map_err(failed)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    bar.finish_and_clear();
    let (stamp, time) = cut.unwrap_or_default();
    Ok(format!(
        "backed up {keys} keys ({value_bytes} bytes of values) at {stamp} ({time}) to {}",
        path.display()
    ))
}

/// What a backup file holds, checked whole.
struct Checked {
    header: Json,
    keys: u64,
    bytes: u64,
}

/// Reads the whole file: its first line, every record, the end line and the CRC.
fn check_file(path: &Path) -> Result<Checked, String> {
    let bad = |why: String| format!("{}: not a complete Firn backup: {why}", path.display());
    let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut input = BufReader::with_capacity(1 << 20, file);
    let header = read_header(&mut input).map_err(bad)?;
    let mut sum = Summing {
        out: io::sink(),
        digest: CRC32C.digest(),
    };
    let (mut keys, mut bytes) = (0u64, 0u64);
    let mut line = String::new();
    loop {
        line.clear();
        input.read_line(&mut line).map_err(|e| bad(e.to_string()))?;
        if line.is_empty() {
            return Err(bad("it ends without its end line (cut short?)".into()));
        }
        let j: Json = serde_json::from_str(line.trim_end())
            .map_err(|e| bad(format!("a record line: {e}")))?;
        if j["end"] == Json::Bool(true) {
            break;
        }
        sum.digest.update(line.as_bytes());
        let head = RecordHead::of(&j, line.trim_end()).map_err(bad)?;
        let copied = io::copy(&mut (&mut input).take(head.size), &mut sum)
            .map_err(|e| bad(e.to_string()))?;
        let mut newline = [0u8; 1];
        if copied != head.size || input.read_exact(&mut newline).is_err() || newline != *b"\n" {
            return Err(bad(format!("{}: its value is cut short", head.key_text())));
        }
        sum.digest.update(&newline);
        keys += 1;
        bytes += head.size;
    }
    let end: Json = serde_json::from_str(line.trim_end()).map_err(|e| bad(e.to_string()))?;
    let crc = sum.digest.finalize();
    if end["keys"].as_u64() != Some(keys) || end["bytes"].as_u64() != Some(bytes) {
        return Err(bad(format!(
            "it holds {keys} keys ({bytes} bytes) but its end line says {end}"
        )));
    }
    if end["crc32c"].as_u64() != Some(u64::from(crc)) {
        return Err(bad(format!(
            "its CRC-32C is {crc}, its end line says {}",
            end["crc32c"]
        )));
    }
    Ok(Checked {
        header,
        keys,
        bytes,
    })
}

fn read_header(input: &mut impl BufRead) -> Result<Json, String> {
    let mut line = String::new();
    input.read_line(&mut line).map_err(|e| e.to_string())?;
    let header: Json =
        serde_json::from_str(line.trim_end()).map_err(|e| format!("its first line: {e}"))?;
    match header["firn_backup"].as_u64() {
        Some(FORMAT) => Ok(header),
        Some(other) => Err(format!("format {other}; this firn reads format {FORMAT}")),
        None => Err("its first line is not a Firn backup's".into()),
    }
}

pub async fn restore(args: RestoreArgs) -> Result<(), String> {
    let path = args.file.clone();
    let checked = tokio::task::spawn_blocking(move || check_file(&path))
        .await
        .map_err(|e| e.to_string())??;
    let client = crate::connect(&args.target).await?;
    // Into a new cluster only: a restore never mixes with keys already there.
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

    let bar = progress(
        Some(checked.keys),
        "{bar:40} {pos}/{len} keys  {bytes_per_sec}  eta {eta}",
    );
    let file = File::open(&args.file).map_err(|e| format!("{}: {e}", args.file.display()))?;
    let mut input = BufReader::with_capacity(1 << 20, file);
    read_header(&mut input)?;
    let mut in_flight = tokio::task::JoinSet::new();
    let mut line = String::new();
    for _ in 0..checked.keys {
        line.clear();
        input.read_line(&mut line).map_err(|e| e.to_string())?;
        let head = RecordHead::parse(line.trim_end())?;
        let utf8_key = std::str::from_utf8(&head.key).ok().map(str::to_string);
        match utf8_key.filter(|_| head.size > INLINE_BYTES) {
            Some(key) => {
                // Streamed from the file over HTTP, while the small ones go on.
                let value = (&mut input).take(head.size);
                tokio::task::block_in_place(|| {
                    args.http
                        .put_value(&key, head.event_time_us, head.size, value)
                })?;
                bar.inc(1);
            }
            None => {
                if head.size > RESP_VALUE_BYTES {
                    return Err(format!(
                        "{}: a value of {} bytes under a key that is not UTF-8: RESP carries at most {RESP_VALUE_BYTES}, and HTTP's path no such key",
                        head.key_text(),
                        head.size
                    ));
                }
                let mut value = vec![0u8; head.size as usize];
                input.read_exact(&mut value).map_err(|e| e.to_string())?;
                while in_flight.len() as u64 >= args.parallel {
                    joined(in_flight.join_next().await)?;
                    bar.inc(1);
                }
                let client = client.clone();
                in_flight.spawn(async move { put(&client, head, value).await });
            }
        }
        let mut newline = [0u8; 1];
        input.read_exact(&mut newline).map_err(|e| e.to_string())?;
    }
    while let Some(done) = in_flight.join_next().await {
        joined(Some(done))?;
        bar.inc(1);
    }
    bar.finish_and_clear();
    println!(
        "restored {} keys ({} bytes of values) and {} keyspaces from the cut at {} ({})",
        checked.keys,
        checked.bytes,
        keyspaces.len(),
        checked.header["at"].as_str().unwrap_or("?"),
        checked.header["at_time"].as_str().unwrap_or("?"),
    );
    Ok(())
}

fn joined(done: Option<Result<Result<(), String>, tokio::task::JoinError>>) -> Result<(), String> {
    match done {
        None => Ok(()),
        Some(Ok(result)) => result,
        Some(Err(e)) => Err(e.to_string()),
    }
}

async fn put(client: &Client, head: RecordHead, value: Vec<u8>) -> Result<(), String> {
    let opts = PutOptions {
        if_version: None,
        event_time_us: head.event_time_us,
    };
    retry_transient(|| client.put(&head.key, &value, opts.clone()))
        .await
        .map(|_| ())
        .map_err(|e| format!("{}: {e}", head.key_text()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_line_names_a_key_that_is_not_utf8_in_base64_and_reads_back() {
        for key in [b"sensor/1".to_vec(), vec![0xff, 0x00, b'a']] {
            let head = RecordHead {
                key: key.clone(),
                event_time_us: Some(7),
                size: 3,
            };
            let back = RecordHead::parse(&head.line()).unwrap();
            assert_eq!((back.key, back.event_time_us, back.size), (key, Some(7), 3));
        }
        assert!(RecordHead::parse(r#"{"size":1}"#).is_err());
        assert!(RecordHead::parse(r#"{"key":"a"}"#).is_err());
    }
}
