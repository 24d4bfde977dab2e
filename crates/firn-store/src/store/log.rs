//! The shared log in a shard: what apply does with the log's operations, and the one read
//! (a page of a tag). A record is stored in its home shard (its first tag's) once per tag,
//! under `(log, tag, seq)`, so reading one tag is one range read; the shard that owns a
//! tag's slot keeps the tag's directory — the other shards that hold records of it.

use std::ops::Bound;

use bytes::Bytes;
use firn_model::Appended;
use firn_model::{
    CommitTs, FirnError, Key, LogPage, LogRecord, LogSeq, NewRecord, Response, StreamId,
    StreamTrim, TagInfo,
};
use serde::{Deserialize, Serialize};

use super::apply::Txn;
use super::{HISTORY_PAGE_VERSIONS, VersionedStore, WALK_PAGE, io_err};
use crate::backend::Table;
use crate::command::StreamAppend;
use crate::record::{decode, encode};

mod stream;
pub mod tags;

/// One record's copy under one of its tags.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredEntry {
    pub tags: Vec<Key>,
    pub payload: Bytes,
    pub commit_ts: CommitTs,
}

/// What a shard keeps about one tag of one log.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TagMeta {
    /// The greatest seq given to a record of the tag here (deleted ones included).
    pub last: LogSeq,
    /// Records of the tag held here.
    pub len: u64,
    /// Records of the tag ever appended here.
    pub added: u64,
    pub max_deleted: LogSeq,
    /// The trim point: records below it were dropped, reads below it are refused.
    pub first_kept: LogSeq,
    /// Other shards holding records of the tag (kept where the tag's slot lives).
    pub homes: Vec<u32>,
}

/// What a shard keeps about a log as a whole.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogMeta {
    /// A trim of every tag: records below it were dropped.
    pub trimmed_before: LogSeq,
}

/// What FLUSHALL leaves of a row of `table`: nothing, except that a log stays known and a
/// tag's directory keeps its homes (routers remember both as made, so they must stay true;
/// they name no record).
pub(super) fn after_flush(table: Table, value: &[u8]) -> Result<Option<Vec<u8>>, FirnError> {
    Ok(match table {
        Table::Logs => Some(encode(&LogMeta::default())),
        Table::LogTags => {
            let meta: TagMeta = decode(value)?;
            (!meta.homes.is_empty()).then(|| {
                encode(&TagMeta {
                    homes: meta.homes,
                    ..TagMeta::default()
                })
            })
        }
        _ => None,
    })
}

pub(super) fn push_name(out: &mut Vec<u8>, name: &[u8]) {
    out.extend_from_slice(&(name.len() as u16).to_be_bytes());
    out.extend_from_slice(name);
}

/// `u16 len · log · u16 len · tag`: a tag's records are contiguous, in seq order.
pub(super) fn tag_key(log: &[u8], tag: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + log.len() + tag.len() + 16);
    push_name(&mut out, log);
    push_name(&mut out, tag);
    out
}

fn entry_key(log: &[u8], tag: &[u8], seq: LogSeq) -> Vec<u8> {
    let mut out = tag_key(log, tag);
    out.extend_from_slice(&seq.to_be_bytes());
    out
}

fn seq_of(entry_key: &[u8]) -> Result<LogSeq, FirnError> {
    entry_key
        .len()
        .checked_sub(16)
        .and_then(|at| LogSeq::from_be_bytes(&entry_key[at..]))
        .ok_or_else(|| FirnError::Internal("a log entry key without a seq".into()))
}

/// The tag of a `LogTags` key under `log`.
fn tag_of(log: &[u8], tag_key: &[u8]) -> Vec<u8> {
    tag_key[2 + log.len() + 2..].to_vec()
}

fn log_prefix(log: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    push_name(&mut out, log);
    out
}

fn too_small() -> FirnError {
    FirnError::BadArgument(
        "The ID specified in XADD is equal or smaller than the target stream top item".into(),
    )
}

/// The lowest seq a record of tags with `metas` may take: above their trim points and the
/// whole log's.
fn trim_floor(metas: &[Option<TagMeta>], log_trim: &LogMeta) -> LogSeq {
    metas
        .iter()
        .flatten()
        .map(|m| m.first_kept)
        .chain([log_trim.trimmed_before])
        .max()
        .unwrap_or_default()
}

/// The id a stream entry gets: Redis's rules, with the commit stamp as the clock.
fn stream_id(rule: StreamId, last: LogSeq, ts: CommitTs) -> Result<LogSeq, FirnError> {
    let ms = ts.wall_us / 1_000;
    match rule {
        StreamId::Auto if ms > last.ms => Ok(LogSeq::new(ms, 0)),
        StreamId::Auto => last.successor().ok_or_else(too_small),
        StreamId::Ms(ms) if ms > last.ms => Ok(LogSeq::new(ms, 0)),
        // Within the top entry's millisecond the sequence counts on, never into the next
        // millisecond: `1-*` after `1-18446744073709551615` is refused, as Redis refuses it.
        StreamId::Ms(ms) if ms == last.ms && last.n < u64::MAX => Ok(LogSeq::new(ms, last.n + 1)),
        StreamId::Ms(_) => Err(too_small()),
        StreamId::Exact(id) if id > last => Ok(id),
        StreamId::Exact(_) => Err(too_small()),
    }
}

impl Txn<'_> {
    pub(super) fn tag_meta(&self, log: &[u8], tag: &[u8]) -> Result<Option<TagMeta>, FirnError> {
        let key = tag_key(log, tag);
        if let Some(m) = self.tag_metas.get(&key) {
            return Ok(m.clone());
        }
        self.store.tag_meta_at(&key)
    }

    pub(super) fn set_tag_meta(&mut self, log: &[u8], tag: &[u8], meta: TagMeta) {
        let key = tag_key(log, tag);
        self.batch.put(Table::LogTags, key.clone(), encode(&meta));
        self.tag_metas.insert(key, Some(meta));
    }

    pub(super) fn log_append(
        &mut self,
        log: &Key,
        home: u32,
        records: &[NewRecord],
        stream: Option<&StreamAppend>,
    ) -> Result<Response, FirnError> {
        let log_trim = self.store.log_meta(log.as_bytes())?.unwrap_or_default();
        if let Some(s) = stream {
            // A stream's key is its log's name and its tag: its shard holds the key.
            if !self.stream_key(log)? {
                if s.no_create {
                    return Ok(Response::Appended(Vec::new()));
                }
                self.make_stream(log)?;
            }
        }
        let mut out = Vec::with_capacity(records.len());
        for (i, record) in records.iter().enumerate() {
            if i > 0 {
                // Each record of a batch has a stamp, and so a seq, of its own.
                self.ts = self.ts.successor();
            }
            let (tags, mut metas) = self.record_tags(log, record)?;
            let seq = match stream {
                Some(s) => {
                    let last = metas[0].as_ref().map_or(LogSeq::ZERO, |m| m.last);
                    stream_id(s.id, last, self.ts)?
                }
                None => {
                    // A record's seq is its stamp: raise the stamp above a trim point set
                    // from another shard's seqs, so that no record lands below it.
                    let floor = trim_floor(&metas, &log_trim);
                    if floor > LogSeq::ZERO {
                        self.ts = self.ts.max(floor.stamp().successor());
                    }
                    LogSeq::from_stamp(self.ts, home)
                }
            };
            match stream {
                Some(s) => self.push_stream_entry(log, &tags, record, seq, &mut metas, s),
                None => self.add_entry(log, &tags, Some(record), seq, self.ts, &mut metas),
            }
            out.push(Appended {
                seq,
                commit_ts: self.ts,
            });
        }
        if let Some(StreamAppend {
            trim: Some(trim), ..
        }) = stream
            && let Some(tag) = records.first().and_then(|r| r.tags.first())
        {
            self.stream_trim(tag, *trim)?;
        }
        Ok(Response::Appended(out))
    }

    /// A log append as a transaction's step, in `home` (this shard, the records' first
    /// tags'): each record's seq is its own stamp, the transaction's and the logical ticks
    /// after it ([`Txn::record_stamp_at`]). Its tags are held from the prepare to the
    /// resolution, so no other record of them comes between and the seqs the prepare
    /// answered are those given here. A record that would land below its log's trim point
    /// (a trim from a shard whose clock runs ahead) is refused, changing nothing.
    pub(super) fn transaction_records(
        &mut self,
        log: &Key,
        home: u32,
        records: &[NewRecord],
    ) -> Result<Response, FirnError> {
        let log_trim = self.store.log_meta(log.as_bytes())?.unwrap_or_default();
        let mut placed = Vec::with_capacity(records.len());
        for (i, record) in records.iter().enumerate() {
            let stamp = self.record_stamp_at(self.records_stamped + i as u32)?;
            let seq = LogSeq::from_stamp(stamp, home);
            let (tags, metas) = self.record_tags(log, record)?;
            let floor = trim_floor(&metas, &log_trim);
            if seq < floor {
                return Err(FirnError::TryAgain(format!(
                    "log '{log}' is trimmed through {floor}, past this transaction's stamp; retry"
                )));
            }
            placed.push((record, tags, metas, seq, stamp));
        }
        let mut out = Vec::with_capacity(placed.len());
        for (record, tags, mut metas, seq, stamp) in placed {
            self.add_entry(log, &tags, Some(record), seq, stamp, &mut metas);
            out.push(Appended {
                seq,
                commit_ts: stamp,
            });
        }
        self.records_stamped += records.len() as u32;
        Ok(Response::Appended(out))
    }

    /// A record's tags, each once, and their metadata here.
    fn record_tags<'r>(
        &self,
        log: &Key,
        record: &'r NewRecord,
    ) -> Result<(Vec<&'r Key>, Vec<Option<TagMeta>>), FirnError> {
        let mut tags: Vec<&Key> = Vec::with_capacity(record.tags.len());
        for t in &record.tags {
            if !tags.contains(&t) {
                tags.push(t);
            }
        }
        let metas = tags
            .iter()
            .map(|t| self.tag_meta(log.as_bytes(), t.as_bytes()))
            .collect::<Result<_, _>>()?;
        Ok((tags, metas))
    }

    /// The stamp of a transaction's `k`-th log record (from 0): `k` logical ticks after the
    /// transaction's.
    pub(super) fn record_stamp_at(&self, k: u32) -> Result<CommitTs, FirnError> {
        let logical = self.ts.logical.checked_add(k).ok_or_else(|| {
            FirnError::TryAgain("a transaction's log records ran out of stamps; retry".into())
        })?;
        Ok(CommitTs::new(self.ts.wall_us, logical))
    }

    /// A stream's new entry, unless the trim that follows it would drop the entry itself
    /// (`MAXLEN 0`, or a `MINID` above its id): the stream then moves past its id (the id
    /// answered, the next one above it, `entries-added` counting it) and holds nothing new,
    /// as Redis's does.
    fn push_stream_entry(
        &mut self,
        log: &Key,
        tags: &[&Key],
        record: &NewRecord,
        seq: LogSeq,
        metas: &mut [Option<TagMeta>],
        stream: &StreamAppend,
    ) {
        // A trim with a LIMIT takes older entries first, and keeps the new one.
        let kept = match stream.trim {
            Some(StreamTrim::MaxLen {
                len: 0,
                limit: None,
            }) => false,
            Some(StreamTrim::MinId { id, limit: None }) => seq >= id,
            _ => true,
        };
        self.add_entry(log, tags, kept.then_some(record), seq, self.ts, metas);
    }

    /// Counts an entry at `seq` under each of its tags, and stores `record` there unless
    /// there is none to keep.
    fn add_entry(
        &mut self,
        log: &Key,
        tags: &[&Key],
        record: Option<&NewRecord>,
        seq: LogSeq,
        commit_ts: CommitTs,
        metas: &mut [Option<TagMeta>],
    ) {
        let stored = record.map(|record| {
            encode(&StoredEntry {
                tags: record.tags.clone(),
                payload: record.payload.clone(),
                commit_ts,
            })
        });
        for (tag, meta) in tags.iter().zip(metas.iter_mut()) {
            let mut m = meta.take().unwrap_or_default();
            m.last = m.last.max(seq);
            m.added += 1;
            if let Some(stored) = &stored {
                m.len += 1;
                self.batch.put(
                    Table::LogEntries,
                    entry_key(log.as_bytes(), tag.as_bytes(), seq),
                    stored.clone(),
                );
            }
            self.set_tag_meta(log.as_bytes(), tag.as_bytes(), m.clone());
            *meta = Some(m);
        }
    }

    /// Marks `log` as existing here (the shard of its name), once.
    pub(super) fn note_log(&mut self, log: &Key) -> Result<(), FirnError> {
        if !self.logs_noted.contains(log.as_bytes())
            && self.store.log_meta(log.as_bytes())?.is_none()
        {
            self.batch.put(
                Table::Logs,
                log.as_bytes().to_vec(),
                encode(&LogMeta::default()),
            );
        }
        self.logs_noted.insert(log.as_bytes().to_vec());
        Ok(())
    }

    pub(super) fn log_ensure(
        &mut self,
        log: &Key,
        tag: Option<&Key>,
        home: Option<u32>,
    ) -> Result<Response, FirnError> {
        match (tag, home) {
            (Some(tag), Some(home)) => {
                let mut meta = self
                    .tag_meta(log.as_bytes(), tag.as_bytes())?
                    .unwrap_or_default();
                if !meta.homes.contains(&home) {
                    meta.homes.push(home);
                    meta.homes.sort_unstable();
                    self.set_tag_meta(log.as_bytes(), tag.as_bytes(), meta);
                }
            }
            _ => {
                self.note_log(log)?;
            }
        }
        Ok(Response::Noted { at: self.ts })
    }

    /// Drops records below `before` of one tag, or of every tag of the log here.
    pub(super) fn log_trim(
        &mut self,
        log: &Key,
        tag: Option<&Key>,
        before: LogSeq,
    ) -> Result<Response, FirnError> {
        let tags: Vec<Vec<u8>> = match tag {
            Some(t) => vec![t.as_bytes().to_vec()],
            None => {
                let mut meta = self.store.log_meta(log.as_bytes())?.unwrap_or_default();
                meta.trimmed_before = meta.trimmed_before.max(before);
                self.make_room(1)?;
                self.batch
                    .put(Table::Logs, log.as_bytes().to_vec(), encode(&meta));
                self.store.tags_of(log.as_bytes())?
            }
        };
        let mut removed = 0;
        for tag in tags {
            let Some(mut meta) = self.tag_meta(log.as_bytes(), &tag)? else {
                continue;
            };
            let gone = self.remove_entries(log.as_bytes(), &tag, LogSeq::ZERO, before, u64::MAX)?;
            meta.len = meta.len.saturating_sub(gone);
            meta.first_kept = meta.first_kept.max(before);
            self.make_room(1)?;
            self.set_tag_meta(log.as_bytes(), &tag, meta);
            removed += gone;
        }
        Ok(Response::Count(removed))
    }

    /// Removes at most `max` entries of a tag with `from ≤ seq < before`, oldest first, a
    /// page at a time; returns how many.
    fn remove_entries(
        &mut self,
        log: &[u8],
        tag: &[u8],
        from: LogSeq,
        before: LogSeq,
        max: u64,
    ) -> Result<u64, FirnError> {
        let (lo, hi) = (entry_key(log, tag, from), entry_key(log, tag, before));
        let mut removed = 0;
        let mut after: Option<Vec<u8>> = None;
        while removed < max {
            let lower = after
                .as_deref()
                .map_or(Bound::Included(&lo[..]), Bound::Excluded);
            let want = (max - removed).min(WALK_PAGE as u64) as usize;
            let page = self
                .store
                .backend
                .range(Table::LogEntries, lower, Bound::Excluded(&hi), false, want)
                .map_err(io_err)?;
            let Some((last, _)) = page.last() else { break };
            after = Some(last.clone());
            let full = page.len() == want;
            for (k, _) in page {
                if self.paged {
                    self.make_room(1)?;
                }
                self.batch.remove(Table::LogEntries, k);
                removed += 1;
            }
            if !full {
                break;
            }
        }
        Ok(removed)
    }
}

impl VersionedStore {
    pub(super) fn tag_meta_at(&self, key: &[u8]) -> Result<Option<TagMeta>, FirnError> {
        self.backend
            .get(Table::LogTags, key)
            .map_err(io_err)?
            .map(|b| decode(&b))
            .transpose()
    }

    fn log_meta(&self, log: &[u8]) -> Result<Option<LogMeta>, FirnError> {
        self.backend
            .get(Table::Logs, log)
            .map_err(io_err)?
            .map(|b| decode(&b))
            .transpose()
    }

    /// Every tag of `log` this shard keeps anything of.
    fn tags_of(&self, log: &[u8]) -> Result<Vec<Vec<u8>>, FirnError> {
        let mut tags = Vec::new();
        self.walk_prefix(Table::LogTags, &log_prefix(log), |k, _| {
            tags.push(tag_of(log, &k));
            Ok(())
        })?;
        Ok(tags)
    }

    pub(super) fn entries(
        &self,
        log: &[u8],
        tag: &[u8],
        from: LogSeq,
        to: LogSeq,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<LogRecord>, FirnError> {
        if from > to {
            return Ok(Vec::new());
        }
        let (lo, hi) = (entry_key(log, tag, from), entry_key(log, tag, to));
        self.backend
            .range(
                Table::LogEntries,
                Bound::Included(&lo),
                Bound::Included(&hi),
                reverse,
                limit,
            )
            .map_err(io_err)?
            .into_iter()
            .map(|(k, v)| {
                let e: StoredEntry = decode(&v)?;
                Ok(LogRecord {
                    seq: seq_of(&k)?,
                    tags: e.tags,
                    payload: e.payload,
                    commit_ts: e.commit_ts,
                })
            })
            .collect()
    }

    /// This shard's records of `tag` with `from ≤ seq ≤ to`, oldest (or newest) first, at
    /// most `limit`; with `at`, only those committed at or before it. With `ends`, the
    /// tag's first and last records are looked up for its info too.
    #[allow(clippy::too_many_arguments)]
    pub fn log_page(
        &self,
        log: &[u8],
        tag: &[u8],
        from: LogSeq,
        to: LogSeq,
        limit: usize,
        reverse: bool,
        at: Option<CommitTs>,
        ends: bool,
    ) -> Result<LogPage, FirnError> {
        if log == tag && at.is_none() && (limit > 0 || ends) {
            // The tag named as its log is the stream of that key: reading its entries or
            // what it holds is a stream read. (A probe that reads neither only asks whether
            // the log is known: log names are their own, whatever the key holds.)
            self.check_stream_type(log)?;
        }
        let log_meta = self.log_meta(log)?;
        let meta = self.tag_meta_at(&tag_key(log, tag))?;
        let mut records = Vec::new();
        if meta.is_some() && limit > 0 {
            // Within a tag here, stamps grow with seqs: a read at T is a prefix.
            let (mut lo, mut hi) = (from, to);
            'pages: loop {
                let page = self.entries(log, tag, lo, hi, reverse, HISTORY_PAGE_VERSIONS)?;
                let full = page.len() == HISTORY_PAGE_VERSIONS;
                let Some(edge) = page.last().map(|r| r.seq) else {
                    break;
                };
                for r in page {
                    if at.is_some_and(|t| r.commit_ts > t) {
                        if reverse {
                            continue;
                        }
                        break 'pages;
                    }
                    records.push(r);
                    if records.len() == limit {
                        break 'pages;
                    }
                }
                if !full {
                    break;
                }
                let next = if reverse {
                    edge.predecessor()
                } else {
                    edge.successor()
                };
                match next {
                    Some(n) if reverse => hi = n,
                    Some(n) => lo = n,
                    None => break,
                }
            }
        }
        let trimmed = log_meta
            .as_ref()
            .map(|m| m.trimmed_before)
            .unwrap_or_default();
        let info = match &meta {
            None => None,
            Some(m) => {
                let (first, last) = if ends {
                    let first = self.entries(log, tag, LogSeq::ZERO, LogSeq::MAX, false, 1)?;
                    let last = self.entries(log, tag, LogSeq::ZERO, LogSeq::MAX, true, 1)?;
                    (first.into_iter().next(), last.into_iter().next())
                } else {
                    (None, None)
                };
                Some(TagInfo {
                    len: m.len,
                    first,
                    last,
                    last_seq: m.last,
                    added: m.added,
                    max_deleted: m.max_deleted,
                    first_kept: m.first_kept.max(trimmed),
                    groups: if ends && log == tag {
                        self.group_count(log)?
                    } else {
                        0
                    },
                })
            }
        };
        Ok(LogPage {
            records,
            homes: meta.map(|m| m.homes).unwrap_or_default(),
            info,
            log_known: log_meta.is_some(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_ids_follow_redis_rules() {
        let ts = CommitTs::new(5_000_123, 0); // ms 5000
        let last = LogSeq::new(5_000, 3);
        assert_eq!(
            stream_id(StreamId::Auto, LogSeq::ZERO, ts).unwrap(),
            LogSeq::new(5_000, 0)
        );
        assert_eq!(
            stream_id(StreamId::Auto, last, ts).unwrap(),
            LogSeq::new(5_000, 4)
        );
        assert_eq!(
            stream_id(StreamId::Auto, LogSeq::new(9_000, 0), ts).unwrap(),
            LogSeq::new(9_000, 1)
        );
        assert_eq!(
            stream_id(StreamId::Ms(5_000), last, ts).unwrap(),
            LogSeq::new(5_000, 4)
        );
        assert_eq!(
            stream_id(StreamId::Ms(6_000), last, ts).unwrap(),
            LogSeq::new(6_000, 0)
        );
        assert!(stream_id(StreamId::Ms(4_000), last, ts).is_err());
        // `0-*` on an empty stream is 0-1 (0-0 is no id), then 0-2, as in Redis.
        let first = stream_id(StreamId::Ms(0), LogSeq::ZERO, ts).unwrap();
        assert_eq!(first, LogSeq::new(0, 1));
        assert_eq!(
            stream_id(StreamId::Ms(0), first, ts).unwrap(),
            LogSeq::new(0, 2)
        );
        assert!(stream_id(StreamId::Exact(last), last, ts).is_err());
        assert_eq!(
            stream_id(StreamId::Exact(LogSeq::new(1, 1)), LogSeq::ZERO, ts).unwrap(),
            LogSeq::new(1, 1)
        );
    }

    #[test]
    fn entry_keys_keep_a_tag_contiguous_and_in_seq_order() {
        let a = entry_key(b"log", b"t", LogSeq::new(1, 2));
        let b = entry_key(b"log", b"t", LogSeq::new(1, 3));
        let other = entry_key(b"log", b"tt", LogSeq::ZERO);
        assert!(a < b);
        assert!(
            b < other,
            "a longer tag sorts after every seq of a shorter one"
        );
        assert_eq!(seq_of(&b).unwrap(), LogSeq::new(1, 3));
        assert_eq!(tag_of(b"log", &tag_key(b"log", b"tt")), b"tt".to_vec());
    }
}
