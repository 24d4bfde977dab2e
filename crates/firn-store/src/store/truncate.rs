//! Truncation of history: by version or time, of a key or of every key under a prefix, and
//! retention by age (`SystemOp::ExpireByAge`). A bulk delete: it may commit in several
//! storage batches (see [`super::BULK_BATCH_WRITES_MAX`]).

use firn_model::{CommitTs, FirnError, KeyRange, Response, TruncateBefore};

use super::BULK_BATCH_WRITES_MAX;
use super::apply::Txn;

impl Txn<'_> {
    /// Drops the versions before `before` of one key or of every key under a prefix.
    pub(super) fn truncate(
        &mut self,
        target: &KeyRange,
        before: TruncateBefore,
    ) -> Result<Response, FirnError> {
        let removed = match target {
            KeyRange::Key(k) => self.truncate_key(k.as_bytes(), before)?,
            KeyRange::Prefix(p) => {
                self.walk_keys_under(p, |txn, key| txn.truncate_key(key, before))?
            }
        };
        Ok(Response::Truncated {
            versions_removed: removed,
        })
    }

    /// Retention by age: in each keyspace with a `max_age`, the versions older than it at
    /// the entry's stamp.
    pub(super) fn expire_by_age(&mut self) -> Result<Response, FirnError> {
        let mut removed = 0;
        for spec in self.store.keyspaces() {
            let Some(max_age) = spec.max_age_us else {
                continue;
            };
            let cutoff = CommitTs::new(self.ts.wall_us.saturating_sub(max_age), 0);
            removed += self.walk_keys_under(spec.prefix.as_bytes(), |txn, key| {
                if txn.store.keyspace_for(key).prefix != spec.prefix {
                    return Ok(0);
                }
                txn.truncate_key(key, TruncateBefore::Time(cutoff))
            })?;
        }
        Ok(Response::Truncated {
            versions_removed: removed,
        })
    }

    /// Drops stored versions before `before`, never the newest. The versions go oldest
    /// first, at most a batch's room at a time, each run with the metadata that stops
    /// naming them: a reader, or a replay after a crash, always finds `oldest` stored.
    fn truncate_key(&mut self, key: &[u8], before: TruncateBefore) -> Result<u64, FirnError> {
        let mut meta = self.meta(key)?;
        if meta.latest == 0 || meta.oldest >= meta.latest {
            return Ok(0);
        }
        let bound = match before {
            TruncateBefore::Version(v) => v.min(meta.latest),
            TruncateBefore::Time(t) => {
                // Stamps grow with versions: the bound is past the last one before t.
                let mut bound = meta.oldest;
                self.store
                    .walk_records(key, meta.oldest, meta.latest - 1, false, |info| {
                        if info.commit_ts >= t {
                            return Ok(false);
                        }
                        bound = info.version + 1;
                        Ok(true)
                    })?;
                bound
            }
        };
        if bound <= meta.oldest {
            return Ok(0);
        }
        let removed = bound - meta.oldest;
        while meta.oldest < bound {
            // One version, its event-time row and the metadata at least.
            self.make_room(3)?;
            let room = ((BULK_BATCH_WRITES_MAX - self.batch.len() - 1) / 2) as u64;
            let to = bound.min(meta.oldest + room);
            self.remove_indexed_versions(key, meta.oldest, to - 1)?;
            meta.oldest = to;
            self.set_meta(key, meta.clone());
        }
        Ok(removed)
    }
}
