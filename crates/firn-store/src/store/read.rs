//! The store's reads: a key's metadata and versions — latest, by version, as of a commit
//! time, by event time — its history, and scans of a prefix (at a time, too). They run
//! concurrently with apply, straight against the backend.

use super::*;

impl VersionedStore {
    /// Calls `each` on every row of `table` whose key starts with `prefix`, in key order,
    /// reading a page of `WALK_PAGE` rows at a time (never the whole range at once).
    pub(crate) fn walk_prefix(
        &self,
        table: Table,
        prefix: &[u8],
        mut each: impl FnMut(Vec<u8>, Vec<u8>) -> Result<(), FirnError>,
    ) -> Result<(), FirnError> {
        let end = prefix_end(prefix);
        let upper = end.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
        let mut after: Option<Vec<u8>> = None;
        loop {
            let lower = after
                .as_deref()
                .map_or(Bound::Included(prefix), Bound::Excluded);
            let page = self
                .backend
                .range(table, lower, upper, false, WALK_PAGE)
                .map_err(io_err)?;
            let full = page.len() == WALK_PAGE;
            after = page.last().map(|(k, _)| k.clone());
            for (k, v) in page {
                each(k, v)?;
            }
            if !full {
                return Ok(());
            }
        }
    }

    pub fn meta(&self, key: &[u8]) -> Result<Option<KeyMeta>, FirnError> {
        self.backend
            .get(Table::KeyMeta, key)
            .map_err(io_err)?
            .map(|b| KeyMeta::decode(&b))
            .transpose()
    }

    pub(super) fn record(
        &self,
        key: &[u8],
        version: Version,
    ) -> Result<Option<VersionRecord>, FirnError> {
        self.backend
            .get(Table::Versions, &version_key(key, version))
            .map_err(io_err)?
            .map(|b| decode(&b))
            .transpose()
    }

    /// Stored versions of `key` in `[from, to]`, ascending (or descending), at most `limit`.
    pub(super) fn records(
        &self,
        key: &[u8],
        from: Version,
        to: Version,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<VersionInfo>, FirnError> {
        if from > to {
            return Ok(Vec::new());
        }
        let (lo, hi) = (version_key(key, from), version_key(key, to));
        self.backend
            .range(
                Table::Versions,
                Bound::Included(&lo),
                Bound::Included(&hi),
                reverse,
                limit,
            )
            .map_err(io_err)?
            .into_iter()
            .map(|(k, v)| Ok(decode::<VersionRecord>(&v)?.into_info(version_of(&k))))
            .collect()
    }

    /// Visits the stored versions of `key` in `[from, to]`, ascending (or descending),
    /// reading at most [`HISTORY_PAGE_VERSIONS`] from storage at a time, until `visit`
    /// answers `false`.
    pub(crate) fn walk_records(
        &self,
        key: &[u8],
        mut from: Version,
        mut to: Version,
        reverse: bool,
        mut visit: impl FnMut(VersionInfo) -> Result<bool, FirnError>,
    ) -> Result<(), FirnError> {
        loop {
            let page = self.records(key, from, to, reverse, HISTORY_PAGE_VERSIONS)?;
            let full = page.len() == HISTORY_PAGE_VERSIONS;
            let Some(last) = page.last().map(|i| i.version) else {
                return Ok(());
            };
            for info in page {
                if !visit(info)? {
                    return Ok(());
                }
            }
            // The next page starts past the last version seen; an empty range ends it.
            match (full, reverse) {
                (false, _) => return Ok(()),
                (true, false) if last < to => from = last + 1,
                (true, true) if last > from => to = last - 1,
                _ => return Ok(()),
            }
        }
    }

    /// The version of `key` a read at `at` sees, tombstones included (the caller decides how
    /// a deleted key reads).
    pub fn get(&self, key: &[u8], at: ReadAt) -> Result<Option<VersionInfo>, FirnError> {
        self.in_lane(key)?;
        let Some(meta) = self.meta(key)? else {
            return Ok(None);
        };
        if meta.latest == 0 {
            return Ok(None);
        }
        // Past the newest version's expiry, a read sees the tombstone that writes it down.
        let ended = |t: CommitTs, found: Option<VersionInfo>| match found {
            Some(info) if info.version == meta.latest && meta.expired_at(t) => {
                Some(Self::expiry_tombstone(&meta))
            }
            found => found,
        };
        match at {
            ReadAt::Latest => {
                let found = self
                    .record(key, meta.latest)?
                    .map(|r| r.into_info(meta.latest));
                Ok(ended(self.read_now(), found))
            }
            ReadAt::Version(v) => {
                if v == 0 || v > meta.latest {
                    return Ok(None);
                }
                if v < meta.oldest {
                    return Err(FirnError::Compacted {
                        oldest: meta.oldest,
                    });
                }
                Ok(self.record(key, v)?.map(|r| r.into_info(v)))
            }
            ReadAt::AsOf(t) => {
                let found = match self.search_as_of(key, &meta, t)? {
                    Some(found) => found,
                    None => self.scan_as_of(key, &meta, t)?,
                };
                Ok(ended(t, found))
            }
            // A seek into the event-time index (`event_index.rs`).
            ReadAt::EventTime(t) => self.read_by_event_time(key, &meta, t),
            // The node turns it into `EventTimeAsOf` from the watermark's state first.
            ReadAt::EventTimeComplete(_) => Err(FirnError::BadArgument(
                "EVENTTIME … COMPLETE reads one key on a node (it waits for the watermark)".into(),
            )),
            // The same among the versions committed by `as_of`: those up to the newest
            // version then (stamps grow with versions).
            ReadAt::EventTimeAsOf { event_us, as_of } => {
                let known = match self.search_as_of(key, &meta, as_of)? {
                    Some(found) => found,
                    None => self.scan_as_of(key, &meta, as_of)?,
                };
                let Some(known) = known else {
                    return Ok(None);
                };
                let then = KeyMeta {
                    latest: known.version,
                    ..meta
                };
                self.read_by_event_time(key, &then, event_us)
            }
        }
    }

    /// The newest version of `key` with `commit_ts ≤ t`, found by point reads: stamps grow
    /// with versions, so it gallops back from the newest and then bisects — O(log d) reads
    /// for a version d back, not the whole history. `None` when a version in the way is not
    /// stored (a `notify` keyspace); the caller then scans.
    pub(super) fn search_as_of(
        &self,
        key: &[u8],
        meta: &KeyMeta,
        t: CommitTs,
    ) -> Result<Option<Option<VersionInfo>>, FirnError> {
        let at = |v: Version| self.record(key, v);
        // Invariant: the version `above` is stamped after t.
        let mut above = meta.latest;
        if meta.latest_ts <= t {
            return Ok(at(above)?.map(|r| Some(r.into_info(above))));
        }
        let mut step = 1;
        let (mut below, mut found) = loop {
            if above <= meta.oldest {
                // Nothing stored is old enough: unknowable if older versions were truncated.
                return if meta.oldest > 1 {
                    Err(FirnError::Compacted {
                        oldest: meta.oldest,
                    })
                } else {
                    Ok(Some(None))
                };
            }
            let v = above.saturating_sub(step).max(meta.oldest);
            match at(v)? {
                None => return Ok(None),
                Some(r) if r.commit_ts <= t => break (v, r),
                Some(_) => {
                    above = v;
                    step = step.saturating_mul(2);
                }
            }
        };
        while above - below > 1 {
            let mid = below + (above - below) / 2;
            match at(mid)? {
                None => return Ok(None),
                Some(r) if r.commit_ts <= t => (below, found) = (mid, r),
                Some(_) => above = mid,
            }
        }
        Ok(Some(Some(found.into_info(below))))
    }

    /// [`search_as_of`](Self::search_as_of) by reading every stored version, newest first.
    pub(super) fn scan_as_of(
        &self,
        key: &[u8],
        meta: &KeyMeta,
        t: CommitTs,
    ) -> Result<Option<VersionInfo>, FirnError> {
        let mut found = None;
        self.walk_records(key, meta.oldest, meta.latest, true, |info| {
            if info.commit_ts <= t {
                found = Some(info);
                return Ok(false);
            }
            Ok(true)
        })?;
        if found.is_some() {
            return Ok(found);
        }
        // Nothing stored is old enough. If older versions were truncated, the answer is
        // unknowable rather than "absent".
        if meta.oldest > 1 {
            return Err(FirnError::Compacted {
                oldest: meta.oldest,
            });
        }
        Ok(None)
    }

    /// Like [`get`](Self::get), but a tombstone reads as absent.
    pub fn get_live(&self, key: &[u8], at: ReadAt) -> Result<Option<VersionInfo>, FirnError> {
        Ok(self.get(key, at)?.filter(|i| !i.deleted))
    }

    pub fn history(
        &self,
        key: &[u8],
        from: Version,
        to: Option<Version>,
        limit: usize,
        as_of: Option<CommitTs>,
    ) -> Result<Vec<VersionInfo>, FirnError> {
        self.in_lane(key)?;
        let Some(meta) = self.meta(key)? else {
            return Ok(Vec::new());
        };
        // A history past the newest version's expiry ends with the tombstone that writes
        // it down, as it will once it is written.
        let ended = meta
            .expired_at(as_of.unwrap_or_else(|| self.read_now()))
            .then(|| Self::expiry_tombstone(&meta));
        let asked_to = to;
        let mut to = to.unwrap_or(meta.latest).min(meta.latest);
        if let Some(t) = as_of {
            // Stamps grow with versions, so the history at T is a prefix: it ends at the
            // version a read at T sees. Nothing stored at or before T: an empty history.
            to = match self.get(key, ReadAt::AsOf(t)) {
                Ok(Some(seen)) => to.min(seen.version),
                Ok(None) | Err(FirnError::Compacted { .. }) => return Ok(Vec::new()),
                Err(e) => return Err(e),
            };
        }
        let mut versions = self.records(key, from.max(meta.oldest), to, false, limit)?;
        if let Some(tombstone) = ended {
            let v = tombstone.version;
            if versions.len() < limit && from <= v && asked_to.is_none_or(|t| t >= v) {
                versions.push(tombstone);
            }
        }
        Ok(versions)
    }

    /// Live keys under `prefix` after `cursor`. Examines at most `limit` keys (Redis SCAN's
    /// COUNT semantics: a page may hold fewer matches than `limit`); returns the matches and
    /// the cursor to continue from, `None` when the prefix is exhausted.
    pub fn scan(
        &self,
        prefix: &[u8],
        cursor: Option<&[u8]>,
        limit: usize,
        pattern: Option<&[u8]>,
        at: ReadAt,
    ) -> Result<ScanPage, FirnError> {
        let end = prefix_end(prefix);
        let lower = match cursor {
            Some(c) if c >= prefix => Bound::Excluded(c),
            _ => Bound::Included(prefix),
        };
        let upper = end.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
        let limit = limit.max(1);
        let page = self
            .backend
            .range(Table::KeyMeta, lower, upper, false, limit)
            .map_err(io_err)?;
        let next_cursor =
            (page.len() == limit).then(|| Bytes::from(page[page.len() - 1].0.clone()));
        let mut found = Vec::new();
        let mut seen_through = None;
        for (k, _) in page {
            // A key of the other durability's shards is theirs to show (here it could only
            // be one left behind by a definition that raced its write).
            if pattern.is_some_and(|p| !glob_match(p, &k)) || self.in_lane(&k).is_err() {
                continue;
            }
            let visible = match at {
                // Truncated history at T is skipped rather than failing the whole page.
                ReadAt::AsOf(_) | ReadAt::EventTime(_) | ReadAt::EventTimeAsOf { .. } => {
                    self.get(&k, at).unwrap_or(None)
                }
                _ => self.get(&k, at)?,
            };
            if let Some(info) = visible {
                seen_through = seen_through.max(Some(info.commit_ts));
                if !info.deleted {
                    found.push((Key::new(k)?, info));
                }
            }
        }
        Ok(ScanPage {
            keys: found,
            next_cursor,
            seen_through,
        })
    }

    pub fn live_keys(&self) -> u64 {
        self.apply_state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .live_keys
    }
}
