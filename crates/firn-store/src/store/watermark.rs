//! Event-time watermarks on a shard (docs/architecture.md, "Watermarks, late data and
//! corrections"): each keyspace's [`WatermarkState`] in the `System` table, the first stamp
//! at which each advance was applied, and the check every write with an event time passes.
//!
//! A keyspace's state is changed only by [`WatermarkOp`]s in the shard's log, so every
//! replica judges every write late or not alike. An advance is kept as a row
//! `(prefix, W) → stamp`: since W only grows, the first row at or above an event time e
//! names the first stamp at which the watermark had reached e — what a complete read
//! (`EVENTTIME e COMPLETE`) reads as of.

use std::collections::HashMap;
use std::ops::Bound;

use firn_model::{CommitTs, FirnError, LatePolicy, Response, WatermarkInfo, WatermarkState};

use super::apply::Txn;
use super::{VersionedStore, io_err, prefix_end};
use crate::backend::Table;
use crate::command::WatermarkOp;
use crate::record::{decode, encode};

/// `System` rows of each keyspace's state: this, then the prefix.
const STATE_ROWS: &[u8] = b"watermark/";
/// `System` rows of advances: this, the prefix's length (4 bytes), the prefix, then W.
const REACHED_ROWS: &[u8] = b"watermark_reached/";

fn state_row(prefix: &str) -> Vec<u8> {
    [STATE_ROWS, prefix.as_bytes()].concat()
}

fn reached_prefix(prefix: &str) -> Vec<u8> {
    let mut out = REACHED_ROWS.to_vec();
    out.extend_from_slice(&(prefix.len() as u32).to_be_bytes());
    out.extend_from_slice(prefix.as_bytes());
    out
}

fn reached_row(prefix: &str, w: u64) -> Vec<u8> {
    let mut out = reached_prefix(prefix);
    out.extend_from_slice(&w.to_be_bytes());
    out
}

/// Every keyspace's state, as stored.
pub(super) fn load(store: &VersionedStore) -> Result<HashMap<String, WatermarkState>, FirnError> {
    let end = prefix_end(STATE_ROWS).expect("a row prefix has an end");
    store
        .backend
        .range(
            Table::System,
            Bound::Included(STATE_ROWS),
            Bound::Excluded(&end),
            false,
            usize::MAX,
        )
        .map_err(io_err)?
        .into_iter()
        .map(|(k, v)| {
            let prefix = String::from_utf8_lossy(&k[STATE_ROWS.len()..]).into_owned();
            Ok((prefix, decode(&v)?))
        })
        .collect()
}

impl VersionedStore {
    /// The watermark state of the keyspace `prefix` names (the default: none).
    pub fn watermark_state(&self, prefix: &str) -> WatermarkState {
        self.watermarks
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(prefix)
            .copied()
            .unwrap_or_default()
    }

    /// What this shard knows of the watermark of the keyspace `prefix` (or, `of_key`, of
    /// the keyspace the key `prefix` is in): the state, the watermark at the shard's closed
    /// time, and — asked about event time `reach` — the first stamp at which an advance
    /// reached it.
    pub fn watermark_info(
        &self,
        prefix: &[u8],
        of_key: bool,
        reach: Option<u64>,
    ) -> Result<WatermarkInfo, FirnError> {
        let prefix = if of_key {
            self.keyspace_for(prefix).prefix
        } else {
            String::from_utf8_lossy(prefix).into_owned()
        };
        let state = self.watermark_state(&prefix);
        let reached_at = match reach {
            Some(e) if state.advanced_us.is_some_and(|w| w >= e) => {
                let from = reached_row(&prefix, e);
                let end = prefix_end(&reached_prefix(&prefix)).expect("a row prefix has an end");
                self.backend
                    .range(
                        Table::System,
                        Bound::Included(&from),
                        Bound::Excluded(&end),
                        false,
                        1,
                    )
                    .map_err(io_err)?
                    .first()
                    .map(|(_, v)| decode::<CommitTs>(v))
                    .transpose()?
            }
            _ => None,
        };
        Ok(WatermarkInfo {
            watermark_us: state.at(self.last_commit_ts()),
            prefix,
            state,
            reached_at,
        })
    }
}

impl Txn<'_> {
    pub(super) fn watermark(&mut self, op: &WatermarkOp) -> Result<Response, FirnError> {
        let prefix = match op {
            WatermarkOp::Advance { prefix, .. } | WatermarkOp::Policy { prefix, .. } => prefix,
        };
        if !self.store.keyspaces().iter().any(|s| &s.prefix == prefix) {
            return Err(FirnError::KeyspaceNotFound(prefix.clone()));
        }
        let mut state = self.store.watermark_state(prefix);
        match op {
            WatermarkOp::Advance { to_us, .. } => {
                match state.advanced_us {
                    Some(w) if *to_us < w => {
                        return Err(FirnError::BadArgument(format!(
                            "the watermark of keyspace '{prefix}' is {w}; it never moves back \
                             (asked: {to_us})"
                        )));
                    }
                    Some(w) if *to_us == w => return Ok(Response::Done),
                    _ => {}
                }
                state.advanced_us = Some(*to_us);
                self.batch
                    .put(Table::System, reached_row(prefix, *to_us), encode(&self.ts));
            }
            WatermarkOp::Policy { policy, .. } => state.policy = *policy,
        }
        self.batch
            .put(Table::System, state_row(prefix), encode(&state));
        // The cache is read again once the batch is written.
        self.keyspaces_changed = true;
        Ok(Response::Done)
    }

    /// Forgets a dropped keyspace's watermark (its advances a page at a time).
    pub(super) fn drop_watermark(&mut self, prefix: &str) -> Result<(), FirnError> {
        self.batch.remove(Table::System, state_row(prefix));
        let rows = reached_prefix(prefix);
        let end = prefix_end(&rows).expect("a row prefix has an end");
        let mut after: Option<Vec<u8>> = None;
        loop {
            let lower = after
                .as_deref()
                .map_or(Bound::Included(&rows[..]), Bound::Excluded);
            let page = self
                .store
                .backend
                .range(Table::System, lower, Bound::Excluded(&end), false, 1_024)
                .map_err(io_err)?;
            let Some((last, _)) = page.last() else {
                return Ok(());
            };
            after = Some(last.clone());
            for (k, _) in page {
                self.batch.remove(Table::System, k);
            }
        }
    }

    /// Whether a write of `key` with event time `event_us` at this entry's stamp is a
    /// correction (late, and kept); refused with `LATE` where late writes are refused.
    pub(super) fn check_late(
        &self,
        prefix: &str,
        event_us: Option<u64>,
    ) -> Result<bool, FirnError> {
        let Some(e) = event_us else {
            return Ok(false);
        };
        let state = self.store.watermark_state(prefix);
        if !state.is_late(e, self.ts) {
            return Ok(false);
        }
        match state.policy.late {
            LatePolicy::Keep => Ok(true),
            LatePolicy::Refuse => Err(FirnError::Late {
                prefix: prefix.to_owned(),
                event_us: e,
                watermark_us: state.at(self.ts).unwrap_or_default(),
            }),
        }
    }
}
