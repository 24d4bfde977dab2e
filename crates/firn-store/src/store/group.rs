//! Consumer groups of a stream, in the stream's shard: what apply does with a group entry
//! (create, deliver, ack, claim, …) and the reads of group state (XPENDING, XINFO). A
//! group's meta, its pending entries list (by id) and its consumers are rows of their own
//! tables under `(stream, group)`. Apply takes its clock from the entry's stamp — delivery
//! times and idle times never come from a node's clock — so every replica holds the same
//! pending list; only a read's idle times use the reader's clock.

use std::ops::Bound;

use bytes::Bytes;
use firn_model::log::LOG_READ_RECORDS_MAX;
use firn_model::{
    ClaimOptions, ConsumerInfo, FirnError, GroupChange, GroupEntry, GroupInfo, GroupStart, Key,
    LogRecord, LogSeq, PendingInfo, PendingSummary, Response,
};
use serde::{Deserialize, Serialize};

use super::apply::Txn;
use super::log::{TagMeta, push_name, tag_key};
use super::{VersionedStore, WALK_PAGE, io_err, prefix_end};
use crate::backend::Table;
use crate::record::{decode, encode};

/// What a shard keeps about one group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupMeta {
    pub last_delivered: LogSeq,
    /// Entries the group has read, when known (Redis's `entries-read`).
    pub entries_read: Option<u64>,
}

/// One entry of a group's pending list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingEntry {
    pub consumer: Bytes,
    /// The last delivery, in milliseconds of the delivering entry's stamp.
    pub delivered_ms: u64,
    pub deliveries: u64,
}

/// One consumer of a group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerMeta {
    /// Its last attempt to read or claim.
    pub seen_ms: u64,
    /// Its last successful read or claim.
    pub active_ms: Option<u64>,
}

/// `u16 len · stream · u16 len · group`: a group's rows in each table are contiguous.
fn group_key(stream: &[u8], group: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + stream.len() + group.len() + 16);
    push_name(&mut out, stream);
    push_name(&mut out, group);
    out
}

fn pending_key(stream: &[u8], group: &[u8], seq: LogSeq) -> Vec<u8> {
    let mut out = group_key(stream, group);
    out.extend_from_slice(&seq.to_be_bytes());
    out
}

fn consumer_key(stream: &[u8], group: &[u8], consumer: &[u8]) -> Vec<u8> {
    let mut out = group_key(stream, group);
    out.extend_from_slice(consumer);
    out
}

fn no_group(key: &Key, group: &[u8], suffix: &str) -> FirnError {
    FirnError::NoGroup(format!(
        "No such key '{}' or consumer group '{}'{suffix}",
        String::from_utf8_lossy(key.as_bytes()),
        String::from_utf8_lossy(group)
    ))
}

fn no_consumer_group(key: &Key, group: &[u8]) -> FirnError {
    FirnError::NoGroup(format!(
        "No such consumer group '{}' for key name '{}'",
        String::from_utf8_lossy(group),
        String::from_utf8_lossy(key.as_bytes())
    ))
}

fn key_required() -> FirnError {
    FirnError::BadArgument(
        "The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically."
            .into(),
    )
}

/// The id a group starts after, and what it has read then, as Redis sets them.
fn start_at(start: GroupStart, stream: &TagMeta) -> GroupMeta {
    match start {
        GroupStart::Last => GroupMeta {
            last_delivered: stream.last,
            entries_read: Some(stream.added),
        },
        GroupStart::Id(LogSeq::ZERO) => GroupMeta {
            last_delivered: LogSeq::ZERO,
            entries_read: Some(0),
        },
        GroupStart::Id(id) => GroupMeta {
            last_delivered: id,
            entries_read: None,
        },
    }
}

fn idle(now_ms: u64, since_ms: u64) -> u64 {
    now_ms.saturating_sub(since_ms)
}

impl Txn<'_> {
    fn now_ms(&self) -> u64 {
        self.ts.wall_us / 1_000
    }

    fn set_group(&mut self, key: &Key, group: &[u8], meta: &GroupMeta) {
        self.batch.put(
            Table::Groups,
            group_key(key.as_bytes(), group),
            encode(meta),
        );
    }

    fn set_pending(&mut self, key: &Key, group: &[u8], seq: LogSeq, entry: &PendingEntry) {
        self.batch.put(
            Table::GroupPending,
            pending_key(key.as_bytes(), group, seq),
            encode(entry),
        );
    }

    fn drop_pending(&mut self, key: &Key, group: &[u8], seq: LogSeq) {
        self.batch
            .remove(Table::GroupPending, pending_key(key.as_bytes(), group, seq));
    }

    /// Notes that `consumer` tried to read or claim now (made if new), and whether it got
    /// anything.
    fn touch_consumer(
        &mut self,
        key: &Key,
        group: &[u8],
        consumer: &[u8],
        active: bool,
    ) -> Result<(), FirnError> {
        let now = self.now_ms();
        let mut meta = self
            .store
            .consumer(key, group, consumer)?
            .unwrap_or_default();
        meta.seen_ms = now;
        if active {
            meta.active_ms = Some(now);
        }
        self.batch.put(
            Table::GroupConsumers,
            consumer_key(key.as_bytes(), group, consumer),
            encode(&meta),
        );
        Ok(())
    }

    /// The stream's entry `seq`, if it is still there.
    fn stream_entry(&self, key: &Key, seq: LogSeq) -> Result<Option<LogRecord>, FirnError> {
        let k = key.as_bytes();
        Ok(self.store.entries(k, k, seq, seq, false, 1)?.pop())
    }

    pub(super) fn group_change(
        &mut self,
        key: &Key,
        group: &Bytes,
        change: &GroupChange,
    ) -> Result<Response, FirnError> {
        let k = key.as_bytes();
        let stream = self.tag_meta(k, k)?;
        let meta = self.store.group(key, group)?;
        let now = self.now_ms();
        match change {
            GroupChange::Create { start, mkstream } => {
                let stream = match stream {
                    Some(s) => s,
                    None if *mkstream => {
                        self.note_log(key)?;
                        self.set_tag_meta(k, k, TagMeta::default());
                        TagMeta::default()
                    }
                    None => return Err(key_required()),
                };
                if meta.is_some() {
                    return Err(FirnError::BusyGroup);
                }
                self.set_group(key, group, &start_at(*start, &stream));
                Ok(Response::Done)
            }
            _ if stream.is_none() => match change {
                GroupChange::Deliver { .. } | GroupChange::Pending { .. } => {
                    Err(no_group(key, group, " in XREADGROUP with GROUP option"))
                }
                GroupChange::Ack { .. } => Ok(Response::Count(0)),
                GroupChange::Claim { .. } | GroupChange::AutoClaim { .. } => {
                    Err(no_group(key, group, ""))
                }
                _ => Err(key_required()),
            },
            GroupChange::Destroy => {
                if meta.is_none() {
                    return Ok(Response::Count(0));
                }
                self.batch.remove(Table::Groups, group_key(k, group));
                for table in [Table::GroupPending, Table::GroupConsumers] {
                    self.remove_under(table, &group_key(k, group))?;
                }
                Ok(Response::Count(1))
            }
            GroupChange::SetId { start } => {
                if meta.is_none() {
                    return Err(no_consumer_group(key, group));
                }
                let stream = stream.unwrap_or_default();
                self.set_group(key, group, &start_at(*start, &stream));
                Ok(Response::Done)
            }
            GroupChange::CreateConsumer { consumer } => {
                if meta.is_none() {
                    return Err(no_consumer_group(key, group));
                }
                if self.store.consumer(key, group, consumer)?.is_some() {
                    return Ok(Response::Count(0));
                }
                self.touch_consumer(key, group, consumer, false)?;
                Ok(Response::Count(1))
            }
            GroupChange::DelConsumer { consumer } => {
                if meta.is_none() {
                    return Err(no_consumer_group(key, group));
                }
                if self.store.consumer(key, group, consumer)?.is_none() {
                    return Ok(Response::Count(0));
                }
                let mut gone = Vec::new();
                self.store
                    .walk_pending(key, group, LogSeq::ZERO, |seq, entry| {
                        if entry.consumer == *consumer {
                            gone.push(seq);
                        }
                        Ok(true)
                    })?;
                let had = gone.len() as u64;
                for seq in gone {
                    self.drop_pending(key, group, seq);
                }
                self.batch
                    .remove(Table::GroupConsumers, consumer_key(k, group, consumer));
                Ok(Response::Count(had))
            }
            GroupChange::Deliver {
                consumer,
                count,
                noack,
            } => {
                let Some(mut meta) = meta else {
                    return Err(no_group(key, group, " in XREADGROUP with GROUP option"));
                };
                let records = match meta.last_delivered.successor() {
                    Some(from) => self.store.entries(k, k, from, LogSeq::MAX, false, *count)?,
                    None => Vec::new(),
                };
                for r in &records {
                    if !noack {
                        let entry = PendingEntry {
                            consumer: consumer.clone(),
                            delivered_ms: now,
                            deliveries: 1,
                        };
                        self.set_pending(key, group, r.seq, &entry);
                    }
                    meta.last_delivered = r.seq;
                }
                meta.entries_read = meta.entries_read.map(|n| n + records.len() as u64);
                self.set_group(key, group, &meta);
                self.touch_consumer(key, group, consumer, !records.is_empty())?;
                Ok(Response::GroupEntries {
                    entries: records
                        .into_iter()
                        .map(|r| GroupEntry {
                            seq: r.seq,
                            record: Some(r),
                        })
                        .collect(),
                    at: self.ts,
                    last_delivered: meta.last_delivered,
                })
            }
            GroupChange::Pending {
                consumer,
                after,
                count,
            } => {
                let Some(meta) = meta else {
                    return Err(no_group(key, group, " in XREADGROUP with GROUP option"));
                };
                let mut entries = Vec::new();
                let mut own = Vec::new();
                if let Some(from) = after.successor() {
                    self.store.walk_pending(key, group, from, |seq, entry| {
                        if entry.consumer == *consumer {
                            own.push((seq, entry));
                        }
                        Ok(own.len() < *count)
                    })?;
                }
                for (seq, mut entry) in own {
                    // Reading a pending entry again is a delivery, as in Redis.
                    entry.delivered_ms = now;
                    entry.deliveries += 1;
                    self.set_pending(key, group, seq, &entry);
                    let record = self.stream_entry(key, seq)?;
                    entries.push(GroupEntry { seq, record });
                }
                self.touch_consumer(key, group, consumer, false)?;
                Ok(Response::GroupEntries {
                    entries,
                    at: self.ts,
                    last_delivered: meta.last_delivered,
                })
            }
            GroupChange::Ack { ids } => {
                if meta.is_none() {
                    return Ok(Response::Count(0));
                }
                let mut distinct = ids.clone();
                distinct.sort_unstable();
                distinct.dedup();
                let mut acked = 0;
                for id in distinct {
                    if self.store.pending_entry(key, group, id)?.is_some() {
                        self.drop_pending(key, group, id);
                        acked += 1;
                    }
                }
                Ok(Response::Count(acked))
            }
            GroupChange::Claim {
                consumer,
                min_idle_ms,
                ids,
                options,
            } => {
                let Some(meta) = meta else {
                    return Err(no_group(key, group, ""));
                };
                let mut entries = Vec::new();
                let mut distinct = ids.clone();
                distinct.dedup();
                for id in distinct {
                    let record = self.stream_entry(key, id)?;
                    let entry = match self.store.pending_entry(key, group, id)? {
                        Some(e) => e,
                        // FORCE adds an entry the stream holds to the list.
                        None if options.force && record.is_some() => PendingEntry {
                            consumer: consumer.clone(),
                            delivered_ms: now,
                            deliveries: 0,
                        },
                        None => continue,
                    };
                    let Some(record) = record else {
                        // Deleted from the stream: Redis 7 drops it from the list.
                        self.drop_pending(key, group, id);
                        continue;
                    };
                    if idle(now, entry.delivered_ms) < *min_idle_ms {
                        continue;
                    }
                    let claimed = claimed(entry, consumer, now, options);
                    self.set_pending(key, group, id, &claimed);
                    entries.push(GroupEntry {
                        seq: id,
                        record: Some(record),
                    });
                }
                self.touch_consumer(key, group, consumer, !entries.is_empty())?;
                if options.just_id {
                    return Ok(Response::Ids(entries.iter().map(|e| e.seq).collect()));
                }
                Ok(Response::GroupEntries {
                    entries,
                    at: self.ts,
                    last_delivered: meta.last_delivered,
                })
            }
            GroupChange::AutoClaim {
                consumer,
                min_idle_ms,
                start,
                count,
                just_id,
            } => {
                if meta.is_none() {
                    return Err(no_group(key, group, ""));
                }
                // Redis looks at no more than ten times COUNT entries per call.
                let attempts = count.saturating_mul(10);
                let mut page = Vec::new();
                self.store.walk_pending(key, group, *start, |seq, entry| {
                    page.push((seq, entry));
                    Ok(page.len() <= attempts)
                })?;
                let mut next = page.get(attempts).map_or(LogSeq::ZERO, |(seq, _)| *seq);
                let options = ClaimOptions {
                    just_id: *just_id,
                    ..ClaimOptions::default()
                };
                let (mut entries, mut deleted) = (Vec::new(), Vec::new());
                for (seq, entry) in page.into_iter().take(attempts) {
                    if entries.len() == *count {
                        next = seq;
                        break;
                    }
                    if idle(now, entry.delivered_ms) < *min_idle_ms {
                        continue;
                    }
                    let Some(record) = self.stream_entry(key, seq)? else {
                        self.drop_pending(key, group, seq);
                        deleted.push(seq);
                        continue;
                    };
                    let claimed = claimed(entry, consumer, now, &options);
                    self.set_pending(key, group, seq, &claimed);
                    entries.push(GroupEntry {
                        seq,
                        record: (!just_id).then_some(record),
                    });
                }
                self.touch_consumer(key, group, consumer, !entries.is_empty())?;
                Ok(Response::AutoClaimed {
                    next,
                    entries,
                    deleted,
                    just_id: *just_id,
                    at: self.ts,
                })
            }
        }
    }

    /// Removes every row of `table` under `prefix`, a page at a time.
    fn remove_under(&mut self, table: Table, prefix: &[u8]) -> Result<(), FirnError> {
        let end = prefix_end(prefix);
        let upper = end.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
        let mut after: Option<Vec<u8>> = None;
        loop {
            let lower = after
                .as_deref()
                .map_or(Bound::Included(prefix), Bound::Excluded);
            let page = self
                .store
                .backend
                .range(table, lower, upper, false, WALK_PAGE)
                .map_err(io_err)?;
            let Some((last, _)) = page.last() else {
                return Ok(());
            };
            after = Some(last.clone());
            let full = page.len() == WALK_PAGE;
            for (k, _) in page {
                self.batch.remove(table, k);
            }
            if !full {
                return Ok(());
            }
        }
    }
}

/// A pending entry after `consumer` claims it now, with XCLAIM's options.
fn claimed(
    entry: PendingEntry,
    consumer: &Bytes,
    now: u64,
    options: &ClaimOptions,
) -> PendingEntry {
    let delivered_ms = match (options.time_ms, options.idle_ms) {
        (Some(t), _) => t,
        (None, Some(idle)) => now.saturating_sub(idle),
        (None, None) => now,
    };
    let deliveries = match options.retry_count {
        Some(n) => n,
        // JUSTID leaves the delivery count as it is.
        None if options.just_id => entry.deliveries,
        None => entry.deliveries + 1,
    };
    PendingEntry {
        consumer: consumer.clone(),
        delivered_ms,
        deliveries,
    }
}

impl VersionedStore {
    fn group(&self, key: &Key, group: &[u8]) -> Result<Option<GroupMeta>, FirnError> {
        self.backend
            .get(Table::Groups, &group_key(key.as_bytes(), group))
            .map_err(io_err)?
            .map(|b| decode(&b))
            .transpose()
    }

    fn consumer(
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

    fn pending_entry(
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
    fn walk_pending(
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
    pub(super) fn group_count(&self, stream: &[u8]) -> Result<u64, FirnError> {
        let mut prefix = Vec::new();
        push_name(&mut prefix, stream);
        let end = prefix_end(&prefix);
        let upper = end.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
        let mut after: Option<Vec<u8>> = None;
        let mut n = 0;
        loop {
            let lower = after
                .as_deref()
                .map_or(Bound::Included(&prefix[..]), Bound::Excluded);
            let page = self
                .backend
                .range(Table::Groups, lower, upper, false, WALK_PAGE)
                .map_err(io_err)?;
            n += page.len() as u64;
            let full = page.len() == WALK_PAGE;
            match page.into_iter().next_back() {
                Some((last, _)) if full => after = Some(last),
                _ => return Ok(n),
            }
        }
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
