//! A persistent MQTT session's state, kept in Firn's own keys (docs/architecture.md, "MQTT",
//! persistent sessions): `_firn/mqtt/session/{C}` holds whose it is, its filters and its
//! expiry; `_firn/mqtt/queue/{C}` is its queue (see `queue.rs`). The hash tag puts both in
//! the shard of the client id's slot.

use bytes::{BufMut, Bytes, BytesMut};
use firn_model::{
    CallContext, ExpireIf, Expiry, FirnError, Key, KvRead, KvWrite, Lifetime, PutRequest, ReadAt,
    ReadConsistency, Request, Response,
};
use serde::{Deserialize, Serialize};

use crate::router::Router;

/// Where the sessions' records live (a prefix of Firn's own keys, `_firn/`).
pub const SESSION_PREFIX: &[u8] = b"_firn/mqtt/session/";
/// Where the sessions' queues live.
pub const QUEUE_PREFIX: &[u8] = b"_firn/mqtt/queue/";
/// The longest a session outlives its last connection: what a 3.1.1 `clean_session` 0
/// session gets, and the most a 5.0 client may ask for (its "never" included) — so a
/// client that never comes back does not keep its queue for ever.
pub const SESSION_EXPIRY_S_MAX: u64 = 7 * 24 * 3_600;
/// The most filters a persistent session keeps (one more is refused with `Quota exceeded`).
pub const SESSION_FILTERS_MAX: usize = 1_000;

/// What a persistent session is, as its record holds it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// The user that made it (`None` on a node without users): another may not take it.
    pub user: Option<String>,
    /// Each filter and its granted QoS.
    pub filters: Vec<(String, u8)>,
    /// How long it outlives a connection, in seconds.
    pub expiry_s: u64,
    /// Made new by a clean start: its QoS 2 PUBLISHes are written under idempotency keys
    /// that name it (see `exactly_once.rs`).
    #[serde(default)]
    pub epoch: u64,
}

impl SessionRecord {
    pub fn decode(bytes: &[u8]) -> Option<SessionRecord> {
        serde_json::from_slice(bytes).ok()
    }

    fn encode(&self) -> Bytes {
        Bytes::from(serde_json::to_vec(self).unwrap_or_default())
    }
}

/// `prefix {client}` as a key: the client id inside a hash tag, so that a session's keys
/// share a slot.
pub(super) fn tagged(prefix: &[u8], client: &str) -> Result<Key, FirnError> {
    let mut key = BytesMut::with_capacity(prefix.len() + client.len() + 2);
    key.put_slice(prefix);
    key.put_u8(b'{');
    key.put_slice(client.as_bytes());
    key.put_u8(b'}');
    Key::new(key.freeze())
}

/// The key of client `client`'s session record.
pub fn session_key(client: &str) -> Result<Key, FirnError> {
    tagged(SESSION_PREFIX, client)
}

/// The stream that is client `client`'s queue.
pub fn queue_key(client: &str) -> Result<Key, FirnError> {
    tagged(QUEUE_PREFIX, client)
}

/// The client id a session record's key names.
pub fn client_of(key: &[u8]) -> Option<String> {
    let inner = key.strip_prefix(SESSION_PREFIX)?;
    let inner = inner.strip_prefix(b"{")?.strip_suffix(b"}")?;
    String::from_utf8(inner.to_vec()).ok()
}

/// Client `client`'s session, if it has one.
pub async fn load(router: &Router, client: &str) -> Result<Option<SessionRecord>, FirnError> {
    let get = KvRead::Get {
        key: session_key(client)?,
        at: ReadAt::Latest,
        consistency: ReadConsistency::Linearizable,
    };
    match run(router, get.into()).await? {
        Response::Value(Some(v)) => Ok(v.value.as_deref().and_then(SessionRecord::decode)),
        _ => Ok(None),
    }
}

/// Writes client `client`'s session, expiring `record.expiry_s` from now, and moves its
/// queue's expiry along.
pub async fn save(router: &Router, client: &str, record: &SessionRecord) -> Result<(), FirnError> {
    let ms = expiry_ms(record.expiry_s);
    let mut put = PutRequest::new(session_key(client)?, record.encode());
    put.life = Lifetime::For { ms };
    run(router, KvWrite::Put(put).into()).await?;
    renew_queue(router, client, ms).await
}

/// Moves the expiry of client `client`'s session and queue to `expiry_s` from now (a
/// connected session's, every half expiry).
pub async fn renew(router: &Router, client: &str, expiry_s: u64) -> Result<(), FirnError> {
    let ms = expiry_ms(expiry_s);
    let expire = KvWrite::Expire {
        key: session_key(client)?,
        to: Expiry::In { ms: ms as i64 },
        only: ExpireIf::Always,
    };
    run(router, expire.into()).await?;
    renew_queue(router, client, ms).await
}

/// The queue has no entries before the first message: a queue that does not exist yet is
/// nothing to renew (its first append makes it; the next renewal gives it an expiry).
async fn renew_queue(router: &Router, client: &str, ms: u64) -> Result<(), FirnError> {
    let expire = KvWrite::Expire {
        key: queue_key(client)?,
        to: Expiry::In { ms: ms as i64 },
        only: ExpireIf::Always,
    };
    run(router, expire.into()).await.map(|_| ())
}

/// Drops client `client`'s session and its queue.
pub async fn drop_session(router: &Router, client: &str) -> Result<(), FirnError> {
    let delete = KvWrite::Delete {
        keys: vec![session_key(client)?, queue_key(client)?],
    };
    run(router, delete.into()).await.map(|_| ())
}

fn expiry_ms(expiry_s: u64) -> u64 {
    expiry_s.clamp(1, SESSION_EXPIRY_S_MAX) * 1_000
}

/// Firn's own request, on no client's behalf (the session keys are under `_firn/`, which
/// no client writes).
async fn run(router: &Router, request: Request) -> Result<Response, FirnError> {
    router
        .execute(&CallContext::default(), request)
        .await
        .map(|a| a.response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_key_names_its_client_and_shares_a_slot_with_its_queue() {
        let key = session_key("sensor-7").unwrap();
        assert_eq!(key.as_bytes(), b"_firn/mqtt/session/{sensor-7}");
        assert_eq!(client_of(key.as_bytes()).as_deref(), Some("sensor-7"));
        assert_eq!(
            queue_key("sensor-7").unwrap().as_bytes(),
            b"_firn/mqtt/queue/{sensor-7}"
        );
        assert_eq!(client_of(b"_firn/mqtt/queue/{x}"), None);
    }

    #[test]
    fn a_record_reads_back_and_garbage_reads_as_none() {
        let record = SessionRecord {
            user: Some("alice".into()),
            filters: vec![("a/+/c".into(), 1)],
            expiry_s: 60,
            epoch: 7,
        };
        assert_eq!(SessionRecord::decode(&record.encode()), Some(record));
        assert_eq!(SessionRecord::decode(b"not json"), None);
    }

    #[test]
    fn an_expiry_is_at_least_a_second_and_at_most_the_bound() {
        assert_eq!(expiry_ms(0), 1_000);
        assert_eq!(expiry_ms(u64::MAX), SESSION_EXPIRY_S_MAX * 1_000);
    }
}
