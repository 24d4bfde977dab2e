//! A site's log records and stream entries going up (docs/architecture.md, "Sites and a
//! hub"): what one shard holds of an uplink log after a seq, in seq order, or of an uplink
//! stream after an id; and each as a step of the batch's transaction at the hub — a record
//! appended to the hub's log `sites/S/NAME` with its own tags and its origin before its
//! payload, an entry added to the hub's stream `sites/S/KEY` under its own id. Reads only
//! the shard's store: it never writes, and never asks another shard.

use bytes::Bytes;
use firn_model::log::decode_fields;
use firn_model::{CommitTs, LogRecord, LogSeq};
use firn_store::VersionedStore;
use firn_store::store::log::tags::tag_cursor;

use super::UplinkConfig;
use super::hub::HubStep;

/// Records or entries a batch takes at most.
pub const BATCH_RECORDS_MAX: usize = 256;
/// Payload bytes a batch takes at most (the hub takes 16 MiB in one transaction).
pub const BATCH_BYTES_MAX: usize = 8 << 20;
/// Tags of one log a shard lists at most in one look: past it the log's records in the
/// shard are not sent (an error, counted and logged, until the log has fewer tags here).
const LOG_TAGS_MAX: usize = 100_000;
/// Tags listed in one page.
const TAGS_PAGE: usize = 1_000;

/// The records of `log` whose home is this shard (`shard`), after `after` and committed at
/// or before `through` (time is closed there: no record can still land below it), in seq
/// order, at most a batch. A record held under several tags here comes once.
pub fn log_after(
    store: &VersionedStore,
    shard: u32,
    log: &[u8],
    after: LogSeq,
    through: CommitTs,
) -> Result<Vec<LogRecord>, String> {
    let Some(from) = after.successor() else {
        return Ok(Vec::new());
    };
    let mut pages = Vec::new();
    // A log's tag rows are contiguous, right after the log's name with no tag.
    let mut cursor = tag_cursor(log, b"");
    let mut listed = 0usize;
    'listing: loop {
        let (tags, next) = store
            .log_tags(shard, Some(&cursor), TAGS_PAGE)
            .map_err(|e| e.to_string())?;
        for tag in &tags {
            if tag.log.as_bytes() != log {
                break 'listing;
            }
            listed += 1;
            if listed > LOG_TAGS_MAX {
                return Err(format!(
                    "log '{}' has more than {LOG_TAGS_MAX} tags in shard {shard}: its records \
                     there are not sent",
                    String::from_utf8_lossy(log)
                ));
            }
            // Nothing of this tag here after the cursor: not read.
            if tag.last_seq < from {
                continue;
            }
            pages.push(page_after(store, log, tag.tag.as_bytes(), from, through)?);
            bound(&mut pages);
        }
        match next {
            Some(n) => cursor = n,
            None => break,
        }
    }
    Ok(batch_of(pages))
}

/// The entries of stream `key` (held by this shard) after id `after` and committed at or
/// before `through`, in id order, at most a batch.
pub fn stream_after(
    store: &VersionedStore,
    key: &[u8],
    after: LogSeq,
    through: CommitTs,
) -> Result<Vec<LogRecord>, String> {
    let Some(from) = after.successor() else {
        return Ok(Vec::new());
    };
    Ok(batch_of(vec![page_after(store, key, key, from, through)?]))
}

/// A page of this shard's records of `tag` of `log` from `from` on, committed at or before
/// `through`, at most a batch, and whether it was cut there.
fn page_after(
    store: &VersionedStore,
    log: &[u8],
    tag: &[u8],
    from: LogSeq,
    through: CommitTs,
) -> Result<(Vec<LogRecord>, bool), String> {
    let page = store
        .log_page(
            log,
            tag,
            from,
            LogSeq::MAX,
            BATCH_RECORDS_MAX,
            false,
            Some(through),
            false,
        )
        .map_err(|e| e.to_string())?;
    let full = page.records.len() == BATCH_RECORDS_MAX;
    Ok((page.records, full))
}

/// Keeps the pages read within a few batches however many tags changed: past four
/// batches' records, they become one batch, marked cut where anything past it was left
/// out — the batch of all the pages is the same.
fn bound(pages: &mut Vec<(Vec<LogRecord>, bool)>) {
    let held: usize = pages.iter().map(|(r, _)| r.len()).sum();
    if held >= 4 * BATCH_RECORDS_MAX {
        let kept = batch_of(std::mem::take(pages));
        let cut = kept.len() < held;
        pages.push((kept, cut));
    }
}

/// One batch of the pages read (each in seq order, `true` where it was cut at its limit):
/// their records in seq order, each once, none past where a cut page ended (a record
/// beyond it may be missing from that tag's page, and the cursor must never pass it), at
/// most [`BATCH_RECORDS_MAX`] and [`BATCH_BYTES_MAX`] of payloads (one record at least).
fn batch_of(pages: Vec<(Vec<LogRecord>, bool)>) -> Vec<LogRecord> {
    let cut = pages
        .iter()
        .filter(|(_, full)| *full)
        .filter_map(|(records, _)| records.last().map(|r| r.seq))
        .min();
    let mut all: Vec<LogRecord> = pages.into_iter().flat_map(|(r, _)| r).collect();
    all.sort_by_key(|r| r.seq);
    all.dedup_by_key(|r| r.seq);
    if let Some(cut) = cut {
        all.retain(|r| r.seq <= cut);
    }
    let mut bytes = 0usize;
    let mut taken = 0usize;
    for r in &all {
        bytes += r.payload.len();
        if taken == BATCH_RECORDS_MAX || (taken > 0 && bytes > BATCH_BYTES_MAX) {
            break;
        }
        taken += 1;
    }
    all.truncate(taken);
    all
}

/// A site record's payload as the hub's log keeps it: one line naming its origin — the
/// site and the record's seq there (its commit stamp at the site, see `LogSeq::stamp`) —
/// then the payload as it was: `S <ms>-<n>\n<payload>`.
pub fn with_origin(site: &str, seq: LogSeq, payload: &[u8]) -> Bytes {
    let head = format!("{site} {seq}\n");
    let mut out = Vec::with_capacity(head.len() + payload.len());
    out.extend_from_slice(head.as_bytes());
    out.extend_from_slice(payload);
    Bytes::from(out)
}

/// Record `record` of the site's log `log`, appended to the hub's log `sites/S/log` with
/// its own tags.
pub fn log_step(config: &UplinkConfig, log: &[u8], record: &LogRecord) -> HubStep {
    HubStep::Append {
        log: config.hub_key(log),
        tags: record.tags.iter().map(|t| t.bytes().clone()).collect(),
        payload: with_origin(&config.site, record.seq, &record.payload),
    }
}

/// Entry `record` of the site's stream `key`, added to the hub's stream `sites/S/key`
/// under its own id; `None` for a record that is no entry (appended under the stream's tag
/// with `FIRN.LOG APPEND`: its payload is not a field list).
pub fn stream_step(config: &UplinkConfig, key: &[u8], record: &LogRecord) -> Option<HubStep> {
    let fields = decode_fields(&record.payload).ok()?;
    Some(HubStep::StreamAdd {
        key: config.hub_key(key),
        id: record.seq.to_string(),
        fields,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use firn_model::Key;
    use firn_model::log::encode_fields;

    fn record(seq: u64, tag: &str, payload: &str) -> LogRecord {
        LogRecord {
            seq: LogSeq::new(seq, 0),
            tags: vec![Key::new(Bytes::from(tag.to_owned())).unwrap()],
            payload: Bytes::from(payload.to_owned()),
            commit_ts: CommitTs::new(seq * 1_000, 0),
        }
    }

    fn seqs(records: &[LogRecord]) -> Vec<u64> {
        records.iter().map(|r| r.seq.ms).collect()
    }

    #[test]
    fn a_batch_merges_the_tags_pages_in_seq_order_each_record_once() {
        // Record 3 is held under both tags.
        let a = vec![
            record(1, "a", "x"),
            record(3, "a", "y"),
            record(5, "a", "z"),
        ];
        let b = vec![
            record(2, "b", "x"),
            record(3, "b", "y"),
            record(4, "b", "z"),
        ];
        assert_eq!(
            seqs(&batch_of(vec![(a, false), (b, false)])),
            [1, 2, 3, 4, 5]
        );
    }

    #[test]
    fn a_batch_stops_where_a_cut_page_ended() {
        // Tag a's page was cut at 3: its records after 3 were not read, so nothing after 3
        // may go (the cursor would pass them).
        let a = vec![record(1, "a", "x"), record(3, "a", "y")];
        let b = vec![
            record(2, "b", "x"),
            record(4, "b", "z"),
            record(6, "b", "z"),
        ];
        assert_eq!(seqs(&batch_of(vec![(a, true), (b, false)])), [1, 2, 3]);
        assert!(batch_of(Vec::new()).is_empty());
    }

    #[test]
    fn a_batch_made_of_batches_is_the_batch_of_all_the_pages() {
        // Tags read in turn, a batch made of what was read every few: the same records go
        // as when every page was kept.
        let pages: Vec<(Vec<LogRecord>, bool)> = (0..20u64)
            .map(|t| {
                let records: Vec<LogRecord> = (0..100u64)
                    .map(|i| record(1 + i * 20 + t, &format!("t{t}"), "p"))
                    .collect();
                (records, false)
            })
            .collect();
        let whole = batch_of(pages.clone());
        let mut held: Vec<(Vec<LogRecord>, bool)> = Vec::new();
        for page in pages {
            held.push(page);
            bound(&mut held);
            assert!(held.iter().map(|(r, _)| r.len()).sum::<usize>() < 5 * BATCH_RECORDS_MAX);
        }
        assert_eq!(seqs(&batch_of(held)), seqs(&whole));
        assert_eq!(whole.len(), BATCH_RECORDS_MAX);
    }

    #[test]
    fn a_batch_is_bounded_by_records_and_bytes_but_takes_one_at_least() {
        let many: Vec<LogRecord> = (1..=BATCH_RECORDS_MAX as u64 + 10)
            .map(|i| record(i, "a", "p"))
            .collect();
        assert_eq!(batch_of(vec![(many, false)]).len(), BATCH_RECORDS_MAX);
        let big = "x".repeat(BATCH_BYTES_MAX / 2 + 1);
        let large = vec![
            record(1, "a", &big),
            record(2, "a", &big),
            record(3, "a", &big),
        ];
        assert_eq!(seqs(&batch_of(vec![(large, false)])), [1]);
        let huge = "x".repeat(BATCH_BYTES_MAX + 1);
        assert_eq!(
            seqs(&batch_of(vec![(vec![record(9, "a", &huge)], false)])),
            [9]
        );
    }

    #[test]
    fn a_record_goes_up_with_its_tags_and_its_origin_before_its_payload() {
        let config =
            UplinkConfig::parse("plant-1", "redis://h:1", Some("log:events"), None).unwrap();
        let mut r = record(1_700_000_000_123, "pump/1", "a\nb");
        r.tags.push(Key::new(Bytes::from("all")).unwrap());
        r.seq = LogSeq::new(1_700_000_000_123, 7 << 16);
        let HubStep::Append { log, tags, payload } = log_step(&config, b"events", &r) else {
            panic!("not an append");
        };
        assert_eq!(log, b"sites/plant-1/events");
        assert_eq!(tags, [Bytes::from("pump/1"), Bytes::from("all")]);
        assert_eq!(&payload[..], b"plant-1 1700000000123-458752\na\nb");
        // The first line names the origin; the rest is the payload as it was.
        let (head, rest) = payload.split_at(payload.iter().position(|&b| b == b'\n').unwrap());
        let (site, seq) = std::str::from_utf8(head).unwrap().split_once(' ').unwrap();
        assert_eq!((site, seq.parse::<LogSeq>().unwrap()), ("plant-1", r.seq));
        assert_eq!(&rest[1..], b"a\nb");
    }

    #[test]
    fn an_entry_goes_up_under_its_own_id_and_a_record_that_is_no_entry_does_not() {
        let config = UplinkConfig::parse("s", "redis://h:1", Some("stream:alarms"), None).unwrap();
        let fields = vec![(Bytes::from("level"), Bytes::from("high"))];
        let mut entry = record(5, "alarms", "");
        entry.seq = LogSeq::new(5, 2);
        entry.payload = encode_fields(&fields);
        assert_eq!(
            stream_step(&config, b"alarms", &entry),
            Some(HubStep::StreamAdd {
                key: b"sites/s/alarms".to_vec(),
                id: "5-2".into(),
                fields,
            })
        );
        assert_eq!(
            stream_step(&config, b"alarms", &record(6, "alarms", "raw")),
            None
        );
    }
}
