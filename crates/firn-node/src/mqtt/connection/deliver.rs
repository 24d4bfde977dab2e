//! Deliveries to the client: messages of the channels it listens on, or of its persistent
//! session's queue, at the QoS its filters were granted; QoS 1 ones held until PUBACK.

use std::time::Duration;

use bytes::Bytes;
use firn_model::{Access, Key, LogSeq};
use tokio::time::Instant;

use super::Connection;
use crate::mqtt::counted;
use crate::mqtt::queue::{self, Queued};
use crate::mqtt::topic::matches;
use crate::mqtt::wire::{self, Out};
use crate::pubsub::Delivery;

/// A persistent session's acknowledged messages are acked in its queue together: at most
/// this many, or what came within this long of the first.
const ACK_BATCH_MAX: usize = 64;
const ACK_BATCH_WAIT: Duration = Duration::from_millis(5);

impl Connection {
    /// A message on a channel this connection listens on: sent once, at the highest QoS
    /// of the filters that match it, when it came through the first of them.
    pub(super) async fn deliver(&mut self, d: Delivery) -> Result<(), String> {
        let Some(topic) = std::str::from_utf8(&d.channel)
            .ok()
            .and_then(|c| c.strip_prefix(self.settings.prefix.as_str()))
            .map(str::to_owned)
        else {
            return Ok(());
        };
        let matching: Vec<&(u8, Bytes)> = self
            .filters
            .iter()
            .filter(|(f, _)| matches(f, &topic))
            .map(|(_, v)| v)
            .collect();
        let Some(first) = matching.first() else {
            return Ok(());
        };
        if d.pattern.as_ref() != Some(&first.1) {
            return Ok(());
        }
        match Key::new(d.channel.clone()) {
            Ok(key) if self.readable(&key) => {}
            _ => return Ok(()),
        }
        let q = matching.iter().map(|(q, _)| *q).max().unwrap_or(0);
        self.send_publish(topic, d.message, q, false)
            .await
            .map(|_| ())
    }

    /// A message of this session's queue: sent at the highest QoS of the filters that match
    /// it now; one no filter matches any more (or this user may no longer read) is
    /// acknowledged without being sent.
    pub(super) async fn deliver_queued(&mut self, m: Queued) -> Result<(), String> {
        let q = self
            .filters
            .iter()
            .filter(|(f, _)| !m.topic.is_empty() && matches(f, &m.topic))
            .map(|(_, (q, _))| *q)
            .max();
        let readable = Key::new(Bytes::from(format!("{}{}", self.settings.prefix, m.topic)))
            .is_ok_and(|key| self.readable(&key));
        match q {
            Some(q) if readable => {
                let id = self.send_publish(m.topic, m.payload, q, false).await?;
                match id {
                    Some(id) => {
                        self.inflight.insert(id, Some(m.seq));
                    }
                    None => self.ack_queued(m.seq),
                }
            }
            _ => self.ack_queued(m.seq),
        }
        Ok(())
    }

    /// Notes entry `seq` of this session's queue as done: acked (and deleted) with the
    /// others of the next few milliseconds, in one ack and one delete.
    pub(super) fn ack_queued(&mut self, seq: LogSeq) {
        if self.persistent.is_none() {
            return;
        }
        if self.acks.is_empty() {
            self.acks_due = Some(Instant::now() + ACK_BATCH_WAIT);
        }
        self.acks.push(seq);
        if self.acks.len() >= ACK_BATCH_MAX {
            self.flush_acks();
        }
    }

    /// Acks (and deletes) the entries noted done, in the background.
    pub(super) fn flush_acks(&mut self) {
        self.acks_due = None;
        let seqs = std::mem::take(&mut self.acks);
        if let (Some(p), false) = (&self.persistent, seqs.is_empty()) {
            tokio::spawn(queue::ack(self.router.clone(), p.client.clone(), seqs));
        }
    }

    /// Whether this connection's user may read `key` (what a message on its channel is).
    pub(super) fn readable(&self, key: &Key) -> bool {
        self.session.authorize(&[Access::read_key(key)]).is_ok()
    }

    /// Sends a message; the packet id it went with at QoS 1.
    pub(super) async fn send_publish(
        &mut self,
        topic: String,
        payload: Bytes,
        q: u8,
        retain: bool,
    ) -> Result<Option<u16>, String> {
        let packet_id = (q > 0).then(|| self.next_packet_id());
        if let Some(id) = packet_id {
            self.inflight.insert(id, None);
        }
        counted("delivered");
        let (topic, topic_alias) = self.sent_aliases.name(topic);
        let publish = wire::Publish {
            topic,
            payload,
            qos: q,
            retain,
            packet_id,
        };
        self.send(Out::Publish {
            publish,
            topic_alias,
        })
        .await?;
        Ok(packet_id)
    }

    fn next_packet_id(&mut self) -> u16 {
        loop {
            self.next_id = self.next_id.wrapping_add(1).max(1);
            if !self.inflight.contains_key(&self.next_id) {
                return self.next_id;
            }
        }
    }
}
