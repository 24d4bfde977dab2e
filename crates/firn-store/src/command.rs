//! The Raft log payload: a write, stamped by the leader with its proposal time.

use bytes::Bytes;
use firn_model::{
    BlobRef, CommitTs, GroupChange, Key, KeyRange, KeyspaceSpec, KvWrite, LogSeq, NewRecord,
    PutRequest, StreamId, StreamTrim, TruncateBefore,
};
use serde::{Deserialize, Serialize};

/// A state change as it travels through the log. `ts` is the leader's HLC reading when it
/// proposed; apply raises it above the previous entry's stamp if two proposals raced.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Command {
    pub ts: CommitTs,
    pub op: Op,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    Put(PutRequest),
    Delete {
        keys: Vec<Key>,
    },
    MSet {
        items: Vec<(Key, Bytes)>,
    },
    Truncate {
        target: KeyRange,
        before: TruncateBefore,
    },
    KeyspaceCreate(KeyspaceSpec),
    KeyspaceDrop {
        prefix: String,
    },
    /// Retention by age: drop versions older than each keyspace's `max_age` at `ts`.
    ExpireByAge,
    /// Closes time through the entry's stamp: changes no key, but every later entry of the
    /// shard is stamped above it. A leader proposes one when the shard has been idle, so
    /// that time keeps closing.
    CloseTime,
    FlushAll,
    /// Records of `log` stored in shard `home` (the shard of each record's first tag), each
    /// under every one of its tags. A log record's seq is its stamp and `home`; a stream
    /// entry (`stream` set: one record, one tag, the key) gets a Redis id, and may be
    /// trimmed after.
    LogAppend {
        log: Key,
        home: u32,
        records: Vec<NewRecord>,
        stream: Option<StreamAppend>,
    },
    /// Notes that `log` exists (on the shard of its name), or that shard `home` holds
    /// records of `tag` (on the shard of the tag: the tag's directory). Idempotent.
    LogEnsure {
        log: Key,
        tag: Option<Key>,
        home: Option<u32>,
    },
    /// Drops this shard's records of `log` (of `tag`, or of every tag) with seq < `before`,
    /// and keeps `before` as the trim point.
    LogTrim {
        log: Key,
        tag: Option<Key>,
        before: LogSeq,
    },
    /// XTRIM on the stream `key`.
    StreamTrim {
        key: Key,
        trim: StreamTrim,
    },
    /// XDEL on the stream `key`.
    StreamDel {
        key: Key,
        ids: Vec<LogSeq>,
    },
    /// A change to the consumer group `group` of the stream `key` (kept in the stream's
    /// shard; the entry's stamp is the clock for delivery and idle times).
    Group {
        key: Key,
        group: Bytes,
        change: GroupChange,
    },
    /// A put whose value is a blob already sealed on a majority of the shard's replicas
    /// (`put.value` is empty): the version records the manifest.
    PutBlob {
        put: PutRequest,
        blob: BlobRef,
    },
}

/// How a stream append chooses its id, and what it trims after.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamAppend {
    pub id: StreamId,
    pub trim: Option<StreamTrim>,
    /// NOMKSTREAM: append nothing if the stream does not exist.
    pub no_create: bool,
}

impl Op {
    /// Whether the command adds data to the store (a value, a record), and so is refused
    /// while the leader's disk is low on space. Deletes, truncations, trims, keyspace
    /// definitions and drops, consumer-group changes and the leader's own bookkeeping run
    /// anyway: they are small, and most are how space is freed (a keyspace redefined with
    /// fewer versions or a shorter age is one way).
    pub fn adds_data(&self) -> bool {
        match self {
            Op::Put(_)
            | Op::MSet { .. }
            | Op::PutBlob { .. }
            | Op::LogAppend { .. }
            | Op::LogEnsure { .. } => true,
            Op::KeyspaceCreate(_)
            | Op::Delete { .. }
            | Op::Truncate { .. }
            | Op::KeyspaceDrop { .. }
            | Op::ExpireByAge
            | Op::CloseTime
            | Op::FlushAll
            | Op::LogTrim { .. }
            | Op::StreamTrim { .. }
            | Op::StreamDel { .. }
            | Op::Group { .. } => false,
        }
    }

    /// Whether the command reads only key metadata (never stored versions) while it applies,
    /// so that it can share one storage batch with its neighbours in the log.
    pub fn is_batchable(&self) -> bool {
        match self {
            Op::Put(p) | Op::PutBlob { put: p, .. } => !p.return_previous,
            Op::Delete { .. } | Op::MSet { .. } | Op::CloseTime => true,
            // An append reads only its tags' metadata, which the batch keeps in view; a
            // stream trim after it walks entries.
            Op::LogAppend { stream, .. } => stream.as_ref().is_none_or(|s| s.trim.is_none()),
            Op::LogEnsure { .. } => true,
            _ => false,
        }
    }
}

impl Op {
    /// How many keys the command writes when that is known from the command alone (a point
    /// write); `None` for one that walks keys or history (FLUSHALL, truncation, retention,
    /// keyspace changes) or reads the version it replaces.
    pub fn keys_written(&self) -> Option<usize> {
        match self {
            Op::Put(p) | Op::PutBlob { put: p, .. } if !p.return_previous => Some(1),
            Op::Delete { keys } => Some(keys.len()),
            Op::MSet { items } => Some(items.len()),
            Op::CloseTime => Some(0),
            // A stream append that trims after walks the stream's entries.
            Op::LogAppend {
                records, stream, ..
            } if stream.as_ref().is_none_or(|s| s.trim.is_none()) => {
                Some(records.iter().map(|r| r.tags.len()).sum())
            }
            Op::LogEnsure { .. } => Some(1),
            _ => None,
        }
    }
}

/// Every kv write is one log operation: the conversion is total, so no write can lack one.
impl From<KvWrite> for Op {
    fn from(write: KvWrite) -> Op {
        match write {
            KvWrite::Put(p) => Op::Put(p),
            KvWrite::Delete { keys } => Op::Delete { keys },
            KvWrite::MSet { items } => Op::MSet { items },
            KvWrite::Truncate { target, before } => Op::Truncate { target, before },
            KvWrite::FlushAll => Op::FlushAll,
            KvWrite::PutBlob { put, blob } => Op::PutBlob { put, blob },
        }
    }
}
