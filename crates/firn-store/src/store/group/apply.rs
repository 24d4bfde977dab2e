//! What apply does with a group entry: one [`GroupChange`] to one stream's group.

use bytes::Bytes;
use firn_model::{
    FirnError, GroupChange, GroupEntry, GroupOptions, GroupStart, Key, LogRecord, LogSeq, Response,
};

use super::deal::Holders;
use super::{
    GroupMeta, PendingEntry, consumer_key, group_key, key_required, no_consumer_group, no_group,
    pending_key, start_at,
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

    /// Takes `seq` off the group's pending list, and off its holder's count.
    pub(super) fn forget_pending(
        &mut self,
        key: &Key,
        group: &Bytes,
        seq: LogSeq,
        entry: &PendingEntry,
        holders: &mut Holders,
    ) -> Result<(), FirnError> {
        self.drop_pending(key, group, seq);
        holders.release(self, key, group, entry)
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

    /// CREATE makes the group; every other change needs the stream and the group to exist,
    /// and is answered as Redis does when either is missing.
    fn change_group(
        &mut self,
        key: &Key,
        group: &Bytes,
        change: &GroupChange,
        holders: &mut Holders,
    ) -> Result<Response, FirnError> {
        let k = key.as_bytes();
        self.stream_key(key)?;
        let stream = self.tag_meta(k, k)?;
        let meta = self.store.group(key, group)?;
        if let GroupChange::Create {
            start,
            mkstream,
            options,
            entries_read,
        } = change
        {
            let exists = meta.is_some();
            let start = (*start, *entries_read);
            return self.create_group(key, group, stream, exists, start, *mkstream, options);
        }
        match (stream, meta) {
            (Some(stream), Some(meta)) => {
                self.change_existing_group(key, group, &stream, meta, change, holders)
            }
            (stream, _) => missing_group(key, group, change, stream.is_some()),
        }
    }

    /// One change other than CREATE, to a group that exists on a stream that exists.
    fn change_existing_group(
        &mut self,
        key: &Key,
        group: &Bytes,
        stream: &TagMeta,
        meta: GroupMeta,
        change: &GroupChange,
        holders: &mut Holders,
    ) -> Result<Response, FirnError> {
        match change {
            // `change_group` answers CREATE before it comes here; were it to, the group
            // exists: BUSYGROUP, as CREATE answers then.
            GroupChange::Create {
                start,
                mkstream,
                options,
                entries_read,
            } => self.create_group(
                key,
                group,
                Some(stream.clone()),
                true,
                (*start, *entries_read),
                *mkstream,
                options,
            ),
            GroupChange::Configure { options } => self.configure_group(key, group, meta, options),
            GroupChange::Destroy => self.destroy_group(key, group),
            GroupChange::SetId {
                start,
                entries_read,
            } => self.set_group_id(key, group, meta, (*start, *entries_read), stream),
            GroupChange::CreateConsumer { consumer } => self.create_consumer(key, group, consumer),
            GroupChange::DelConsumer { consumer } => {
                self.delete_consumer(key, group, &meta, consumer, holders)
            }
            GroupChange::Deliver {
                consumer,
                count,
                noack,
            } => self.deliver(key, group, meta, consumer, *count, *noack, holders),
            GroupChange::Pending {
                consumer,
                after,
                count,
            } => self.read_own_pending(key, group, &meta, consumer, *after, *count),
            GroupChange::Ack { ids } => self.ack(key, group, ids, holders),
            GroupChange::Claim {
                consumer,
                min_idle_ms,
                ids,
                options,
            } => self.claim(
                key,
                group,
                meta,
                consumer,
                *min_idle_ms,
                ids,
                options,
                holders,
            ),
            GroupChange::AutoClaim {
                consumer,
                min_idle_ms,
                start,
                count,
                just_id,
            } => self.autoclaim(
                key,
                group,
                &meta,
                consumer,
                *min_idle_ms,
                *start,
                *count,
                *just_id,
                holders,
            ),
        }
    }

    /// XGROUP CREATE, with MKSTREAM making an empty stream when there is none.
    #[allow(clippy::too_many_arguments)]
    fn create_group(
        &mut self,
        key: &Key,
        group: &Bytes,
        stream: Option<TagMeta>,
        exists: bool,
        start: (GroupStart, Option<u64>),
        mkstream: bool,
        options: &GroupOptions,
    ) -> Result<Response, FirnError> {
        options.check(key)?;
        let stream = match stream {
            Some(s) => s,
            None if mkstream => self.make_stream(key)?,
            None => return Err(key_required()),
        };
        if exists {
            return Err(FirnError::BusyGroup);
        }
        let meta = GroupMeta {
            options: options.clone(),
            ..GroupMeta::default()
        };
        let meta = start_at(start, &stream, meta);
        self.set_group(key, group, &meta);
        Ok(Response::Done)
    }

    /// XGROUP CONFIGURE (Firn's): the group's delivery options replaced.
    fn configure_group(
        &mut self,
        key: &Key,
        group: &Bytes,
        mut meta: GroupMeta,
        options: &GroupOptions,
    ) -> Result<Response, FirnError> {
        options.check(key)?;
        meta.options = options.clone();
        self.set_group(key, group, &meta);
        Ok(Response::Done)
    }

    /// XGROUP DESTROY: the group's meta and every row under it (pending list, consumers,
    /// key holders).
    fn destroy_group(&mut self, key: &Key, group: &Bytes) -> Result<Response, FirnError> {
        let k = key.as_bytes();
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

    /// XGROUP SETID: the id the group has delivered up to.
    fn set_group_id(
        &mut self,
        key: &Key,
        group: &Bytes,
        meta: GroupMeta,
        start: (GroupStart, Option<u64>),
        stream: &TagMeta,
    ) -> Result<Response, FirnError> {
        self.set_group(key, group, &start_at(start, stream, meta));
        Ok(Response::Done)
    }

    /// XGROUP CREATECONSUMER: 1 if the consumer is new, 0 if it was there.
    fn create_consumer(
        &mut self,
        key: &Key,
        group: &Bytes,
        consumer: &Bytes,
    ) -> Result<Response, FirnError> {
        if self.store.consumer(key, group, consumer)?.is_some() {
            return Ok(Response::Count(0));
        }
        self.touch_consumer(key, group, consumer, false)?;
        Ok(Response::Count(1))
    }

    /// XGROUP DELCONSUMER: the consumer and its pending entries go; answers how many it had.
    fn delete_consumer(
        &mut self,
        key: &Key,
        group: &Bytes,
        meta: &GroupMeta,
        consumer: &Bytes,
        holders: &mut Holders,
    ) -> Result<Response, FirnError> {
        if self.store.consumer(key, group, consumer)?.is_none() {
            return Ok(Response::Count(0));
        }
        let mut gone = Vec::new();
        self.store
            .walk_pending(key, group, meta.pending_floor, |seq, entry| {
                if entry.consumer == *consumer {
                    gone.push((seq, entry));
                }
                Ok(true)
            })?;
        let had = gone.len() as u64;
        for (seq, entry) in gone {
            self.forget_pending(key, group, seq, &entry, holders)?;
        }
        self.batch.remove(
            Table::GroupConsumers,
            consumer_key(key.as_bytes(), group, consumer),
        );
        Ok(Response::Count(had))
    }

    /// XREADGROUP with an id: up to `count` of the consumer's own pending entries after
    /// `after`, each delivered again.
    fn read_own_pending(
        &mut self,
        key: &Key,
        group: &Bytes,
        meta: &GroupMeta,
        consumer: &Bytes,
        after: LogSeq,
        count: usize,
    ) -> Result<Response, FirnError> {
        let now = self.now_ms();
        let mut entries = Vec::new();
        let mut own = Vec::new();
        if let Some(from) = after.successor() {
            self.store
                .walk_pending(key, group, from.max(meta.pending_floor), |seq, entry| {
                    if entry.consumer == *consumer {
                        own.push((seq, entry));
                    }
                    Ok(own.len() < count)
                })?;
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

    /// XACK: each distinct id taken off the pending list; answers how many were on it.
    fn ack(
        &mut self,
        key: &Key,
        group: &Bytes,
        ids: &[LogSeq],
        holders: &mut Holders,
    ) -> Result<Response, FirnError> {
        let mut distinct = ids.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        let mut acked = 0;
        for id in distinct {
            if let Some(entry) = self.store.pending_entry(key, group, id)? {
                self.forget_pending(key, group, id, &entry, holders)?;
                acked += 1;
            }
        }
        Ok(Response::Count(acked))
    }
}

/// The answer to `change` when the stream (`stream_exists` false) or its group is missing.
fn missing_group(
    key: &Key,
    group: &Bytes,
    change: &GroupChange,
    stream_exists: bool,
) -> Result<Response, FirnError> {
    match change {
        GroupChange::Deliver { .. } | GroupChange::Pending { .. } => {
            Err(no_group(key, group, " in XREADGROUP with GROUP option"))
        }
        GroupChange::Ack { .. } => Ok(Response::Count(0)),
        GroupChange::Claim { .. } | GroupChange::AutoClaim { .. } => Err(no_group(key, group, "")),
        _ if !stream_exists => Err(key_required()),
        GroupChange::Destroy => Ok(Response::Count(0)),
        GroupChange::Create { .. }
        | GroupChange::Configure { .. }
        | GroupChange::SetId { .. }
        | GroupChange::CreateConsumer { .. }
        | GroupChange::DelConsumer { .. } => Err(no_consumer_group(key, group)),
    }
}
