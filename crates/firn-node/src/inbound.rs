//! Calls from other nodes, answered here. The peer transport hands each call to the
//! [`Inbox`] at once: the inbox exists before the node's router does, and calls that arrive
//! before it is published wait for it (no part is bound late into another that calls it).
//! Each call is answered in the transport's own task, with no further hand-off. How many
//! calls a node handles at once is bounded once, by the transport
//! (`firn_raft::peer::PEER_APP_CONCURRENCY_MAX` handled and `PEER_APP_WAITING_MAX` waiting;
//! past that a caller hears `busy`, which it takes as TRYAGAIN).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use firn_model::FirnError;
use firn_raft::peer::AppHandler;
use tokio::sync::watch;

use crate::blob::{BlobChunk, BlobDiscard, BlobRead, BlobSeal};
use crate::cluster::follow::OriginCounts;
use crate::cluster::meta::MetaClient;
use crate::cluster::view::Describe;
use crate::cursors::ScanCursor;
use crate::disk::DiskNotice;
use crate::log::index::ForgetLog;
use crate::mqtt::{ClientsHere, MqttTakeOver};
use crate::router::Router;
use crate::rpc::{
    Call, Execute, ListKeyspaces, MetaChange, Publish, ReadIndex, Recovering, Rpc, ServiceReply,
    SetReplicas, TransferLeader, WatchPoll, decode_tag,
};

/// Where the peer transport leaves calls for this node.
pub struct Inbox(watch::Receiver<Option<Arc<Answerer>>>);

/// Publishes the answering side once it exists ([`Opening::open`]).
pub struct Opening(watch::Sender<Option<Arc<Answerer>>>);

pub fn inbox() -> (Arc<Inbox>, Opening) {
    let (tx, rx) = watch::channel(None);
    (Arc::new(Inbox(rx)), Opening(tx))
}

impl Opening {
    /// From now on, calls are answered by `router`, `meta` and `mqtt`.
    pub fn open(self, router: Arc<Router>, meta: Arc<MetaClient>, mqtt: Arc<ClientsHere>) {
        self.0
            .send_replace(Some(Arc::new(Answerer { router, meta, mqtt })));
    }
}

impl AppHandler for Inbox {
    fn handle(&self, payload: Vec<u8>) -> Pin<Box<dyn Future<Output = Vec<u8>> + Send>> {
        let mut ready = self.0.clone();
        Box::pin(async move {
            let (call, body) = match decode_tag(&payload) {
                Ok(c) => c,
                Err(e) => return undecodable(&e),
            };
            let answerer = match ready.wait_for(Option::is_some).await {
                Ok(a) => a.clone(),
                Err(_) => None, // the node stopped before it started
            };
            match answerer {
                Some(a) => a.answer(call, body).await,
                None => Vec::new(),
            }
        })
    }
}

/// The answer to a call that cannot be read. Every reply that can fail is a `Result`,
/// whose `Err` encodes alike.
fn undecodable(why: &str) -> Vec<u8> {
    let e: Result<(), FirnError> = Err(FirnError::Internal(format!(
        "undecodable peer request: {why}"
    )));
    postcard::to_stdvec(&e).unwrap_or_default()
}

pub struct Answerer {
    router: Arc<Router>,
    meta: Arc<MetaClient>,
    /// This node's MQTT clients (none connected without `--mqtt-addr`).
    mqtt: Arc<ClientsHere>,
}

/// The reply to a call of type `R`, encoded: the compiler checks each arm answers with the
/// reply type its call names.
fn reply<R: Rpc>(reply: R::Reply) -> Vec<u8> {
    postcard::to_stdvec(&reply).unwrap_or_default()
}

/// Decodes the body of a call of type `$ty` and answers it with `$answer`, in which `$c`
/// is the call: the compiler checks that the answer is the reply type the call names.
macro_rules! serve {
    ($body:expr, $ty:ty, |$c:pat_param| $answer:expr) => {
        match postcard::from_bytes::<$ty>($body) {
            Ok($c) => reply::<$ty>($answer),
            Err(e) => undecodable(&e.to_string()),
        }
    };
}

impl Answerer {
    /// The one place where every call meets what answers it.
    async fn answer(&self, call: Call, body: &[u8]) -> Vec<u8> {
        let router = &self.router;
        match call {
            Call::Execute => serve!(body, Execute, |c| router.kernel().execute_part(c).await),
            Call::ReadIndex => serve!(body, ReadIndex, |c| router.kernel().read_index(c).await),
            Call::Recovering => serve!(body, Recovering, |c| router
                .kernel()
                .replicas()
                .get(c.shard)
                .is_some_and(|r| r.restarted_without_leader())),
            Call::Describe => serve!(body, Describe, |_| router.kernel().describe()),
            Call::MetaChange => serve!(body, MetaChange, |c| self.meta.change(c).await),
            Call::ListKeyspaces => serve!(body, ListKeyspaces, |_| self.meta.keyspaces().await),
            Call::SetReplicas => serve!(body, SetReplicas, |c| router
                .kernel()
                .replicas()
                .set_voters(c.shard, c.voters)
                .await),
            Call::TransferLeader => serve!(body, TransferLeader, |c| router
                .kernel()
                .replicas()
                .transfer_leader(c.shard, c.to)
                .await),
            Call::WatchPoll => serve!(body, WatchPoll, |c| router.watches().watch_poll(c).await),
            Call::DiskNotice => serve!(body, DiskNotice, |c| router.kernel().disk().note_peer(c)),
            Call::ForgetLog => serve!(body, ForgetLog, |c| router.log().index().forget(&c.0)),
            Call::Publish => serve!(body, Publish, |c| router
                .publisher()
                .pubsub()
                .deliver(&c.channel, &c.message)
                as u64),
            Call::ServiceReply => serve!(body, ServiceReply, |c| router
                .services()
                .reply_slots()
                .complete(c.token, &c.service, c.payload)),
            Call::ScanCursor => serve!(body, ScanCursor, |c| router.cursors().local(c.0)),
            Call::MqttTakeOver => serve!(body, MqttTakeOver, |c| self
                .mqtt
                .taken_over_elsewhere(c)
                .await),
            Call::OriginCounts => serve!(body, OriginCounts, |_| router.kernel().origin_report()),
            Call::BlobChunk => serve!(body, BlobChunk, |c| router
                .large()
                .blobs()
                .serve_chunk(c)
                .await),
            Call::BlobSeal => serve!(body, BlobSeal, |c| router
                .large()
                .blobs()
                .serve_seal(c)
                .await),
            Call::BlobRead => serve!(body, BlobRead, |c| router
                .large()
                .blobs()
                .serve_read(c)
                .await),
            Call::BlobDiscard => {
                serve!(body, BlobDiscard, |c| router
                    .large()
                    .blobs()
                    .serve_discard(c)
                    .await)
            }
        }
    }
}
