//! The shared log's requests: reads by tag ([`LogRead`]) and writes ([`LogWrite`]). Redis
//! Streams are the same log seen one way: a stream key is a log whose records carry the one
//! tag that is the key; the `stream` flag of a read asks for Redis's manners (a missing
//! stream reads empty, a range below the trim point starts at the first kept entry).

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::ReadConsistency;
use crate::hlc::CommitTs;
use crate::key::Key;
use crate::log::{LogSeq, NewRecord, StreamId, StreamTrim};

/// A read of one tag of a log, by seq: `read_next`, `read_prev`, `check_tail` and `range`
/// are all this one query.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogQuery {
    pub log: Key,
    pub tag: Key,
    /// Inclusive bounds.
    pub from: LogSeq,
    pub to: LogSeq,
    pub limit: usize,
    /// Newest first.
    pub reverse: bool,
    /// When nothing matches, wait this long for a record to arrive (0: without end).
    pub block_ms: Option<u64>,
    /// Read the log as it was at this time (the same cut as every Firn read at T).
    pub at: Option<CommitTs>,
    pub consistency: ReadConsistency,
    /// Redis Streams' manners (see the module doc).
    pub stream: bool,
    /// `from` is the tag's start (`-`, or no start given): a tag trimmed since reads from
    /// its first kept record rather than answering TRIMMED.
    pub from_start: bool,
}

impl LogQuery {
    fn new(log: Key, tag: Key, from: LogSeq, to: LogSeq, limit: usize, reverse: bool) -> Self {
        LogQuery {
            log,
            tag,
            from,
            to,
            limit,
            reverse,
            block_ms: None,
            at: None,
            consistency: ReadConsistency::Linearizable,
            stream: false,
            from_start: false,
        }
    }

    /// The first record with the tag and `seq ≥ min`.
    pub fn next(log: Key, tag: Key, min: LogSeq) -> Self {
        Self::new(log, tag, min, LogSeq::MAX, 1, false)
    }

    /// The last record with the tag and `seq ≤ max`.
    pub fn prev(log: Key, tag: Key, max: LogSeq) -> Self {
        Self::new(log, tag, LogSeq::ZERO, max, 1, true)
    }

    /// The newest record with the tag.
    pub fn tail(log: Key, tag: Key) -> Self {
        Self::prev(log, tag, LogSeq::MAX)
    }

    /// Records with the tag and `from ≤ seq ≤ to`, at most `limit`.
    pub fn range(log: Key, tag: Key, from: LogSeq, to: LogSeq, limit: usize) -> Self {
        Self::new(log, tag, from, to, limit, false)
    }

    /// A stream's entries (XRANGE/XREVRANGE/XREAD): the key is the log and its tag.
    pub fn stream(key: Key, from: LogSeq, to: LogSeq, limit: usize, reverse: bool) -> Self {
        let mut q = Self::new(key.clone(), key, from, to, limit, reverse);
        q.stream = true;
        q
    }

    /// Reads from the tag's start, wherever its trim point now is (see `from_start`).
    pub fn from_start(mut self) -> Self {
        self.from = LogSeq::ZERO;
        self.from_start = true;
        self
    }

    pub fn at(mut self, at: Option<CommitTs>) -> Self {
        self.at = at;
        self
    }

    pub fn consistency(mut self, consistency: ReadConsistency) -> Self {
        self.consistency = consistency;
        self
    }

    pub fn block(mut self, block_ms: Option<u64>) -> Self {
        self.block_ms = block_ms;
        self
    }
}

/// A read of the log. Never changes state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LogRead {
    /// Records of one tag (answers `Response::Records`).
    Query(LogQuery),
    /// Several streams' entries after an id each (`None`: after the stream's last id, XREAD's
    /// `$`), as XREAD reads them: answers `Response::Streams` with the streams that have
    /// any, blocking until one has.
    Streams {
        after: Vec<(Key, Option<LogSeq>)>,
        limit: usize,
        block_ms: Option<u64>,
    },
    /// What a tag holds (XLEN, XINFO STREAM): answers `Response::TagInfo` (an unknown
    /// stream: `None`).
    Info {
        log: Key,
        tag: Key,
        consistency: ReadConsistency,
    },
    /// What every log holds: a page of (log, tag) rows from every shard, in one order
    /// (length-prefixed log name, then tag), after `cursor` (an answer's `next_cursor`),
    /// at most `limit`; answers `Response::LogTags`. With `at`, every shard has closed
    /// `at` first, so every tag with a record committed at or before it is listed; without,
    /// each shard is read after a linearizable barrier.
    Tags {
        cursor: Option<Bytes>,
        limit: usize,
        at: Option<CommitTs>,
    },
}

impl LogRead {
    pub fn name(&self) -> &'static str {
        match self {
            LogRead::Query(_) => "log_read",
            LogRead::Streams { .. } => "stream_read",
            LogRead::Info { .. } => "log_info",
            LogRead::Tags { .. } => "log_tags",
        }
    }
}

/// A write of the log: what a shard's log carries as an `Op`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LogWrite {
    /// Append records (1 to `LOG_BATCH_RECORDS_MAX`); answers `Response::Appended`, one per
    /// record in order.
    Append { log: Key, records: Vec<NewRecord> },
    /// XADD: one entry to a stream, optionally trimming it after.
    StreamAdd {
        key: Key,
        id: StreamId,
        payload: Bytes,
        trim: Option<StreamTrim>,
        /// NOMKSTREAM: do nothing (answer no id) if the stream does not exist.
        no_create: bool,
    },
    /// Drop the records (of `tag`, or of every tag) with `seq < before`; answers
    /// `Response::Count` with how many went.
    Trim {
        log: Key,
        tag: Option<Key>,
        before: LogSeq,
    },
    /// XTRIM: answers `Response::Count`.
    StreamTrim { key: Key, trim: StreamTrim },
    /// XDEL: answers `Response::Count` with how many of the ids existed.
    StreamDel { key: Key, ids: Vec<LogSeq> },
}

impl LogWrite {
    pub fn name(&self) -> &'static str {
        match self {
            LogWrite::Append { .. } => "log_append",
            LogWrite::StreamAdd { .. } => "stream_add",
            LogWrite::Trim { .. } => "log_trim",
            LogWrite::StreamTrim { .. } => "stream_trim",
            LogWrite::StreamDel { .. } => "stream_del",
        }
    }
}

/// A request of the log subsystem.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LogRequest {
    Read(LogRead),
    Write(LogWrite),
}
