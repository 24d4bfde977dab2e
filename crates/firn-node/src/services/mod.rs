//! Request/response: the one implementation both front ends call (see
//! docs/architecture.md, "Request/response"). A service S is the stream `firn.svc:{S}` with
//! the consumer group `workers`. [`Services::request`] opens a reply slot here, appends the
//! request and waits; [`Services::serve`] makes the group if it is missing and reads one
//! request through the XREADGROUP path, acking and deleting those whose deadline passed;
//! [`Services::reply`] acks and deletes the request's entry and hands the reply to the
//! requester's node — this one's slots, or one `ServiceReply` peer call, never retried.

mod slots;

pub use slots::{ReplySlot, ReplySlots, WAITING_REQUESTS_MAX};

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::{BufMut, Bytes, BytesMut};
use firn_model::log::{decode_fields, encode_fields};
use firn_model::{
    CallContext, DeliveryPolicy, FirnError, GroupChange, GroupEntry, GroupKey, GroupOptions,
    GroupStart, GroupWrite, Key, LogRequest, LogSeq, LogWrite, Response, StreamId,
};
use firn_raft::NodeId;

use crate::exec::Kernel;
use crate::log::Log;
use crate::rpc::ServiceReply;

/// Longest service name, in bytes (a group or consumer name's bound).
pub const SERVICE_NAME_BYTES_MAX: usize = 1_024;
/// A request's timeout when it names none.
pub const REQUEST_TIMEOUT_MS_DEFAULT: u64 = 5_000;
/// The longest a request may wait for its reply: one hour.
pub const REQUEST_TIMEOUT_MS_MAX: u64 = 3_600_000;
/// How long a worker may hold a request unacked before it is given to another, unless the
/// first `FIRN.SERVE` of the service says otherwise.
pub const ACK_WAIT_MS_DEFAULT: u64 = 5_000;
/// The consumer group of a service's workers.
pub const SERVICE_GROUP: &str = "workers";
/// How long a worker's node waits for the requester's node to take a reply: a healthy peer
/// answers in milliseconds, and a requester whose node is down waits for nobody.
pub const REPLY_PEER_TIMEOUT: Duration = Duration::from_secs(1);

/// The fields of a request entry.
const FIELD_PAYLOAD: &[u8] = b"payload";
const FIELD_KEY: &[u8] = b"key";
const FIELD_REPLY: &[u8] = b"reply";
const FIELD_DEADLINE: &[u8] = b"deadline";

/// How a service's group deals requests to its workers (`FIRN.SERVE … POLICY`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ServicePolicy {
    /// The first free worker to ask takes the request (Redis's `first`): no deal to a
    /// worker that is busy, so the lowest latency.
    #[default]
    First,
    /// Requests dealt to the live workers in turn, busy or not.
    RoundRobin,
    /// A request's `KEY` picks its worker (highest random weight); keyless ones by id.
    Hrw,
}

/// What a worker asks for in `FIRN.SERVE`.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// The group's policy and ACKWAIT, if this call makes the group (a later call's are
    /// ignored: the first worker sets them).
    pub policy: ServicePolicy,
    pub ack_wait_ms: u64,
    /// How long to wait for a request; 0 waits without end (as XREADGROUP's BLOCK 0).
    pub block_ms: u64,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            policy: ServicePolicy::First,
            ack_wait_ms: ACK_WAIT_MS_DEFAULT,
            block_ms: 0,
        }
    }
}

/// A request as a worker gets it: the opaque id it replies to, the payload and the key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServedRequest {
    pub id: Bytes,
    pub payload: Bytes,
    pub key: Option<Bytes>,
}

/// A request id: the entry, the requester's node and slot, and the service. Written
/// `<entry id>/<node>/<token>/<service>` — the service last, since it may hold any byte.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestId {
    pub entry: LogSeq,
    pub node: NodeId,
    pub token: u64,
    pub service: Bytes,
}

impl RequestId {
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(64 + self.service.len());
        out.put_slice(format!("{}/{}/{}/", self.entry, self.node, self.token).as_bytes());
        out.put_slice(&self.service);
        out.freeze()
    }

    pub fn parse(id: &[u8]) -> Result<RequestId, FirnError> {
        let bad = || {
            FirnError::BadArgument(
                "not a request id (FIRN.SERVE answers one: <entry>/<node>/<token>/<service>)"
                    .into(),
            )
        };
        let mut parts = id.splitn(4, |&b| b == b'/');
        let mut number = || {
            parts
                .next()
                .and_then(|p| std::str::from_utf8(p).ok())
                .map(str::to_owned)
                .ok_or_else(bad)
        };
        let entry: LogSeq = number()?.parse().map_err(|_| bad())?;
        let node: NodeId = number()?.parse().map_err(|_| bad())?;
        let token: u64 = number()?.parse().map_err(|_| bad())?;
        let service = parts.next().ok_or_else(bad)?;
        check_service(service)?;
        Ok(RequestId {
            entry,
            node,
            token,
            service: Bytes::copy_from_slice(service),
        })
    }
}

fn check_service(service: &[u8]) -> Result<(), FirnError> {
    if service.is_empty() || service.len() > SERVICE_NAME_BYTES_MAX {
        return Err(FirnError::BadArgument(format!(
            "service name is {} bytes; it must be 1 to {SERVICE_NAME_BYTES_MAX}",
            service.len()
        )));
    }
    Ok(())
}

/// The stream of service `service`: `firn.svc:{S}`, in the shard of S's slot.
pub fn service_stream(service: &[u8]) -> Result<Key, FirnError> {
    check_service(service)?;
    let mut key = BytesMut::with_capacity(service.len() + 11);
    key.put_slice(b"firn.svc:{");
    key.put_slice(service);
    key.put_slice(b"}");
    Key::new(key.freeze())
}

/// A request timeout as a front end takes it: the default, or 1 ms to one hour.
pub fn check_timeout_ms(timeout_ms: Option<u64>) -> Result<u64, FirnError> {
    match timeout_ms {
        None => Ok(REQUEST_TIMEOUT_MS_DEFAULT),
        Some(ms) if (1..=REQUEST_TIMEOUT_MS_MAX).contains(&ms) => Ok(ms),
        Some(ms) => Err(FirnError::BadArgument(format!(
            "TIMEOUT is {ms} ms; it must be 1 to {REQUEST_TIMEOUT_MS_MAX}"
        ))),
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn group_name() -> Bytes {
    Bytes::from_static(SERVICE_GROUP.as_bytes())
}

/// Request/response services: a service's requests are a stream's entries, its workers a
/// consumer group, its replies handed back through reply slots.
pub struct Services {
    kernel: Arc<Kernel>,
    /// The services' streams.
    log: Arc<Log>,
    /// Requests waiting here for a service's reply.
    slots: ReplySlots,
}

impl Services {
    pub fn new(kernel: Arc<Kernel>, log: Arc<Log>) -> Self {
        Services {
            kernel,
            log,
            slots: ReplySlots::default(),
        }
    }

    /// This node's reply slots.
    pub fn reply_slots(&self) -> &ReplySlots {
        &self.slots
    }

    /// Sends `payload` to service `service` and waits up to `timeout_ms` for a worker's
    /// reply (`NoReply` then). `key` is what an `hrw` service deals by.
    pub async fn request(
        &self,
        ctx: &CallContext,
        service: Bytes,
        payload: Bytes,
        key: Option<Bytes>,
        timeout_ms: u64,
    ) -> Result<Bytes, FirnError> {
        metrics::counter!("firn_requests_total", "op" => "service_request").increment(1);
        let stream = service_stream(&service)?;
        let timeout_ms = check_timeout_ms(Some(timeout_ms))?;
        self.kernel.limits().check_value(payload.len())?;
        if let Some(k) = &key {
            self.kernel.limits().check_value(k.len())?;
        }
        let slot = self.slots.open(service.clone())?;
        let deadline_ms = now_ms() + timeout_ms;
        let mut fields = vec![(Bytes::from_static(FIELD_PAYLOAD), payload)];
        if let Some(k) = key {
            fields.push((Bytes::from_static(FIELD_KEY), k));
        }
        fields.push((
            Bytes::from_static(FIELD_REPLY),
            Bytes::from(format!("{}/{}", self.kernel.node_id(), slot.token)),
        ));
        fields.push((
            Bytes::from_static(FIELD_DEADLINE),
            Bytes::from(deadline_ms.to_string()),
        ));
        let add = LogWrite::StreamAdd {
            key: stream,
            id: StreamId::Auto,
            payload: encode_fields(&fields),
            trim: None,
            no_create: false,
        };
        let waited = tokio::time::timeout(Duration::from_millis(timeout_ms), async move {
            self.log.submit(ctx, LogRequest::Write(add)).await.await?;
            let mut slot = slot;
            (&mut slot.reply)
                .await
                .map_err(|_| FirnError::Internal("a reply slot closed unanswered".into()))
        })
        .await;
        waited.unwrap_or_else(|_| {
            Err(FirnError::NoReply {
                service: String::from_utf8_lossy(&service).into_owned(),
                within_ms: timeout_ms,
            })
        })
    }

    /// Gives worker `consumer` one request of `service`, waiting up to `block_ms` (0: without
    /// end); `None` when none came. Makes the group if it is missing, starting at the
    /// stream's beginning so requests sent before the first worker are served. Requests
    /// whose deadline passed, and entries that are no requests, are acked and deleted.
    pub async fn serve(
        &self,
        ctx: &CallContext,
        service: Bytes,
        consumer: Bytes,
        options: ServeOptions,
    ) -> Result<Option<ServedRequest>, FirnError> {
        metrics::counter!("firn_requests_total", "op" => "service_serve").increment(1);
        let stream = service_stream(&service)?;
        let until = (options.block_ms > 0)
            .then(|| Instant::now() + Duration::from_millis(options.block_ms));
        let mut made = false;
        loop {
            // BLOCK 0 waits without end; past a finite deadline one last look waits not at all.
            let block_ms = match until {
                None => Some(0),
                Some(t) => match t.saturating_duration_since(Instant::now()).as_millis() as u64 {
                    0 => None,
                    ms => Some(ms),
                },
            };
            let read = GroupWrite::ReadGroup {
                group: group_name(),
                consumer: consumer.clone(),
                streams: vec![(stream.clone(), None)],
                count: 1,
                noack: false,
                block_ms,
            };
            let answer = match self.kernel.execute(ctx, read.into()).await {
                // Made once per call: a group destroyed again at once is the caller's to see.
                Err(FirnError::NoGroup(_)) if !made => {
                    self.create_service_group(ctx, &stream, &options).await?;
                    made = true;
                    continue;
                }
                answer => answer?,
            };
            let Response::GroupStreams { streams, .. } = answer.response else {
                return Err(FirnError::Internal(
                    "a group read answered no entries".into(),
                ));
            };
            let Some(entry) = streams.into_iter().flat_map(|(_, e)| e).next() else {
                if block_ms.is_none() || until.is_some_and(|t| Instant::now() >= t) {
                    return Ok(None);
                }
                continue;
            };
            let seq = entry.seq;
            match served(&service, entry, now_ms()) {
                Some(request) => return Ok(Some(request)),
                None => self.finish_request(ctx, &stream, seq).await?,
            }
        }
    }

    /// Completes request `id` with `payload`: acks and deletes its entry and hands the
    /// reply to the requester's node. True if a requester took it; false if none waits
    /// (it gave up, or another worker replied first): the reply is dropped.
    pub async fn reply(
        &self,
        ctx: &CallContext,
        id: &[u8],
        payload: Bytes,
    ) -> Result<bool, FirnError> {
        metrics::counter!("firn_requests_total", "op" => "service_reply").increment(1);
        let id = RequestId::parse(id)?;
        self.kernel.limits().check_value(payload.len())?;
        let stream = service_stream(&id.service)?;
        // The entry is done with whatever becomes of the reply; both at once, as the
        // requester should not wait on the ack's commit.
        let (finished, delivered) = futures::future::join(
            self.finish_request(ctx, &stream, id.entry),
            self.deliver_reply(id.node, id.token, id.service.clone(), payload),
        )
        .await;
        match (finished, delivered) {
            (Err(e), false) => Err(e),
            (Err(e), true) => {
                // Delivered, but left pending: redelivered after ACKWAIT, its reply dropped.
                tracing::warn!("a reply was delivered but its request not acked: {e}");
                Ok(true)
            }
            (Ok(()), delivered) => Ok(delivered),
        }
    }

    async fn deliver_reply(
        &self,
        node: NodeId,
        token: u64,
        service: Bytes,
        payload: Bytes,
    ) -> bool {
        if node == self.kernel.node_id() {
            return self.slots.complete(token, &service, payload);
        }
        let reply = ServiceReply {
            token,
            payload,
            service,
        };
        self.kernel
            .peers()
            .call_within(node, reply, REPLY_PEER_TIMEOUT)
            .await
            .unwrap_or_else(|e| {
                tracing::debug!(node, "a reply could not reach its requester's node: {e}");
                false
            })
    }

    /// Acks and deletes a request's entry (XACK, then XDEL; both are idempotent).
    async fn finish_request(
        &self,
        ctx: &CallContext,
        stream: &Key,
        seq: LogSeq,
    ) -> Result<(), FirnError> {
        let ack = GroupWrite::Change {
            key: stream.clone(),
            group: group_name(),
            change: GroupChange::Ack { ids: vec![seq] },
        };
        let del = LogWrite::StreamDel {
            key: stream.clone(),
            ids: vec![seq],
        };
        let (acked, deleted) = futures::future::join(
            self.kernel.execute(ctx, ack.into()),
            self.kernel.execute(ctx, del.into()),
        )
        .await;
        acked.and(deleted).map(|_| ())
    }

    async fn create_service_group(
        &self,
        ctx: &CallContext,
        stream: &Key,
        options: &ServeOptions,
    ) -> Result<(), FirnError> {
        let policy = match options.policy {
            ServicePolicy::First => DeliveryPolicy::First,
            ServicePolicy::RoundRobin => DeliveryPolicy::RoundRobin,
            ServicePolicy::Hrw => {
                DeliveryPolicy::Hrw(GroupKey::Field(Bytes::from_static(FIELD_KEY)))
            }
        };
        let create = GroupWrite::Change {
            key: stream.clone(),
            group: group_name(),
            change: GroupChange::Create {
                entries_read: None,
                start: GroupStart::Id(LogSeq::ZERO),
                mkstream: true,
                options: GroupOptions {
                    policy,
                    ack_wait_ms: Some(options.ack_wait_ms),
                    ..GroupOptions::default()
                },
            },
        };
        match self.kernel.execute(ctx, create.into()).await {
            Ok(_) | Err(FirnError::BusyGroup) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// The request an entry holds, unless its deadline passed before `now_ms` or it is no
/// request (deleted, or appended to the stream by something other than FIRN.REQUEST).
fn served(service: &Bytes, entry: GroupEntry, now_ms: u64) -> Option<ServedRequest> {
    let record = entry.record?;
    let fields = decode_fields(&record.payload).ok()?;
    let field = |name: &[u8]| {
        fields
            .iter()
            .find(|(f, _)| f == name)
            .map(|(_, v)| v.clone())
    };
    let text = |v: Bytes| String::from_utf8(v.to_vec()).ok();
    let deadline: u64 = text(field(FIELD_DEADLINE)?)?.parse().ok()?;
    if deadline <= now_ms {
        return None;
    }
    let reply = text(field(FIELD_REPLY)?)?;
    let (node, token) = reply.split_once('/')?;
    let id = RequestId {
        entry: entry.seq,
        node: node.parse().ok()?,
        token: token.parse().ok()?,
        service: service.clone(),
    };
    Some(ServedRequest {
        id: id.encode(),
        payload: field(FIELD_PAYLOAD)?,
        key: field(FIELD_KEY),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_id_reads_back_with_any_service_bytes() {
        let id = RequestId {
            entry: "1700000000000-3".parse().unwrap(),
            node: 2,
            token: 99,
            service: Bytes::from_static(b"a/b c"),
        };
        assert_eq!(RequestId::parse(&id.encode()).unwrap(), id);
    }

    #[test]
    fn malformed_request_ids_are_refused() {
        for bad in [&b""[..], b"1-0/2/3", b"x/2/3/s", b"1-0/x/3/s", b"1-0/2/3/"] {
            assert!(RequestId::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn timeouts_are_bounded() {
        assert_eq!(check_timeout_ms(None).unwrap(), REQUEST_TIMEOUT_MS_DEFAULT);
        assert!(check_timeout_ms(Some(0)).is_err());
        assert!(check_timeout_ms(Some(REQUEST_TIMEOUT_MS_MAX + 1)).is_err());
        assert!(service_stream(&[b'x'; SERVICE_NAME_BYTES_MAX + 1]).is_err());
    }
}
