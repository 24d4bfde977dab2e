//! The versions of a prefix committed after a position, in commit order: what a trigger that
//! is behind its shard's live feed catches up on. Keys whose newest version is older than the
//! position are passed over on their metadata; each other key is entered at its version as of
//! the position (a bisection, not a walk of its history) and read forward, at most `limit`
//! versions of it.

use firn_model::{CommitTs, FirnError, Key, KeyspaceMode, Version, WatchEvent};
use serde::{Deserialize, Serialize};

use super::VersionedStore;
use crate::backend::Table;
use crate::record::KeyMeta;

/// A place in a shard's commit order: a version of a key, ordered by (stamp, key, version).
/// Serialized, it is a trigger's cursor.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ChangePosition {
    pub commit_ts: CommitTs,
    pub key: Vec<u8>,
    pub version: Version,
}

impl ChangePosition {
    pub fn of(event: &WatchEvent) -> ChangePosition {
        ChangePosition {
            commit_ts: event.info.commit_ts,
            key: event.key.as_bytes().to_vec(),
            version: event.info.version,
        }
    }
}

impl VersionedStore {
    /// The first `limit` versions of keys under `prefix` after `after` and stamped at or
    /// before `through`, in (stamp, key, version) order; tombstones included, keys of
    /// `notify` keyspaces (which keep no versions) left out. Versions truncated away are
    /// gone: a key whose versions after `after` were truncated starts at its oldest.
    pub fn changes(
        &self,
        prefix: &[u8],
        after: &ChangePosition,
        through: CommitTs,
        limit: usize,
    ) -> Result<Vec<WatchEvent>, FirnError> {
        let mut found: Vec<WatchEvent> = Vec::new();
        if limit == 0 || through < after.commit_ts {
            return Ok(found);
        }
        let keep_first = |found: &mut Vec<WatchEvent>| {
            found.sort_by_cached_key(ChangePosition::of);
            found.truncate(limit);
        };
        self.walk_prefix(Table::KeyMeta, prefix, |key, meta| {
            let meta = KeyMeta::decode(&meta)?;
            if meta.latest == 0
                || meta.latest_ts < after.commit_ts
                || self.keyspace_mode(&key) == KeyspaceMode::Notify
            {
                return Ok(());
            }
            let start = self.first_after(&key, &meta, after.commit_ts)?;
            let key = Key::new(key)?;
            let mut taken = 0;
            self.walk_records(key.as_bytes(), start, meta.latest, false, |info| {
                if info.commit_ts > through {
                    return Ok(false);
                }
                let event = WatchEvent {
                    key: key.clone(),
                    info,
                };
                if ChangePosition::of(&event) > *after {
                    found.push(event);
                    taken += 1;
                }
                Ok(taken < limit)
            })?;
            // Memory stays bounded by a few times `limit` however many keys changed.
            if found.len() >= 4 * limit {
                keep_first(&mut found);
            }
            Ok(())
        })?;
        keep_first(&mut found);
        Ok(found)
    }

    /// The version of `key` to read forward from for versions stamped at or after `t`: its
    /// version as of `t` (that one may be older; the caller filters), else its oldest.
    fn first_after(&self, key: &[u8], meta: &KeyMeta, t: CommitTs) -> Result<Version, FirnError> {
        Ok(match self.search_as_of(key, meta, t) {
            Ok(Some(Some(info))) => info.version,
            // Nothing that old is stored, or a version in the way is not: from the oldest.
            Ok(Some(None) | None) | Err(FirnError::Compacted { .. }) => meta.oldest,
            Err(e) => return Err(e),
        })
    }
}
