//! Reads of group state (XPENDING, XINFO GROUPS|CONSUMERS, XINFO STREAM's count) and the
//! lookups apply makes.

use std::ops::Bound;

use bytes::Bytes;
use firn_model::log::LOG_READ_RECORDS_MAX;
use firn_model::{ConsumerInfo, FirnError, GroupInfo, Key, LogSeq, PendingInfo, PendingSummary};

use super::{
    ConsumerMeta, GroupMeta, PendingEntry, consumer_key, group_key, idle, no_consumer_group,
    no_group, pending_key,
};
use crate::backend::Table;
use crate::record::decode;
use crate::store::log::{push_name, tag_key};
use crate::store::{VersionedStore, WALK_PAGE, io_err, prefix_end};

impl VersionedStore {
    pub(super) fn group(&self, key: &Key, group: &[u8]) -> Result<Option<GroupMeta>, FirnError> {
        self.backend
            .get(Table::Groups, &group_key(key.as_bytes(), group))
            .map_err(io_err)?
            .map(|b| decode(&b))
            .transpose()
    }

    pub(super) fn consumer(
        &self,
        key: &Key,
        group: &[u8],
        consumer: &[u8],
    ) -> Result<Option<ConsumerMeta>, FirnError> {
        self.backend
            .get(
                Table::GroupConsumers,
                &consumer_key(key.as_bytes(), group, consumer),
            )
            .map_err(io_err)?
            .map(|b| decode(&b))
            .transpose()
    }

    pub(super) fn pending_entry(
        &self,
        key: &Key,
        group: &[u8],
        seq: LogSeq,
    ) -> Result<Option<PendingEntry>, FirnError> {
        self.backend
            .get(
                Table::GroupPending,
                &pending_key(key.as_bytes(), group, seq),
            )
            .map_err(io_err)?
            .map(|b| decode(&b))
            .transpose()
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
                if !each(seq, decode(&v)?)? {
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
        if self.group(key, group)?.is_none() {
            return Err(no_group(key, group, ""));
        }
        let mut summary = PendingSummary::default();
        let mut counts: std::collections::BTreeMap<Bytes, u64> = Default::default();
        self.walk_pending(key, group, LogSeq::ZERO, |seq, entry| {
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
        if self.group(key, group)?.is_none() {
            return Err(no_group(key, group, ""));
        }
        let count = count.min(LOG_READ_RECORDS_MAX);
        let mut out = Vec::new();
        if count == 0 {
            return Ok(out);
        }
        self.walk_pending(key, group, start, |seq, entry| {
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

    /// How many entries each consumer of the group has pending.
    fn pending_counts(
        &self,
        key: &Key,
        group: &[u8],
    ) -> Result<std::collections::HashMap<Bytes, u64>, FirnError> {
        let mut counts = std::collections::HashMap::new();
        self.walk_pending(key, group, LogSeq::ZERO, |_, entry| {
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
        let mut out = Vec::with_capacity(rows.len());
        for (gk, v) in rows {
            let meta: GroupMeta = decode(&v)?;
            let name = &gk[prefix.len() + 2..];
            let pending = self.pending_counts(key, name)?.values().sum();
            let consumers = self.consumers(key, name, 0)?.len() as u64;
            let lag = if meta.last_delivered >= stream.last {
                Some(0)
            } else if stream.max_deleted == LogSeq::ZERO {
                meta.entries_read.map(|r| stream.added.saturating_sub(r))
            } else {
                None
            };
            out.push(GroupInfo {
                name: Bytes::copy_from_slice(name),
                consumers,
                pending,
                last_delivered: meta.last_delivered,
                entries_read: meta.entries_read,
                lag,
            });
        }
        Ok(out)
    }

    /// XINFO CONSUMERS: the group's consumers in name order, idle times at `now_ms`.
    pub fn consumers(
        &self,
        key: &Key,
        group: &[u8],
        now_ms: u64,
    ) -> Result<Vec<ConsumerInfo>, FirnError> {
        if self.group(key, group)?.is_none() {
            return Err(no_consumer_group(key, group));
        }
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
                LOG_READ_RECORDS_MAX,
            )
            .map_err(io_err)?;
        let pending = self.pending_counts(key, group)?;
        rows.into_iter()
            .map(|(ck, v)| {
                let meta: ConsumerMeta = decode(&v)?;
                let name = &ck[prefix.len()..];
                Ok(ConsumerInfo {
                    name: Bytes::copy_from_slice(name),
                    pending: pending.get(name).copied().unwrap_or(0),
                    idle_ms: idle(now_ms, meta.seen_ms),
                    inactive_ms: meta.active_ms.map(|a| idle(now_ms, a)),
                })
            })
            .collect()
    }
}
