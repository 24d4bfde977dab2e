//! One MQTT connection: CONNECT (the protocol level read first, then the codec for it),
//! then PUBLISH written through the core in the order sent and acknowledged once committed,
//! SUBSCRIBE as publish/subscribe patterns narrowed by MQTT's matching (the retained
//! messages sent first), deliveries at the granted QoS, and keep-alive. A persistent
//! session takes its deliveries from its queue instead, and keeps its filters in its record.

mod connect;
mod deliver;
mod publish;
mod subscribe;
mod will;

pub use subscribe::RETAINED_PER_SUBSCRIBE_MAX;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use firn_model::LogSeq;
use futures::stream::FuturesOrdered;
use futures::{SinkExt, StreamExt};
use rmqtt_codec::version::{ProtocolVersion, VersionCodec};
use rmqtt_codec::{MqttCodec, MqttPacket, v3, v5};
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;
use tokio_util::codec::Framed;

use super::alias::{AliasInvalid, SentAliases, TopicAliases};
use super::clients::Clients;
use super::exactly_once::Qos2Ids;
use super::frame::{Frame, FrameCodec};
use super::queue::{self, QueueReader};
use super::registry::Registry;
use super::session::SessionRecord;
use super::takeover::take_over_elsewhere;
use super::wills::{DelayedWills, Reconnect};
use super::wire::{self, Closing, In, Level, Out};
use super::{MqttSettings, counted};
use crate::pubsub::Subscriber;
use crate::router::Router;
use crate::session::Session;
use crate::tls::ClientStream;
use publish::Writing;

/// How long a client has to send its CONNECT.
const CONNECT_WAIT: Duration = Duration::from_secs(10);
/// How long a connection taken over may take to send its DISCONNECT before it closes.
const DISCONNECT_SEND_WAIT: Duration = Duration::from_secs(1);
/// Messages sent at QoS 1 and not yet acknowledged, at most, per connection; past it the
/// connection takes no more deliveries until one is acknowledged.
pub const INFLIGHT_MAX: usize = 64;

type Wire = Framed<ClientStream, FrameCodec>;

/// What every connection of the listener shares.
pub struct Shared {
    /// Every node's persistent sessions, as this node knows them.
    pub sessions: Arc<Registry>,
    /// This node's connections by client id.
    pub clients: Arc<Clients>,
    /// The wills this node holds for their delay.
    pub wills: Arc<DelayedWills>,
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
    let Shared {
        sessions,
        clients,
        wills,
    } = shared;
    let max = settings.packet_bytes_max;
    let codec = FrameCodec {
        mqtt: MqttCodec::Version(VersionCodec),
    };
    let mut wire: Wire = Framed::new(stream, codec);
    let level = match tokio::time::timeout(CONNECT_WAIT, wire.next()).await {
        Ok(Some(Ok(Frame::Packet(MqttPacket::Version(v))))) => v,
        _ => return,
    };
    let level = match level {
        ProtocolVersion::MQTT3 => {
            wire.codec_mut().mqtt = MqttCodec::V3(v3::Codec::new(max));
            Level::V3
        }
        ProtocolVersion::MQTT5 => {
            wire.codec_mut().mqtt = MqttCodec::V5(v5::Codec::new(max, max));
            Level::V5
        }
    };
    let connect = match tokio::time::timeout(CONNECT_WAIT, wire.next()).await {
        Ok(Some(Ok(Frame::Packet(packet)))) => match wire::incoming(packet) {
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
        aliases: TopicAliases::default(),
        sent_aliases: SentAliases::new(connect.topic_alias_max),
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
    // A client id whose session is another user's is refused before anything of that
    // client's is touched: its connections, its will, its session.
    if let Err(refused) = conn.check_owner(&client).await {
        counted("refused");
        let _ = conn.refuse_connect(refused).await;
        return;
    }
    // A connection with this client id is closed first (MQTT's takeover), here and on
    // every other node, all at once (at most `REMOTE_TAKEOVER_WAIT`). An id this node just
    // made up is nowhere else.
    let elsewhere = async {
        if assigned.is_none() {
            take_over_elsewhere(&router, &client, connect.clean).await;
        }
    };
    let (mut held, ()) = tokio::join!(clients.hold(&client), elsewhere);
    let session_present = match conn.resume(&connect, &client).await {
        Ok(present) => present,
        Err(refused) => {
            counted("refused");
            let _ = conn.refuse_connect(refused).await;
            return;
        }
    };
    // Back before its will's delay has passed: the will is not published, or — a clean
    // start ending the session — published now.
    let reconnect = match connect.clean {
        true => Reconnect::Clean,
        false => Reconnect::Resumed,
    };
    wills.reconnected(&client, reconnect);
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
    // Gone without DISCONNECT (dropped, silent past its keep-alive, a bad packet) or with
    // 5.0's "with Will Message": its will is published, after its delay — unless the node
    // is stopping, which is no fault of the client's.
    if let Some(will) = connect.will
        && !conn.disconnected
        && !*stop.borrow()
    {
        conn.leave_will(will, &client, connect.will_delay_s, &wills, stop.clone())
            .await;
    }
    conn.session_ended().await;
}

/// A persistent session, while its client is connected.
struct Persistent {
    client: String,
    record: SessionRecord,
    reader: QueueReader,
    /// When its expiry is next moved along.
    renew_at: Instant,
    /// Its QoS 2 packet ids, written once across its connections.
    qos2: Qos2Ids,
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
    /// The client said DISCONNECT (not 5.0's "with Will Message"): its will is not
    /// published.
    disconnected: bool,
    /// QoS 2 PUBLISHes being written, and those written and told so (PUBREC) whose PUBREL
    /// has not come: a PUBLISH sent again with one of these ids is not written again.
    qos2_writing: HashSet<u16>,
    qos2_received: HashSet<u16>,
    /// The Topic Aliases the client set on this connection (5.0).
    aliases: TopicAliases,
    /// The Topic Aliases this server set for its deliveries on this connection (5.0).
    sent_aliases: SentAliases,
    /// Queue entries delivered and acknowledged, not yet acked in the queue, and when they
    /// are (the first's time + `ACK_BATCH_WAIT`).
    acks: Vec<LogSeq>,
    acks_due: Option<Instant>,
}

impl Connection {
    pub(super) async fn send(&mut self, out: Out) -> Result<(), String> {
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
                        Some(Ok(Frame::Packet(packet))) => packet,
                        Some(Ok(Frame::AliasZero)) => {
                            return self.alias_invalid(AliasInvalid::OutOfRange(0)).await;
                        }
                        Some(Err(e)) => return Err(format!("malformed packet: {e}")),
                        None => return self.finish(writes).await,
                    };
                    deadline = keep_alive.map(|k| Instant::now() + k);
                    if !self.take(wire::incoming(packet), &mut writes).await? {
                        return self.finish(writes).await;
                    }
                }
                Some(outcome) = writes.next(), if !writes.is_empty() => {
                    self.written(outcome).await?;
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
                    // Told in 5.0 (bounded: a client that reads nothing does not hold the
                    // new connection up).
                    let closing = self.send(Out::Disconnect(Closing::SessionTakenOver));
                    let _ = tokio::time::timeout(DISCONNECT_SEND_WAIT, closing).await;
                    return Err("a newer connection took its client id over".into());
                }
            }
        }
    }

    /// Takes one packet from the client; `false`: the connection ends.
    async fn take(
        &mut self,
        packet: In,
        writes: &mut FuturesOrdered<Writing>,
    ) -> Result<bool, String> {
        match packet {
            In::Publish {
                publish,
                topic_alias,
            } => self.publish(publish, topic_alias, writes).await?,
            In::PubAck(id) => {
                if let Some(Some(seq)) = self.inflight.remove(&id) {
                    self.ack_queued(seq);
                }
            }
            In::PubRel(packet_id) => {
                let mut known = self.qos2_received.remove(&packet_id);
                // A persistent session's id may have been received on an earlier
                // connection: its counter moves on whatever this one saw.
                if let Some(p) = self.persistent.as_mut() {
                    p.qos2
                        .release(&self.router, packet_id)
                        .await
                        .map_err(|e| format!("releasing QoS 2 packet id {packet_id}: {e}"))?;
                    known = true;
                }
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
            In::Disconnect {
                with_will,
                expiry_s,
            } => {
                self.session_expires(expiry_s).await?;
                self.disconnected = !with_will;
                return Ok(false);
            }
            In::Connect(_) => return Err("a second CONNECT".into()),
            In::Unexpected(what) => {
                self.send(Out::Disconnect(Closing::ProtocolError)).await?;
                return Err(what.into());
            }
        }
        Ok(true)
    }
}

/// A random number for a client id the server assigns.
fn rand_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(firn_model::hlc::system_wall_us());
    h.finish()
}
