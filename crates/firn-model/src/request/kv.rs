//! The key-value subsystem's requests: reads ([`KvRead`]), served by a replica, and writes
//! ([`KvWrite`]), which go through a shard's log.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::{KeyRange, KvRequest, PutRequest, ReadAt, ReadConsistency, TruncateBefore};
use crate::hlc::CommitTs;
use crate::key::{Key, Version};

/// A read of keys. Never changes state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum KvRead {
    Get {
        key: Key,
        at: ReadAt,
        consistency: ReadConsistency,
    },
    MGet {
        keys: Vec<Key>,
        at: ReadAt,
        consistency: ReadConsistency,
    },
    Exists {
        keys: Vec<Key>,
        consistency: ReadConsistency,
    },
    /// The key's newest version whatever its type (`TYPE`): a [`Response::Value`] whose
    /// `kind` names it, where [`KvRead::Get`] answers `WRONGTYPE` for a key that is not a
    /// string.
    Type {
        key: Key,
        consistency: ReadConsistency,
    },
    /// Versions `from..=to` of a key, oldest first, at most `limit`; with `as_of`, only the
    /// versions committed at or before that time (the history as a read at T sees it).
    History {
        key: Key,
        from: Version,
        to: Option<Version>,
        limit: usize,
        as_of: Option<CommitTs>,
        consistency: ReadConsistency,
        /// Only the corrections: versions written late, with an event time at or below
        /// their keyspace's watermark, and kept (`FIRN.HISTORY … CORRECTIONS`).
        #[serde(default)]
        corrections: bool,
    },
    /// Live keys under `prefix` after `cursor`, in key order, at most `limit`.
    Scan {
        prefix: Bytes,
        cursor: Option<Bytes>,
        limit: usize,
        pattern: Option<Bytes>,
        at: ReadAt,
        consistency: ReadConsistency,
    },
    /// Keys or a prefix read as of one time T across every shard involved: one consistent
    /// cut, the same at every replica. Without `at`, T is the newest time every shard
    /// involved has closed.
    Snapshot {
        of: SnapshotOf,
        at: Option<CommitTs>,
    },
    /// Number of live keys.
    DbSize,
    /// When the key's value ends (`TTL`, `PTTL`, `EXPIRETIME`, `PEXPIRETIME`): answers
    /// `Response::Expiry`.
    Expiry {
        key: Key,
        consistency: ReadConsistency,
    },
    /// A lease as its record holds it (`FIRN.LEASE TTL`); `key` is its [`crate::lease_key`]:
    /// answers `Response::Lease`, or `LeaseNotFound` when it is not live.
    Lease {
        key: Key,
        id: crate::LeaseId,
        consistency: ReadConsistency,
    },
    /// The keys attached to a lease on one shard (what a lease's end deletes), at most
    /// `limit`: answers `Response::LeaseKeys`.
    LeaseKeys { id: crate::LeaseId, limit: usize },
}

/// A write of keys, as it travels into a shard's log too (`firn_store::Op::Kv`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum KvWrite {
    Put(PutRequest),
    /// Tombstone each key; the response says which existed.
    Delete {
        keys: Vec<Key>,
    },
    /// Several puts applied atomically in one log entry (per shard).
    MSet {
        items: Vec<(Key, Bytes)>,
    },
    Truncate {
        target: KeyRange,
        before: TruncateBefore,
    },
    /// Drop every key and version (refused unless the node allows it).
    FlushAll,
    /// A put of a large value already stored beside the log (`put.value` is empty): only
    /// its manifest goes through consensus.
    PutBlob {
        put: PutRequest,
        blob: crate::BlobRef,
    },
    /// A new version of one key computed from its current value in its shard, as one
    /// entry (INCR, APPEND, GETDEL …): answers `Response::Changed`.
    Change {
        key: Key,
        change: KeyChange,
    },
    /// A transaction (`MULTI`/`EXEC`, `FIRN.TXN`): when every compare holds, `steps` run in
    /// order, each seeing those before it on its shard, all at one stamp; when one does not,
    /// the `otherwise` steps run — or, without them, nothing (`EXEC` after a watched key
    /// changed: `WATCH` is a compare of the key's stamp). Within one shard it is one log
    /// entry; across shards, a prepare on each, the anchor's decision and a resolve on each
    /// (`TxnOp`). Answers `Response::Steps` without `otherwise`, `Response::Branch` with it.
    Atomic {
        compares: Vec<crate::Compare>,
        steps: Vec<TxnStep>,
        otherwise: Option<Vec<TxnStep>>,
    },
    /// A key's expiry changed, not its value: no new version (`EXPIRE`, `PEXPIRE`,
    /// `EXPIREAT`, `PEXPIREAT`, `PERSIST`, `GETEX`). An expiry at or before the write's
    /// stamp deletes the key. Answers `Response::ExpirySet`.
    Expire {
        key: Key,
        to: Expiry,
        only: ExpireIf,
    },
    /// A lease granted, kept alive or ended, on the shard of its record.
    Lease(crate::LeaseWrite),
}

/// When a key's value ends, as a write sets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Expiry {
    /// This many milliseconds after the write's stamp (`EXPIRE`, `PEXPIRE`; 0 or less: now).
    In { ms: i64 },
    /// At a moment, in milliseconds since the Unix epoch (`EXPIREAT`, `PEXPIREAT`).
    At { unix_ms: i64 },
    /// Never (`PERSIST`).
    Never,
}

/// When [`KvWrite::Expire`] sets the expiry (Redis 7's `NX`, `XX`, `GT`, `LT`): a key
/// without one counts as expiring never, later than any time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExpireIf {
    #[default]
    Always,
    /// `NX`: only when the key has no expiry.
    NoExpiry,
    /// `XX`: only when it has one.
    HasExpiry,
    /// `GT`: only when the new one is later.
    Later,
    /// `LT`: only when the new one is sooner.
    Sooner,
}

/// When a key's value ends, as a read finds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum KeyExpiry {
    /// The key has no value (never written, deleted, expired).
    Absent,
    /// It lives until it is deleted.
    Never,
    /// It ends at this stamp.
    At(CommitTs),
    /// It ends with the lease.
    Lease(crate::LeaseId),
}

/// One command of an [`KvWrite::Atomic`]: a point read of the newest versions (GET, MGET,
/// EXISTS, TYPE) or a write of keys (SET, MSET, DEL, INCR …).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnStep {
    Read(KvRead),
    Write(KvWrite),
    /// An entry added to a stream (`XADD`: a stream is a key, so its shard holds it for the
    /// transaction like any other), or records appended to a log (`FIRN.LOG APPEND`: the
    /// node places them as [`TxnStep::Records`]).
    Log(super::LogWrite),
    /// A log append's records whose home (their first tag's shard) is the shard running
    /// the step, named here since a shard's store does not know its own id: the node
    /// makes it of `Log(LogWrite::Append)`, splitting an append whose records have several
    /// homes; no client sends it. Each record's seq is its stamp (the transaction's, and
    /// the logical ticks after it for the records after the first), and the part holds its
    /// tags on the shard until it is resolved.
    Records {
        log: Key,
        home: u32,
        records: Vec<crate::NewRecord>,
    },
}

impl TxnStep {
    /// Whether the step may run inside a transaction: a point read of newest values (GET,
    /// MGET, EXISTS, TYPE) or a write of keys (SET and its kin, MSET, DEL, the counters …).
    pub fn check(&self) -> Result<(), crate::FirnError> {
        let refused = TxnStep::refused;
        match self {
            TxnStep::Write(KvWrite::Put(PutRequest {
                life: crate::Lifetime::Lease(_),
                ..
            })) => Err(crate::FirnError::BadArgument(
                "LEASE cannot be given inside a transaction; attach the key with SET … LEASE on \
                 its own"
                    .into(),
            )),
            TxnStep::Read(
                KvRead::Get {
                    at: ReadAt::Latest, ..
                }
                | KvRead::MGet {
                    at: ReadAt::Latest, ..
                }
                | KvRead::Exists { .. }
                | KvRead::Type { .. },
            )
            | TxnStep::Write(
                KvWrite::Put(_)
                | KvWrite::MSet { .. }
                | KvWrite::Delete { .. }
                | KvWrite::Change { .. }
                | KvWrite::Expire { .. },
            ) => Ok(()),
            TxnStep::Log(super::LogWrite::StreamAdd { .. } | super::LogWrite::Append { .. }) => {
                Ok(())
            }
            TxnStep::Records { .. } => Err(crate::FirnError::BadArgument(
                "a log append is placed on its records' shards by the node; send it as an append"
                    .into(),
            )),
            TxnStep::Read(r) => Err(refused(r.name())),
            TxnStep::Write(w) => Err(refused(w.name())),
            TxnStep::Log(w) => Err(refused(w.name())),
        }
    }

    /// Why `what` (a command's or request's name) is no transaction step.
    pub fn refused(what: &str) -> crate::FirnError {
        crate::FirnError::BadArgument(format!(
            "{what} cannot run inside a transaction (GET, MGET, EXISTS, TYPE, the writes of keys, \
             XADD and FIRN.LOG APPEND can)"
        ))
    }

    /// The keys the step names (a log append names its log; placed on its records' home,
    /// it names none: its records are held by their tags).
    pub fn keys(&self) -> NamedKeys<'_> {
        match self {
            TxnStep::Read(r) => r.keys(),
            TxnStep::Write(w) => w.keys(),
            TxnStep::Log(
                super::LogWrite::StreamAdd { key, .. }
                | super::LogWrite::StreamTrim { key, .. }
                | super::LogWrite::StreamDel { key, .. },
            ) => Box::new(std::iter::once(key)),
            TxnStep::Log(
                super::LogWrite::Append { log, .. } | super::LogWrite::Trim { log, .. },
            ) => Box::new(std::iter::once(log)),
            TxnStep::Records { .. } => Box::new(std::iter::empty()),
        }
    }

    /// Whether the step changes anything (a write, an append).
    pub fn writes(&self) -> bool {
        !matches!(self, TxnStep::Read(_))
    }
}

/// How [`KvWrite::Change`] computes a key's next value from its current one (absent: as
/// Redis takes it, `0` for a counter and empty for an append).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum KeyChange {
    /// INCR, INCRBY, DECR, DECRBY: the value read as a signed 64-bit decimal integer, plus
    /// `by`.
    IncrBy(i64),
    /// INCRBYFLOAT: the value read as a decimal number, plus `by` (kept as text, parsed at
    /// apply with the same rules on every replica).
    IncrByFloat(String),
    /// APPEND: the value followed by `suffix`, refused past `max_len` bytes.
    Append { suffix: Bytes, max_len: u64 },
    /// GETDEL: a tombstone, answering the value it replaced.
    GetDel,
}

/// What a snapshot reads.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SnapshotOf {
    Keys(Vec<Key>),
    /// Live keys under `prefix` after `cursor`, in key order, at most `limit`.
    Prefix {
        prefix: Bytes,
        cursor: Option<Bytes>,
        limit: usize,
    },
}

impl SnapshotOf {
    /// The read of these keys as of `at`, served by any replica once it has closed `at`.
    pub fn read_at(self, at: CommitTs) -> KvRead {
        let (at, consistency) = (ReadAt::AsOf(at), ReadConsistency::Local);
        match self {
            SnapshotOf::Keys(keys) => KvRead::MGet {
                keys,
                at,
                consistency,
            },
            SnapshotOf::Prefix {
                prefix,
                cursor,
                limit,
            } => KvRead::Scan {
                prefix,
                cursor,
                limit,
                pattern: None,
                at,
                consistency,
            },
        }
    }
}

/// The keys a kv request names one by one, in its order: what access checks, origin
/// counting and planning read (a scan, a prefix truncate, `DBSIZE` and `FLUSHALL` name a
/// range or everything instead, and none here).
pub type NamedKeys<'a> = Box<dyn Iterator<Item = &'a Key> + 'a>;

impl KvRequest {
    /// See [`NamedKeys`].
    pub fn keys(&self) -> NamedKeys<'_> {
        match self {
            KvRequest::Read(r) => r.keys(),
            KvRequest::Write(w) => w.keys(),
        }
    }
}

impl KvRead {
    /// See [`NamedKeys`].
    pub fn keys(&self) -> NamedKeys<'_> {
        match self {
            KvRead::Get { key, .. }
            | KvRead::History { key, .. }
            | KvRead::Type { key, .. }
            | KvRead::Expiry { key, .. }
            | KvRead::Lease { key, .. } => Box::new(std::iter::once(key)),
            KvRead::MGet { keys, .. }
            | KvRead::Exists { keys, .. }
            | KvRead::Snapshot {
                of: SnapshotOf::Keys(keys),
                ..
            } => Box::new(keys.iter()),
            KvRead::Scan { .. }
            | KvRead::Snapshot {
                of: SnapshotOf::Prefix { .. },
                ..
            }
            | KvRead::DbSize
            | KvRead::LeaseKeys { .. } => Box::new(std::iter::empty()),
        }
    }

    /// How fresh the read must be (a snapshot reads at a closed time: as fresh as that).
    pub fn consistency(&self) -> ReadConsistency {
        match self {
            KvRead::Get { consistency, .. }
            | KvRead::MGet { consistency, .. }
            | KvRead::Exists { consistency, .. }
            | KvRead::Type { consistency, .. }
            | KvRead::History { consistency, .. }
            | KvRead::Scan { consistency, .. }
            | KvRead::Expiry { consistency, .. }
            | KvRead::Lease { consistency, .. } => *consistency,
            KvRead::Snapshot { .. } => ReadConsistency::Local,
            KvRead::DbSize | KvRead::LeaseKeys { .. } => ReadConsistency::Linearizable,
        }
    }

    /// The time a read is at, for reads as of a commit time (`ASOF t`).
    pub fn as_of(&self) -> Option<CommitTs> {
        match self {
            KvRead::Get { at, .. } | KvRead::MGet { at, .. } | KvRead::Scan { at, .. } => {
                at.as_of()
            }
            KvRead::History { as_of: Some(t), .. } => Some(*t),
            _ => None,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            KvRead::Get { .. } => "get",
            KvRead::MGet { .. } => "mget",
            KvRead::Exists { .. } => "exists",
            KvRead::Type { .. } => "type",
            KvRead::History { .. } => "history",
            KvRead::Scan { .. } => "scan",
            KvRead::Snapshot { .. } => "snapshot",
            KvRead::DbSize => "dbsize",
            KvRead::Expiry { .. } => "ttl",
            KvRead::Lease { .. } => "lease",
            KvRead::LeaseKeys { .. } => "lease_keys",
        }
    }
}

impl KvWrite {
    /// See [`NamedKeys`].
    pub fn keys(&self) -> NamedKeys<'_> {
        match self {
            KvWrite::Put(p) | KvWrite::PutBlob { put: p, .. } => Box::new(std::iter::once(&p.key)),
            KvWrite::Change { key, .. } => Box::new(std::iter::once(key)),
            KvWrite::Atomic {
                compares,
                steps,
                otherwise,
            } => Box::new(
                steps
                    .iter()
                    .chain(otherwise.iter().flatten())
                    .flat_map(TxnStep::keys)
                    .chain(compares.iter().map(|c| &c.key)),
            ),
            KvWrite::Delete { keys } => Box::new(keys.iter()),
            KvWrite::MSet { items } => Box::new(items.iter().map(|(k, _)| k)),
            KvWrite::Truncate {
                target: KeyRange::Key(key),
                ..
            } => Box::new(std::iter::once(key)),
            KvWrite::Truncate { .. } | KvWrite::FlushAll => Box::new(std::iter::empty()),
            KvWrite::Expire { key, .. } | KvWrite::Lease(crate::LeaseWrite { key, .. }) => {
                Box::new(std::iter::once(key))
            }
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            KvWrite::Put(_) | KvWrite::PutBlob { .. } => "put",
            KvWrite::Delete { .. } => "delete",
            KvWrite::MSet { .. } => "mset",
            KvWrite::Change { .. } => "change",
            KvWrite::Atomic { .. } => "exec",
            KvWrite::Truncate { .. } => "truncate",
            KvWrite::FlushAll => "flushall",
            KvWrite::Expire { .. } => "expire",
            KvWrite::Lease(_) => "lease",
        }
    }
}

/// A value as Redis reads an integer (`string2ll`): an optional `-`, then digits without a
/// leading zero (but `0` itself), nothing else, within a signed 64-bit range.
pub fn redis_integer(text: &[u8]) -> Option<i64> {
    if text == b"0" {
        return Some(0);
    }
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    if digits.is_empty()
        || digits.len() > 20
        || !(b'1'..=b'9').contains(&digits[0])
        || !digits.iter().all(u8::is_ascii_digit)
    {
        return None;
    }
    let magnitude: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    if negative {
        0i64.checked_sub_unsigned(magnitude)
    } else {
        i64::try_from(magnitude).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_read_as_redis_reads_them() {
        for (text, want) in [
            ("0", Some(0)),
            ("10", Some(10)),
            ("-7", Some(-7)),
            ("9223372036854775807", Some(i64::MAX)),
            ("-9223372036854775808", Some(i64::MIN)),
            ("9223372036854775808", None),
            ("01", None),
            ("-0", None),
            ("+1", None),
            (" 1", None),
            ("1 ", None),
            ("", None),
            ("-", None),
            ("1.5", None),
        ] {
            assert_eq!(redis_integer(text.as_bytes()), want, "{text:?}");
        }
    }
}
