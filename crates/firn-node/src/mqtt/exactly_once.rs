//! QoS 2 across a persistent session's connections (docs/architecture.md, "MQTT", QoS 2).
//!
//! A client that lost a PUBREC sends its PUBLISH again — on its next connection, when the
//! first one dropped. Within a connection the packet ids received are remembered in memory;
//! across connections the write itself carries an idempotency key, so that the second try
//! applies nothing and answers what the first did. The key names the session (its epoch:
//! a clean start makes a new one), the packet id and how many times that id was released
//! before: each PUBREL adds one to the id's counter, a key of its own in the session's
//! slot, before the PUBCOMP. A message sent again is under the same key; a new message with
//! a released id, under the next.
//!
//! Counters expire [`COUNTER_LIFE_MS`] after their last touch (a counter reads 0 again),
//! and a connection touches a counter before using a number it read more than
//! [`TOUCH_EVERY`] ago: every write under a number is followed by at least
//! `COUNTER_LIFE_MS - TOUCH_EVERY` of its counter's life, longer than the idempotency
//! window; so a number comes round again only after every earlier write under it has left
//! the window (a new message is never taken for an old one), and a PUBLISH sent again within
//! the window finds its first try's number.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use firn_model::limits::{IDEM_PART_BYTES_MAX, IDEM_WINDOW_US};
use firn_model::{
    CallContext, ExpireIf, Expiry, FirnError, IdemKey, Key, KeyChange, KvWrite, Request, Response,
    TxnStep,
};
use tokio::time::Instant;

use crate::router::Router;

/// Where the counters live: `_firn/mqtt/qos2/{client}/{packet id}`.
pub const COUNTER_PREFIX: &[u8] = b"_firn/mqtt/qos2/";
/// How long before a number read is read (and its counter's life moved along) again.
pub const TOUCH_EVERY: Duration = Duration::from_secs(5 * 60);
/// How long a counter lives after its last touch: the idempotency window and twice
/// [`TOUCH_EVERY`].
pub const COUNTER_LIFE_MS: u64 = IDEM_WINDOW_US / 1_000 + 2 * TOUCH_EVERY.as_millis() as u64;

/// A number, and when its counter was last touched.
#[derive(Clone, Copy, Debug)]
struct Number {
    n: u64,
    touched: Instant,
}

/// One connection's view of its persistent session's QoS 2 packet ids.
#[derive(Debug)]
pub struct Qos2Ids {
    client: String,
    producer: Bytes,
    epoch: u64,
    numbers: HashMap<u16, Number>,
}

impl Qos2Ids {
    /// The ids of client `client`'s session of epoch `epoch`.
    pub fn new(client: &str, epoch: u64) -> Qos2Ids {
        Qos2Ids {
            client: client.to_owned(),
            producer: producer_of(client),
            epoch,
            numbers: HashMap::new(),
        }
    }

    /// The idempotency key a QoS 2 PUBLISH with `packet_id` is written under.
    pub async fn key_for(&mut self, router: &Router, packet_id: u16) -> Result<IdemKey, FirnError> {
        let n = match self.numbers.get(&packet_id) {
            Some(number) if number.touched.elapsed() < TOUCH_EVERY => number.n,
            _ => self.count(router, packet_id, 0).await?,
        };
        IdemKey::new(
            self.producer.clone(),
            Bytes::from(format!("{:x}/{packet_id}/{n}", self.epoch)),
        )
    }

    /// `packet_id` is released (PUBREL, or a refused PUBREC that ends its exchange): the next
    /// message with it is a new message.
    pub async fn release(&mut self, router: &Router, packet_id: u16) -> Result<(), FirnError> {
        self.count(router, packet_id, 1).await.map(|_| ())
    }

    /// Adds `by` to `packet_id`'s counter and gives it its whole life again, in one entry:
    /// the number it holds now.
    async fn count(&mut self, router: &Router, packet_id: u16, by: i64) -> Result<u64, FirnError> {
        let touched = Instant::now();
        let key = counter_key(&self.client, packet_id)?;
        let write = KvWrite::Atomic {
            compares: Vec::new(),
            steps: vec![
                TxnStep::Write(KvWrite::Change {
                    key: key.clone(),
                    change: KeyChange::IncrBy(by),
                }),
                TxnStep::Write(KvWrite::Expire {
                    key,
                    to: Expiry::In {
                        ms: COUNTER_LIFE_MS as i64,
                    },
                    only: ExpireIf::Always,
                }),
            ],
            otherwise: None,
        };
        let answer = router
            .execute(&CallContext::default(), Request::from(write))
            .await?;
        let n = number_in(answer.response)?;
        self.numbers.insert(packet_id, Number { n, touched });
        Ok(n)
    }
}

/// The counter's value in the answer to [`Qos2Ids::count`]'s write.
fn number_in(response: Response) -> Result<u64, FirnError> {
    let Response::Steps(Some(mut steps)) = response else {
        return Err(FirnError::Internal(format!(
            "a QoS 2 counter's write answered {response:?}"
        )));
    };
    if steps.is_empty() {
        return Err(FirnError::Internal(
            "a QoS 2 counter's write answered nothing".into(),
        ));
    }
    match steps.swap_remove(0)? {
        Response::Changed {
            value: Some(value), ..
        } => std::str::from_utf8(&value)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| FirnError::Internal("a QoS 2 counter is no number".into())),
        other => Err(FirnError::Internal(format!(
            "a QoS 2 counter's change answered {other:?}"
        ))),
    }
}

/// The key of client `client`'s counter for `packet_id` (the client id in a hash tag: the
/// slot of its session).
pub fn counter_key(client: &str, packet_id: u16) -> Result<Key, FirnError> {
    let tagged = super::session::tagged(COUNTER_PREFIX, client)?;
    Key::new([tagged.as_bytes(), b"/", packet_id.to_string().as_bytes()].concat())
}

/// The producer a session's writes are made as: `mqtt/{client}`, or for a client id too long
/// for that, a hash of it (a producer is at most [`IDEM_PART_BYTES_MAX`] bytes).
fn producer_of(client: &str) -> Bytes {
    let plain = format!("mqtt/{client}");
    if plain.len() <= IDEM_PART_BYTES_MAX {
        return Bytes::from(plain);
    }
    let hash = xxhash_rust::xxh3::xxh3_128(client.as_bytes());
    Bytes::from(format!("mqtt#{hash:032x}"))
}

/// A new session's epoch: random, so that a clean start's messages are never taken for
/// those of the session it replaced.
pub fn new_epoch() -> u64 {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        // No system randomness: the wall clock's microsecond is still a new one.
        return firn_model::hlc::system_wall_us();
    }
    u64::from_le_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counter_shares_its_session_slot_and_names_its_packet_id() {
        let key = counter_key("sensor-7", 513).unwrap();
        assert_eq!(key.as_bytes(), b"_firn/mqtt/qos2/{sensor-7}/513");
    }

    #[test]
    fn a_producer_fits_the_idempotency_limit_whatever_the_client_id() {
        assert_eq!(&producer_of("d1")[..], b"mqtt/d1");
        let long = "x".repeat(1_000);
        let producer = producer_of(&long);
        assert!(producer.len() <= IDEM_PART_BYTES_MAX);
        assert_ne!(producer, producer_of(&"y".repeat(1_000)));
    }

    #[test]
    fn a_counter_outlives_the_window_after_every_number_used() {
        let window_ms = IDEM_WINDOW_US / 1_000;
        assert!(COUNTER_LIFE_MS - TOUCH_EVERY.as_millis() as u64 > window_ms);
    }

    #[test]
    fn the_number_is_read_from_the_change_and_anything_else_is_an_error() {
        let changed = |value: &'static [u8]| {
            Response::Steps(Some(vec![
                Ok(Response::Changed {
                    written: firn_model::Written {
                        key: Key::new(Bytes::from_static(b"k")).unwrap(),
                        version: 1,
                        commit_ts: firn_model::hlc::CommitTs::ZERO,
                        existed: true,
                        previous: None,
                        durability: Default::default(),
                    },
                    value: Some(Bytes::from_static(value)),
                }),
                Ok(Response::ExpirySet(true)),
            ]))
        };
        assert_eq!(number_in(changed(b"41")).unwrap(), 41);
        assert!(number_in(changed(b"x")).is_err());
        assert!(number_in(Response::Steps(None)).is_err());
        assert!(number_in(Response::Steps(Some(vec![Err(FirnError::WrongType)]))).is_err());
    }
}
