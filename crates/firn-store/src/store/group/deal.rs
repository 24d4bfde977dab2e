//! XREADGROUP `>` under a group's delivery options (docs/architecture.md, "Delivery
//! policies"): due entries given again or moved to the dead-letter stream, entries dealt to
//! the live consumers (`roundrobin`, `hrw`), and what the asker is handed. Everything is
//! decided from the group's rows with the entry's stamp as the clock, so every replica
//! deals alike; the work of one apply is bounded by the constants below.

use std::collections::BTreeMap;

use bytes::Bytes;
use firn_model::log::{decode_fields, encode_fields};
use firn_model::{
    DeliveryPolicy, FirnError, GroupEntry, GroupKey, Key, LogRecord, LogSeq, MaxDeliver, NewRecord,
    Response, StreamId,
};

use super::{GroupMeta, KeyHolder, PendingEntry, fnv1a, holder_key, read_through, weight};
use crate::backend::Table;
use crate::command::StreamAppend;
use crate::record::encode;
use crate::store::apply::Txn;

/// Pending entries one `>` looks at for due and waiting ones (the oldest first). A
/// `roundrobin` or `hrw` group deals nothing new while it has this many pending, so all of
/// its list is looked at.
pub const PENDING_SCAN_MAX: usize = 1_000;
/// New entries one `>` deals at most: COUNT × live consumers, capped here.
pub const DEAL_MAX: usize = 1_000;
/// Consumers a `roundrobin` or `hrw` deal considers (the first by name).
pub const CONSUMERS_SCAN_MAX: usize = 1_000;

/// The `hrw` key rows one apply reads or changes, written once at its end (a storage batch
/// cannot be read back).
#[derive(Default)]
pub(super) struct Holders {
    rows: BTreeMap<u64, Option<KeyHolder>>,
}

impl Holders {
    fn get(
        &mut self,
        txn: &Txn<'_>,
        key: &Key,
        group: &[u8],
        key_hash: u64,
    ) -> Result<Option<KeyHolder>, FirnError> {
        if let Some(row) = self.rows.get(&key_hash) {
            return Ok(row.clone());
        }
        let row = txn.store.key_holder(key, group, key_hash)?;
        self.rows.insert(key_hash, row.clone());
        Ok(row)
    }

    /// One pending entry of the key is gone (acked, dropped, moved to the dead letters).
    pub(super) fn release(
        &mut self,
        txn: &Txn<'_>,
        key: &Key,
        group: &[u8],
        entry: &PendingEntry,
    ) -> Result<(), FirnError> {
        let Some(h) = entry.key_hash else {
            return Ok(());
        };
        let row = self.get(txn, key, group, h)?.and_then(|mut k| {
            k.held = k.held.saturating_sub(1);
            (k.held > 0).then_some(k)
        });
        self.rows.insert(h, row);
        Ok(())
    }

    pub(super) fn write(self, txn: &mut Txn<'_>, key: &Key, group: &[u8]) {
        for (h, row) in self.rows {
            let k = holder_key(key.as_bytes(), group, h);
            match row {
                Some(row) => txn.batch.put(Table::GroupKeys, k, encode(&row)),
                None => txn.batch.remove(Table::GroupKeys, k),
            }
        }
    }
}

/// Who may be dealt to in this apply: the live consumers, by name (never empty: the asker
/// is one).
struct Dealer {
    live: Vec<Bytes>,
    dealt_last: Option<Bytes>,
}

impl Dealer {
    fn is_live(&self, consumer: &Bytes) -> bool {
        self.live.binary_search(consumer).is_ok()
    }

    /// `roundrobin`: the live consumer after the one dealt to last, by name, wrapping.
    fn next_in_turn(&mut self) -> Bytes {
        let next = self
            .live
            .iter()
            .find(|c| self.dealt_last.as_ref().is_none_or(|last| *c > last))
            .unwrap_or(&self.live[0])
            .clone();
        self.dealt_last = Some(next.clone());
        next
    }

    /// `roundrobin` for an entry given again: the next in turn other than the consumer
    /// that let it fall due, unless it is the only live one.
    fn next_in_turn_but(&mut self, holder: &Bytes) -> Bytes {
        let next = self.next_in_turn();
        if next == *holder && self.live.len() > 1 {
            return self.next_in_turn();
        }
        next
    }

    /// The live consumer with the highest weight for a key (ties, which need a hash
    /// collision, go to the greater name).
    fn by_weight(&self, key_hash: u64) -> Bytes {
        self.live
            .iter()
            .max_by_key(|c| (weight(key_hash, c), (*c).clone()))
            .unwrap_or(&self.live[0])
            .clone()
    }

    /// `hrw`: the key stays with its holder while the holder is live (per-key order); else
    /// it moves to its highest-weight live consumer. `fresh`: a new entry of the key.
    fn hrw(
        &self,
        txn: &Txn<'_>,
        holders: &mut Holders,
        key: &Key,
        group: &[u8],
        key_hash: u64,
        fresh: bool,
    ) -> Result<Bytes, FirnError> {
        let row = holders.get(txn, key, group, key_hash)?;
        let target = match &row {
            Some(k) if self.is_live(&k.consumer) => k.consumer.clone(),
            _ => self.by_weight(key_hash),
        };
        let held = row.map_or(0, |k| k.held) + u64::from(fresh);
        holders.rows.insert(
            key_hash,
            Some(KeyHolder {
                consumer: target.clone(),
                held: held.max(1),
            }),
        );
        Ok(target)
    }
}

/// The hash of an entry's key under `hrw` (`None` under other policies): a field's value or
/// the first tag other than the stream; an entry without one is keyed by its id.
fn entry_key_hash(policy: &DeliveryPolicy, stream: &Key, record: &LogRecord) -> Option<u64> {
    let DeliveryPolicy::Hrw(by) = policy else {
        return None;
    };
    let key: Option<Vec<u8>> = match by {
        GroupKey::Field(name) => decode_fields(&record.payload).ok().and_then(|fields| {
            fields
                .into_iter()
                .find(|(f, _)| f == name)
                .map(|(_, v)| v.to_vec())
        }),
        GroupKey::Tag => record
            .tags
            .iter()
            .find(|t| *t != stream)
            .map(|t| t.as_bytes().to_vec()),
    };
    Some(match key {
        Some(k) => fnv1a(&[b"k", &k]),
        None => fnv1a(&[b"i", &record.seq.to_be_bytes()]),
    })
}

impl Txn<'_> {
    /// XREADGROUP `>`: the asker first gets its due and dealt entries, then new ones are
    /// dealt; answers `GroupEntries` (in id order).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn deliver(
        &mut self,
        key: &Key,
        group: &Bytes,
        mut meta: GroupMeta,
        consumer: &Bytes,
        count: usize,
        noack: bool,
        holders: &mut Holders,
    ) -> Result<Response, FirnError> {
        let k = key.as_bytes();
        let now = self.now_ms();
        let options = meta.options.clone();
        let policy = &options.policy;
        let dealing = *policy != DeliveryPolicy::First;
        let mut live = vec![consumer.clone()];
        if dealing {
            for (name, c) in self.store.consumer_rows(key, group, CONSUMERS_SCAN_MAX)? {
                if now.saturating_sub(c.seen_ms) < options.liveness_ms {
                    live.push(name);
                }
            }
            live.sort();
            live.dedup();
        }
        let mut dealer = Dealer {
            live,
            dealt_last: meta.dealt_last.clone(),
        };
        // What the asker is handed: (id, entry, record when already read).
        let mut handed: Vec<(LogSeq, PendingEntry, Option<LogRecord>)> = Vec::new();
        let mut pending_len = 0;
        if dealing || options.ack_wait_ms.is_some() || meta.has_dealt {
            let mut rows = Vec::new();
            self.store
                .walk_pending(key, group, meta.pending_floor, |seq, entry| {
                    rows.push((seq, entry));
                    Ok(rows.len() < PENDING_SCAN_MAX)
                })?;
            // The new floor: the oldest pending id, or the first id this call may deal (after
            // the last delivered one, which SETID may have moved below the list), whichever
            // is lower. An id below it comes back only by SETID or FORCE, which lower it.
            let next = meta.last_delivered.successor().unwrap_or(LogSeq::MAX);
            meta.pending_floor = rows.first().map_or(next, |(seq, _)| (*seq).min(next));
            pending_len = rows.len();
            for (seq, mut e) in rows {
                let holder_live = !dealing || dealer.is_live(&e.consumer);
                let waited = !e.waiting
                    && e.deliveries > 0
                    && options
                        .ack_wait_ms
                        .is_some_and(|w| now.saturating_sub(e.delivered_ms) >= w);
                if holder_live && !waited {
                    if e.waiting && e.consumer == *consumer && handed.len() < count {
                        handed.push((seq, e, None));
                    }
                    continue;
                }
                if let Some(max) = &options.max_deliver
                    && e.deliveries >= max.deliveries
                {
                    self.dead_letter(key, group, seq, &e, max, holders)?;
                    pending_len -= 1;
                    continue;
                }
                if !dealing {
                    // `first`: the asker takes a due entry while it has room.
                    if handed.len() < count {
                        handed.push((seq, e, None));
                    }
                    continue;
                }
                e.consumer = match (policy, e.key_hash) {
                    (DeliveryPolicy::Hrw(_), Some(h)) => {
                        dealer.hrw(self, holders, key, group, h, false)?
                    }
                    (DeliveryPolicy::Hrw(_), None) => {
                        dealer.by_weight(fnv1a(&[&seq.to_be_bytes()]))
                    }
                    _ => dealer.next_in_turn_but(&e.consumer),
                };
                e.waiting = true;
                e.delivered_ms = now;
                if e.consumer == *consumer && handed.len() < count {
                    handed.push((seq, e, None));
                } else {
                    self.set_pending(key, group, seq, &e);
                }
            }
        }
        if handed.len() < count {
            let room = if dealing {
                count
                    .saturating_mul(dealer.live.len())
                    .min(DEAL_MAX)
                    .min(PENDING_SCAN_MAX.saturating_sub(pending_len))
            } else {
                count - handed.len()
            };
            let records = match meta.last_delivered.successor() {
                Some(from) if room > 0 => {
                    self.store.entries(k, k, from, LogSeq::MAX, false, room)?
                }
                _ => Vec::new(),
            };
            // What the group has read, counted as Redis counts it (see `read_through`).
            let stream = self.tag_meta(k, k)?.unwrap_or_default();
            let first = match records.first() {
                Some(_) => self.store.first_entry(k)?,
                None => None,
            };
            for r in records {
                meta.last_delivered = r.seq;
                meta.entries_read = read_through(&stream, first, meta.entries_read, r.seq);
                let key_hash = entry_key_hash(policy, key, &r);
                let target = match (policy, key_hash) {
                    (DeliveryPolicy::Hrw(_), Some(h)) => {
                        dealer.hrw(self, holders, key, group, h, true)?
                    }
                    (DeliveryPolicy::RoundRobin, _) => dealer.next_in_turn(),
                    _ => consumer.clone(),
                };
                let e = PendingEntry {
                    consumer: target,
                    delivered_ms: now,
                    deliveries: 0,
                    key_hash,
                    waiting: true,
                };
                if e.consumer == *consumer && handed.len() < count {
                    handed.push((r.seq, e, Some(r)));
                } else {
                    self.set_pending(key, group, r.seq, &e);
                }
            }
        }
        let mut entries = Vec::with_capacity(handed.len());
        for (seq, mut e, record) in handed {
            let fresh = record.is_some();
            let record = match record {
                Some(r) => Some(r),
                None => self.stream_entry(key, seq)?,
            };
            let Some(record) = record else {
                // Deleted from the stream since: it leaves the list, as a claim drops it.
                self.drop_pending(key, group, seq);
                holders.release(self, key, group, &e)?;
                continue;
            };
            if fresh && noack {
                holders.release(self, key, group, &e)?;
            } else {
                e.consumer = consumer.clone();
                e.delivered_ms = now;
                e.deliveries += 1;
                e.waiting = false;
                self.set_pending(key, group, seq, &e);
            }
            entries.push(GroupEntry {
                seq,
                record: Some(record),
            });
        }
        meta.dealt_last = dealer.dealt_last;
        meta.has_dealt |= dealing;
        self.set_group(key, group, &meta);
        self.touch_consumer(key, group, consumer, !entries.is_empty())?;
        Ok(Response::GroupEntries {
            entries,
            at: self.ts,
            last_delivered: meta.last_delivered,
        })
    }

    /// MAXDELIVER: the entry leaves the pending list and is appended, in this apply, to the
    /// dead-letter stream with its fields and where it came from.
    fn dead_letter(
        &mut self,
        key: &Key,
        group: &Bytes,
        seq: LogSeq,
        entry: &PendingEntry,
        max: &MaxDeliver,
        holders: &mut Holders,
    ) -> Result<(), FirnError> {
        self.drop_pending(key, group, seq);
        holders.release(self, key, group, entry)?;
        let Some(record) = self.stream_entry(key, seq)? else {
            return Ok(());
        };
        // A record that is not a stream entry (FIRN.LOG APPEND) keeps its payload whole.
        let mut fields = decode_fields(&record.payload)
            .unwrap_or_else(|_| vec![(Bytes::from_static(b"payload"), record.payload.clone())]);
        let from = format!("{} {seq}", String::from_utf8_lossy(key.as_bytes()));
        fields.push((Bytes::from_static(b"firn-from"), Bytes::from(from)));
        fields.push((Bytes::from_static(b"firn-group"), group.clone()));
        fields.push((
            Bytes::from_static(b"firn-deliveries"),
            Bytes::from(entry.deliveries.to_string()),
        ));
        let dead = &max.dead_letter;
        self.log_append(
            dead,
            0,
            &[NewRecord {
                tags: vec![dead.clone()],
                payload: encode_fields(&fields),
            }],
            Some(&StreamAppend {
                id: StreamId::Auto,
                trim: None,
                no_create: false,
            }),
        )?;
        Ok(())
    }
}
