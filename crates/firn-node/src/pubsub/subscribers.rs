//! The node's publish/subscribe registry: which connections listen to which channels and
//! patterns, each through a bounded queue of its own. Delivery is fire-and-forget, as in
//! Redis: nothing is stored, a message reaches the subscribers present when it arrives, and
//! one whose queue is full (in messages or in bytes) loses it (counted in
//! `firn_pubsub_messages_dropped_total`) rather than slow the publisher or grow without
//! bound. It never touches Raft, the disk or the
//! network: fanning a message out to other nodes is the router's (`pubsub/`).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use firn_store::glob::glob_match;
use tokio::sync::mpsc;

/// Messages a subscriber's queue holds before newer ones are dropped for it: a subscriber
/// that reads more slowly than messages arrive loses the excess, as a Redis client past its
/// output buffer limit does (Redis closes it; Firn keeps it and drops).
pub const SUBSCRIBER_QUEUE_MESSAGES_MAX: usize = 1_024;
/// Message bytes a subscriber's queue holds before newer ones are dropped for it, whatever
/// their number: 1,024 messages of the largest value size would be 1 GiB a subscriber.
/// Redis's figure for a pub/sub client's buffer (its soft limit: 8 MiB).
pub const SUBSCRIBER_QUEUE_BYTES_MAX: usize = 8 << 20;
/// Channels and patterns one connection may subscribe to at once (each costs an entry in
/// the registry and a glob match per message for patterns).
pub const SUBSCRIPTIONS_PER_CONNECTION_MAX: usize = 10_000;

/// One message as a subscriber receives it.
#[derive(Clone, Debug, PartialEq)]
pub struct Delivery {
    /// The pattern it matched (`pmessage`), or none for a channel subscription (`message`).
    pub pattern: Option<Bytes>,
    pub channel: Bytes,
    pub message: Bytes,
}

type Senders = HashMap<u64, Queue>;

/// The sending end of one subscriber's queue, with the message bytes in it.
#[derive(Clone)]
struct Queue {
    tx: mpsc::Sender<Delivery>,
    bytes: Arc<AtomicUsize>,
}

impl Queue {
    /// Queues `delivery` unless the queue is full in messages or in bytes.
    fn offer(&self, delivery: Delivery) -> bool {
        let len = delivery.message.len();
        let before = self.bytes.fetch_add(len, Ordering::AcqRel);
        if before + len > SUBSCRIBER_QUEUE_BYTES_MAX && before > 0 {
            self.bytes.fetch_sub(len, Ordering::AcqRel);
            return false;
        }
        if self.tx.try_send(delivery).is_err() {
            self.bytes.fetch_sub(len, Ordering::AcqRel);
            return false;
        }
        true
    }
}

/// Channels and patterns → the queues of the connections subscribed to them.
#[derive(Default)]
pub struct PubSub {
    inner: Mutex<Registry>,
}

#[derive(Default)]
struct Registry {
    channels: HashMap<Bytes, Senders>,
    patterns: HashMap<Bytes, Senders>,
    next_subscriber: u64,
}

impl PubSub {
    /// A new subscriber (one per connection that subscribes): its queue, and the handle
    /// through which it (un)subscribes. Dropping the handle removes its subscriptions.
    pub fn subscriber(self: &Arc<Self>) -> Subscriber {
        let (tx, rx) = mpsc::channel(SUBSCRIBER_QUEUE_MESSAGES_MAX);
        let queue = Queue {
            tx,
            bytes: Arc::default(),
        };
        let id = {
            let mut r = self.inner.lock().expect("pubsub registry lock");
            r.next_subscriber += 1;
            r.next_subscriber
        };
        Subscriber {
            id,
            registry: self.clone(),
            queue,
            rx,
            channels: BTreeSet::new(),
            patterns: BTreeSet::new(),
        }
    }

    /// Hands `message` to this node's subscribers of `channel` and of patterns matching it;
    /// answers how many there were (those whose queue was full included, as Redis counts
    /// receivers, not deliveries).
    pub fn deliver(&self, channel: &Bytes, message: &Bytes) -> usize {
        let r = self.inner.lock().expect("pubsub registry lock");
        let mut receivers = 0;
        let mut send = |queue: &Queue, pattern: Option<&Bytes>| {
            receivers += 1;
            let delivery = Delivery {
                pattern: pattern.cloned(),
                channel: channel.clone(),
                message: message.clone(),
            };
            if !queue.offer(delivery) {
                metrics::counter!("firn_pubsub_messages_dropped_total").increment(1);
            }
        };
        for tx in r.channels.get(channel).into_iter().flat_map(|s| s.values()) {
            send(tx, None);
        }
        for (pattern, subs) in &r.patterns {
            if glob_match(pattern, channel) {
                for tx in subs.values() {
                    send(tx, Some(pattern));
                }
            }
        }
        receivers
    }

    /// Channels with at least one subscriber here, matching `pattern` if given (sorted).
    pub fn channels(&self, pattern: Option<&[u8]>) -> Vec<Bytes> {
        let r = self.inner.lock().expect("pubsub registry lock");
        let mut names: Vec<Bytes> = r
            .channels
            .keys()
            .filter(|c| pattern.is_none_or(|p| glob_match(p, c)))
            .cloned()
            .collect();
        names.sort();
        names
    }

    /// Subscribers here of `channel` (patterns not counted, as in Redis).
    pub fn subscribers(&self, channel: &[u8]) -> usize {
        let r = self.inner.lock().expect("pubsub registry lock");
        r.channels.get(channel).map_or(0, HashMap::len)
    }

    /// Patterns subscribed to here, each counted once however many connections subscribe
    /// to it (Redis's `PUBSUB NUMPAT`).
    pub fn patterns(&self) -> usize {
        let r = self.inner.lock().expect("pubsub registry lock");
        r.patterns.values().filter(|subs| !subs.is_empty()).count()
    }
}

/// Whether a subscription is to a channel or to a pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Channel,
    Pattern,
}

/// One connection's subscriptions and its queue of messages.
pub struct Subscriber {
    id: u64,
    registry: Arc<PubSub>,
    queue: Queue,
    rx: mpsc::Receiver<Delivery>,
    channels: BTreeSet<Bytes>,
    patterns: BTreeSet<Bytes>,
}

impl Subscriber {
    /// Channels and patterns subscribed to (the count Redis's confirmations carry).
    pub fn count(&self) -> usize {
        self.channels.len() + self.patterns.len()
    }

    /// The channels or patterns subscribed to, sorted.
    pub fn names(&self, kind: Kind) -> Vec<Bytes> {
        self.set(kind).iter().cloned().collect()
    }

    fn set(&self, kind: Kind) -> &BTreeSet<Bytes> {
        match kind {
            Kind::Channel => &self.channels,
            Kind::Pattern => &self.patterns,
        }
    }

    /// Subscribes to `name` (again is a no-op); false past
    /// [`SUBSCRIPTIONS_PER_CONNECTION_MAX`].
    pub fn subscribe(&mut self, kind: Kind, name: Bytes) -> bool {
        if self.set(kind).contains(&name) {
            return true;
        }
        if self.count() >= SUBSCRIPTIONS_PER_CONNECTION_MAX {
            return false;
        }
        let mut r = self.registry.inner.lock().expect("pubsub registry lock");
        let table = match kind {
            Kind::Channel => &mut r.channels,
            Kind::Pattern => &mut r.patterns,
        };
        table
            .entry(name.clone())
            .or_default()
            .insert(self.id, self.queue.clone());
        drop(r);
        match kind {
            Kind::Channel => self.channels.insert(name),
            Kind::Pattern => self.patterns.insert(name),
        };
        true
    }

    /// Unsubscribes from `name` (not subscribed is a no-op).
    pub fn unsubscribe(&mut self, kind: Kind, name: &Bytes) {
        let removed = match kind {
            Kind::Channel => self.channels.remove(name),
            Kind::Pattern => self.patterns.remove(name),
        };
        if !removed {
            return;
        }
        let mut r = self.registry.inner.lock().expect("pubsub registry lock");
        let table = match kind {
            Kind::Channel => &mut r.channels,
            Kind::Pattern => &mut r.patterns,
        };
        if let Some(subs) = table.get_mut(name) {
            subs.remove(&self.id);
            if subs.is_empty() {
                table.remove(name);
            }
        }
    }

    /// A message already queued for this connection, without waiting.
    pub fn try_next(&mut self) -> Option<Delivery> {
        self.rx.try_recv().ok().map(|d| self.taken(d))
    }

    /// The next message for this connection (waits; never ends while the handle lives,
    /// since it holds a sender of its own queue).
    pub async fn next(&mut self) -> Option<Delivery> {
        let d = self.rx.recv().await?;
        Some(self.taken(d))
    }

    /// `d`, out of the queue: its bytes no longer count.
    fn taken(&self, d: Delivery) -> Delivery {
        self.queue
            .bytes
            .fetch_sub(d.message.len(), Ordering::AcqRel);
        d
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        for kind in [Kind::Channel, Kind::Pattern] {
            for name in self.names(kind) {
                self.unsubscribe(kind, &name);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[tokio::test]
    async fn a_message_reaches_channel_and_pattern_subscribers_and_counts_both() {
        let ps = Arc::new(PubSub::default());
        let mut a = ps.subscriber();
        let mut p = ps.subscriber();
        assert!(a.subscribe(Kind::Channel, b("news")));
        assert!(p.subscribe(Kind::Pattern, b("n*")));
        assert_eq!(ps.deliver(&b("news"), &b("hi")), 2);
        assert_eq!(a.next().await.unwrap().message, b("hi"));
        assert_eq!(p.next().await.unwrap().pattern, Some(b("n*")));
        assert_eq!(ps.deliver(&b("other"), &b("x")), 0);
        assert_eq!(ps.subscribers(b"news"), 1);
        assert_eq!(ps.patterns(), 1);
    }

    #[tokio::test]
    async fn a_dropped_subscriber_leaves_the_registry() {
        let ps = Arc::new(PubSub::default());
        let mut a = ps.subscriber();
        a.subscribe(Kind::Channel, b("c"));
        a.subscribe(Kind::Pattern, b("*"));
        drop(a);
        assert_eq!(ps.deliver(&b("c"), &b("m")), 0);
        assert!(ps.channels(None).is_empty());
        assert_eq!(ps.patterns(), 0);
    }

    #[tokio::test]
    async fn a_full_queue_drops_newer_messages_and_keeps_the_subscriber() {
        let ps = Arc::new(PubSub::default());
        let mut a = ps.subscriber();
        a.subscribe(Kind::Channel, b("c"));
        for i in 0..SUBSCRIBER_QUEUE_MESSAGES_MAX + 10 {
            assert_eq!(ps.deliver(&b("c"), &b(&i.to_string())), 1);
        }
        assert_eq!(a.next().await.unwrap().message, b("0"));
        assert_eq!(ps.deliver(&b("c"), &b("late")), 1);
    }

    #[tokio::test]
    async fn a_queue_full_in_bytes_drops_newer_messages_until_one_is_taken() {
        let ps = Arc::new(PubSub::default());
        let mut a = ps.subscriber();
        a.subscribe(Kind::Channel, b("c"));
        let big = Bytes::from(vec![b'x'; 1 << 20]);
        let fits = SUBSCRIBER_QUEUE_BYTES_MAX / big.len();
        for _ in 0..fits + 3 {
            assert_eq!(ps.deliver(&b("c"), &big), 1, "still counted as a receiver");
        }
        let mut queued = 0;
        while a.try_next().is_some() {
            queued += 1;
        }
        assert_eq!(queued, fits, "past the byte bound, messages are dropped");
        ps.deliver(&b("c"), &big);
        assert_eq!(a.try_next().unwrap().message.len(), big.len());
    }

    #[tokio::test]
    async fn one_message_larger_than_the_byte_bound_still_reaches_an_empty_queue() {
        let ps = Arc::new(PubSub::default());
        let mut a = ps.subscriber();
        a.subscribe(Kind::Channel, b("c"));
        let huge = Bytes::from(vec![b'x'; SUBSCRIBER_QUEUE_BYTES_MAX + 1]);
        ps.deliver(&b("c"), &huge);
        ps.deliver(&b("c"), &b("small"));
        assert_eq!(a.try_next().unwrap().message.len(), huge.len());
        assert!(a.try_next().is_none(), "nothing fits beside it");
    }
}
