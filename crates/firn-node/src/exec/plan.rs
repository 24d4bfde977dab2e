//! Which shards a kv request touches, the part each runs, and how the parts' answers are
//! merged.

use std::collections::BTreeMap;

use firn_model::{Key, KeyRange, KvRead, KvRequest, KvWrite, LogWrite, TxnStep};
use firn_raft::ShardId;
use firn_store::Op;

use super::merge::Merge;
use crate::cluster::layout::ClusterLayout;
use crate::rpc::ShardPart;

pub(super) enum Plan {
    One(ShardId, ShardPart),
    /// Per-shard parts, with the original positions of each part's keys.
    Split {
        parts: Vec<(ShardId, ShardPart, Vec<usize>)>,
        merge: Merge,
        /// Keys in the whole request.
        keys: usize,
    },
    /// The same part on every shard.
    All {
        part: ShardPart,
        merge: Merge,
    },
}

/// Groups keyed items by shard, remembering each item's position.
fn split<T>(
    items: Vec<T>,
    shard_of: impl Fn(&T) -> ShardId,
) -> BTreeMap<ShardId, (Vec<T>, Vec<usize>)> {
    let mut by: BTreeMap<ShardId, (Vec<T>, Vec<usize>)> = BTreeMap::new();
    for (i, item) in items.into_iter().enumerate() {
        let e = by.entry(shard_of(&item)).or_default();
        e.0.push(item);
        e.1.push(i);
    }
    by
}

/// Plans `request` (never a snapshot: it is planned as the read it becomes) over `layout`,
/// which has shards.
pub(super) fn plan(layout: &ClusterLayout, request: KvRequest) -> Plan {
    let shard = |k: &Key| layout.shard_of_key(k.as_bytes());
    let split_keys = |keys: Vec<Key>, make: &dyn Fn(Vec<Key>) -> ShardPart, merge: Merge| {
        let n = keys.len();
        let parts = split(keys, |k| shard(k))
            .into_iter()
            .map(|(s, (keys, pos))| (s, make(keys), pos))
            .collect();
        Plan::Split {
            parts,
            merge,
            keys: n,
        }
    };
    let everywhere = |part: ShardPart, merge: Merge| match layout.shards.as_slice() {
        [only] => Plan::One(only.id, part),
        _ => Plan::All { part, merge },
    };
    match request {
        KvRequest::Read(read) => match read {
            KvRead::Get { ref key, .. }
            | KvRead::Type { ref key, .. }
            | KvRead::History { ref key, .. }
            | KvRead::Expiry { ref key, .. }
            | KvRead::Lease { ref key, .. } => Plan::One(shard(key), ShardPart::Read(read)),
            read @ KvRead::LeaseKeys { .. } => everywhere(ShardPart::Read(read), Merge::Keys),
            KvRead::MGet {
                keys,
                at,
                consistency,
            } => split_keys(
                keys,
                &|keys| {
                    ShardPart::Read(KvRead::MGet {
                        keys,
                        at,
                        consistency,
                    })
                },
                Merge::Values,
            ),
            KvRead::Exists { keys, consistency } => split_keys(
                keys,
                &|keys| ShardPart::Read(KvRead::Exists { keys, consistency }),
                Merge::Count,
            ),
            read @ KvRead::Scan { .. } => everywhere(ShardPart::Read(read), Merge::Scan),
            read @ (KvRead::DbSize | KvRead::Snapshot { .. }) => {
                everywhere(ShardPart::Read(read), Merge::Count)
            }
        },
        KvRequest::Write(write) => match write {
            KvWrite::Put(p) => Plan::One(shard(&p.key), ShardPart::Write(Op::Kv(KvWrite::Put(p)))),
            KvWrite::Change { key, change } => Plan::One(
                shard(&key),
                ShardPart::Write(Op::Kv(KvWrite::Change { key, change })),
            ),
            write @ (KvWrite::Expire { .. } | KvWrite::Lease(_)) => {
                let at = write.keys().next().map_or(0, &shard);
                Plan::One(at, ShardPart::Write(Op::Kv(write)))
            }
            // One shard's (one spanning shards is a `Kernel::transact`): where its first
            // step's first key (or record) goes, with its log appends placed there.
            KvWrite::Atomic {
                compares,
                steps,
                otherwise,
            } => {
                let at = steps
                    .iter()
                    .chain(otherwise.iter().flatten())
                    .flat_map(|s| step_shards(layout, s))
                    .chain(compares.iter().map(|c| shard(&c.key)))
                    .next()
                    .unwrap_or(0);
                let place = |steps: Vec<TxnStep>| {
                    steps.into_iter().map(|s| placed(s, at)).collect::<Vec<_>>()
                };
                let write = KvWrite::Atomic {
                    compares,
                    steps: place(steps),
                    otherwise: otherwise.map(place),
                };
                Plan::One(at, ShardPart::Write(Op::Kv(write)))
            }
            // The manifest goes where its blob was uploaded: the key's shard (checked).
            KvWrite::PutBlob { put, blob } => Plan::One(
                blob.shard,
                ShardPart::Write(Op::Kv(KvWrite::PutBlob { put, blob })),
            ),
            KvWrite::Truncate {
                target: KeyRange::Key(k),
                before,
            } => Plan::One(
                shard(&k),
                ShardPart::Write(Op::Kv(KvWrite::Truncate {
                    target: KeyRange::Key(k),
                    before,
                })),
            ),
            KvWrite::Delete { keys } => split_keys(
                keys,
                &|keys| ShardPart::Write(Op::Kv(KvWrite::Delete { keys })),
                Merge::Written,
            ),
            KvWrite::MSet { items } => {
                let n = items.len();
                let parts = split(items, |(k, _)| shard(k))
                    .into_iter()
                    .map(|(s, (items, pos))| {
                        (s, ShardPart::Write(Op::Kv(KvWrite::MSet { items })), pos)
                    })
                    .collect();
                Plan::Split {
                    parts,
                    merge: Merge::Written,
                    keys: n,
                }
            }
            write @ (KvWrite::Truncate { .. } | KvWrite::FlushAll) => {
                everywhere(ShardPart::Write(Op::Kv(write)), Merge::Truncated)
            }
        },
    }
}

/// Whether a write's keys are in more than one shard (a transaction that is, runs across
/// shards: `Kernel::transact`).
pub(super) fn spans_shards(layout: &ClusterLayout, write: &KvWrite) -> bool {
    let mut keys = write.keys();
    let Some(first) = keys.next() else {
        return false;
    };
    let home = layout.shard_of_key(first.as_bytes());
    keys.any(|k| layout.shard_of_key(k.as_bytes()) != home)
}

/// A write that runs as a transaction across shards (`Kernel::transact`): a transaction
/// whose keys span shards, or an MSET of keys in several shards (atomic, as Redis's).
pub(crate) struct AcrossShards {
    pub compares: Vec<firn_model::Compare>,
    pub steps: Vec<firn_model::TxnStep>,
    pub otherwise: Option<Vec<firn_model::TxnStep>>,
    /// The answer is the one step's (an MSET's), not the transaction's.
    pub one_step: bool,
}

/// `request` as a transaction across shards, or back as it was.
#[allow(clippy::result_large_err)] // the request handed back, not an error
pub(super) fn across_shards(
    layout: &ClusterLayout,
    request: KvRequest,
) -> Result<AcrossShards, KvRequest> {
    match request {
        KvRequest::Write(KvWrite::Atomic {
            compares,
            steps,
            otherwise,
        }) if spans_shards_all(layout, &compares, &steps, otherwise.as_deref()) => {
            Ok(AcrossShards {
                compares,
                steps,
                otherwise,
                one_step: false,
            })
        }
        KvRequest::Write(write @ KvWrite::MSet { .. }) if spans_shards(layout, &write) => {
            Ok(AcrossShards {
                compares: Vec::new(),
                steps: vec![firn_model::TxnStep::Write(write)],
                otherwise: None,
                one_step: true,
            })
        }
        other => Err(other),
    }
}

fn spans_shards_all(
    layout: &ClusterLayout,
    compares: &[firn_model::Compare],
    steps: &[TxnStep],
    otherwise: Option<&[TxnStep]>,
) -> bool {
    let mut shards = steps
        .iter()
        .chain(otherwise.into_iter().flatten())
        .flat_map(|s| step_shards(layout, s))
        .chain(
            compares
                .iter()
                .map(|c| layout.shard_of_key(c.key.as_bytes())),
        );
    let Some(first) = shards.next() else {
        return false;
    };
    shards.any(|s| s != first)
}

/// Where each thing a transaction's step places goes, in order: each key its step names to
/// the key's shard — or, for a log append, each record to its home, the shard of its first
/// tag's name (records are routed by name, as every append is; a log names no key).
pub(crate) fn step_shards(layout: &ClusterLayout, step: &TxnStep) -> Vec<ShardId> {
    match step {
        TxnStep::Log(LogWrite::Append { records, .. }) => records
            .iter()
            .map(|r| {
                r.tags
                    .first()
                    .map_or(0, |t| layout.shard_of_name(t.as_bytes()))
            })
            .collect(),
        step => step
            .keys()
            .map(|k| layout.shard_of_key(k.as_bytes()))
            .collect(),
    }
}

/// `step` as the shard `home` runs it: a log append's records (every one of them homed
/// there) with their home named, which the store needs for their seqs.
pub(crate) fn placed(step: TxnStep, home: ShardId) -> TxnStep {
    match step {
        TxnStep::Log(LogWrite::Append { log, records }) => TxnStep::Records { log, home, records },
        step => step,
    }
}
