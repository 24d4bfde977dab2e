//! What a watch replays before it goes live: the stored versions of a key, or of every key
//! under a prefix, from a version or a time, in commit order.

use std::ops::Bound;

use firn_model::limits::WATCH_REPLAY_MAX;
use firn_model::{FirnError, Key, KeyRange, KeyspaceMode, WatchEvent, WatchFrom};

use super::{VersionedStore, io_err, prefix_end};
use crate::backend::Table;

impl VersionedStore {
    /// The committed versions a watch starting at `from` replays, in commit order.
    pub fn replay(&self, target: &KeyRange, from: WatchFrom) -> Result<Vec<WatchEvent>, FirnError> {
        if from == WatchFrom::Now {
            return Ok(Vec::new());
        }
        let keys: Vec<Vec<u8>> = match target {
            KeyRange::Key(k) => vec![k.as_bytes().to_vec()],
            KeyRange::Prefix(p) => {
                let end = prefix_end(p);
                let upper = end.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
                self.backend
                    .range(
                        Table::KeyMeta,
                        Bound::Included(p),
                        upper,
                        false,
                        WATCH_REPLAY_MAX + 1,
                    )
                    .map_err(io_err)?
                    .into_iter()
                    .map(|(k, _)| k)
                    .collect()
            }
        };
        let mut events = Vec::new();
        for key in keys {
            let Some(meta) = self.meta(&key)? else {
                continue;
            };
            if meta.latest == 0 || self.keyspace_mode(&key) == KeyspaceMode::Notify {
                continue;
            }
            let key = Key::new(key)?;
            let start = match from {
                WatchFrom::Now => unreachable!("handled above"),
                WatchFrom::Version(v) => {
                    if v < meta.oldest && v <= meta.latest {
                        return Err(FirnError::Compacted {
                            oldest: meta.oldest,
                        });
                    }
                    v.max(meta.oldest)
                }
                WatchFrom::Time(_) => meta.oldest,
            };
            let mut first = true;
            self.walk_records(key.as_bytes(), start, meta.latest, false, |info| {
                if let WatchFrom::Time(t) = from {
                    // The oldest stored version is after t: what came before was truncated.
                    if first && meta.oldest > 1 && info.commit_ts > t {
                        return Err(FirnError::Compacted {
                            oldest: meta.oldest,
                        });
                    }
                    first = false;
                    if info.commit_ts < t {
                        return Ok(true);
                    }
                }
                events.push(WatchEvent {
                    key: key.clone(),
                    info,
                });
                if events.len() > WATCH_REPLAY_MAX {
                    return Err(FirnError::BadArgument(format!(
                        "the replay holds more than {WATCH_REPLAY_MAX} versions; start the watch \
                         later or page through history first"
                    )));
                }
                Ok(true)
            })?;
        }
        events.sort_by(|a, b| {
            a.info
                .commit_ts
                .cmp(&b.info.commit_ts)
                .then(a.key.cmp(&b.key))
        });
        Ok(events)
    }
}
