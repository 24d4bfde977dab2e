//! One MQTT connection: CONNECT (the protocol level read first, then the codec for it),
//! then PUBLISH written through the core in the order sent and acknowledged once committed,
//! SUBSCRIBE as publish/subscribe patterns narrowed by MQTT's matching (the retained
//! messages sent first), deliveries at the granted QoS, and keep-alive. A persistent
//! session takes its deliveries from its queue instead, and keeps its filters in its record.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use firn_model::{
    Access, FirnError, Key, KeyspaceMode, KvRead, KvWrite, LogSeq, LogWrite, NewRecord, PutRequest,
    ReadAt, ReadConsistency, Request, Response, Scope,
};
use futures::stream::FuturesOrdered;
use futures::{SinkExt, StreamExt};
use rmqtt_codec::version::{ProtocolVersion, VersionCodec};
use rmqtt_codec::{MqttCodec, MqttPacket, v3, v5};
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;
use tokio_util::codec::Framed;

use super::clients::Clients;
use super::queue::{self, QueueReader, Queued};
use super::registry::Registry;
use super::session::{self, SESSION_EXPIRY_S_MAX, SESSION_FILTERS_MAX, SessionRecord};
use super::topic::{channel_glob, check_filter, check_topic, fixed_prefix, matches};
use super::wire::{self, In, Level, Out, Reason, Refused};
use super::{MqttSettings, counted};
use crate::auth::Principal;
use crate::pubsub::{Delivery, Kind, Subscriber};
use crate::router::Router;
use crate::session::{Session, Started};
use crate::tls::ClientStream;

/// How long a client has to send its CONNECT.
const CONNECT_WAIT: Duration = Duration::from_secs(10);
/// Messages sent at QoS 1 and not yet acknowledged, at most, per connection; past it the
/// connection takes no more deliveries until one is acknowledged.
pub const INFLIGHT_MAX: usize = 64;
/// Retained messages a SUBSCRIBE sends at most (the newest of that many topics).
pub const RETAINED_PER_SUBSCRIBE_MAX: usize = 10_000;
/// A persistent session's acknowledged messages are acked in its queue together: at most
/// this many, or what came within this long of the first.
const ACK_BATCH_MAX: usize = 64;
const ACK_BATCH_WAIT: Duration = Duration::from_millis(5);
/// Keys a retained-message scan reads a page.
const RETAINED_PAGE: usize = 1_000;

type Wire = Framed<ClientStream, MqttCodec>;

/// A PUBLISH whose write was started, in the order the client sent it.
type Writing = std::pin::Pin<
    Box<dyn std::future::Future<Output = (wire::Publish, Key, Result<(), FirnError>)> + Send>,
>;

/// What every connection of the listener shares.
pub struct Shared {
    /// Every node's persistent sessions, as this node knows them.
    pub sessions: Arc<Registry>,
    /// This node's connections by client id.
    pub clients: Arc<Clients>,
}

/// Serves one connection until it closes, the client goes silent past its keep-alive, a
/// newer connection takes its client id over, or the node stops.
pub async fn run(
    stream: ClientStream,
    router: Arc<Router>,
    settings: Arc<MqttSettings>,
    shared: Shared,
    mut stop: watch::Receiver<bool>,
) {
    let Shared { sessions, clients } = shared;
    let max = settings.packet_bytes_max;
    let mut wire: Wire = Framed::new(stream, MqttCodec::Version(VersionCodec));
    let level = match tokio::time::timeout(CONNECT_WAIT, wire.next()).await {
        Ok(Some(Ok((MqttPacket::Version(v), _)))) => v,
        _ => return,
    };
    let level = match level {
        ProtocolVersion::MQTT3 => {
            *wire.codec_mut() = MqttCodec::V3(v3::Codec::new(max));
            Level::V3
        }
        ProtocolVersion::MQTT5 => {
            *wire.codec_mut() = MqttCodec::V5(v5::Codec::new(max, max));
            Level::V5
        }
    };
    let connect = match tokio::time::timeout(CONNECT_WAIT, wire.next()).await {
        Ok(Some(Ok((packet, _)))) => match wire::incoming(packet) {
            In::Connect(c) => c,
            _ => return,
        },
        _ => return,
    };
    let mut conn = Connection {
        level,
        wire,
        router: router.clone(),
        settings,
        session: Session::default(),
        subscriber: router.publisher().pubsub().subscriber(),
        filters: BTreeMap::new(),
        next_id: 0,
        inflight: HashMap::new(),
        sessions,
        persistent: None,
        enqueued: None,
        disconnected: false,
        qos2_writing: HashSet::new(),
        qos2_received: HashSet::new(),
        acks: Vec::new(),
        acks_due: None,
    };
    let principal = match conn.sign_in(&connect) {
        Ok(p) => p,
        Err(refused) => {
            counted("refused");
            let _ = conn.refuse_connect(refused).await;
            return;
        }
    };
    conn.session.set_principal(principal);
    // A client that named none gets one (it is told so in 5.0).
    let assigned = connect
        .client_id
        .is_empty()
        .then(|| format!("firn-{:016x}", rand_id()));
    let client = assigned
        .clone()
        .unwrap_or_else(|| connect.client_id.clone());
    // A connection with this client id here is closed first (MQTT's takeover).
    let mut held = clients.hold(&client).await;
    let session_present = match conn.resume(&connect, &client).await {
        Ok(present) => present,
        Err(refused) => {
            counted("refused");
            let _ = conn.refuse_connect(refused).await;
            return;
        }
    };
    let accepted = Out::ConnAck {
        result: Ok(assigned),
        session_present,
        packet_bytes_max: conn.settings.packet_bytes_max,
    };
    if conn.send(accepted).await.is_err() {
        return;
    }
    counted("connected");
    let keep_alive = (connect.keep_alive_s > 0)
        .then(|| Duration::from_millis(u64::from(connect.keep_alive_s) * 1_500));
    if let Err(why) = conn
        .serve(keep_alive, &mut stop, &mut held.taken_over)
        .await
    {
        tracing::debug!("mqtt connection ended: {why}");
    }
    // What the client acknowledged is acked before the session can be taken up again.
    if let Some(p) = &conn.persistent
        && !conn.acks.is_empty()
    {
        let seqs = std::mem::take(&mut conn.acks);
        queue::ack(router.clone(), p.client.clone(), seqs).await;
    }
    // Gone without DISCONNECT (dropped, silent past its keep-alive, a bad packet): its will
    // is published — unless the node is stopping, which is no fault of the client's.
    if let Some(will) = connect.will
        && !conn.disconnected
        && !*stop.borrow()
    {
        conn.publish_will(will).await;
    }
    // A session's expiry counts from its connection's end.
    if let Some(p) = &conn.persistent
        && let Err(e) = session::renew(&router, &p.client, p.record.expiry_s).await
    {
        tracing::debug!(client = p.client, "renewing an MQTT session's expiry: {e}");
    }
}

/// A persistent session, while its client is connected.
struct Persistent {
    client: String,
    record: SessionRecord,
    reader: QueueReader,
    /// When its expiry is next moved along.
    renew_at: Instant,
}

impl Persistent {
    fn renew_every(&self) -> Duration {
        Duration::from_secs((self.record.expiry_s / 2).max(1))
    }
}

struct Connection {
    level: Level,
    wire: Wire,
    router: Arc<Router>,
    settings: Arc<MqttSettings>,
    session: Session,
    subscriber: Subscriber,
    /// Each filter subscribed to: its granted QoS and the channel pattern it listens on.
    filters: BTreeMap<String, (u8, Bytes)>,
    next_id: u16,
    /// Packet ids of deliveries at QoS 1 not yet acknowledged, with the queue entry each
    /// came from (a persistent session's).
    inflight: HashMap<u16, Option<LogSeq>>,
    /// Every node's persistent sessions, as this node knows them.
    sessions: Arc<Registry>,
    /// This connection's session, if it outlives the connection.
    persistent: Option<Persistent>,
    /// Done once the last PUBLISH's message is in the queues it goes to: the next one's
    /// waits for it, so that queues keep the order the client sent.
    enqueued: Option<oneshot::Receiver<()>>,
    /// The client said DISCONNECT: its will is not published.
    disconnected: bool,
    /// QoS 2 PUBLISHes being written, and those written and told so (PUBREC) whose PUBREL
    /// has not come: a PUBLISH sent again with one of these ids is not written again.
    qos2_writing: HashSet<u16>,
    qos2_received: HashSet<u16>,
    /// Queue entries delivered and acknowledged, not yet acked in the queue, and when they
    /// are (the first's time + `ACK_BATCH_WAIT`).
    acks: Vec<LogSeq>,
    acks_due: Option<Instant>,
}

impl Connection {
    /// Who the CONNECT signs in as: on a node with users, the user its name and password
    /// name; without users, anyone.
    fn sign_in(&self, c: &wire::Connect) -> Result<Principal, Refused> {
        if c.client_id.is_empty() && !c.clean {
            // A session to come back to needs a name (3.1.1, 3.1.3-8).
            return Err(Refused::IdentifierRejected);
        }
        let Some(users) = self.router.kernel().users() else {
            return Ok(Principal::Open);
        };
        let Some(name) = &c.username else {
            return Err(Refused::NotAuthorized);
        };
        let password = c.password.clone().unwrap_or_default();
        users
            .login(name.as_bytes(), &password)
            .map(Principal::User)
            .map_err(|_| Refused::BadCredentials)
    }

    async fn refuse_connect(&mut self, refused: Refused) -> Result<(), String> {
        let packet_bytes_max = self.settings.packet_bytes_max;
        self.send(Out::ConnAck {
            result: Err(refused),
            session_present: false,
            packet_bytes_max,
        })
        .await
    }

    /// Takes up `client`'s persistent session (true: it had one) or makes one, if the
    /// CONNECT asks for a session that outlives it; a clean one drops any it had.
    async fn resume(&mut self, c: &wire::Connect, client: &str) -> Result<bool, Refused> {
        let expiry_s = match c.expiry_s {
            // 5.0: the client's interval, "never" (u32::MAX) included, within the bound.
            Some(s) => u64::from(s).min(SESSION_EXPIRY_S_MAX),
            None if !c.clean => SESSION_EXPIRY_S_MAX,
            None => 0,
        };
        let router = self.router.clone();
        if (c.clean || expiry_s == 0) && self.sessions.knows(client) {
            session::drop_session(&router, client)
                .await
                .map_err(|_| Refused::Unavailable)?;
            self.sessions.set(client, None);
        }
        if expiry_s == 0 {
            return Ok(false);
        }
        let user = self.session.principal().user_name().map(str::to_owned);
        let existing = match c.clean {
            true => None,
            false => session::load(&router, client)
                .await
                .map_err(|_| Refused::Unavailable)?,
        };
        if existing.as_ref().is_some_and(|r| r.user != user) {
            // A session is its user's: another signing in with its client id does not get
            // its messages.
            return Err(Refused::NotAuthorized);
        }
        if !self.sessions.has_room(client) {
            return Err(Refused::Unavailable);
        }
        let present = existing.is_some();
        let record = SessionRecord {
            user,
            expiry_s,
            filters: existing.map(|r| r.filters).unwrap_or_default(),
        };
        queue::make(&router, client)
            .await
            .map_err(|_| Refused::Unavailable)?;
        session::save(&router, client, &record)
            .await
            .map_err(|_| Refused::Unavailable)?;
        self.sessions.set(client, Some(&record));
        for (filter, q) in &record.filters {
            self.filters.insert(filter.clone(), (*q, Bytes::new()));
        }
        let reader = QueueReader::start(router, client).map_err(|_| Refused::IdentifierRejected)?;
        let persistent = Persistent {
            client: client.to_owned(),
            record,
            reader,
            renew_at: Instant::now(),
        };
        let first_renewal = Instant::now() + persistent.renew_every();
        self.persistent = Some(Persistent {
            renew_at: first_renewal,
            ..persistent
        });
        counted(if present {
            "session_resumed"
        } else {
            "session_made"
        });
        Ok(present)
    }

    async fn send(&mut self, out: Out) -> Result<(), String> {
        let Some(packet) = wire::outgoing(self.level, out) else {
            return Ok(());
        };
        self.wire.send(packet).await.map_err(|e| e.to_string())
    }

    async fn serve(
        &mut self,
        keep_alive: Option<Duration>,
        stop: &mut watch::Receiver<bool>,
        taken_over: &mut watch::Receiver<bool>,
    ) -> Result<(), String> {
        let mut writes: FuturesOrdered<Writing> = FuturesOrdered::new();
        let mut deadline = keep_alive.map(|k| Instant::now() + k);
        loop {
            let silent = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let may_deliver = self.inflight.len() < INFLIGHT_MAX;
            let renew_at = self.persistent.as_ref().map(|p| p.renew_at);
            let renewal = async {
                match renew_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let acks_due = self.acks_due;
            let acks_flush = async {
                match acks_due {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let queued = async {
                match self.persistent.as_mut() {
                    Some(p) => p.reader.messages.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                packet = self.wire.next() => {
                    let packet = match packet {
                        Some(Ok((packet, _))) => packet,
                        Some(Err(e)) => return Err(format!("malformed packet: {e}")),
                        None => return self.finish(writes).await,
                    };
                    deadline = keep_alive.map(|k| Instant::now() + k);
                    if !self.take(wire::incoming(packet), &mut writes).await? {
                        return self.finish(writes).await;
                    }
                }
                Some((publish, key, written)) = writes.next(), if !writes.is_empty() => {
                    self.written(publish, key, written).await?;
                }
                Some(delivery) = self.subscriber.next(), if may_deliver => {
                    self.deliver(delivery).await?;
                }
                message = queued, if may_deliver => match message {
                    Some(Ok(m)) => self.deliver_queued(m).await?,
                    Some(Err(e)) => return Err(format!("reading the session's queue: {e}")),
                    None => return Err("the session's queue reader ended".into()),
                },
                _ = renewal => self.renew(),
                _ = acks_flush => self.flush_acks(),
                _ = silent => return Err("no packet within 1.5 times the keep-alive".into()),
                _ = stop.changed() => return Ok(()),
                _ = taken_over.changed() => {
                    counted("closed_taken_over");
                    return Err("a newer connection took its client id over".into());
                }
            }
        }
    }

    /// The writes still in flight when the client left (a QoS 0 PUBLISH followed by
    /// DISCONNECT, say): each is still delivered once committed; only the answers to the
    /// client are lost with it.
    async fn finish(&mut self, mut writes: FuturesOrdered<Writing>) -> Result<(), String> {
        while let Some((publish, key, written)) = writes.next().await {
            let _ = self.written(publish, key, written).await;
        }
        Ok(())
    }

    /// Takes one packet from the client; `false`: the connection ends.
    async fn take(
        &mut self,
        packet: In,
        writes: &mut FuturesOrdered<Writing>,
    ) -> Result<bool, String> {
        match packet {
            In::Publish(p) => self.publish(p, writes).await?,
            In::PubAck(id) => {
                if let Some(Some(seq)) = self.inflight.remove(&id) {
                    self.ack_queued(seq);
                }
            }
            In::PubRel(packet_id) => {
                let known = self.qos2_received.remove(&packet_id);
                self.send(Out::PubComp { packet_id, known }).await?;
            }
            In::Subscribe { packet_id, filters } => self.subscribe(packet_id, filters).await?,
            In::Unsubscribe { packet_id, filters } => {
                let count = filters.len();
                for f in filters {
                    self.unsubscribe(&f);
                }
                self.save_filters().await?;
                self.send(Out::UnsubAck { packet_id, count }).await?;
            }
            In::Ping => self.send(Out::PingResp).await?,
            In::Disconnect => {
                self.disconnected = true;
                return Ok(false);
            }
            In::Connect(_) => return Err("a second CONNECT".into()),
            In::Unexpected(what) => {
                self.send(Out::Disconnect(Reason::Unspecified)).await?;
                return Err(what.into());
            }
        }
        Ok(true)
    }

    /// Starts the write a PUBLISH stands for; it is acknowledged (and delivered) once
    /// committed, in the order sent.
    async fn publish(
        &mut self,
        p: wire::Publish,
        writes: &mut FuturesOrdered<Writing>,
    ) -> Result<(), String> {
        if p.qos == 2
            && let Some(packet_id) = p.packet_id
        {
            // Sent again before its PUBREL: written once already (or being written).
            if self.qos2_received.contains(&packet_id) {
                return self
                    .send(Out::PubRec {
                        packet_id,
                        refused: None,
                    })
                    .await;
            }
            if !self.qos2_writing.insert(packet_id) {
                return Ok(());
            }
        }
        let key = match check_topic(&p.topic)
            .map_err(FirnError::BadArgument)
            .and_then(|()| Key::new(Bytes::from(format!("{}{}", self.settings.prefix, p.topic))))
        {
            Ok(key) => key,
            Err(e) => return self.refuse(&p, Reason::TopicInvalid, e).await,
        };
        let request = match self.write_of(&p, &key) {
            Ok(r) => r,
            Err(e) => return self.refuse(&p, reason_of(&e), e).await,
        };
        // A topic's messages, retained or not, are its key's: writing them takes `write`
        // on the key (not on the log they go to).
        if let Err(e) = self.session.authorize(&[Access::write_key(&key)]) {
            return self.refuse(&p, Reason::NotAuthorized, e).await;
        }
        let started: Option<Started> = match request {
            Some(request) => Some(self.session.submit(&self.router, request).await),
            // Only delivered.
            None => None,
        };
        let router = self.router.clone();
        let sessions = self.sessions.clone();
        let (enqueued, done) = oneshot::channel();
        let before = self.enqueued.replace(done);
        writes.push_back(Box::pin(async move {
            let mut written = match started {
                Some(started) => started.answer(&router, false).await.map(|_| ()),
                None => Ok(()),
            };
            // In every persistent session's queue it matches before it is acknowledged,
            // after the message before it.
            if let Some(before) = before {
                let _ = before.await;
            }
            if written.is_ok() {
                let clients = sessions.matching(&p.topic);
                if !clients.is_empty() {
                    written = queue::enqueue(&router, &clients, &p.topic, &p.payload).await;
                }
            }
            let _ = enqueued.send(());
            (p, key, written)
        }));
        counted("publish");
        Ok(())
    }

    /// The write a PUBLISH stands for: a retained message is a version of its key (an
    /// empty one deletes it); any other is a record of the log under its key's tag, unless
    /// the key's keyspace stores nothing (`notify`: `None`, only delivered).
    fn write_of(&self, p: &wire::Publish, key: &Key) -> Result<Option<Request>, FirnError> {
        self.router.kernel().limits().check_value(p.payload.len())?;
        if p.retain {
            return Ok(Some(if p.payload.is_empty() {
                KvWrite::Delete {
                    keys: vec![key.clone()],
                }
                .into()
            } else {
                KvWrite::Put(PutRequest::new(key.clone(), p.payload.clone())).into()
            }));
        }
        let layout = self.router.kernel().layout();
        let mode = layout.keyspaces.as_ref().and_then(|specs| {
            crate::cluster::layout::keyspace_among(specs, key.as_bytes()).map(|s| s.mode)
        });
        if mode == Some(KeyspaceMode::Notify) {
            return Ok(None);
        }
        Ok(Some(
            LogWrite::Append {
                log: self.settings.log.clone(),
                records: vec![NewRecord {
                    tags: vec![key.clone()],
                    payload: p.payload.clone(),
                }],
            }
            .into(),
        ))
    }

    /// A PUBLISH refused before anything was written: 5.0 says why in its PUBACK (a QoS 0
    /// one is dropped); 3.1.1 has no way to, so the connection closes, as it says to.
    async fn refuse(
        &mut self,
        p: &wire::Publish,
        reason: Reason,
        e: FirnError,
    ) -> Result<(), String> {
        counted("publish_refused");
        if p.qos == 2
            && let Some(packet_id) = p.packet_id
        {
            self.qos2_writing.remove(&packet_id);
        }
        match (self.level, p.packet_id) {
            (Level::V5, Some(packet_id)) if p.qos == 2 => {
                self.send(Out::PubRec {
                    packet_id,
                    refused: Some(reason),
                })
                .await
            }
            (Level::V5, Some(packet_id)) => {
                self.send(Out::PubAck {
                    packet_id,
                    refused: Some(reason),
                })
                .await
            }
            (Level::V5, None) => Ok(()),
            (Level::V3, _) => Err(format!("PUBLISH to '{}' refused: {e}", p.topic)),
        }
    }

    /// A PUBLISH whose write is over: committed, it is delivered to every subscriber of its
    /// channel (on every node) and acknowledged; refused, 5.0 says why and 3.1.1 closes the
    /// connection (the client sends it again on its next).
    async fn written(
        &mut self,
        p: wire::Publish,
        key: Key,
        written: Result<(), FirnError>,
    ) -> Result<(), String> {
        if let Err(e) = written {
            return self.refuse(&p, reason_of(&e), e).await;
        }
        let _ = self
            .router
            .publisher()
            .publish(key.bytes().clone(), p.payload.clone())
            .await;
        match p.packet_id {
            Some(packet_id) if p.qos == 2 => {
                self.qos2_writing.remove(&packet_id);
                self.qos2_received.insert(packet_id);
                self.send(Out::PubRec {
                    packet_id,
                    refused: None,
                })
                .await?;
            }
            Some(packet_id) => {
                self.send(Out::PubAck {
                    packet_id,
                    refused: None,
                })
                .await?;
            }
            None => {}
        }
        Ok(())
    }

    async fn subscribe(
        &mut self,
        packet_id: u16,
        filters: Vec<(String, u8)>,
    ) -> Result<(), String> {
        let mut granted = Vec::with_capacity(filters.len());
        let mut retained = Vec::new();
        for (filter, asked) in filters {
            let outcome = self.listen(&filter, asked.min(1));
            if let Ok(q) = outcome {
                retained.push((filter, q));
            }
            granted.push(outcome);
        }
        self.save_filters().await?;
        self.send(Out::SubAck { packet_id, granted }).await?;
        for (filter, q) in retained {
            self.send_retained(&filter, q).await?;
        }
        Ok(())
    }

    /// Subscribes to one filter at QoS `q`.
    fn listen(&mut self, filter: &str, q: u8) -> Result<u8, Reason> {
        check_filter(filter).map_err(|_| Reason::TopicInvalid)?;
        let prefix = &self.settings.prefix;
        // Reading what the filter covers: the keys under its levels before a wildcard (a
        // topic above them that `#` matches too is checked as it comes, see `readable`).
        let before_wildcard = filter.find(['+', '#']).map_or(filter, |at| &filter[..at]);
        let reads = Bytes::from(format!("{prefix}{before_wildcard}"));
        self.session
            .authorize(&[Access::read(Scope::Prefix(reads))])
            .map_err(|_| Reason::NotAuthorized)?;
        if self.persistent.is_some() {
            // Delivered from the session's queue, not from publish/subscribe.
            if !self.filters.contains_key(filter) && self.filters.len() >= SESSION_FILTERS_MAX {
                return Err(Reason::QuotaExceeded);
            }
            self.filters.insert(filter.to_owned(), (q, Bytes::new()));
            return Ok(q);
        }
        let glob = channel_glob(prefix, filter);
        if !self.subscriber.subscribe(Kind::Pattern, glob.clone()) {
            return Err(Reason::QuotaExceeded);
        }
        self.filters.insert(filter.to_owned(), (q, glob));
        Ok(q)
    }

    fn unsubscribe(&mut self, filter: &str) {
        let Some((_, glob)) = self.filters.remove(filter) else {
            return;
        };
        if self.persistent.is_some() {
            return;
        }
        if !self.filters.values().any(|(_, g)| *g == glob) {
            self.subscriber.unsubscribe(Kind::Pattern, &glob);
        }
    }

    /// The retained messages `filter` matches: the newest value of each live key under its
    /// fixed prefix whose topic it matches, a page of keys at a time.
    async fn send_retained(&mut self, filter: &str, q: u8) -> Result<(), String> {
        let prefix = self.settings.prefix.clone();
        let mut sent = 0;
        // `a/#` matches `a` too: the key above the subtree, read on its own.
        let parent = fixed_prefix(filter);
        if filter.ends_with("/#")
            && let Ok(key) = Key::new(Bytes::from(format!("{prefix}{parent}")))
            && self.readable(&key)
        {
            let get = KvRead::Get {
                key,
                at: ReadAt::Latest,
                consistency: ReadConsistency::Linearizable,
            };
            if let Ok(Response::Value(Some(v))) = self
                .session
                .run(&self.router, get.into())
                .await
                .map(|a| a.response)
                && let Some(payload) = v.value
            {
                self.send_publish(parent.to_owned(), payload, q, true)
                    .await?;
                sent += 1;
            }
        }
        let before_wildcard = filter.find(['+', '#']).map_or(filter, |at| &filter[..at]);
        let scan_prefix = Bytes::from(format!("{prefix}{before_wildcard}"));
        let mut cursor = None;
        loop {
            let scan = KvRead::Scan {
                prefix: scan_prefix.clone(),
                cursor,
                limit: RETAINED_PAGE,
                pattern: None,
                at: ReadAt::Latest,
                consistency: ReadConsistency::Linearizable,
            };
            let page = self.session.run(&self.router, scan.into()).await;
            let (keys, next) = match page.map(|a| a.response) {
                Ok(Response::Scan { keys, next_cursor }) => (keys, next_cursor),
                Ok(_) | Err(_) => return Ok(()),
            };
            for (key, version) in keys {
                let (Some(topic), Some(payload)) = (
                    std::str::from_utf8(key.as_bytes())
                        .ok()
                        .and_then(|k| k.strip_prefix(prefix.as_str())),
                    version.value,
                ) else {
                    continue;
                };
                if !matches(filter, topic)
                    || sent >= RETAINED_PER_SUBSCRIBE_MAX
                    || !self.readable(&key)
                {
                    continue;
                }
                let topic = topic.to_owned();
                self.send_publish(topic, payload, q, true).await?;
                sent += 1;
            }
            match next {
                Some(c) if sent < RETAINED_PER_SUBSCRIBE_MAX => cursor = Some(c),
                _ => return Ok(()),
            }
        }
    }

    /// A message on a channel this connection listens on: sent once, at the highest QoS
    /// of the filters that match it, when it came through the first of them.
    async fn deliver(&mut self, d: Delivery) -> Result<(), String> {
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

    /// Publishes the client's last will as the client would have: written (retained or to
    /// the log) with its permission, delivered, and queued for the persistent sessions it
    /// matches. One that cannot be written is dropped (logged).
    async fn publish_will(&mut self, will: wire::Publish) {
        let key = match check_topic(&will.topic)
            .map_err(FirnError::BadArgument)
            .and_then(|()| {
                Key::new(Bytes::from(format!(
                    "{}{}",
                    self.settings.prefix, will.topic
                )))
            }) {
            Ok(key) => key,
            Err(e) => {
                tracing::debug!("an MQTT will to '{}' is not published: {e}", will.topic);
                return;
            }
        };
        let written = match self.write_of(&will, &key) {
            Ok(Some(request)) => self.session.run(&self.router, request).await.map(|_| ()),
            Ok(None) => self.session.authorize(&[Access::write_key(&key)]),
            Err(e) => Err(e),
        };
        if let Err(e) = written {
            tracing::debug!("an MQTT will to '{}' is not published: {e}", will.topic);
            counted("will_refused");
            return;
        }
        let _ = self
            .router
            .publisher()
            .publish(key.bytes().clone(), will.payload.clone())
            .await;
        let clients = self.sessions.matching(&will.topic);
        if !clients.is_empty()
            && let Err(e) = queue::enqueue(&self.router, &clients, &will.topic, &will.payload).await
        {
            tracing::debug!("queueing an MQTT will: {e}");
        }
        counted("will_published");
    }

    /// A persistent session's filters, written to its record (and known here at once)
    /// before the SUBACK or UNSUBACK that tells the client.
    async fn save_filters(&mut self) -> Result<(), String> {
        let Some(p) = self.persistent.as_mut() else {
            return Ok(());
        };
        p.record.filters = self
            .filters
            .iter()
            .map(|(f, (q, _))| (f.clone(), *q))
            .collect();
        session::save(&self.router, &p.client, &p.record)
            .await
            .map_err(|e| format!("writing the session's filters: {e}"))?;
        self.sessions.set(&p.client, Some(&p.record));
        Ok(())
    }

    /// Moves a connected persistent session's expiry along (in the background: a failed
    /// renewal is tried again at the next).
    fn renew(&mut self) {
        let Some(p) = self.persistent.as_mut() else {
            return;
        };
        p.renew_at = Instant::now() + p.renew_every();
        let (router, client, expiry_s) = (self.router.clone(), p.client.clone(), p.record.expiry_s);
        tokio::spawn(async move {
            if let Err(e) = session::renew(&router, &client, expiry_s).await {
                tracing::debug!(client, "renewing an MQTT session's expiry: {e}");
            }
        });
    }

    /// A message of this session's queue: sent at the highest QoS of the filters that match
    /// it now; one no filter matches any more (or this user may no longer read) is
    /// acknowledged without being sent.
    async fn deliver_queued(&mut self, m: Queued) -> Result<(), String> {
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
    fn ack_queued(&mut self, seq: LogSeq) {
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
    fn flush_acks(&mut self) {
        self.acks_due = None;
        let seqs = std::mem::take(&mut self.acks);
        if let (Some(p), false) = (&self.persistent, seqs.is_empty()) {
            tokio::spawn(queue::ack(self.router.clone(), p.client.clone(), seqs));
        }
    }

    /// Whether this connection's user may read `key` (what a message on its channel is).
    fn readable(&self, key: &Key) -> bool {
        self.session.authorize(&[Access::read_key(key)]).is_ok()
    }

    /// Sends a message; the packet id it went with at QoS 1.
    async fn send_publish(
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
        self.send(Out::Publish(wire::Publish {
            topic,
            payload,
            qos: q,
            retain,
            packet_id,
        }))
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

/// A random number for a client id the server assigns.
fn rand_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(firn_model::hlc::system_wall_us());
    h.finish()
}

/// How a refused write shows in a 5.0 PUBACK.
fn reason_of(e: &FirnError) -> Reason {
    match e {
        FirnError::NoPerm { .. } | FirnError::NoAuth => Reason::NotAuthorized,
        FirnError::ValueTooLarge { .. } | FirnError::NoSpace(_) => Reason::QuotaExceeded,
        FirnError::KeyTooLarge { .. } | FirnError::BadArgument(_) => Reason::TopicInvalid,
        _ => Reason::Unspecified,
    }
}
