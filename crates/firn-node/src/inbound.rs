//! Calls from other nodes, answered here. The peer transport hands each call to an
//! [`Inbox`] at once (it exists before the node's router does); the calls wait in bounded
//! queues until [`serve`] answers them, each lane with a stated limit on the calls it
//! handles at once. Forwarded requests (which may wait on other nodes) have a lane of their
//! own, so that they can never hold up the short calls they depend on (read indexes).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use firn_model::FirnError;
use firn_raft::peer::AppHandler;
use tokio::sync::{Semaphore, mpsc, oneshot, watch};

use crate::cluster::meta::MetaClient;
use crate::router::Router;
use crate::rpc::{NodeRpc, Rpc};

/// Forwarded requests one node handles at once. Each holds little (a request, a proposal in
/// flight); past this, callers wait in the queue and the peer connection pushes back.
pub const INBOUND_FORWARDED_MAX: usize = 4_096;
/// Other calls (read indexes, watch polls, descriptions, cluster changes) handled at once.
pub const INBOUND_CONTROL_MAX: usize = 1_024;
/// Calls queued per lane before the peer transport waits to hand over more.
const INBOUND_QUEUE_MAX: usize = 1_024;

type Call = (NodeRpc, oneshot::Sender<Vec<u8>>);

/// Where the peer transport leaves calls for this node.
pub struct Inbox {
    forwarded: mpsc::Sender<Call>,
    control: mpsc::Sender<Call>,
}

/// The receiving ends of an [`Inbox`], for [`serve`].
pub struct InboxQueues {
    forwarded: mpsc::Receiver<Call>,
    control: mpsc::Receiver<Call>,
}

pub fn inbox() -> (Arc<Inbox>, InboxQueues) {
    let (ftx, frx) = mpsc::channel(INBOUND_QUEUE_MAX);
    let (ctx, crx) = mpsc::channel(INBOUND_QUEUE_MAX);
    (
        Arc::new(Inbox {
            forwarded: ftx,
            control: ctx,
        }),
        InboxQueues {
            forwarded: frx,
            control: crx,
        },
    )
}

impl AppHandler for Inbox {
    fn handle(&self, payload: Vec<u8>) -> Pin<Box<dyn Future<Output = Vec<u8>> + Send>> {
        let lanes = (self.forwarded.clone(), self.control.clone());
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
            let lane = match call {
                NodeRpc::Execute(_) => lanes.0,
                _ => lanes.1,
            };
            let (tx, rx) = oneshot::channel();
            if lane.send((call, tx)).await.is_err() {
                return Vec::new(); // the node is stopping
            }
            rx.await.unwrap_or_default()
        })
    }
}

/// Answers the calls in `queues` until `stop`, at most each lane's limit at once.
pub async fn serve(
    queues: InboxQueues,
    router: Arc<Router>,
    meta: Arc<MetaClient>,
    stop: watch::Receiver<bool>,
) {
    let answerer = Arc::new(Answerer { router, meta });
    tokio::join!(
        lane(
            queues.forwarded,
            INBOUND_FORWARDED_MAX,
            answerer.clone(),
            stop.clone()
        ),
        lane(queues.control, INBOUND_CONTROL_MAX, answerer, stop),
    );
}

async fn lane(
    mut queue: mpsc::Receiver<Call>,
    limit: usize,
    answerer: Arc<Answerer>,
    mut stop: watch::Receiver<bool>,
) {
    let permits = Arc::new(Semaphore::new(limit));
    loop {
        let (call, reply) = tokio::select! {
            next = queue.recv() => match next {
                Some(c) => c,
                None => return,
            },
            _ = stop.changed() => return,
        };
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let answerer = answerer.clone();
        tokio::spawn(async move {
            let _ = reply.send(answerer.answer(call).await);
            drop(permit);
        });
    }
}

struct Answerer {
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
        }
    }
}
