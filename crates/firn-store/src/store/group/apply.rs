//! What apply does with a group entry: one [`GroupChange`] to one stream's group.

use bytes::Bytes;
use firn_model::{
    ClaimOptions, FirnError, GroupChange, GroupEntry, Key, LogRecord, LogSeq, Response,
};

use super::deal::Holders;
use super::{
    GroupMeta, PendingEntry, claimed, consumer_key, group_key, idle, key_required,
    no_consumer_group, no_group, pending_key, start_at,
};
use crate::backend::Table;
use crate::record::encode;
use crate::store::apply::Txn;
use crate::store::log::TagMeta;

impl Txn<'_> {
    pub(super) fn now_ms(&self) -> u64 {
        self.ts.wall_us / 1_000
    }

    pub(super) fn set_group(&mut self, key: &Key, group: &[u8], meta: &GroupMeta) {
        self.batch.put(
            Table::Groups,
            group_key(key.as_bytes(), group),
            encode(meta),
        );
    }

    pub(super) fn set_pending(
        &mut self,
        key: &Key,
        group: &[u8],
        seq: LogSeq,
        entry: &PendingEntry,
    ) {
        self.batch.put(
            Table::GroupPending,
            pending_key(key.as_bytes(), group, seq),
            encode(entry),
        );
    }

    pub(super) fn drop_pending(&mut self, key: &Key, group: &[u8], seq: LogSeq) {
        self.batch
            .remove(Table::GroupPending, pending_key(key.as_bytes(), group, seq));
    }

    /// Notes that `consumer` tried to read or claim now (made if new), and whether it got
    /// anything.
    pub(super) fn touch_consumer(
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
    pub(super) fn stream_entry(
        &self,
        key: &Key,
        seq: LogSeq,
    ) -> Result<Option<LogRecord>, FirnError> {
        let k = key.as_bytes();
        Ok(self.store.entries(k, k, seq, seq, false, 1)?.pop())
    }

    pub(in crate::store) fn group_change(
        &mut self,
        key: &Key,
        group: &Bytes,
        change: &GroupChange,
    ) -> Result<Response, FirnError> {
        let mut holders = Holders::default();
        let response = self.change_group(key, group, change, &mut holders)?;
        holders.write(self, key, group);
        Ok(response)
    }

    fn change_group(
        &mut self,
        key: &Key,
        group: &Bytes,
        change: &GroupChange,
        holders: &mut Holders,
    ) -> Result<Response, FirnError> {
        let k = key.as_bytes();
        let stream = self.tag_meta(k, k)?;
        let meta = self.store.group(key, group)?;
        let now = self.now_ms();
        match change {
            GroupChange::Create {
                start,
                mkstream,
                options,
            } => {
                options.check(key)?;
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
                let meta = GroupMeta {
                    options: options.clone(),
                    ..GroupMeta::default()
                };
                let meta = start_at(*start, &stream, meta);
                self.set_group(key, group, &meta);
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
            GroupChange::Configure { options } => {
                let Some(mut meta) = meta else {
                    return Err(no_consumer_group(key, group));
                };
                options.check(key)?;
                meta.options = options.clone();
                self.set_group(key, group, &meta);
                Ok(Response::Done)
            }
            GroupChange::Destroy => {
                if meta.is_none() {
                    return Ok(Response::Count(0));
                }
                self.batch.remove(Table::Groups, group_key(k, group));
                let store = self.store;
                for table in [Table::GroupPending, Table::GroupConsumers, Table::GroupKeys] {
                    store.walk_prefix(table, &group_key(k, group), |row, _| {
                        self.batch.remove(table, row);
                        Ok(())
                    })?;
                }
                Ok(Response::Count(1))
            }
            GroupChange::SetId { start } => {
                let Some(meta) = meta else {
                    return Err(no_consumer_group(key, group));
                };
                let stream = stream.unwrap_or_default();
                self.set_group(key, group, &start_at(*start, &stream, meta));
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
                let floor = meta.as_ref().map_or(LogSeq::ZERO, |m| m.pending_floor);
                let mut gone = Vec::new();
                self.store.walk_pending(key, group, floor, |seq, entry| {
                    if entry.consumer == *consumer {
                        gone.push((seq, entry));
                    }
                    Ok(true)
                })?;
                let had = gone.len() as u64;
                for (seq, entry) in gone {
                    self.drop_pending(key, group, seq);
                    holders.release(self, key, group, &entry)?;
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
                let Some(meta) = meta else {
                    return Err(no_group(key, group, " in XREADGROUP with GROUP option"));
                };
                self.deliver(key, group, meta, consumer, *count, *noack, holders)
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
                    self.store.walk_pending(
                        key,
                        group,
                        from.max(meta.pending_floor),
                        |seq, entry| {
                            if entry.consumer == *consumer {
                                own.push((seq, entry));
                            }
                            Ok(own.len() < *count)
                        },
                    )?;
                }
                for (seq, mut entry) in own {
                    // Reading a pending entry again is a delivery, as in Redis.
                    entry.delivered_ms = now;
                    entry.deliveries += 1;
                    entry.waiting = false;
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
                    if let Some(entry) = self.store.pending_entry(key, group, id)? {
                        self.drop_pending(key, group, id);
                        holders.release(self, key, group, &entry)?;
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
                let Some(mut meta) = meta else {
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
                            key_hash: None,
                            waiting: false,
                        },
                        None => continue,
                    };
                    let Some(record) = record else {
                        // Deleted from the stream: Redis 7 drops it from the list.
                        self.drop_pending(key, group, id);
                        holders.release(self, key, group, &entry)?;
                        continue;
                    };
                    if idle(now, entry.delivered_ms) < *min_idle_ms {
                        continue;
                    }
                    let claimed = claimed(entry, consumer, now, options);
                    self.set_pending(key, group, id, &claimed);
                    if id < meta.pending_floor {
                        // FORCE put an entry below the list's floor.
                        meta.pending_floor = id;
                        self.set_group(key, group, &meta);
                    }
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
                let Some(meta) = &meta else {
                    return Err(no_group(key, group, ""));
                };
                // Redis looks at no more than ten times COUNT entries per call.
                let attempts = count.saturating_mul(10);
                let mut page = Vec::new();
                let from = (*start).max(meta.pending_floor);
                self.store.walk_pending(key, group, from, |seq, entry| {
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
                        holders.release(self, key, group, &entry)?;
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
}
