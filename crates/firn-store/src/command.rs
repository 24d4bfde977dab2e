//! The Raft log payload: a write, stamped by the leader with its proposal time.

use bytes::Bytes;
use firn_model::{
    CommitTs, GroupChange, IdemKey, Key, KeyspaceSpec, KvWrite, LogSeq, NewRecord, StreamId,
    StreamTrim, TxnId, TxnOutcome, TxnStep,
};
use serde::{Deserialize, Serialize};

/// A state change as it travels through the log. `ts` is the leader's HLC reading when it
/// proposed; apply raises it above the previous entry's stamp if two proposals raced.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Command {
    pub ts: CommitTs,
    pub op: Op,
}

/// One intent, from the request that made it to the shard that applies it: a client's write
/// of keys travels as its request carries it ([`KvWrite`]), the log's and the shard's own
/// changes as their own types.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// A write of keys: put, a large value's manifest, delete, MSET, truncate, FLUSHALL.
    Kv(KvWrite),
    /// The shared log and the Redis streams on it.
    Log(LogOp),
    /// A change to the consumer group `group` of the stream `key` (kept in the stream's
    /// shard; the entry's stamp is the clock for delivery and idle times).
    Group {
        key: Key,
        group: Bytes,
        change: GroupChange,
    },
    /// What a shard is told about itself: keyspace definitions, retention, closing time.
    System(SystemOp),
    /// A shard's part in a transaction across shards, or the anchor's decision of one.
    Txn(TxnOp),
    /// `op` with an idempotency key: applied once; sent again within the window, it
    /// applies nothing and answers what it answered the first time (`store/once.rs`).
    Once { key: IdemKey, op: Box<Op> },
}

/// The steps of a transaction across shards on one shard (docs/architecture.md,
/// "Transactions across shards").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnOp {
    /// Checks the compares, runs `steps` (and `otherwise`) to their answers without keeping
    /// what they write, and holds every key they name (and time, from this entry's stamp)
    /// until the transaction is resolved here. The anchor's prepare also writes the
    /// transaction's record, undecided. Answers `Response::Prepared` (holding nothing when
    /// a compare failed and there are no `otherwise` steps); refused with `TxnConflict`
    /// when another transaction holds one of the keys.
    Prepare { txn: TxnId, part: TxnPart },
    /// At the anchor: decides the transaction — `Committed(T)` commits it if it is still
    /// undecided, `Aborted` aborts it — unless it was decided before (or never prepared
    /// here: then it is aborted). Resolves the anchor's own part the same way. Answers
    /// `Response::Decided` with the outcome the record holds (an aborted one is not
    /// remembered under an idempotency key: see `store/once.rs`).
    Decide {
        txn: TxnId,
        decision: TxnOutcome,
        /// The client's answer, when the transaction has an idempotency key: remembered
        /// with the decision under it.
        answer: Option<Box<firn_model::Response>>,
    },
    /// At a participant: ends its part as the anchor decided — committed, its steps (or
    /// its `otherwise` steps) run again as versions stamped `T`; aborted, nothing. A part resolved before (or never
    /// prepared) is left alone.
    Resolve { txn: TxnId, outcome: TxnOutcome },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LogOp {
    /// Records of `log` stored in shard `home` (the shard of each record's first tag), each
    /// under every one of its tags. A log record's seq is its stamp and `home`; a stream
    /// entry (`stream` set: one record, one tag, the key) gets a Redis id, and may be
    /// trimmed after.
    Append {
        log: Key,
        home: u32,
        records: Vec<NewRecord>,
        stream: Option<StreamAppend>,
    },
    /// Notes that `log` exists (on the shard of its name), or that shard `home` holds
    /// records of `tag` (on the shard of the tag: the tag's directory). Idempotent.
    Ensure {
        log: Key,
        tag: Option<Key>,
        home: Option<u32>,
    },
    /// Drops this shard's records of `log` (of `tag`, or of every tag) with seq < `before`,
    /// and keeps `before` as the trim point.
    Trim {
        log: Key,
        tag: Option<Key>,
        before: LogSeq,
    },
    /// XTRIM on the stream `key`.
    StreamTrim { key: Key, trim: StreamTrim },
    /// XDEL on the stream `key`.
    StreamDel { key: Key, ids: Vec<LogSeq> },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SystemOp {
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
    /// Writes down the expiries due by the entry's stamp (`store/expiry.rs`); a leader
    /// proposes one when the soonest is due.
    ExpireDue,
    /// A keyspace's event-time watermark moved, or its late policy set.
    Watermark(WatermarkOp),
}

/// A change to a keyspace's watermark, applied by every shard in its log order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WatermarkOp {
    /// Raises the watermark to `to_us`; one below the current is refused, nothing changed.
    Advance { prefix: String, to_us: u64 },
    /// Sets the keyspace's allowed lateness and late policy.
    Policy {
        prefix: String,
        policy: firn_model::WatermarkPolicy,
    },
}

/// One shard's part of a transaction across shards, as the coordinator prepares it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnPart {
    /// The shard whose record decides the transaction.
    pub anchor: u32,
    /// Whether this shard is the anchor.
    pub is_anchor: bool,
    /// Wall µs after which a participant asks the anchor, which then aborts the transaction
    /// if it is still undecided.
    pub deadline_us: u64,
    pub compares: Vec<firn_model::Compare>,
    pub steps: Vec<TxnStep>,
    /// `Some` when the transaction has `otherwise` steps (this part's may be none).
    pub otherwise: Option<Vec<TxnStep>>,
}

/// How a stream append chooses its id, and what it trims after.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamAppend {
    pub id: StreamId,
    pub trim: Option<StreamTrim>,
    /// NOMKSTREAM: append nothing if the stream does not exist.
    pub no_create: bool,
}

impl LogOp {
    /// XADD of `payload` to the stream `key`, whose log's home is `home` (the key's shard).
    pub fn stream_add(
        key: Key,
        home: u32,
        id: StreamId,
        payload: Bytes,
        trim: Option<StreamTrim>,
        no_create: bool,
    ) -> LogOp {
        LogOp::Append {
            log: key.clone(),
            home,
            records: vec![NewRecord {
                tags: vec![key],
                payload,
            }],
            stream: Some(StreamAppend {
                id,
                trim,
                no_create,
            }),
        }
    }
}

impl Op {
    /// The keys the op writes one by one: a key-value write's, a stream's, a consumer
    /// group's stream (an idempotent write's own op names its keys when it runs; a log
    /// append names tags, not keys).
    pub fn named_keys(&self) -> Box<dyn Iterator<Item = &Key> + '_> {
        match self {
            Op::Kv(write) => write.keys(),
            Op::Log(
                LogOp::StreamTrim { key, .. }
                | LogOp::StreamDel { key, .. }
                | LogOp::Append {
                    stream: Some(_),
                    log: key,
                    ..
                },
            )
            | Op::Group { key, .. } => Box::new(std::iter::once(key)),
            Op::Log(_) | Op::System(_) | Op::Txn(_) | Op::Once { .. } => {
                Box::new(std::iter::empty())
            }
        }
    }

    /// Whether the command adds data to the store (a value, a record), and so is refused
    /// while the leader's disk is low on space. Deletes, truncations, trims, keyspace
    /// definitions and drops, consumer-group changes and the leader's own bookkeeping run
    /// anyway: they are small, and most are how space is freed (a keyspace redefined with
    /// fewer versions or a shorter age is one way).
    pub fn adds_data(&self) -> bool {
        match self {
            Op::Once { op, .. } => op.adds_data(),
            Op::Kv(
                KvWrite::Put(_)
                | KvWrite::MSet { .. }
                | KvWrite::PutBlob { .. }
                | KvWrite::Change { .. }
                | KvWrite::Atomic { .. }
                | KvWrite::Lease(_),
            )
            | Op::Log(LogOp::Append { .. } | LogOp::Ensure { .. })
            | Op::Txn(TxnOp::Prepare { .. }) => true,
            Op::Kv(
                KvWrite::Delete { .. }
                | KvWrite::Truncate { .. }
                | KvWrite::FlushAll
                | KvWrite::Expire { .. },
            )
            | Op::Log(LogOp::Trim { .. } | LogOp::StreamTrim { .. } | LogOp::StreamDel { .. })
            | Op::Group { .. }
            | Op::System(_)
            | Op::Txn(TxnOp::Decide { .. } | TxnOp::Resolve { .. }) => false,
        }
    }

    /// Whether the command reads only key metadata (never stored versions) while it applies,
    /// so that it can share one storage batch with its neighbours in the log.
    pub fn is_batchable(&self) -> bool {
        match self {
            // The answers it remembers are kept in view in the batch, as key metadata is.
            Op::Once { op, .. } => op.is_batchable(),
            Op::Kv(KvWrite::Put(p) | KvWrite::PutBlob { put: p, .. }) => !p.return_previous,
            Op::Kv(KvWrite::Delete { .. } | KvWrite::MSet { .. })
            | Op::System(SystemOp::CloseTime) => true,
            // An append reads only its tags' metadata, which the batch keeps in view; a
            // stream trim after it walks entries.
            Op::Log(LogOp::Append { stream, .. }) => {
                stream.as_ref().is_none_or(|s| s.trim.is_none())
            }
            Op::Log(LogOp::Ensure { .. }) => true,
            _ => false,
        }
    }

    /// How many keys the command writes when that is known from the command alone (a point
    /// write); `None` for one that walks keys or history (FLUSHALL, truncation, retention,
    /// keyspace changes) or reads the version it replaces.
    pub fn keys_written(&self) -> Option<usize> {
        match self {
            Op::Once { op, .. } => op.keys_written().map(|n| n + 3),
            Op::Kv(KvWrite::Put(p) | KvWrite::PutBlob { put: p, .. }) if !p.return_previous => {
                Some(1)
            }
            Op::Kv(KvWrite::Delete { keys }) => Some(keys.len()),
            Op::Kv(KvWrite::MSet { items }) => Some(items.len()),
            Op::System(SystemOp::CloseTime) => Some(0),
            // A stream append that trims after walks the stream's entries.
            Op::Log(LogOp::Append {
                records, stream, ..
            }) if stream.as_ref().is_none_or(|s| s.trim.is_none()) => {
                Some(records.iter().map(|r| r.tags.len()).sum())
            }
            Op::Log(LogOp::Ensure { .. }) => Some(1),
            _ => None,
        }
    }
}
