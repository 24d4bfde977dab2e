//! Pipelined replication: the leader's end of openraft's stream of AppendEntries to one
//! follower.
//!
//! openraft produces a group's appends to a follower as a stream, the next one as soon as
//! the leader has new entries ([`openraft::RaftNetworkV2::stream_append`]). Its default
//! transport sends one and waits for its answer before the next, so an entry proposed while
//! an append is out waits a whole round trip (the follower's append and fsync included)
//! before it is even sent. [`send_appends`] sends each as it comes, up to the pool's
//! [`PeerPool::appends_in_flight`] unanswered (at most
//! [`crate::peer::APPENDS_IN_FLIGHT_MAX`]), and yields the answers in order. One in flight is openraft's default behaviour again.
//!
//! The follower's end, which hands each group's appends to its Raft in the order they
//! arrived, is the peer transport's (`crate::peer`'s append streams): it is fed by the
//! connection's reader there.
//!
//! Nothing here decides what is safe: openraft's log-matching check refuses an append whose
//! previous entry the follower lacks, whatever the order of arrival. Order only decides
//! whether the pipeline goes on or starts again from a conflict.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::stream::{BoxStream, FuturesOrdered};
use futures::{FutureExt, Stream, StreamExt};
use openraft::errors::RPCError;
use openraft::network::RPCTypes;
use openraft::raft::{AppendEntriesRequest, StreamAppendResult};

// The bound is the pool's, which clamps to it, and the follower's queue is sized by it;
// the node names it by the pipeline it bounds.
use crate::peer::{Covers, Lane, PeerPool, PeerRequest, PeerResponse};
use crate::rpc_failure::{rpc_error, unreachable};
use crate::stages::{self, STAGES};
use crate::types::{FirnRaft, NodeId, ShardId};

/// Who the leader's end of a stream talks to.
pub(crate) struct Follower {
    pub me: NodeId,
    pub target: NodeId,
    pub shard: ShardId,
    pub pool: Arc<PeerPool>,
}

/// One append's answer as openraft takes it, or why there is none.
type Answered = Result<StreamAppendResult<FirnRaft>, RPCError<FirnRaft>>;

/// The leader's end: each request of `input` is sent to `to` as it comes (while fewer than
/// the pool's [`PeerPool::appends_in_flight`] are unanswered), and the answers are yielded in the order of
/// the requests, each within `timeout` of its sending. The stream ends after the input
/// does and every answer is in, or at the first answer that stops the pipeline (an error,
/// a conflict, a newer vote, a partial success), as openraft's sequential default does.
pub(crate) fn send_appends<S>(
    to: Follower,
    input: S,
    timeout: Duration,
) -> BoxStream<'static, Answered>
where
    S: Stream<Item = AppendEntriesRequest<FirnRaft>> + Send + Unpin + 'static,
{
    let sending = Sending {
        in_flight_max: to.pool.appends_in_flight(),
        to: Arc::new(to),
        input,
        input_done: false,
        in_flight: FuturesOrdered::new(),
        stopped: false,
        timeout,
    };
    futures::stream::unfold(sending, |mut s| async move {
        let answered = s.next_answer().await?;
        Some((answered, s))
    })
    .boxed()
}

struct Sending<S> {
    to: Arc<Follower>,
    in_flight_max: usize,
    input: S,
    input_done: bool,
    /// Each answer to come, with whether the pipeline goes on after it.
    in_flight: FuturesOrdered<BoxFuture<'static, (Answered, bool)>>,
    stopped: bool,
    timeout: Duration,
}

impl<S> Sending<S>
where
    S: Stream<Item = AppendEntriesRequest<FirnRaft>> + Send + Unpin + 'static,
{
    /// Sends what the input offers while waiting for the oldest answer; `None` at the end.
    async fn next_answer(&mut self) -> Option<Answered> {
        if self.stopped {
            return None;
        }
        loop {
            let may_send = !self.input_done && self.in_flight.len() < self.in_flight_max;
            if self.input_done && self.in_flight.is_empty() {
                return None;
            }
            tokio::select! {
                // An answer first: openraft learns of progress as early as it can.
                biased;
                Some((answered, goes_on)) = self.in_flight.next(), if !self.in_flight.is_empty() => {
                    self.stopped = !goes_on;
                    return Some(answered);
                }
                next = self.input.next(), if may_send => match next {
                    None => self.input_done = true,
                    // Sent before the next request is taken: the frames go out in order.
                    Some(rpc) => {
                        let carries_entries = !rpc.entries.is_empty();
                        let sent = send(self.to.clone(), rpc, self.timeout).await;
                        self.in_flight.push_back(sent);
                        if carries_entries {
                            STAGES.appends_in_flight.record(self.in_flight.len() as f64);
                        }
                    }
                },
            }
        }
    }
}

/// Queues `rpc` on the connection to `to` and returns the wait for its answer, with whether
/// the pipeline goes on after it: only when the follower took the whole append.
async fn send(
    to: Arc<Follower>,
    rpc: AppendEntriesRequest<FirnRaft>,
    timeout: Duration,
) -> BoxFuture<'static, (Answered, bool)> {
    let covers = Covers::of(&rpc);
    let carries_entries = !rpc.entries.is_empty();
    if carries_entries {
        STAGES.appends_with_entries.increment(1);
    } else {
        STAGES.appends_without_entries.increment(1);
    }
    // Heartbeats carry no entries: only the replication of writes is a stage of one.
    let started = carries_entries.then(Instant::now);
    let request = PeerRequest::Append {
        shard: to.shard,
        rpc,
    };
    let sent = to
        .pool
        .send_on(Lane::Messages, to.target, request, timeout)
        .await;
    async move {
        let answer = match sent {
            Ok(call) => call.answer().await,
            Err(e) => Err(e),
        };
        if let (Some(started), Ok(_)) = (started, &answer) {
            stages::since(&STAGES.replicate, started);
        }
        let answered = match answer {
            Ok(PeerResponse::Append(r)) => Ok(r.into_stream_result(covers.prev, covers.last)),
            Ok(other) => Err(RPCError::Unreachable(unreachable(format!(
                "unexpected answer {other:?}"
            )))),
            Err(e) => Err(rpc_error(RPCTypes::AppendEntries, to.me, to.target, e)),
        };
        let goes_on = matches!(&answered, Ok(Ok(matched)) if *matched == covers.last);
        (answered, goes_on)
    }
    .boxed()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::peer::{Envelope, codec, encode};
    use crate::types::LogId;
    use futures::SinkExt;
    use openraft::entry::EntryPayload;
    use openraft::raft::AppendEntriesResponse;
    use openraft::raft::StreamAppendError;
    use openraft::vote::RaftLeaderId;
    use tokio::net::TcpListener;
    use tokio_util::codec::Framed;

    fn log_id(index: u64) -> LogId {
        let leader = openraft::alias::CommittedLeaderIdOf::<FirnRaft>::new(1, 1);
        LogId::new(leader, index)
    }

    /// The append of entry `index`, after entry `index - 1`.
    fn append(index: u64) -> AppendEntriesRequest<FirnRaft> {
        AppendEntriesRequest {
            vote: crate::types::Vote::new_committed(1, 1),
            prev_log_id: Some(log_id(index - 1)),
            leader_commit: None,
            entries: vec![crate::types::Entry {
                log_id: log_id(index),
                payload: EntryPayload::Blank,
            }],
        }
    }

    /// A follower that takes `holds` appends before answering any, then answers them in
    /// order with `answer(i)` for the i-th; each append must come within 2 s.
    async fn follower(
        holds: usize,
        answer: fn(usize) -> AppendEntriesResponse<FirnRaft>,
    ) -> (String, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let task = tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let (mut sink, mut frames) = Framed::new(stream, codec()).split();
            let mut held = Vec::new();
            while held.len() < holds {
                let frame = tokio::time::timeout(Duration::from_secs(2), frames.next())
                    .await
                    .unwrap_or_else(|_| {
                        panic!("append {} not sent before an answer", held.len() + 1)
                    })
                    .unwrap()
                    .unwrap();
                let request: Envelope<PeerRequest> = postcard::from_bytes(&frame).unwrap();
                held.push(request.id);
            }
            for (i, id) in held.into_iter().enumerate() {
                let body = PeerResponse::Append(answer(i));
                sink.send(encode(&Envelope::new(id, body)).unwrap())
                    .await
                    .unwrap();
            }
        });
        (addr, task)
    }

    /// Appends 1, 2 and 3 sent with `in_flight` at most out to a follower that holds
    /// three before it answers them with `answer`: what the leader's end yielded.
    async fn three_appends(
        in_flight: usize,
        answer: fn(usize) -> AppendEntriesResponse<FirnRaft>,
    ) -> Vec<Answered> {
        let (addr, follower) = follower(3, answer).await;
        let pool = PeerPool::new(1, HashMap::from([(2, addr)])).with_appends_in_flight(in_flight);
        let to = Follower {
            me: 1,
            target: 2,
            shard: 0,
            pool: Arc::new(pool),
        };
        let input = futures::stream::iter((1..=3).map(append));
        let answers = send_appends(to, input, Duration::from_secs(5))
            .collect()
            .await;
        follower.await.unwrap();
        answers
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn appends_go_out_before_the_answers_to_those_before_them() {
        let answers = three_appends(4, |_| AppendEntriesResponse::Success).await;
        let matched: Vec<_> = answers.into_iter().map(|a| a.unwrap().unwrap()).collect();
        assert_eq!(matched, [1, 2, 3].map(|i| Some(log_id(i))));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_pipeline_stops_at_a_conflict() {
        let answers = three_appends(4, |i| match i {
            0 => AppendEntriesResponse::Success,
            _ => AppendEntriesResponse::Conflict,
        })
        .await;
        assert_eq!(answers.len(), 2, "{answers:?}");
        assert_eq!(answers[0].as_ref().unwrap(), &Ok(Some(log_id(1))));
        assert_eq!(
            answers[1].as_ref().unwrap(),
            &Err(StreamAppendError::Conflict(log_id(1)))
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_pipeline_stops_at_a_partial_success() {
        let answers = three_appends(4, |i| match i {
            0 => AppendEntriesResponse::Success,
            _ => AppendEntriesResponse::PartialSuccess(Some(log_id(1))),
        })
        .await;
        let matched: Vec<_> = answers.into_iter().map(|a| a.unwrap().unwrap()).collect();
        assert_eq!(matched, [Some(log_id(1)), Some(log_id(1))]);
    }
}
