//! The follower's end of pipelined replication (the leader's is [`crate::pipeline`]): the
//! appends a connection carries, handed to their groups' Raft in the order they arrived.
//!
//! The follower must take them in the order sent. One connection's frames arrive in order,
//! and [`AppendStreams`] hands every append of a group arriving on a connection to one
//! [`openraft::Raft::stream_append`], which submits them to the Raft core in that order and
//! answers each once its entries are durable. A task per append, as other requests get,
//! could reach the core out of order. It is the transport's because a connection's reader
//! feeds it; the leader's end only sends through the pool, above the transport.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use futures::{Stream, StreamExt};
use openraft::Raft;
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, StreamAppendResult};
use tokio::sync::mpsc;

use super::{APPENDS_IN_FLIGHT_MAX, PeerResponse, Replies};
use crate::state_machine::ShardStateMachine;
use crate::types::{FirnRaft, LogId, ShardId};

/// Appends of one group a follower's connection holds for its Raft stream before it
/// refuses more (a leader keeps at most [`APPENDS_IN_FLIGHT_MAX`] a stream out, plus its
/// heartbeat). A connection's reader never waits on one group.
const FOLLOWER_QUEUE_MAX: usize = 2 * APPENDS_IN_FLIGHT_MAX;

/// The range an append covers: `(prev, last]`, `last` being `prev` for a heartbeat. The
/// wire's answer to an append is read against it at both ends: the follower makes it from
/// Raft's answer ([`response`]), the leader turns it back with `into_stream_result`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Covers {
    pub(crate) prev: Option<LogId>,
    pub(crate) last: Option<LogId>,
}

impl Covers {
    pub(crate) fn of(rpc: &AppendEntriesRequest<FirnRaft>) -> Covers {
        let prev = rpc.prev_log_id;
        Covers {
            last: rpc.entries.last().map(|e| e.log_id).or(prev),
            prev,
        }
    }
}

/// The follower's end, one per connection: every append of a group that arrives on it goes
/// to one `Raft::stream_append` of that group, in arrival order, and each answer goes back
/// under its request's id, in the same order.
#[derive(Default)]
pub(crate) struct AppendStreams {
    by_shard: HashMap<ShardId, GroupStream>,
}

/// One group's stream on one connection.
struct GroupStream {
    requests: mpsc::Sender<AppendEntriesRequest<FirnRaft>>,
    waiting: Waiting,
    /// The replica it hands appends to (see `LocalGroup::incarnation`).
    incarnation: u64,
}

/// The ids of the requests a group's stream handed to Raft and that are not yet answered,
/// oldest first, with what each covered; `None` once the stream has ended (nothing more is
/// taken).
type Waiting = Arc<Mutex<Option<VecDeque<(u64, Covers)>>>>;

impl AppendStreams {
    /// Hands the append `id` to its group's stream (opening one if there is none, the last
    /// has ended, or it went to a replica `raft` has replaced). Never waits: an append that
    /// cannot be taken comes back as the error to answer at once, which the leader takes as
    /// a failed append.
    pub(crate) fn take(
        &mut self,
        raft: &Raft<FirnRaft, ShardStateMachine>,
        incarnation: u64,
        shard: ShardId,
        id: u64,
        rpc: AppendEntriesRequest<FirnRaft>,
        replies: &Replies,
    ) -> Result<(), PeerResponse> {
        let covers = Covers::of(&rpc);
        let open = || GroupStream::open(raft, incarnation, replies.clone());
        let stream = self.by_shard.entry(shard).or_insert_with(open);
        if stream.incarnation != incarnation {
            // The replica was removed and added again: the old one's stream ends (dropping
            // its sender), and the new one gets its own.
            *stream = open();
        }
        let refused = match stream.offer(id, covers.clone(), rpc) {
            Ok(()) => return Ok(()),
            Err(Offer::Ended(rpc)) => {
                // The stream ended (a conflict, a newer vote, the group stopped): this
                // append starts the next one.
                *stream = open();
                match stream.offer(id, covers, rpc) {
                    Ok(()) => return Ok(()),
                    Err(_) => "its group's append stream could not take it",
                }
            }
            Err(Offer::Full) => "too many appends of its group are waiting on this connection",
        };
        Err(PeerResponse::Error(format!("append not taken: {refused}")))
    }
}

enum Offer {
    Ended(AppendEntriesRequest<FirnRaft>),
    Full,
}

impl GroupStream {
    fn open(
        raft: &Raft<FirnRaft, ShardStateMachine>,
        incarnation: u64,
        replies: Replies,
    ) -> GroupStream {
        let (requests, rx) = mpsc::channel(FOLLOWER_QUEUE_MAX);
        let waiting = Arc::new(Mutex::new(Some(VecDeque::new())));
        let input =
            futures::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|rpc| (rpc, rx)) },
            );
        let answers = raft.stream_append(input);
        tokio::spawn(answer(answers, waiting.clone(), replies));
        GroupStream {
            requests,
            waiting,
            incarnation,
        }
    }

    /// Queues the append unless the stream has ended or is full; its id goes into
    /// `waiting` under the same lock, so the answer task never misses it.
    fn offer(
        &self,
        id: u64,
        covers: Covers,
        rpc: AppendEntriesRequest<FirnRaft>,
    ) -> Result<(), Offer> {
        let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        let Some(ids) = waiting.as_mut() else {
            return Err(Offer::Ended(rpc));
        };
        match self.requests.try_send(rpc) {
            Ok(()) => {
                ids.push_back((id, covers));
                Ok(())
            }
            Err(mpsc::error::TrySendError::Full(_)) => Err(Offer::Full),
            Err(mpsc::error::TrySendError::Closed(rpc)) => Err(Offer::Ended(rpc)),
        }
    }
}

/// Sends each of Raft's answers back under the id of the request it answers (they come in
/// the order of the requests). When Raft's stream ends, the stream takes nothing more, and
/// every request still waiting is answered with an error.
async fn answer<A>(answers: A, waiting: Waiting, replies: Replies)
where
    A: Stream<Item = Result<StreamAppendResult<FirnRaft>, openraft::errors::Fatal<FirnRaft>>>,
{
    let mut answers = std::pin::pin!(answers);
    while let Some(result) = answers.next().await {
        let next = waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
            .and_then(VecDeque::pop_front);
        let Some((id, covers)) = next else {
            // Raft answers only what it was handed, and each was recorded first.
            tracing::error!("an append answer with no request waiting for it");
            break;
        };
        let body = match result {
            Ok(r) => PeerResponse::Append(response(r, &covers)),
            Err(fatal) => PeerResponse::Error(fatal.to_string()),
        };
        replies.send(id, body).await;
    }
    let left = waiting
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
        .unwrap_or_default();
    for (id, _) in left {
        let ended = "the group's append stream ended before this append (a conflict or a \
                     newer vote answered an earlier one); send it again";
        replies.send(id, PeerResponse::Error(ended.into())).await;
    }
}

/// The wire's answer to an append that covered `covers`, from what Raft's stream said:
/// the leader turns it back with `into_stream_result` over the same range.
fn response(
    result: StreamAppendResult<FirnRaft>,
    covers: &Covers,
) -> AppendEntriesResponse<FirnRaft> {
    match result {
        Ok(matched) if matched == covers.last => AppendEntriesResponse::Success,
        Ok(matched) => AppendEntriesResponse::PartialSuccess(matched),
        Err(openraft::raft::StreamAppendError::Conflict(_)) => AppendEntriesResponse::Conflict,
        Err(openraft::raft::StreamAppendError::HigherVote(vote)) => {
            AppendEntriesResponse::HigherVote(vote)
        }
    }
}
