//! Reads of group state (XPENDING, XINFO GROUPS|CONSUMERS, XINFO STREAM's count) and the
//! lookups apply makes.

use std::ops::Bound;

use bytes::Bytes;
use firn_model::log::LOG_READ_RECORDS_MAX;
use firn_model::{
    ConsumerInfo, FirnError, GroupFull, GroupInfo, Key, LogSeq, PendingInfo, PendingSummary,
    StreamFull,
};

use super::deal::PENDING_SCAN_MAX;
use super::{
    ConsumerMeta, GroupMeta, GroupWake, KeyHolder, PendingEntry, consumer_key, group_key,
    holder_key, idle, lag, no_consumer_group, no_group, pending_key,
};
use crate::backend::Table;
use crate::record::decode;
use crate::store::log::{push_name, tag_key};
use crate::store::{VersionedStore, WALK_PAGE, io_err, prefix_end};

impl VersionedStore {
    /// One row of `table`, read by `read`.
    fn row<T>(
        &self,
        table: Table,
        key: &[u8],
        read: impl Fn(&[u8]) -> Result<T, FirnError>,
    ) -> Result<Option<T>, FirnError> {
        self.backend
            .get(table, key)
            .map_err(io_err)?
            .map(|b| read(&b))
            .transpose()
    }

    pub(super) fn group(&self, key: &Key, group: &[u8]) -> Result<Option<GroupMeta>, FirnError> {
        let row = group_key(key.as_bytes(), group);
        self.row(Table::Groups, &row, GroupMeta::decode)
    }

    pub(super) fn consumer(
        &self,
        key: &Key,
        group: &[u8],
        consumer: &[u8],
    ) -> Result<Option<ConsumerMeta>, FirnError> {
        let row = consumer_key(key.as_bytes(), group, consumer);
        self.row(Table::GroupConsumers, &row, decode)
    }

    pub(super) fn pending_entry(
        &self,
        key: &Key,
        group: &[u8],
        seq: LogSeq,
    ) -> Result<Option<PendingEntry>, FirnError> {
        let row = pending_key(key.as_bytes(), group, seq);
        self.row(Table::GroupPending, &row, PendingEntry::decode)
    }

    pub(super) fn key_holder(
        &self,
        key: &Key,
        group: &[u8],
        key_hash: u64,
    ) -> Result<Option<KeyHolder>, FirnError> {
        let row = holder_key(key.as_bytes(), group, key_hash);
        self.row(Table::GroupKeys, &row, decode)
    }

    /// Calls `each` on the group's pending entries with `seq ≥ from`, in id order, until it
    /// answers `false`; reads the list a page at a time, so a long list is never held whole.
    pub(super) fn walk_pending(
        &self,
        key: &Key,
        group: &[u8],
        from: LogSeq,
        mut each: impl FnMut(LogSeq, PendingEntry) -> Result<bool, FirnError>,
    ) -> Result<(), FirnError> {
        let k = key.as_bytes();
        let upper = pending_key(k, group, LogSeq::MAX);
        let mut lower = pending_key(k, group, from);
        let mut inclusive = true;
        loop {
            let lo = if inclusive {
                Bound::Included(&lower[..])
            } else {
                Bound::Excluded(&lower[..])
            };
            let page = self
                .backend
                .range(
                    Table::GroupPending,
                    lo,
                    Bound::Included(&upper),
                    false,
                    WALK_PAGE,
                )
                .map_err(io_err)?;
            let full = page.len() == WALK_PAGE;
            let Some((last, _)) = page.last() else {
                return Ok(());
            };
            lower = last.clone();
            inclusive = false;
            for (pk, v) in page {
                let seq = LogSeq::from_be_bytes(&pk[pk.len() - 16..])
                    .ok_or_else(|| FirnError::Internal("a pending entry without an id".into()))?;
                if !each(seq, PendingEntry::decode(&v)?)? {
                    return Ok(());
                }
            }
            if !full {
                return Ok(());
            }
        }
    }

    /// XPENDING's summary of `group`.
    pub fn pending_summary(&self, key: &Key, group: &[u8]) -> Result<PendingSummary, FirnError> {
        self.check_stream_type(key.as_bytes())?;
        let Some(meta) = self.group(key, group)? else {
            return Err(no_group(key, group, ""));
        };
        let mut summary = PendingSummary::default();
        let mut counts: std::collections::BTreeMap<Bytes, u64> = Default::default();
        self.walk_pending(key, group, meta.pending_floor, |seq, entry| {
            summary.count += 1;
            summary.first.get_or_insert(seq);
            summary.last = Some(seq);
            *counts.entry(entry.consumer).or_default() += 1;
            Ok(true)
        })?;
        summary.consumers = counts.into_iter().collect();
        Ok(summary)
    }

    /// XPENDING's extended form: pending entries with `start ≤ id ≤ end`, at most `count`,
    /// idle at least `min_idle_ms`, of `consumer` only when given; idle times at `now_ms`.
    #[allow(clippy::too_many_arguments)]
    pub fn pending(
        &self,
        key: &Key,
        group: &[u8],
        min_idle_ms: Option<u64>,
        start: LogSeq,
        end: LogSeq,
        count: usize,
        consumer: Option<&[u8]>,
        now_ms: u64,
    ) -> Result<Vec<PendingInfo>, FirnError> {
        self.check_stream_type(key.as_bytes())?;
        let Some(meta) = self.group(key, group)? else {
            return Err(no_group(key, group, ""));
        };
        let count = count.min(LOG_READ_RECORDS_MAX);
        let mut out = Vec::new();
        if count == 0 {
            return Ok(out);
        }
        self.walk_pending(key, group, start.max(meta.pending_floor), |seq, entry| {
            if seq > end {
                return Ok(false);
            }
            let idle_ms = idle(now_ms, entry.delivered_ms);
            if consumer.is_none_or(|c| c == &entry.consumer[..])
                && min_idle_ms.is_none_or(|m| idle_ms >= m)
            {
                out.push(PendingInfo {
                    seq,
                    consumer: entry.consumer,
                    idle_ms,
                    deliveries: entry.deliveries,
                });
            }
            Ok(out.len() < count)
        })?;
        Ok(out)
    }

    /// The group's first `limit` consumers by name, and when each was last seen.
    pub(super) fn consumer_rows(
        &self,
        key: &Key,
        group: &[u8],
        limit: usize,
    ) -> Result<Vec<(Bytes, ConsumerMeta)>, FirnError> {
        let prefix = group_key(key.as_bytes(), group);
        let end = prefix_end(&prefix);
        let upper = end.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
        let rows = self
            .backend
            .range(
                Table::GroupConsumers,
                Bound::Included(&prefix),
                upper,
                false,
                limit,
            )
            .map_err(io_err)?;
        rows.into_iter()
            .map(|(ck, v)| Ok((Bytes::copy_from_slice(&ck[prefix.len()..]), decode(&v)?)))
            .collect()
    }

    /// When the group's earliest delivered entry falls due under ACKWAIT, and who has
    /// entries waiting to be handed over, among the first [`PENDING_SCAN_MAX`] pending.
    #[allow(clippy::type_complexity)]
    fn due_and_waiting(
        &self,
        key: &Key,
        group: &[u8],
        meta: &GroupMeta,
    ) -> Result<(Option<u64>, Vec<(Bytes, u64)>), FirnError> {
        let mut due: Option<u64> = None;
        let mut waiting: std::collections::BTreeMap<Bytes, u64> = Default::default();
        let mut seen = 0;
        self.walk_pending(key, group, meta.pending_floor, |_, entry| {
            seen += 1;
            if entry.waiting {
                *waiting.entry(entry.consumer).or_default() += 1;
            } else if let Some(wait) = meta.options.ack_wait_ms
                && entry.deliveries > 0
            {
                let at = entry.delivered_ms.saturating_add(wait);
                due = Some(due.map_or(at, |d| d.min(at)));
            }
            Ok(seen < PENDING_SCAN_MAX)
        })?;
        Ok((due, waiting.into_iter().collect()))
    }

    /// A group's [`GroupWake`] (`None`: no such group), bounded as a deal is.
    pub fn group_wake(&self, key: &Key, group: &[u8]) -> Result<Option<GroupWake>, FirnError> {
        let Some(meta) = self.group(key, group)? else {
            return Ok(None);
        };
        let (next_due_ms, waiting) = self.due_and_waiting(key, group, &meta)?;
        Ok(Some(GroupWake {
            options: meta.options,
            next_due_ms,
            waiting,
        }))
    }

    /// How many entries each consumer of the group has pending.
    fn pending_counts(
        &self,
        key: &Key,
        group: &[u8],
        meta: &GroupMeta,
    ) -> Result<std::collections::HashMap<Bytes, u64>, FirnError> {
        let mut counts = std::collections::HashMap::new();
        self.walk_pending(key, group, meta.pending_floor, |_, entry| {
            *counts.entry(entry.consumer).or_default() += 1;
            Ok(true)
        })?;
        Ok(counts)
    }

    /// How many groups the stream `stream` has (XINFO STREAM's `groups`), counted a page at
    /// a time.
    pub(in crate::store) fn group_count(&self, stream: &[u8]) -> Result<u64, FirnError> {
        let mut prefix = Vec::new();
        push_name(&mut prefix, stream);
        let mut n = 0;
        self.walk_prefix(Table::Groups, &prefix, |_, _| {
            n += 1;
            Ok(())
        })?;
        Ok(n)
    }

    /// XINFO GROUPS: the stream's groups in name order (`ERR no such key` for no stream).
    pub fn groups(&self, key: &Key) -> Result<Vec<GroupInfo>, FirnError> {
        self.check_stream_type(key.as_bytes())?;
        let k = key.as_bytes();
        let Some(stream) = self.tag_meta_at(&tag_key(k, k))? else {
            return Err(FirnError::BadArgument("no such key".into()));
        };
        let mut prefix = Vec::new();
        push_name(&mut prefix, k);
        let end = prefix_end(&prefix);
        let upper = end.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
        let rows = self
            .backend
            .range(
                Table::Groups,
                Bound::Included(&prefix),
                upper,
                false,
                LOG_READ_RECORDS_MAX,
            )
            .map_err(io_err)?;
        let first = self.first_entry(k)?;
        let mut out = Vec::with_capacity(rows.len());
        for (gk, v) in rows {
            let meta = GroupMeta::decode(&v)?;
            let name = &gk[prefix.len() + 2..];
            let (next_due_ms, waiting) = self.due_and_waiting(key, name, &meta)?;
            let pending = self.pending_counts(key, name, &meta)?.values().sum();
            let consumers = self.consumers(key, name, 0)?.len() as u64;
            let lag = lag(&stream, first, &meta);
            out.push(GroupInfo {
                name: Bytes::copy_from_slice(name),
                consumers,
                pending,
                last_delivered: meta.last_delivered,
                entries_read: meta.entries_read,
                lag,
                options: meta.options,
                next_due_ms,
                waiting,
            });
        }
        Ok(out)
    }

    /// XINFO STREAM … FULL: the stream's first `count` entries, and each group with its
    /// first `count` pending entries and its consumers with their first `count` (each
    /// list at most [`LOG_READ_RECORDS_MAX`]); `None` for no stream.
    pub fn stream_full(
        &self,
        key: &Key,
        count: usize,
        now_ms: u64,
    ) -> Result<Option<StreamFull>, FirnError> {
        let k = key.as_bytes();
        let count = count.clamp(1, LOG_READ_RECORDS_MAX);
        let page = self.log_page(k, k, LogSeq::ZERO, LogSeq::MAX, count, false, None, true)?;
        let Some(info) = page.info else {
            return Ok(None);
        };
        let pending = |group: &[u8], consumer: Option<&[u8]>| {
            self.pending(
                key,
                group,
                None,
                LogSeq::ZERO,
                LogSeq::MAX,
                count,
                consumer,
                now_ms,
            )
        };
        let mut groups = Vec::new();
        for group in self.groups(key)? {
            let mut consumers = Vec::new();
            for consumer in self.consumers(key, &group.name, now_ms)? {
                let own = pending(&group.name, Some(&consumer.name))?;
                consumers.push((consumer, own));
            }
            groups.push(GroupFull {
                pending: pending(&group.name, None)?,
                info: group,
                consumers,
            });
        }
        Ok(Some(StreamFull {
            info,
            entries: page.records,
            groups,
        }))
    }

    /// XINFO CONSUMERS: the group's consumers in name order, idle times at `now_ms`.
    pub fn consumers(
        &self,
        key: &Key,
        group: &[u8],
        now_ms: u64,
    ) -> Result<Vec<ConsumerInfo>, FirnError> {
        self.check_stream_type(key.as_bytes())?;
        let Some(meta) = self.group(key, group)? else {
            return Err(no_consumer_group(key, group));
        };
        let pending = self.pending_counts(key, group, &meta)?;
        let rows = self.consumer_rows(key, group, LOG_READ_RECORDS_MAX)?;
        Ok(rows
            .into_iter()
            .map(|(name, meta)| ConsumerInfo {
                pending: pending.get(&name).copied().unwrap_or(0),
                idle_ms: idle(now_ms, meta.seen_ms),
                inactive_ms: meta.active_ms.map(|a| idle(now_ms, a)),
                name,
            })
            .collect())
    }
}
