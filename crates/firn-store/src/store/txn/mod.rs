//! A shard's side of transactions across shards (docs/architecture.md, "Transactions across
//! shards"): the parts it has prepared, which hold their keys and hold its closed time back
//! until they are resolved, and — on a transaction's anchor — the record that decides it.
//!
//! Both live in the `System` table under `txn/`, so that snapshots and restarts carry them.
//! What the shard holds is also kept in memory ([`Held`]): every write looks there for its
//! keys, and the closed time the shard publishes is below its oldest prepared part. It is
//! rebuilt from the rows after each transaction entry (there are as many rows as
//! transactions in flight).

mod apply;

use std::collections::HashMap;

use firn_model::{CommitTs, FirnError, Key, TxnId, TxnOutcome, TxnStep};
use serde::{Deserialize, Serialize};

use super::{VersionedStore, io_err};
use crate::backend::Table;
use crate::record::decode;

/// Prepared parts: `txn/part/<id>` → [`StoredPart`].
const PARTS: &[u8] = b"txn/part/";
/// The anchor's records: `txn/record/<id>` → [`Record`].
const RECORDS: &[u8] = b"txn/record/";
/// Decided records by age: `txn/decided/<wall µs, big-endian><id>` → nothing.
const DECIDED: &[u8] = b"txn/decided/";
/// The last decided row dropped: the next drop starts after it.
const DECIDED_CURSOR: &[u8] = b"txn/decided-cursor";

/// How long an anchor keeps a decided record: a participant cut off for less than this
/// still learns the outcome from it. One decided later finds none, and aborts — which only
/// a part prepared and then cut off from its cluster for this long could meet.
pub const RECORD_KEPT_US: u64 = 10 * 60 * 1_000_000;

/// Most expired records one decision drops: the records go at the pace they came.
const RECORDS_DROPPED_PER_DECISION: usize = 4;

fn row(prefix: &[u8], txn: TxnId) -> Vec<u8> {
    let mut k = prefix.to_vec();
    k.extend_from_slice(&txn.to_bytes());
    k
}

fn decided_row(at_us: u64, txn: TxnId) -> Vec<u8> {
    let mut k = DECIDED.to_vec();
    k.extend_from_slice(&at_us.to_be_bytes());
    k.extend_from_slice(&txn.to_bytes());
    k
}

/// A prepared part, until it is resolved.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct StoredPart {
    anchor: u32,
    deadline_us: u64,
    prepared: CommitTs,
    /// The steps to run again, at the commit stamp, if the transaction commits with its
    /// compares holding, and those if it commits without.
    steps: Vec<TxnStep>,
    otherwise: Option<Vec<TxnStep>>,
    /// Every key the part holds: its steps' and its compared keys.
    keys: Vec<Key>,
}

/// The anchor's record of a transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum Record {
    Pending,
    /// Decided at the entry stamped `at_us` (wall µs).
    Decided {
        outcome: TxnOutcome,
        at_us: u64,
    },
}

/// A part this shard holds, undecided: what a shard's leader looks at to resolve it once
/// its deadline passes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeldPart {
    pub txn: TxnId,
    /// The shard whose record decides it.
    pub anchor: u32,
    pub deadline_us: u64,
    pub prepared: CommitTs,
}

/// What the shard's undecided parts hold, in memory: read from the rows when the store
/// opens (or installs a snapshot), then kept by each transaction entry's changes
/// ([`HeldChange`]) — never by scanning rows a shard writes and deletes by the thousand.
/// A part holds keys (those it reads and writes) and log tags (those of the records it
/// appends: another record of a tag could otherwise take a seq the resolution gives, or
/// one below it once the tag was read past it); both are [`held_name`]s.
#[derive(Debug, Default)]
pub(crate) struct Held {
    names: HashMap<Vec<u8>, TxnId>,
    parts: HashMap<TxnId, (HeldPart, Vec<Vec<u8>>)>,
}

/// What a part holds: a key, or a log's tag.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Holds<'a> {
    Key(&'a [u8]),
    Tag { log: &'a [u8], tag: &'a [u8] },
}

/// The tags of the log records `steps` append.
pub(crate) fn record_tags<'s>(steps: impl Iterator<Item = &'s TxnStep>) -> Vec<Holds<'s>> {
    steps
        .flat_map(|step| match step {
            TxnStep::Records { log, records, .. } => records
                .iter()
                .flat_map(|r| &r.tags)
                .map(|tag| Holds::Tag {
                    log: log.as_bytes(),
                    tag: tag.as_bytes(),
                })
                .collect(),
            _ => Vec::new(),
        })
        .collect()
}

/// The name [`Held`] knows `holds` by (a key and a tag never share one).
pub(crate) fn held_name(holds: Holds<'_>) -> Vec<u8> {
    match holds {
        Holds::Key(key) => [b"k".as_slice(), key].concat(),
        Holds::Tag { log, tag } => {
            let mut name = b"t".to_vec();
            name.extend_from_slice(&super::log::tag_key(log, tag));
            name
        }
    }
}

/// A change an entry made to what the shard holds, applied once its batch is written.
#[derive(Debug)]
pub(crate) enum HeldChange {
    Prepared(HeldPart, Vec<Vec<u8>>),
    Resolved(TxnId),
}

impl Held {
    /// The transaction holding `holds`, if any.
    pub(crate) fn holder(&self, holds: Holds<'_>) -> Option<TxnId> {
        if self.names.is_empty() {
            return None;
        }
        self.names.get(&held_name(holds)).copied()
    }

    /// Whether any part holds a tag of `log`.
    pub(crate) fn holds_tags_of(&self, log: &[u8]) -> bool {
        let prefix = held_name(Holds::Tag { log, tag: b"" });
        // A tag's name is `t`, the log's, then the tag's own (its length first).
        let log_part = &prefix[..prefix.len() - 2];
        self.names.keys().any(|n| n.starts_with(log_part))
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// The greatest stamp this shard may call closed when it has applied through
    /// `applied`: below its oldest undecided part's prepare stamp, whose transaction may
    /// still commit at a stamp at or above it.
    pub(crate) fn closed(&self, applied: CommitTs) -> CommitTs {
        match self.parts.values().map(|(p, _)| p.prepared).min() {
            Some(p) => applied.min(p.predecessor()),
            None => applied,
        }
    }

    pub(crate) fn change(&mut self, change: HeldChange) {
        match change {
            HeldChange::Prepared(part, names) => {
                for name in &names {
                    self.names.insert(name.clone(), part.txn);
                }
                self.parts.insert(part.txn, (part, names));
            }
            HeldChange::Resolved(txn) => {
                if let Some((_, names)) = self.parts.remove(&txn) {
                    for name in names {
                        self.names.remove(&name);
                    }
                }
            }
        }
    }

    /// Reads the parts' rows.
    pub(crate) fn load(store: &VersionedStore) -> Result<Held, FirnError> {
        let mut held = Held::default();
        store.walk_prefix(Table::System, PARTS, |k, v| {
            let part: StoredPart = decode(&v)?;
            let id: [u8; 16] = k[PARTS.len()..]
                .try_into()
                .map_err(|_| FirnError::Internal("corrupt transaction part row".into()))?;
            held.change(part.held(TxnId(u128::from_be_bytes(id))));
            Ok(())
        })?;
        Ok(held)
    }
}

impl StoredPart {
    /// What the part holds, as a change to the shard's [`Held`].
    fn held(&self, txn: TxnId) -> HeldChange {
        HeldChange::Prepared(
            HeldPart {
                txn,
                anchor: self.anchor,
                deadline_us: self.deadline_us,
                prepared: self.prepared,
            },
            self.held_names(),
        )
    }

    /// The [`held_name`]s of its keys and of the tags of the records it appends.
    fn held_names(&self) -> Vec<Vec<u8>> {
        let keys = self.keys.iter().map(|k| Holds::Key(k.as_bytes()));
        let tags = record_tags(self.steps.iter().chain(self.otherwise.iter().flatten()));
        let mut names: Vec<Vec<u8>> = keys.chain(tags).map(held_name).collect();
        names.sort();
        names.dedup();
        names
    }
}

impl VersionedStore {
    /// The parts this shard holds undecided.
    pub fn undecided(&self) -> Vec<HeldPart> {
        let held = self.held.read().unwrap_or_else(|p| p.into_inner());
        held.parts.values().map(|(p, _)| *p).collect()
    }

    /// Which of `keys` a transaction being committed holds: a read of their newest values
    /// waits until none does ([`Self::wait_unheld`]).
    pub fn held_keys<'k>(&self, keys: impl IntoIterator<Item = &'k Key>) -> Vec<Key> {
        let held = self.held.read().unwrap_or_else(|p| p.into_inner());
        if held.is_empty() {
            return Vec::new();
        }
        keys.into_iter()
            .filter(|k| held.holder(Holds::Key(k.as_bytes())).is_some())
            .cloned()
            .collect()
    }

    /// Waits (at most `timeout`) until no transaction holds any of `keys`.
    pub async fn wait_unheld(
        &self,
        keys: &[Key],
        timeout: std::time::Duration,
    ) -> Result<(), FirnError> {
        let mut changes = self.held_changes.subscribe();
        let free = || self.held_keys(keys).is_empty();
        let waited = tokio::time::timeout(timeout, async {
            while !free() {
                if changes.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
        match waited {
            Ok(()) if free() => Ok(()),
            _ => Err(FirnError::TryAgain(format!(
                "key '{}' is held by a transaction being committed; retry",
                keys.first().map(|k| k.to_string()).unwrap_or_default()
            ))),
        }
    }

    /// Re-reads what the shard's parts hold (at a start, after a snapshot).
    pub(super) fn reload_held(&self) -> Result<(), FirnError> {
        let held = Held::load(self)?;
        *self.held.write().unwrap_or_else(|p| p.into_inner()) = held;
        self.held_changes.send_modify(|n| *n += 1);
        Ok(())
    }

    /// Applies a written batch's changes to what the shard holds.
    pub(super) fn change_held(&self, changes: Vec<HeldChange>) {
        let mut held = self.held.write().unwrap_or_else(|p| p.into_inner());
        for change in changes {
            held.change(change);
        }
        drop(held);
        self.held_changes.send_modify(|n| *n += 1);
    }

    fn txn_part(&self, txn: TxnId) -> Result<Option<StoredPart>, FirnError> {
        self.backend
            .get(Table::System, &row(PARTS, txn))
            .map_err(io_err)?
            .map(|v| decode(&v))
            .transpose()
    }
}
