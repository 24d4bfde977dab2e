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

/// How long a call may take unless it says otherwise. A healthy peer answers in
/// milliseconds; past this the peer is probably gone, and the client hears UNCERTAIN (a
/// write) or CLUSTERDOWN (a read) rather than waiting longer.
pub const PEER_CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// A request one node sends another: its place in the table of calls, the peer connection
/// it goes over, and the type of its reply. A call's type is declared beside what it is for
/// (a large value's chunk in `blob`, a node's description in `view`, …), with its `Rpc`
/// impl; this module knows the calls only by [`Call`], so it depends on none of them.
pub trait Rpc: Serialize {
    const CALL: Call;
    /// A large value's chunk (or a read, whose answer is one) goes over the bulk lane,
    /// behind which nothing small waits.
    const LANE: Lane = Lane::Messages;
    type Reply: Serialize + DeserializeOwned;
}

/// Every call between nodes, by the number it travels under (its tag on the wire, before
/// the call itself). The numbers are the wire format: a new call takes the next one, and
/// none is ever reused. `crate::inbound` answers each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Call {
    /// Execute a part of a request on this node's replica of a shard (proposing if it leads).
    Execute = 0,
    /// As the shard's leader, confirm leadership and return the read index.
    ReadIndex = 1,
    /// Describe yourself.
    Describe = 2,
    /// A change of the cluster's layout, run on the meta leader.
    MetaChange = 3,
    /// As the meta leader, the keyspace definitions the layout holds.
    ListKeyspaces = 4,
    /// As the shard's leader, make `voters` the group's voters.
    SetReplicas = 5,
    /// As the shard's leader, hand leadership to another replica.
    TransferLeader = 6,
    /// A remote watch's long poll.
    WatchPoll = 7,
    /// Forget, in the local log index, what a committed trim or FLUSHALL removed.
    ForgetLog = 8,
    /// Deliver a published message to this node's subscribers; answers how many there were.
    Publish = 9,
    /// Hand a service's reply to the request waiting here under a token; answers whether one
    /// was waiting.
    ServiceReply = 10,
    /// Where this node's clients sent requests lately (for leaders that follow them).
    OriginCounts = 11,
    /// Whether this node's replica of a memory shard restarted and has seen no leader since
    /// (see `crate::recovery`).
    Recovering = 12,
    /// A chunk of a large value for this node's replica of a shard (see `crate::blob`).
    BlobChunk = 13,
    /// Seal an uploaded blob: check it against its manifest, fsync it, make it readable.
    BlobSeal = 14,
    /// A chunk of a blob sealed here.
    BlobRead = 15,
    /// Drop an upload whose manifest will not be proposed.
    BlobDiscard = 16,
    /// The sender's data disk went low, is still low, or has room again (see `crate::disk`).
    DiskNotice = 17,
    /// The key a SCAN cursor this node issued continues after (see `crate::cursors`).
    ScanCursor = 18,
    /// An MQTT client connected on the sender: end its connection and its will's wait here
    /// (see `crate::mqtt::takeover`).
    MqttTakeOver = 19,
}

impl Call {
    const ALL: [Call; 20] = [
        Call::Execute,
        Call::ReadIndex,
        Call::Describe,
        Call::MetaChange,
        Call::ListKeyspaces,
        Call::SetReplicas,
        Call::TransferLeader,
        Call::WatchPoll,
        Call::ForgetLog,
        Call::Publish,
        Call::ServiceReply,
        Call::OriginCounts,
        Call::Recovering,
        Call::BlobChunk,
        Call::BlobSeal,
        Call::BlobRead,
        Call::BlobDiscard,
        Call::DiskNotice,
        Call::ScanCursor,
        Call::MqttTakeOver,
    ];

    /// The call a tag names, if any.
    pub fn from_tag(tag: u32) -> Option<Call> {
        Call::ALL.into_iter().find(|c| *c as u32 == tag)
    }
}

/// A call as it travels: its tag, then the call. postcard writes the tag as a varint, as it
/// writes an enum's variant, so these are the bytes an enum of every call would make.
pub fn encode_call<R: Rpc>(call: &R) -> Result<Vec<u8>, FirnError> {
    postcard::to_stdvec(&(R::CALL as u32, call)).map_err(|e| FirnError::Internal(e.to_string()))
}

/// A call's tag and the bytes of the call after it.
pub fn decode_tag(payload: &[u8]) -> Result<(Call, &[u8]), String> {
    let (tag, rest) = postcard::take_from_bytes::<u32>(payload).map_err(|e| e.to_string())?;
    let call = Call::from_tag(tag).ok_or_else(|| format!("unknown call {tag}"))?;
    Ok((call, rest))
}

/// Declares each call type's [`Rpc`]: its [`Call`] and its reply.
macro_rules! rpc {
    ($($name:ident => $reply:ty;)*) => {
        $(impl $crate::rpc::Rpc for $name {
            const CALL: $crate::rpc::Call = $crate::rpc::Call::$name;
            type Reply = $reply;
        })*
    };
}
pub(crate) use rpc;

rpc! {
    Execute => Result<Answer, FirnError>;
    ReadIndex => Result<u64, FirnError>;
    MetaChange => Result<(), FirnError>;
    ListKeyspaces => Result<Vec<KeyspaceDef>, FirnError>;
    SetReplicas => Result<(), FirnError>;
    TransferLeader => Result<(), FirnError>;
    WatchPoll => Result<(Vec<WatchEvent>, CommitTs), FirnError>;
    Publish => u64;
    ServiceReply => bool;
    Recovering => bool;
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
    /// The watermark state of the keyspace `prefix` (or, `of_key`, of the key's keyspace)
    /// on the shard, and the first stamp an advance reached `reach` at (answers
    /// `Response::Watermark`).
    Watermark {
        prefix: bytes::Bytes,
        of_key: bool,
        reach: Option<u64>,
    },
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

/// A PUBLISH made at another node (see `pubsub/`).
#[derive(Debug, Serialize, Deserialize)]
pub struct Publish {
    pub channel: bytes::Bytes,
    pub message: bytes::Bytes,
}

/// A worker's reply for a request waiting at another node (see `services/`): it completes
/// the slot `token` only if that slot waits on `service`.
#[derive(Debug, Serialize, Deserialize)]
pub struct ServiceReply {
    pub token: u64,
    pub payload: bytes::Bytes,
    pub service: bytes::Bytes,
}

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
        let payload = encode_call(&call)?;
        let answer = self
            .pool
            .call_on(R::LANE, target, PeerRequest::App(payload), timeout)
            .await;
        decode::<R>(&format!("node {target}"), answer)
    }

    /// Calls whichever node listens at `addr` (a joining node knows no ids yet).
    pub async fn call_addr<R: Rpc>(&self, addr: &str, call: R) -> Result<R::Reply, FirnError> {
        let payload = encode_call(&call)?;
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

    /// A call travels as its tag then itself, the bytes an enum of every call would make;
    /// a tag no call has is refused, not misread.
    #[test]
    fn a_call_travels_under_its_tag_and_an_unknown_tag_is_refused() {
        for call in Call::ALL {
            assert_eq!(Call::from_tag(call as u32), Some(call));
        }
        assert_eq!(
            Call::ALL.len(),
            Call::MqttTakeOver as usize + 1,
            "tags are 0, 1, 2, …"
        );
        let index = ReadIndex {
            shard: 7,
            lease: true,
        };
        let bytes = encode_call(&index).unwrap();
        assert_eq!(bytes, [1, 7, 1], "tag 1 (a varint), shard 7, lease");
        let (call, rest) = decode_tag(&bytes).unwrap();
        assert_eq!(call, Call::ReadIndex);
        let back: ReadIndex = postcard::from_bytes(rest).unwrap();
        assert_eq!((back.shard, back.lease), (7, true));
        assert!(
            decode_tag(&[200, 1])
                .unwrap_err()
                .contains("unknown call 200")
        );
        assert!(decode_tag(&[]).is_err());
        assert_eq!(<ReadIndex as Rpc>::LANE, Lane::Messages);
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
