//! The event-time index: a read by event time (`FIRN.GET key EVENTTIME e`) is a seek, not
//! a walk over every version of the key (docs/architecture.md, "Event time").
//!
//! Each version of a versioned keyspace's key that carries an event time has a row
//! `(key, event time, version)` in [`Table::EventIndex`], written in the batch that writes
//! the version and removed in the batch that removes it (retention by count, truncation,
//! FLUSHALL). A read by event time `e` takes the last row at or below `(key, e, MAX)`: the
//! version with the greatest (event time, version) whose event time is at most `e` — the
//! same answer the walk gave. A row whose version is no longer stored (a keyspace redefined
//! with another mode meanwhile) is skipped, so the index can be behind but never wrong.
//!
//! A store opened (or a snapshot installed) without [`SYS_EVENT_INDEX`] — data written
//! before the index existed — builds the index from its versions first, once.

use std::ops::Bound;

use firn_model::{FirnError, Version, VersionInfo};

use super::apply::Txn;
use super::{VersionedStore, io_err};
use crate::backend::{Batch, Table};
use crate::record::{KeyMeta, VersionRecord, decode, version_of, version_prefix};

/// Set in the system table once the index holds a row for every stored version with an
/// event time.
const SYS_EVENT_INDEX: &[u8] = b"event_index";
/// The value of the index row of a correction: a version written with an event time at
/// or below its keyspace's watermark (other rows are empty).
const CORRECTION: &[u8] = &[1];
/// Rows one page of a read examines (stale rows are skipped page by page).
const READ_PAGE_ROWS: usize = 64;
/// Versions read, and rows written, per batch while the index is built.
const BUILD_PAGE: usize = 4_096;

/// The index row of `key`'s version `version`, written at event time `event_time_us`.
pub(crate) fn index_key(key: &[u8], event_time_us: u64, version: Version) -> Vec<u8> {
    let mut out = version_prefix(key);
    out.extend_from_slice(&event_time_us.to_be_bytes());
    out.extend_from_slice(&version.to_be_bytes());
    out
}

/// The index row of the version stored under the versions-table key `at`.
fn index_key_of(at: &[u8], event_time_us: u64) -> Vec<u8> {
    let (prefix, version) = at.split_at(at.len() - 8);
    let mut out = prefix.to_vec();
    out.extend_from_slice(&event_time_us.to_be_bytes());
    out.extend_from_slice(version);
    out
}

impl VersionedStore {
    /// The version of `key` with the greatest (event time, version) whose event time is at
    /// most `t`, tombstones included: a seek into the index, then the version's record.
    pub(super) fn read_by_event_time(
        &self,
        key: &[u8],
        meta: &KeyMeta,
        t: u64,
    ) -> Result<Option<VersionInfo>, FirnError> {
        // One version stored at most (a `latest` keyspace keeps one, with no row): read it.
        if meta.oldest >= meta.latest {
            if meta.oldest > meta.latest {
                return Ok(None);
            }
            let only = self
                .record(key, meta.latest)?
                .map(|r| r.into_info(meta.latest));
            return Ok(only.filter(|i| i.event_time_us.is_some_and(|e| e <= t)));
        }
        let lowest = index_key(key, 0, 0);
        // Pages from the top down; each after the first ends below the last row seen.
        let mut below: Option<Vec<u8>> = None;
        let highest = index_key(key, t, Version::MAX);
        loop {
            let upper = match &below {
                Some(row) => Bound::Excluded(row.as_slice()),
                None => Bound::Included(highest.as_slice()),
            };
            let rows = self
                .backend
                .range(
                    Table::EventIndex,
                    Bound::Included(lowest.as_slice()),
                    upper,
                    true,
                    READ_PAGE_ROWS,
                )
                .map_err(io_err)?;
            for (row, _) in &rows {
                let version = version_of(row);
                if version < meta.oldest || version > meta.latest {
                    continue;
                }
                if let Some(record) = self.record(key, version)? {
                    return Ok(Some(record.into_info(version)));
                }
            }
            if rows.len() < READ_PAGE_ROWS {
                return Ok(None);
            }
            below = rows.last().map(|(row, _)| row.clone());
        }
    }

    /// The corrections among `key`'s stored versions `from..=to` (committed by `as_of`),
    /// oldest first, at most `limit`: the versions whose index rows are marked so. Walks the
    /// key's index rows a page at a time.
    pub fn corrections(
        &self,
        key: &[u8],
        from: Version,
        to: Option<Version>,
        limit: usize,
        as_of: Option<firn_model::CommitTs>,
    ) -> Result<Vec<VersionInfo>, FirnError> {
        self.in_lane(key)?;
        let Some(meta) = self.meta(key)? else {
            return Ok(Vec::new());
        };
        let (from, to) = (
            from.max(meta.oldest),
            to.unwrap_or(meta.latest).min(meta.latest),
        );
        let mut versions = Vec::new();
        let (lowest, highest) = (index_key(key, 0, 0), index_key(key, u64::MAX, Version::MAX));
        let mut after: Option<Vec<u8>> = None;
        loop {
            let lower = match &after {
                Some(row) => Bound::Excluded(row.as_slice()),
                None => Bound::Included(lowest.as_slice()),
            };
            let rows = self
                .backend
                .range(
                    Table::EventIndex,
                    lower,
                    Bound::Included(highest.as_slice()),
                    false,
                    BUILD_PAGE,
                )
                .map_err(io_err)?;
            versions.extend(
                rows.iter()
                    .filter(|(_, mark)| mark.as_slice() == CORRECTION)
                    .map(|(row, _)| version_of(row))
                    .filter(|v| (from..=to).contains(v)),
            );
            if rows.len() < BUILD_PAGE {
                break;
            }
            after = rows.last().map(|(row, _)| row.clone());
        }
        versions.sort_unstable();
        let mut out = Vec::new();
        for v in versions {
            if out.len() >= limit {
                break;
            }
            let Some(record) = self.record(key, v)? else {
                continue;
            };
            if as_of.is_some_and(|t| record.commit_ts > t) {
                break;
            }
            out.push(record.into_info(v));
        }
        Ok(out)
    }

    /// Builds the index from the stored versions unless it is marked built (data written
    /// before it existed, or a snapshot from such a node).
    pub(super) fn ensure_event_index(&self) -> Result<(), FirnError> {
        if self.system_get(SYS_EVENT_INDEX)?.is_some() {
            return Ok(());
        }
        let mut after: Option<Vec<u8>> = None;
        let mut rows = 0u64;
        loop {
            let lower = match &after {
                Some(k) => Bound::Excluded(k.as_slice()),
                None => Bound::Unbounded,
            };
            let page = self
                .backend
                .range(Table::Versions, lower, Bound::Unbounded, false, BUILD_PAGE)
                .map_err(io_err)?;
            let mut batch = Batch::default();
            for (at, value) in &page {
                let record: VersionRecord = decode(value)?;
                if let Some(e) = record.event_time_us {
                    batch.put(Table::EventIndex, index_key_of(at, e), Vec::new());
                    rows += 1;
                }
            }
            if page.len() < BUILD_PAGE {
                batch.put(Table::System, SYS_EVENT_INDEX.to_vec(), vec![1]);
                self.backend.write(batch).map_err(io_err)?;
                if rows > 0 {
                    tracing::info!(rows, "built the event-time index of the stored versions");
                }
                return Ok(());
            }
            self.backend.write(batch).map_err(io_err)?;
            after = page.last().map(|(k, _)| k.clone());
        }
    }
}

impl Txn<'_> {
    /// Indexes `key`'s version `version`, written with event time `event_time_us`; a
    /// `correction` (written late, below the watermark) is marked so in its row.
    pub(super) fn index_event_time(
        &mut self,
        key: &[u8],
        version: Version,
        event_time_us: Option<u64>,
        correction: bool,
    ) {
        if let Some(e) = event_time_us {
            let mark = if correction {
                CORRECTION.to_vec()
            } else {
                Vec::new()
            };
            self.batch
                .put(Table::EventIndex, index_key(key, e, version), mark);
        }
    }

    /// Removes `key`'s stored versions `from..=to` and their index rows (reading the
    /// versions' event times from storage a page at a time).
    pub(super) fn remove_indexed_versions(
        &mut self,
        key: &[u8],
        from: Version,
        to: Version,
    ) -> Result<(), FirnError> {
        if from > to {
            return Ok(());
        }
        let mut rows = Vec::new();
        self.store.walk_records(key, from, to, false, |info| {
            if let Some(e) = info.event_time_us {
                rows.push(index_key(key, e, info.version));
            }
            Ok(true)
        })?;
        for row in rows {
            self.batch.remove(Table::EventIndex, row);
        }
        self.remove_versions(key, from, to);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::version_key;

    #[test]
    fn rows_sort_by_key_then_event_time_then_version() {
        assert!(index_key(b"a", 5, 9) < index_key(b"a", 6, 1));
        assert!(index_key(b"a", 5, 1) < index_key(b"a", 5, 2));
        assert!(index_key(b"a", u64::MAX, u64::MAX) < index_key(b"b", 0, 0));
        assert!(index_key(b"a", u64::MAX, u64::MAX) < index_key(b"a\0", 0, 0));
        assert_eq!(
            index_key_of(&version_key(b"k", 7), 42),
            index_key(b"k", 42, 7)
        );
        assert_eq!(version_of(&index_key(b"k", 42, 7)), 7);
    }
}
