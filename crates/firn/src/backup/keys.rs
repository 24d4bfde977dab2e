//! The keys of a backup: every live key's value at the cut, read as a snapshot across all
//! shards page by page at the first page's time; restored over RESP, several at once, with
//! large values streamed over HTTP.

use std::fs::File;
use std::io::{BufRead, Read};

use base64::Engine;
use firn_client::{Client, PutOptions, retry_transient};
use indicatif::ProgressBar;
use serde_json::json;

use super::file::{KeyHead, Line, Writer, b64};
use crate::http::HttpTarget;

/// Keys per snapshot page while backing up.
const PAGE: usize = 1_000;
/// Values up to this size are restored over RESP, several at once; larger ones stream over
/// HTTP one at a time (the server's default inline limit).
const INLINE_BYTES: u64 = 1 << 20;
/// The largest value RESP carries: a larger one under a key that is not UTF-8 (which HTTP's
/// path cannot carry) cannot be restored.
const RESP_VALUE_BYTES: u64 = firn_model::limits::RESP_VALUE_BYTES_MAX as u64;

/// The cut's time, as the snapshot named it.
pub(super) struct Cut {
    pub(super) stamp: String,
    pub(super) time: String,
}

/// Reads the first snapshot page (which picks the cut's time unless `at` is given), starts
/// the file with its header, and writes every key of the cut.
pub(super) fn write_keys(
    http: &HttpTarget,
    at: Option<String>,
    keyspaces: &[firn_model::KeyspaceDef],
    file: File,
    bar: &ProgressBar,
) -> Result<(Writer, Cut), String> {
    let failed = |e: std::io::Error| e.to_string();
    let mut at = at;
    let mut cursor: Option<String> = None;
    let mut started: Option<(Writer, Cut)> = None;
    let mut file = Some(file);
    loop {
        let mut query = vec![("prefix", String::new()), ("limit", PAGE.to_string())];
        query.extend(at.clone().map(|t| ("at", t)));
        query.extend(cursor.clone().map(|c| ("cursor", c)));
        let page = http.get_json("/v1/snapshot", &query)?;
        let (out, _) = match &mut started {
            Some(s) => s,
            None => {
                let stamp = page["at"]
                    .as_str()
                    .ok_or("a snapshot page without its time")?
                    .to_string();
                let header = json!({
                    "firn_backup": super::file::FORMAT,
                    "at": stamp,
                    "at_time": page["at_time"],
                    "keyspaces": keyspaces,
                });
                let file = file.take().ok_or("the file is already started")?;
                let writer = Writer::start(file, &header).map_err(failed)?;
                at = Some(stamp.clone());
                let time = page["at_time"].as_str().unwrap_or("").to_string();
                started.insert((writer, Cut { stamp, time }))
            }
        };
        for entry in page["keys"]
            .as_array()
            .ok_or("a snapshot page without keys")?
        {
            // A stream's key is listed too; its entries and groups are backed up with the
            // logs and groups.
            if entry["deleted"].as_bool() == Some(true)
                || entry["type"].as_str().is_some_and(|t| t != "string")
            {
                continue;
            }
            let key = match (entry["key"].as_str(), entry["key_base64"].as_str()) {
                (Some(k), _) => k.as_bytes().to_vec(),
                (None, Some(b)) => b64().decode(b).map_err(|e| format!("key_base64: {e}"))?,
                _ => return Err(format!("a snapshot entry without its key: {entry}")),
            };
            let head = KeyHead {
                key,
                event_time_us: entry["event_time"].as_u64(),
                size: entry["size"]
                    .as_u64()
                    .ok_or("a snapshot entry without its size")?,
            };
            let size = head.size;
            if entry["large"].as_bool() == Some(true) {
                // Stored beside the log: stream that exact version.
                let key = std::str::from_utf8(&head.key)
                    .map_err(|_| {
                        format!(
                            "a large value under a key that is not UTF-8 ({}) cannot be read over HTTP",
                            String::from_utf8_lossy(&head.key)
                        )
                    })?
                    .to_string();
                out.line(&Line::Key(head)).map_err(failed)?;
                let version = entry["version"].as_u64().unwrap_or(0).to_string();
                let copied = http.get_value(&key, &[("version", version)], &mut out.body)?;
                if copied != size {
                    return Err(format!("{key}: read {copied} bytes of {size}"));
                }
                out.end_bytes().map_err(failed)?;
            } else {
                let value = match (entry["value"].as_str(), entry["value_base64"].as_str()) {
                    (Some(v), _) => v.as_bytes().to_vec(),
                    (None, Some(b)) => b64().decode(b).map_err(|e| format!("value_base64: {e}"))?,
                    _ => return Err(format!("a snapshot entry without its value: {entry}")),
                };
                out.with_payload(&Line::Key(head), &value).map_err(failed)?;
            }
            bar.inc(1);
        }
        cursor = page["next_cursor"].as_str().map(str::to_string);
        if cursor.is_none() {
            return started.ok_or_else(|| "no snapshot page was read".into());
        }
    }
}

/// Restores one key: streamed over HTTP when large (and its key is UTF-8), else read into
/// memory and put over RESP alongside others (`in_flight`, at most `parallel`).
pub(super) async fn restore_key(
    head: KeyHead,
    input: &mut impl BufRead,
    client: &Client,
    http: &HttpTarget,
    in_flight: &mut tokio::task::JoinSet<Result<(), String>>,
    parallel: u64,
) -> Result<(), String> {
    let utf8_key = std::str::from_utf8(&head.key).ok().map(str::to_string);
    match utf8_key.filter(|_| head.size > INLINE_BYTES) {
        Some(key) => {
            // Streamed from the file over HTTP, while the small ones go on.
            let value = input.take(head.size);
            tokio::task::block_in_place(|| {
                http.put_value(&key, head.event_time_us, head.size, value)
            })
        }
        None => {
            if head.size > RESP_VALUE_BYTES {
                return Err(format!(
                    "{}: a value of {} bytes under a key that is not UTF-8: RESP carries at most {RESP_VALUE_BYTES}, and HTTP's path no such key",
                    String::from_utf8_lossy(&head.key),
                    head.size
                ));
            }
            let mut value = vec![0u8; head.size as usize];
            input.read_exact(&mut value).map_err(|e| e.to_string())?;
            while in_flight.len() as u64 >= parallel {
                joined(in_flight.join_next().await)?;
            }
            let client = client.clone();
            in_flight.spawn(async move { put(&client, head, value).await });
            Ok(())
        }
    }
}

/// Waits for every put in flight.
pub(super) async fn drain(
    in_flight: &mut tokio::task::JoinSet<Result<(), String>>,
) -> Result<(), String> {
    while let Some(done) = in_flight.join_next().await {
        joined(Some(done))?;
    }
    Ok(())
}

fn joined(done: Option<Result<Result<(), String>, tokio::task::JoinError>>) -> Result<(), String> {
    match done {
        None => Ok(()),
        Some(Ok(result)) => result,
        Some(Err(e)) => Err(e.to_string()),
    }
}

async fn put(client: &Client, head: KeyHead, value: Vec<u8>) -> Result<(), String> {
    let opts = PutOptions {
        if_version: None,
        event_time_us: head.event_time_us,
    };
    retry_transient(|| client.put(&head.key, &value, opts.clone()))
        .await
        .map(|_| ())
        .map_err(|e| format!("{}: {e}", String::from_utf8_lossy(&head.key)))
}
