//! A trigger's inputs, whatever it follows: a version of a key under its prefix, or a record
//! of its log tag (a stream's entry, for `ON STREAM`). Each has a place in its shard's commit
//! order — (stamp, key, version) for a version; (stamp, seq) for a record, whose seqs grow
//! with their stamps within a tag of a shard — which the trigger's cursor holds once it ran.

use bytes::Bytes;
use firn_model::log::decode_fields;
use firn_model::{CommitTs, EntrySource, FirnError, LogRecord, LogSeq, WatchEvent};
use firn_store::{ChangePosition, VersionedStore};

use crate::functions::sandbox::{InputKind, Invocation};

/// One input of a trigger.
#[derive(Clone, Debug)]
pub struct Input {
    /// Its place in the shard's commit order: the cursor once its outputs committed.
    pub at: ChangePosition,
    /// What the run is given.
    pub invocation: Invocation,
    /// How a dead letter names it: its key (or stream, or tag) and its version (or id).
    pub key: Bytes,
    pub id: String,
    /// A put of a large value (kept beside the log): a function reads values up to the
    /// inline value limit, so such an input is refused, not run without its value.
    pub too_large: bool,
}

impl Input {
    /// A committed version of a key: a put (the value its argument) or a delete.
    pub fn of_version(event: WatchEvent) -> Input {
        let at = ChangePosition::of(&event);
        let key = event.key.bytes().clone();
        let too_large = event.info.blob.is_some() && event.info.value.is_none();
        Input {
            at,
            too_large,
            id: event.info.version.to_string(),
            invocation: Invocation {
                kind: if event.info.deleted {
                    InputKind::Delete
                } else {
                    InputKind::Put
                },
                keys: vec![key.clone()],
                args: event.info.value.iter().cloned().collect(),
                stamp_us: event.info.commit_ts.wall_us,
                input_version: event.info.version,
            },
            key,
        }
    }

    /// A record of a log tag or a stream's entry: its id, then its payload (a stream's
    /// fields and values, in order), are the run's arguments.
    pub fn of_record(source: &EntrySource, record: LogRecord) -> Input {
        let id = record.seq.to_string();
        let mut args = vec![Bytes::from(id.clone())];
        match source {
            EntrySource::Stream(_) => match decode_fields(&record.payload) {
                Ok(fields) => args.extend(fields.into_iter().flat_map(|(f, v)| [f, v])),
                // Not a stream's entry (a record appended under the stream's name by
                // FIRN.LOG): its payload as it is.
                Err(_) => args.push(record.payload),
            },
            EntrySource::Log { .. } => args.push(record.payload),
        }
        let (_, tag) = source.log_and_tag();
        Input {
            at: record_position(record.commit_ts, record.seq),
            invocation: Invocation {
                kind: InputKind::Entry,
                keys: vec![tag.clone()],
                args,
                stamp_us: record.commit_ts.wall_us,
                input_version: 0,
            },
            key: tag.clone(),
            id,
            too_large: false,
        }
    }

    pub fn stamp(&self) -> CommitTs {
        self.at.commit_ts
    }
}

/// A record's place: its stamp, then its seq (big-endian, so bytes order as seqs do).
fn record_position(commit_ts: CommitTs, seq: LogSeq) -> ChangePosition {
    let mut key = seq.ms.to_be_bytes().to_vec();
    key.extend_from_slice(&seq.n.to_be_bytes());
    ChangePosition {
        commit_ts,
        key,
        version: 0,
    }
}

/// The seq a record's place holds; none for a place that is no record's (a start).
fn seq_of(at: &ChangePosition) -> Option<LogSeq> {
    let ms = u64::from_be_bytes(at.key.get(..8)?.try_into().ok()?);
    let n = u64::from_be_bytes(at.key.get(8..16)?.try_into().ok()?);
    (at.key.len() == 16).then_some(LogSeq::new(ms, n))
}

/// The first `limit` records of `source` in this shard after `after`, stamped at or before
/// `through`, and the place of the last record passed over before them (older than the
/// trigger's start): the next look starts after it.
pub fn records(
    store: &VersionedStore,
    source: &EntrySource,
    after: &ChangePosition,
    through: CommitTs,
    limit: usize,
) -> Result<(Vec<Input>, Option<ChangePosition>), FirnError> {
    let (log, tag) = source.log_and_tag();
    let mut from = match seq_of(after) {
        Some(seq) => match seq.successor() {
            Some(next) => next,
            None => return Ok((Vec::new(), None)),
        },
        None => LogSeq::ZERO,
    };
    let mut passed = None;
    loop {
        let page = store.log_page(
            log,
            tag,
            from,
            LogSeq::MAX,
            limit,
            false,
            Some(through),
            false,
        )?;
        let full = page.records.len() == limit;
        let mut inputs = Vec::new();
        for record in page.records {
            from = record.seq;
            let at = record_position(record.commit_ts, record.seq);
            if at > *after {
                inputs.push(Input::of_record(source, record));
            } else {
                passed = Some(at);
            }
        }
        if !inputs.is_empty() || !full {
            return Ok((inputs, passed));
        }
        match from.successor() {
            Some(next) => from = next,
            None => return Ok((inputs, passed)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_records_place_orders_as_its_stamp_then_its_seq_and_gives_the_seq_back() {
        let at = |wall, ms, n| record_position(CommitTs::new(wall, 0), LogSeq::new(ms, n));
        assert!(at(5, 1, 2) < at(5, 1, 3));
        assert!(at(5, 1, u64::MAX) < at(5, 2, 0));
        assert!(at(5, 9, 9) < at(6, 0, 0));
        assert_eq!(seq_of(&at(5, 7, 8)), Some(LogSeq::new(7, 8)));
        assert_eq!(seq_of(&ChangePosition::default()), None);
    }
}
