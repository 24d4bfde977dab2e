//! Typed calls between nodes: each request type names its reply type ([`Rpc::Reply`]), and
//! one [`PeerClient::call`] sends any of them over the peer transport and decodes exactly
//! that reply. The answering side is [`crate::inbound`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use firn_model::{Answer, CallContext, CommitTs, FirnError, KeyRange, KeyspaceDef, KvRead};
use firn_model::{WatchEvent, WatchFrom};
use firn_raft::peer::{Lane, PeerError, PeerPool, PeerRequest, PeerResponse};
use firn_raft::{NodeId, ShardId};
use firn_store::Op;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::view::NodeView;

/// How long a call may take unless it says otherwise. A healthy peer answers in
/// milliseconds; past this the peer is probably gone, and the client hears UNCERTAIN (a
/// write) or CLUSTERDOWN (a read) rather than waiting longer.
pub const PEER_CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// A request one node sends another, and the type of its reply.
pub trait Rpc: Serialize + Into<NodeRpc> {
    type Reply: Serialize + DeserializeOwned;
}

/// Declares the calls: each becomes a variant of [`NodeRpc`] and an [`Rpc`] with its reply.
macro_rules! calls {
    ($($(#[$doc:meta])* $name:ident => $reply:ty;)*) => {
        /// Every call, as it travels. Built once per call and serialized at once, so the
        /// size of its largest variant (an `Execute`) costs nothing worth a box.
        #[derive(Debug, Serialize, Deserialize)]
        #[allow(clippy::large_enum_variant)]
        pub enum NodeRpc {
            $($(#[$doc])* $name($name),)*
        }
        $(
            impl From<$name> for NodeRpc {
                fn from(call: $name) -> Self {
                    NodeRpc::$name(call)
                }
            }
            impl Rpc for $name {
                type Reply = $reply;
            }
        )*
    };
}

calls! {
    /// Execute a part of a request on this node's replica of a shard (proposing if it leads).
    Execute => Result<Answer, FirnError>;
    /// As the shard's leader, confirm leadership and return the read index.
    ReadIndex => Result<u64, FirnError>;
    /// Describe yourself.
    Describe => NodeView;
    /// A change of the cluster's layout, run on the meta leader.
    MetaChange => Result<(), FirnError>;
    /// As the meta leader, the keyspace definitions the layout holds.
    ListKeyspaces => Result<Vec<KeyspaceDef>, FirnError>;
    /// As the shard's leader, make `voters` the group's voters.
    SetReplicas => Result<(), FirnError>;
    /// As the shard's leader, hand leadership to another replica.
    TransferLeader => Result<(), FirnError>;
    /// A remote watch's long poll.
    WatchPoll => Result<(Vec<WatchEvent>, CommitTs), FirnError>;
    /// Forget, in the local log index, what a committed trim or FLUSHALL removed.
    ForgetLog => ();
    /// Deliver a published message to this node's subscribers; answers how many there were.
    Publish => u64;
    /// Hand a service's reply to the request waiting here under a token; answers whether one
    /// was waiting.
    ServiceReply => bool;
    /// Where this node's clients sent requests lately (for leaders that follow them).
    OriginCounts => crate::cluster::follow::OriginReport;
    /// Whether this node's replica of a memory shard is recovering (see `crate::recovery`).
    Recovering => bool;
    /// A chunk of a large value for this node's replica of a shard (see `crate::blob`).
    BlobChunk => Result<(), FirnError>;
    /// Seal an uploaded blob: check it against its manifest, fsync it, make it readable.
    BlobSeal => Result<(), FirnError>;
    /// A chunk of a blob sealed here.
    BlobRead => Result<bytes::Bytes, FirnError>;
    /// Drop an upload whose manifest will not be proposed.
    BlobDiscard => ();
    /// The sender's data disk went low, is still low, or has room again (see `crate::disk`).
    DiskNotice => ();
}

pub use crate::disk::DiskNotice;

pub use crate::blob::{BlobChunk, BlobDiscard, BlobRead, BlobSeal};

impl NodeRpc {
    /// The peer connection the call goes over: a large value's chunk (or a read, whose
    /// answer is one) on the bulk lane, behind which nothing small waits.
    fn lane(&self) -> Lane {
        match self {
            NodeRpc::BlobChunk(_) | NodeRpc::BlobRead(_) => Lane::Bulk,
            _ => Lane::Messages,
        }
    }
}

/// What one shard is asked: a read, or a write as the log operation it becomes.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum ShardPart {
    Read(KvRead),
    Write(Op),
    /// The keyspace definitions the shard has applied (the steward compares them with the
    /// layout's).
    Keyspaces,
    /// A page of one tag of a log (answers `Response::LogPage`).
    LogRead(LogShardRead),
    /// A read of a stream's consumer groups, served by the stream's shard.
    GroupRead(firn_model::GroupRead),
    /// A page of the shard's tags of every log (answers `Response::LogTags`).
    LogTags(LogTagsRead),
    /// Close time through this stamp now, on the shard's leader (a reader waits for it;
    /// see `firn_raft::closer`). Answers `Response::Done` once the leader has applied it.
    Close(CommitTs),
}

/// One shard's part of a listing of every log's tags.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LogTagsRead {
    /// The row after which the page starts (a listing cursor).
    pub after: Option<bytes::Bytes>,
    pub limit: usize,
    /// Read once the replica has closed this time (no barrier); else after a linearizable
    /// barrier.
    pub at: Option<CommitTs>,
}

/// One shard's part of a log read.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LogShardRead {
    pub log: firn_model::Key,
    pub tag: firn_model::Key,
    pub from: firn_model::LogSeq,
    pub to: firn_model::LogSeq,
    pub limit: usize,
    pub reverse: bool,
    /// Read at this closed time (no barrier); else as `consistency` says.
    pub at: Option<CommitTs>,
    pub consistency: firn_model::ReadConsistency,
    /// Look up the tag's first and last records too.
    pub ends: bool,
    /// `at` is the reader's now: read on the shard's leader, which closes it at once
    /// instead of waiting for time to close by itself (see `ShardReplica::close_through`).
    pub close: bool,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Execute {
    pub shard: ShardId,
    pub part: ShardPart,
    pub ctx: CallContext,
    /// How many nodes forwarded it already.
    pub hops: u8,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct ReadIndex {
    pub shard: ShardId,
    /// From the leader's lease while it holds (no quorum round trip).
    pub lease: bool,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Describe;

/// Whether the node's replica of a memory shard restarted and has seen no leader elected
/// since (`ShardReplica::restarted_without_leader`): what a recovering replica counts.
#[derive(Debug, Serialize, Deserialize)]
pub struct Recovering {
    pub shard: ShardId,
}

/// What the meta leader changes in the layout.
#[derive(Debug, Serialize, Deserialize)]
pub enum MetaChange {
    /// A node asks to join (sent to any member; forwarded to the meta leader).
    Join { node: NodeId, addr: String },
    /// Start removing a node: its replicas move elsewhere, then it leaves.
    Remove { node: NodeId },
    /// Record a keyspace definition (or, with `drop`, its removal).
    Keyspace { def: KeyspaceDef, drop: bool },
}

#[derive(Debug, Serialize, Deserialize)]
pub struct ListKeyspaces;

#[derive(Debug, Serialize, Deserialize)]
pub struct SetReplicas {
    pub shard: ShardId,
    /// Node id → peer address; each new one is added as a learner and caught up first.
    pub voters: BTreeMap<NodeId, String>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct TransferLeader {
    pub shard: ShardId,
    pub to: NodeId,
}

/// A watch on a node without a replica of `shard`: the replica's versions of `target` from
/// `from` on, waiting briefly for some if there are none yet.
#[derive(Debug, Serialize, Deserialize)]
pub struct WatchPoll {
    pub shard: ShardId,
    pub target: KeyRange,
    pub from: WatchFrom,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct ForgetLog(pub crate::log_index::Forget);

/// A PUBLISH made at another node (see `router/publish.rs`).
#[derive(Debug, Serialize, Deserialize)]
pub struct Publish {
    pub channel: bytes::Bytes,
    pub message: bytes::Bytes,
}

/// A worker's reply for a request waiting at another node (see `router/service.rs`).
#[derive(Debug, Serialize, Deserialize)]
pub struct ServiceReply {
    pub token: u64,
    pub payload: bytes::Bytes,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct OriginCounts;

/// Sends typed calls to other nodes.
#[derive(Clone)]
pub struct PeerClient {
    pool: Arc<PeerPool>,
}

impl PeerClient {
    pub fn new(pool: Arc<PeerPool>) -> Self {
        PeerClient { pool }
    }

    /// Where node `id` is reached.
    pub fn set_addr(&self, id: NodeId, addr: &str) {
        self.pool.set_addr(id, addr);
    }

    /// Calls node `target` (never this node: callers answer themselves directly).
    pub async fn call<R: Rpc>(&self, target: NodeId, call: R) -> Result<R::Reply, FirnError> {
        self.call_within(target, call, PEER_CALL_TIMEOUT).await
    }

    pub async fn call_within<R: Rpc>(
        &self,
        target: NodeId,
        call: R,
        timeout: Duration,
    ) -> Result<R::Reply, FirnError> {
        self.try_call(target, call, timeout)
            .await
            .map_err(FirnError::from)
    }

    /// Calls node `target` with a call that changes nothing there (a read index, a watch's
    /// poll, a listing): one sent and unanswered is `CLUSTERDOWN` ([`read_unanswered`]),
    /// never `UNCERTAIN`.
    pub async fn call_read<R: Rpc>(&self, target: NodeId, call: R) -> Result<R::Reply, FirnError> {
        self.try_call(target, call, PEER_CALL_TIMEOUT)
            .await
            .map_err(|e| match e {
                CallError::Unanswered(why) => read_unanswered(&why),
                other => other.into(),
            })
    }

    /// Calls node `target`, saying whether a call without a reply ever reached it.
    pub async fn try_call<R: Rpc>(
        &self,
        target: NodeId,
        call: R,
        timeout: Duration,
    ) -> Result<R::Reply, CallError> {
        let call = call.into();
        let lane = call.lane();
        let payload = encode(call)?;
        let answer = self
            .pool
            .call_on(lane, target, PeerRequest::App(payload), timeout)
            .await;
        decode::<R>(&format!("node {target}"), answer)
    }

    /// Calls whichever node listens at `addr` (a joining node knows no ids yet).
    pub async fn call_addr<R: Rpc>(&self, addr: &str, call: R) -> Result<R::Reply, FirnError> {
        let payload = encode(call.into())?;
        let answer = self
            .pool
            .call_addr(addr, PeerRequest::App(payload), PEER_CALL_TIMEOUT)
            .await;
        Ok(decode::<R>(addr, answer)?)
    }
}

/// Why a call to another node has no reply.
#[derive(Debug)]
pub enum CallError {
    /// The call never reached the node: no connection to it, or the connection ended before
    /// the call was written. Nothing happened there; trying again is safe.
    NotSent(FirnError),
    /// Sent, and no answer came (the connection dropped, or the call's time ran out): what
    /// the call did there is unknown. Says why.
    Unanswered(String),
    /// Anything else: the node too busy to take it (nothing happened, but it asked for a
    /// pause), its answer unreadable.
    Failed(FirnError),
}

impl From<CallError> for FirnError {
    fn from(e: CallError) -> Self {
        match e {
            CallError::NotSent(e) | CallError::Failed(e) => e,
            // A request that changes something may have done so.
            CallError::Unanswered(why) => FirnError::Indeterminate(format!(
                "{why}; the request may or may not have been applied"
            )),
        }
    }
}

impl From<FirnError> for CallError {
    fn from(e: FirnError) -> Self {
        CallError::Failed(e)
    }
}

/// What a read whose call to another node went unanswered tells its client: it cannot be
/// served now (the node it needs does not answer), and it changed nothing, so it may be sent
/// again.
pub fn read_unanswered(why: &str) -> FirnError {
    FirnError::Unavailable(format!("{why}; a read changes nothing: retry"))
}

fn encode(call: NodeRpc) -> Result<Vec<u8>, FirnError> {
    postcard::to_stdvec(&call).map_err(|e| FirnError::Internal(e.to_string()))
}

fn decode<R: Rpc>(
    who: &str,
    answer: Result<PeerResponse, PeerError>,
) -> Result<R::Reply, CallError> {
    let failed = |e| Err(CallError::Failed(e));
    match answer {
        Ok(PeerResponse::App(bytes)) => postcard::from_bytes(&bytes)
            .or_else(|e| failed(FirnError::Internal(format!("{who} answered garbage: {e}")))),
        Ok(PeerResponse::Error(e)) => failed(FirnError::TryAgain(format!("{who}: {e}"))),
        Ok(other) => failed(FirnError::Internal(format!("{who} answered {other:?}"))),
        // Never sent: nothing happened.
        Err(e @ PeerError::Unreachable(..)) => {
            Err(CallError::NotSent(FirnError::TryAgain(format!("{e}"))))
        }
        // Not taken: nothing happened, but the node asks for a pause.
        Err(e @ PeerError::Busy(..)) => failed(FirnError::Busy(format!("{e}"))),
        // Sent, but no answer: a write may have been applied.
        Err(e) => Err(CallError::Unanswered(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_of_large_values_take_the_bulk_lane_and_nothing_else_does() {
        let chunk = BlobChunk {
            shard: 0,
            id: 1,
            key: bytes::Bytes::from_static(b"k"),
            offset: 0,
            data: bytes::Bytes::from(vec![0u8; 4 << 20]),
        };
        let read = BlobRead {
            shard: 0,
            id: 1,
            offset: 0,
            len: 4 << 20,
        };
        assert_eq!(NodeRpc::from(chunk).lane(), Lane::Bulk);
        assert_eq!(NodeRpc::from(read).lane(), Lane::Bulk);
        let index = ReadIndex {
            shard: 0,
            lease: false,
        };
        assert_eq!(NodeRpc::from(index).lane(), Lane::Messages);
        assert_eq!(NodeRpc::from(Describe).lane(), Lane::Messages);
    }

    /// What a call without a reply says: never sent (retry), not taken (retry after a
    /// pause), or sent and unanswered (unknown: the caller decides what that means).
    #[test]
    fn a_call_without_a_reply_says_whether_it_was_sent() {
        let no_reply = |e| decode::<ReadIndex>("node 3", Err(e));
        assert!(matches!(
            no_reply(PeerError::Unreachable(3, "refused".into())),
            Err(CallError::NotSent(FirnError::TryAgain(_)))
        ));
        assert!(matches!(
            no_reply(PeerError::Busy(3, "full".into())),
            Err(CallError::Failed(FirnError::Busy(_)))
        ));
        for sent in [
            PeerError::Lost(3),
            PeerError::Timeout(3, std::time::Duration::from_secs(5)),
        ] {
            let Err(CallError::Unanswered(why)) = no_reply(sent) else {
                panic!("a sent call without an answer must be unanswered");
            };
            // To a caller that does not tell reads from writes, its outcome is unknown; to a
            // read, it is a refusal to try again.
            assert!(matches!(
                FirnError::from(CallError::Unanswered(why.clone())),
                FirnError::Indeterminate(_)
            ));
            assert!(matches!(read_unanswered(&why), FirnError::Unavailable(_)));
        }
    }
}
