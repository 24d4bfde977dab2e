//! What apply does with XCLAIM and XAUTOCLAIM: pending entries idle long enough handed to
//! another consumer, and entries the stream no longer holds dropped from the list.

use bytes::Bytes;
use firn_model::{ClaimOptions, FirnError, GroupEntry, Key, LogSeq, Response};

use super::deal::Holders;
use super::{GroupMeta, PendingEntry, claimed, idle};
use crate::store::apply::Txn;

impl Txn<'_> {
    /// XCLAIM: each listed id idle for `min_idle_ms` now `consumer`'s.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn claim(
        &mut self,
        key: &Key,
        group: &Bytes,
        mut meta: GroupMeta,
        consumer: &Bytes,
        min_idle_ms: u64,
        ids: &[LogSeq],
        options: &ClaimOptions,
        holders: &mut Holders,
    ) -> Result<Response, FirnError> {
        let now = self.now_ms();
        let mut entries = Vec::new();
        let mut distinct = ids.to_vec();
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
                self.forget_pending(key, group, id, &entry, holders)?;
                continue;
            };
            if idle(now, entry.delivered_ms) < min_idle_ms {
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

    /// XAUTOCLAIM: up to `count` entries from `start` on, idle for `min_idle_ms`, now
    /// `consumer`'s; answers where the next call starts and the ids the stream had lost.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn autoclaim(
        &mut self,
        key: &Key,
        group: &Bytes,
        meta: &GroupMeta,
        consumer: &Bytes,
        min_idle_ms: u64,
        start: LogSeq,
        count: usize,
        just_id: bool,
        holders: &mut Holders,
    ) -> Result<Response, FirnError> {
        let now = self.now_ms();
        // Redis looks at no more than ten times COUNT entries per call.
        let attempts = count.saturating_mul(10);
        let mut page = Vec::new();
        let from = start.max(meta.pending_floor);
        self.store.walk_pending(key, group, from, |seq, entry| {
            page.push((seq, entry));
            Ok(page.len() <= attempts)
        })?;
        let options = ClaimOptions {
            just_id,
            ..ClaimOptions::default()
        };
        // As Redis: a deleted entry leaves the pending list and counts toward COUNT, an
        // entry not idle long enough only toward the attempts; the cursor is the pending
        // entry after the last one looked at (0-0: none).
        let (mut entries, mut deleted) = (Vec::new(), Vec::new());
        let (mut left, mut next) = (count, LogSeq::ZERO);
        for (tried, (seq, entry)) in page.into_iter().enumerate() {
            if left == 0 || tried == attempts {
                next = seq;
                break;
            }
            let Some(record) = self.stream_entry(key, seq)? else {
                self.forget_pending(key, group, seq, &entry, holders)?;
                deleted.push(seq);
                left -= 1;
                continue;
            };
            if idle(now, entry.delivered_ms) < min_idle_ms {
                continue;
            }
            let claimed = claimed(entry, consumer, now, &options);
            self.set_pending(key, group, seq, &claimed);
            entries.push(GroupEntry {
                seq,
                record: (!just_id).then_some(record),
            });
            left -= 1;
        }
        self.touch_consumer(key, group, consumer, !entries.is_empty())?;
        Ok(Response::AutoClaimed {
            next,
            entries,
            deleted,
            just_id,
            at: self.ts,
        })
    }
}
