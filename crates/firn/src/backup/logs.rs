//! The shared log and streams in a backup. Reading: the listing of every log's tags
//! (`GET /v1/logs?at=T`) page by page; for each log, its stream entries first (when the log
//! is a stream, read through its own tag), then every other record once, in seq order — a
//! merge of the log's tags, each read at T (`GET /v1/log/{log}/{tag}/range?at=T`), where the
//! copies of a record under its several tags meet at its seq. Restoring: stream entries by
//! XADD with their ids, a batch per round trip; records by `FIRN.LOG APPEND` in file order,
//! consecutive records whose first tags share a slot in one batch (one home shard, so the
//! batch keeps their order), each batch awaited before the next (so the connection's
//! causality token stamps it above the one before, whichever shard it lands in).

use std::collections::VecDeque;

use base64::Engine;
use firn_client::{Client, ClientError, TRANSIENT_RETRY_FOR, retry_transient};
use firn_model::LogSeq;
use firn_model::log::{LOG_BATCH_RECORDS_MAX, decode_fields};
use indicatif::ProgressBar;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::Value as Json;

use super::file::{EntryHead, Line, RecordHead, Writer, b64};
use crate::http::HttpTarget;

/// Rows of the listing per page.
const LIST_PAGE: usize = 1_000;
/// Records a log's merge holds at once, over all its tags: a page per tag of
/// `MERGE_RECORDS / tags` (at least 1, at most [`TAG_PAGE_MAX`]).
const MERGE_RECORDS: usize = 2_000;
const TAG_PAGE_MAX: usize = 256;
/// A restore's append batch: at most this many payload bytes (or one record above it).
const RUN_BYTES_MAX: usize = 1 << 20;
/// Stream entries sent in one round trip.
const XADD_BATCH: usize = 100;

/// A log name or tag as one path segment: every byte but the unreserved ones escaped.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// A tag of the log being backed up, as the listing showed it.
struct TagRow {
    tag: String,
    first_kept: LogSeq,
    len: u64,
}

/// A record read back through one tag.
struct Read {
    seq: LogSeq,
    tags: Vec<String>,
    payload: Vec<u8>,
}

/// Whether a record is a stream entry of `log`: XADD's shape (the one tag that is the log,
/// its fields as the payload). Those are restored with their ids; every other record is
/// appended again.
fn is_entry(log: &str, r: &Read) -> bool {
    r.tags.len() == 1 && r.tags[0] == log && decode_fields(&r.payload).is_ok_and(|f| !f.is_empty())
}

/// Writes every log's entries and records at `at`; answers the streams (logs read through
/// their own tag), whose groups come next.
pub(super) fn write_logs(
    http: &HttpTarget,
    out: &mut Writer,
    at: &str,
    bar: &ProgressBar,
) -> Result<Vec<String>, String> {
    let mut streams = Vec::new();
    let mut current: Option<(String, Vec<TagRow>)> = None;
    let mut cursor: Option<String> = None;
    loop {
        let mut query = vec![("at", at.to_string()), ("limit", LIST_PAGE.to_string())];
        query.extend(cursor.clone().map(|c| ("cursor", c)));
        let page = http.get_json("/v1/logs", &query)?;
        for row in page["tags"].as_array().ok_or("a listing without tags")? {
            let (log, tag) = (text(row, "log")?, text(row, "tag")?);
            let row = TagRow {
                tag,
                first_kept: seq_in(row, "first_kept")?,
                len: row["len"].as_u64().unwrap_or(0),
            };
            match &mut current {
                Some((l, rows)) if *l == log => rows.push(row),
                _ => {
                    if let Some((l, rows)) = current.take() {
                        write_log(http, out, at, &l, &rows, bar, &mut streams)?;
                    }
                    current = Some((log, vec![row]));
                }
            }
        }
        cursor = page["next_cursor"].as_str().map(str::to_string);
        if cursor.is_none() {
            break;
        }
    }
    if let Some((l, rows)) = current {
        write_log(http, out, at, &l, &rows, bar, &mut streams)?;
    }
    Ok(streams)
}

fn write_log(
    http: &HttpTarget,
    out: &mut Writer,
    at: &str,
    log: &str,
    rows: &[TagRow],
    bar: &ProgressBar,
    streams: &mut Vec<String>,
) -> Result<(), String> {
    let failed = |e: std::io::Error| e.to_string();
    // Whether the stream's own tag holds records that are not its entries: only then is it
    // read again with the log's other tags (an entry carries no other tag).
    let mut others_under_own = false;
    if let Some(own) = rows.iter().find(|r| r.tag == log) {
        streams.push(log.to_string());
        // A stream's entries first: a restore adds them by id, and an id must be above the
        // stream's top, which appending the log's other records there would raise.
        let mut tag = TagReader::new(own, TAG_PAGE_MAX);
        while let Some(r) = tag.next(http, log, at)? {
            if !is_entry(log, &r) {
                others_under_own = true;
                continue;
            }
            let head = EntryHead {
                stream: log.as_bytes().to_vec(),
                id: r.seq,
                size: r.payload.len() as u64,
            };
            out.with_payload(&Line::Entry(head), &r.payload)
                .map_err(failed)?;
            bar.inc(1);
        }
    }
    let held: Vec<&TagRow> = rows
        .iter()
        .filter(|r| r.len > 0 && (r.tag != log || others_under_own))
        .collect();
    let page = (MERGE_RECORDS / held.len().max(1)).clamp(1, TAG_PAGE_MAX);
    let mut tags: Vec<TagReader> = held.iter().map(|r| TagReader::new(r, page)).collect();
    loop {
        // The smallest seq any tag holds next: a record, met under each tag it is held by.
        let mut next: Option<LogSeq> = None;
        for t in &mut tags {
            if let Some(seq) = t.peek(http, log, at)? {
                next = Some(next.map_or(seq, |n| n.min(seq)));
            }
        }
        let Some(seq) = next else { return Ok(()) };
        let mut found: Option<Read> = None;
        let mut held_by = Vec::new();
        for t in &mut tags {
            if t.peek(http, log, at)? == Some(seq) {
                held_by.push(t.tag.clone());
                found = t.buffer.pop_front();
            }
        }
        let Some(r) = found else { continue };
        if is_entry(log, &r) {
            continue;
        }
        let all = distinct(&r.tags);
        let held: Vec<&String> = all
            .iter()
            .copied()
            .filter(|t| held_by.contains(t))
            .collect();
        let bytes = |tags: &[&String]| tags.iter().map(|t| t.as_bytes().to_vec()).collect();
        let head = RecordHead {
            log: log.as_bytes().to_vec(),
            seq: r.seq,
            tags: r.tags.iter().map(|t| t.as_bytes().to_vec()).collect(),
            // Trimmed from some of its tags: restored under the others only.
            held: (held.len() < all.len()).then(|| bytes(&held)),
            size: r.payload.len() as u64,
        };
        out.with_payload(&Line::Record(head), &r.payload)
            .map_err(failed)?;
        bar.inc(1);
    }
}

/// The tags, each once, in the record's order.
fn distinct(tags: &[String]) -> Vec<&String> {
    let mut seen: Vec<&String> = Vec::with_capacity(tags.len());
    for t in tags {
        if !seen.contains(&t) {
            seen.push(t);
        }
    }
    seen
}

/// One tag of a log, read at the cut a page at a time.
struct TagReader {
    tag: String,
    from: LogSeq,
    page: usize,
    buffer: VecDeque<Read>,
    done: bool,
}

impl TagReader {
    fn new(row: &TagRow, page: usize) -> TagReader {
        TagReader {
            tag: row.tag.clone(),
            from: row.first_kept,
            page,
            buffer: VecDeque::new(),
            done: false,
        }
    }

    /// The seq of the next record, reading the next page when the last is used up.
    fn peek(&mut self, http: &HttpTarget, log: &str, at: &str) -> Result<Option<LogSeq>, String> {
        while self.buffer.is_empty() && !self.done {
            self.fill(http, log, at)?;
        }
        Ok(self.buffer.front().map(|r| r.seq))
    }

    fn next(&mut self, http: &HttpTarget, log: &str, at: &str) -> Result<Option<Read>, String> {
        self.peek(http, log, at)?;
        Ok(self.buffer.pop_front())
    }

    fn fill(&mut self, http: &HttpTarget, log: &str, at: &str) -> Result<(), String> {
        let url = format!(
            "{}/v1/log/{}/{}/range",
            http.base(),
            utf8_percent_encode(log, SEGMENT),
            utf8_percent_encode(&self.tag, SEGMENT)
        );
        let answer = http
            .request("GET", &url)
            .query("from", &self.from.to_string())
            .query("limit", &self.page.to_string())
            .query("at", at)
            .call();
        let page: Json = match answer {
            Ok(r) => r.into_json().map_err(|e| e.to_string())?,
            // Trimmed since the listing (a trim is not kept as a version): what is left
            // starts at the new trim point.
            Err(ureq::Error::Status(410, r)) => {
                let body: Json = r.into_json().map_err(|e| e.to_string())?;
                let first_kept = seq_in(&body, "first_kept")?;
                if first_kept <= self.from {
                    return Err(format!("{log} {}: trimmed at {first_kept}", self.tag));
                }
                self.from = first_kept;
                return Ok(());
            }
            Err(e) => return Err(format!("{log} {}: {}", self.tag, crate::http::failed(e))),
        };
        let records = page["records"].as_array().ok_or("a read without records")?;
        self.done = records.len() < self.page;
        for r in records {
            let payload = match (r["value"].as_str(), r["value_base64"].as_str()) {
                (Some(v), _) => v.as_bytes().to_vec(),
                (None, Some(b)) => b64().decode(b).map_err(|e| format!("value_base64: {e}"))?,
                _ => return Err(format!("a record without its value: {r}")),
            };
            let tags = r["tags"]
                .as_array()
                .ok_or("a record without tags")?
                .iter()
                .map(|t| {
                    t.as_str()
                        .map(str::to_string)
                        .ok_or("a tag that is not text")
                })
                .collect::<Result<_, _>>()?;
            let seq = seq_in(r, "seq")?;
            self.from = seq.successor().unwrap_or(LogSeq::MAX);
            self.buffer.push_back(Read { seq, tags, payload });
        }
        Ok(())
    }
}

/// A listing's log or tag name: the HTTP API reads a log by names in its path, so a name
/// that is not UTF-8 cannot be backed up this way.
fn text(row: &Json, field: &str) -> Result<String, String> {
    match (row[field].as_str(), row[format!("{field}_base64")].as_str()) {
        (Some(t), _) => Ok(t.to_string()),
        (None, Some(b)) => Err(format!(
            "a {field} that is not UTF-8 ({}): the HTTP API reads logs by name in a path, so it cannot be backed up",
            String::from_utf8_lossy(&b64().decode(b).unwrap_or_default())
        )),
        _ => Err(format!("a listing row without its {field}: {row}")),
    }
}

fn seq_in(j: &Json, field: &str) -> Result<LogSeq, String> {
    j[field]
        .as_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no seq in {field}: {j}"))
}

/// Whether the cluster's logs hold anything: a record, or a stream (even an empty one,
/// whose top id would refuse the backup's).
pub(super) fn logs_held(http: &HttpTarget) -> Result<Option<String>, String> {
    let mut cursor: Option<String> = None;
    loop {
        let mut query = vec![("limit", LIST_PAGE.to_string())];
        query.extend(cursor.clone().map(|c| ("cursor", c)));
        let page = http.get_json("/v1/logs", &query)?;
        for row in page["tags"].as_array().ok_or("a listing without tags")? {
            let stream = row["log"].is_string() && row["log"] == row["tag"];
            if row["len"].as_u64().unwrap_or(0) > 0 || stream {
                let name = row["log"].as_str().unwrap_or("(not UTF-8)");
                return Ok(Some(name.to_string()));
            }
        }
        cursor = page["next_cursor"].as_str().map(str::to_string);
        if cursor.is_none() {
            return Ok(None);
        }
    }
}

/// Stream entries of one stream not yet sent, in id order.
struct EntryBatch {
    stream: Vec<u8>,
    entries: Vec<(LogSeq, Vec<(bytes::Bytes, bytes::Bytes)>)>,
    bytes: usize,
}

/// Records of one log not yet appended, all with first tags in one slot.
struct RecordRun {
    log: Vec<u8>,
    slot: u16,
    append: redis::Cmd,
    records: usize,
    bytes: usize,
}

/// Writes a backup's entries and records into a cluster, in the file's order.
#[derive(Default)]
pub(super) struct LogRestore {
    entries: Option<EntryBatch>,
    run: Option<RecordRun>,
    pub(super) entries_added: u64,
    pub(super) records_appended: u64,
}

impl LogRestore {
    pub(super) async fn entry(
        &mut self,
        client: &Client,
        head: &EntryHead,
        payload: Vec<u8>,
    ) -> Result<(), String> {
        self.flush_run(client).await?;
        let fields = decode_fields(&payload)
            .map_err(|e| format!("stream {} entry {}: {e}", lossy(&head.stream), head.id))?;
        if self.entries.as_ref().is_some_and(|b| {
            b.stream != head.stream || b.entries.len() >= XADD_BATCH || b.bytes >= RUN_BYTES_MAX
        }) {
            self.flush_entries(client).await?;
        }
        let batch = self.entries.get_or_insert_with(|| EntryBatch {
            stream: head.stream.clone(),
            entries: Vec::new(),
            bytes: 0,
        });
        batch.entries.push((head.id, fields));
        batch.bytes += payload.len();
        Ok(())
    }

    pub(super) async fn record(
        &mut self,
        client: &Client,
        head: &RecordHead,
        payload: Vec<u8>,
    ) -> Result<(), String> {
        self.flush_entries(client).await?;
        let tags = head.restored_tags();
        let slot = firn_model::slot::slot_of(&tags[0]);
        let fits = |r: &RecordRun| {
            r.log == head.log
                && r.slot == slot
                && r.records < LOG_BATCH_RECORDS_MAX
                && r.bytes + payload.len() <= RUN_BYTES_MAX
        };
        if self.run.as_ref().is_some_and(|r| !fits(r)) {
            self.flush_run(client).await?;
        }
        let run = self.run.get_or_insert_with(|| {
            let mut append = redis::cmd("FIRN.LOG");
            append.arg("APPEND").arg(&head.log);
            RecordRun {
                log: head.log.clone(),
                slot,
                append,
                records: 0,
                bytes: 0,
            }
        });
        run.append.arg("TAGS").arg(tags.len());
        for tag in tags {
            run.append.arg(tag);
        }
        run.append.arg(&payload);
        run.records += 1;
        run.bytes += payload.len();
        Ok(())
    }

    /// Sends whatever is held.
    pub(super) async fn flush(&mut self, client: &Client) -> Result<(), String> {
        self.flush_entries(client).await?;
        self.flush_run(client).await
    }

    /// XADDs the batch in one round trip. A transient error answers one XADD, and those
    /// before it may be in: then only the entries above the stream's top are sent again.
    async fn flush_entries(&mut self, client: &Client) -> Result<(), String> {
        let Some(batch) = self.entries.take() else {
            return Ok(());
        };
        let failed = |e: ClientError| format!("stream {}: XADD: {e}", lossy(&batch.stream));
        let deadline = tokio::time::Instant::now() + TRANSIENT_RETRY_FOR;
        let mut left = &batch.entries[..];
        while !left.is_empty() {
            let mut pipe = redis::pipe();
            for (id, fields) in left {
                let add = pipe.cmd("XADD").arg(&batch.stream).arg(id.to_string());
                for (field, value) in fields {
                    add.arg(field.as_ref()).arg(value.as_ref());
                }
            }
            match client.raw_pipeline(&pipe).await {
                Ok(_) => break,
                Err(e) if e.is_transient() && tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    let top = stream_top(client, &batch.stream).await.map_err(failed)?;
                    left = &left[left.partition_point(|(id, _)| Some(*id) <= top)..];
                }
                Err(e) => return Err(failed(e)),
            }
        }
        self.entries_added += batch.entries.len() as u64;
        Ok(())
    }

    /// Appends the run; a transient error applied nothing (the run is one entry of one
    /// shard), so it is sent again.
    async fn flush_run(&mut self, client: &Client) -> Result<(), String> {
        let Some(run) = self.run.take() else {
            return Ok(());
        };
        retry_transient(|| client.raw(&run.append))
            .await
            .map_err(|e| format!("log {}: FIRN.LOG APPEND: {e}", lossy(&run.log)))?;
        self.records_appended += run.records as u64;
        Ok(())
    }
}

/// The id of a stream's last entry (`None`: it has none).
async fn stream_top(client: &Client, stream: &[u8]) -> Result<Option<LogSeq>, ClientError> {
    let mut last = redis::cmd("XREVRANGE");
    last.arg(stream).arg("+").arg("-").arg("COUNT").arg(1);
    let answer = retry_transient(|| client.raw(&last)).await?;
    let redis::Value::Array(entries) = answer else {
        return Err(ClientError::Protocol(format!(
            "XREVRANGE answered {answer:?}"
        )));
    };
    Ok(match entries.first() {
        Some(redis::Value::Array(entry)) => match entry.first() {
            Some(redis::Value::BulkString(id)) => {
                std::str::from_utf8(id).ok().and_then(|id| id.parse().ok())
            }
            _ => None,
        },
        _ => None,
    })
}

pub(super) fn lossy(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}
