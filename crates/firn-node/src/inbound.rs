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

use crate::cluster::meta::MetaClient;
use crate::router::Router;
use crate::rpc::{NodeRpc, Rpc};

/// Where the peer transport leaves calls for this node.
pub struct Inbox(watch::Receiver<Option<Arc<Answerer>>>);

/// Publishes the answering side once it exists ([`Opening::open`]).
pub struct Opening(watch::Sender<Option<Arc<Answerer>>>);

pub fn inbox() -> (Arc<Inbox>, Opening) {
    let (tx, rx) = watch::channel(None);
    (Arc::new(Inbox(rx)), Opening(tx))
}

impl Opening {
    /// From now on, calls are answered by `router` and `meta`.
    pub fn open(self, router: Arc<Router>, meta: Arc<MetaClient>) {
        self.0
            .send_replace(Some(Arc::new(Answerer { router, meta })));
    }
}

impl AppHandler for Inbox {
    fn handle(&self, payload: Vec<u8>) -> Pin<Box<dyn Future<Output = Vec<u8>> + Send>> {
        let mut ready = self.0.clone();
        Box::pin(async move {
            let call = match postcard::from_bytes::<NodeRpc>(&payload) {
                Ok(c) => c,
                // Every reply that can fail is a `Result`, whose `Err` encodes alike.
                Err(e) => {
                    let e: Result<(), FirnError> = Err(FirnError::Internal(format!(
                        "undecodable peer request: {e}"
                    )));
                    return postcard::to_stdvec(&e).unwrap_or_default();
                }
            };
            let answerer = match ready.wait_for(Option::is_some).await {
                Ok(a) => a.clone(),
                Err(_) => None, // the node stopped before it started
            };
            match answerer {
                Some(a) => a.answer(call).await,
                None => Vec::new(),
            }
        })
    }
}

pub struct Answerer {
    router: Arc<Router>,
    meta: Arc<MetaClient>,
}

/// The reply to a call of type `R`, encoded: the compiler checks each arm answers with the
/// reply type its call names.
fn reply<R: Rpc>(reply: R::Reply) -> Vec<u8> {
    postcard::to_stdvec(&reply).unwrap_or_default()
}

impl Answerer {
    async fn answer(&self, call: NodeRpc) -> Vec<u8> {
        let router = &self.router;
        match call {
            NodeRpc::Execute(c) => reply::<crate::rpc::Execute>(router.execute_part(c).await),
            NodeRpc::ReadIndex(c) => reply::<crate::rpc::ReadIndex>(router.read_index(c).await),
            NodeRpc::Recovering(c) => reply::<crate::rpc::Recovering>(
                router
                    .replicas()
                    .get(c.shard)
                    .is_some_and(|r| r.restarted_without_leader()),
            ),
            NodeRpc::Describe(_) => reply::<crate::rpc::Describe>(router.describe()),
            NodeRpc::MetaChange(c) => reply::<crate::rpc::MetaChange>(self.meta.change(c).await),
            NodeRpc::ListKeyspaces(_) => {
                reply::<crate::rpc::ListKeyspaces>(self.meta.keyspaces().await)
            }
            NodeRpc::SetReplicas(c) => reply::<crate::rpc::SetReplicas>(
                router.replicas().set_voters(c.shard, c.voters).await,
            ),
            NodeRpc::TransferLeader(c) => reply::<crate::rpc::TransferLeader>(
                router.replicas().transfer_leader(c.shard, c.to).await,
            ),
            NodeRpc::WatchPoll(c) => reply::<crate::rpc::WatchPoll>(router.watch_poll(c).await),
            NodeRpc::DiskNotice(c) => {
                router.disk().note_peer(c);
                reply::<crate::rpc::DiskNotice>(())
            }
            NodeRpc::ForgetLog(c) => {
                router.log_index().forget(&c.0);
                reply::<crate::rpc::ForgetLog>(())
            }
            NodeRpc::Publish(c) => {
                reply::<crate::rpc::Publish>(router.pubsub().deliver(&c.channel, &c.message) as u64)
            }
            NodeRpc::ServiceReply(c) => {
                reply::<crate::rpc::ServiceReply>(router.reply_slots().complete(c.token, c.payload))
            }
            NodeRpc::OriginCounts(_) => reply::<crate::rpc::OriginCounts>(router.origin_report()),
            NodeRpc::BlobChunk(c) => {
                reply::<crate::rpc::BlobChunk>(router.blobs().serve_chunk(c).await)
            }
            NodeRpc::BlobSeal(c) => {
                reply::<crate::rpc::BlobSeal>(router.blobs().serve_seal(c).await)
            }
            NodeRpc::BlobRead(c) => {
                reply::<crate::rpc::BlobRead>(router.blobs().serve_read(c).await)
            }
            NodeRpc::BlobDiscard(c) => {
                router.blobs().serve_discard(c).await;
                reply::<crate::rpc::BlobDiscard>(())
            }
        }
    }
}
