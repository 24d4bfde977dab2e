//! Where a shard's write runs: proposed here when this node leads the shard, else forwarded
//! to its leader. At the node its client reached, a write the leader never took (it could
//! not be reached, or it no longer led the shard, while leadership moves) waits for the
//! shard's leadership to settle and is tried again, for at most [`LEADER_WAIT`]: a client
//! writing at any node sees its leader's failure as a delay, not an error. A write whose
//! outcome is unknown (sent, and no answer) is never tried again. One a leader here took and
//! then refused (it stepped down before appending it: `TRYAGAIN`, nothing applied) is sent
//! again once its answer is awaited, by a caller that submitted nothing after it
//! ([`Kernel::again_while_refused`]); a connection that pipelined later writes behind it
//! gets its `TRYAGAIN`, since a second try would overtake them.

use std::sync::Arc;
use std::time::Instant;

use firn_model::{Answer, CallContext, FirnError};
use firn_raft::ShardId;
use firn_store::Op;

use super::{Kernel, LEADER_CHANGE_PAUSE, Pending, ready};
use crate::replicas::LEADER_WAIT;
use crate::rpc::{CallError, ShardPart};

/// One try of a write.
enum Tried {
    /// Proposed here (its outcome to come), or answered.
    Done(Pending),
    /// Not taken by the shard's leader: nothing happened. The write comes back, to be tried
    /// again (at the node its client reached; elsewhere it is not kept).
    NotTaken(FirnError, Option<Box<Op>>),
}

impl Kernel {
    /// Runs a write on its shard's leader. The future finishes once the write is proposed in
    /// order; the `Pending` it yields finishes with the answer (see `on_shard`).
    pub(super) async fn write(
        &self,
        shard: ShardId,
        mut op: Op,
        ctx: CallContext,
        hops: u8,
    ) -> Pending {
        let since = Instant::now();
        let planned_by = self.layout();
        loop {
            match self.try_write(shard, op, &ctx, hops).await {
                Tried::Done(pending) => return pending,
                // Sent again only by the node its client reached (only there is `again`
                // kept): a write forwarded here is tried once, so waits do not stack. Not
                // to the same shard once the layout changed: the write may belong to
                // another shard now (a keyspace defined meanwhile), and its refusal goes
                // back to be planned again (`again_while_refused`).
                Tried::NotTaken(_, Some(again))
                    if since.elapsed() < LEADER_WAIT
                        && Arc::ptr_eq(&planned_by, &self.layout()) =>
                {
                    metrics::counter!("firn_write_retries_total").increment(1);
                    tokio::time::sleep(LEADER_CHANGE_PAUSE).await;
                    op = *again;
                }
                Tried::NotTaken(e, _) => return ready(Err(e)),
            }
        }
    }

    async fn try_write(&self, shard: ShardId, op: Op, ctx: &CallContext, hops: u8) -> Tried {
        let leader = match self.leader_of(shard).await {
            Ok(l) => l,
            Err(e) => return Tried::Done(ready(Err(e))),
        };
        let Some(replica) = self.replicas.get(shard).filter(|_| leader == self.node_id) else {
            let again = (hops == 0).then(|| Box::new(op.clone()));
            let part = ShardPart::Write(op);
            return match self.forward(leader, shard, part, ctx.clone(), hops).await {
                Ok(Err(e @ FirnError::TryAgain(_))) | Err(CallError::NotSent(e)) => {
                    Tried::NotTaken(e, again)
                }
                Ok(answer) => Tried::Done(ready(answer)),
                Err(e @ (CallError::Failed(_) | CallError::Unanswered(_))) => {
                    Tried::Done(ready(Err(e.into())))
                }
            };
        };
        if op.adds_data()
            && let Err(e) = self.disk_allows(shard)
        {
            return Tried::Done(ready(Err(e)));
        }
        // A write after a token is stamped above it.
        if let Some(t) = ctx.after {
            replica.observe(t);
        }
        // A write with an idempotency key is remembered by the shard that applies it.
        let op = match &ctx.once {
            Some(key) => Op::Once {
                key: key.clone(),
                op: Box::new(op),
            },
            None => op,
        };
        Tried::Done(match replica.propose(op).await {
            Ok(p) => Box::pin(async move { p.await.map(Answer::new) }),
            Err(e) => ready(Err(e)),
        })
    }
}

/// Sends a write again with `send` every [`LEADER_CHANGE_PAUSE`] while its answer is a
/// refusal for now ([`refused_for_now`]), until [`LEADER_WAIT`] after `since` or until
/// `still_fits` says the write no longer fits what it was planned for; then the last answer.
pub async fn resend_while_refused<F, Fut>(
    since: Instant,
    mut result: Result<Answer, FirnError>,
    mut still_fits: impl FnMut() -> bool,
    mut send: F,
) -> Result<Answer, FirnError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Answer, FirnError>>,
{
    while refused_for_now(&result) && since.elapsed() < LEADER_WAIT && still_fits() {
        metrics::counter!("firn_write_retries_total").increment(1);
        tokio::time::sleep(LEADER_CHANGE_PAUSE).await;
        result = send().await;
    }
    result
}

/// Whether a write's answer is a refusal the node its client reached sends the write again
/// after: `TRYAGAIN` (nothing applied), but not a node at its limit (`Busy`: it asks for a
/// pause, which is the client's to make) nor anything whose outcome is unknown.
fn refused_for_now(result: &Result<Answer, FirnError>) -> bool {
    matches!(result, Err(FirnError::TryAgain(_)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused() -> Result<Answer, FirnError> {
        Err(FirnError::TryAgain("not the leader".into()))
    }

    /// Refused twice, then taken: sent three times in all, and the answer is the last one.
    #[tokio::test]
    async fn a_write_refused_for_now_is_sent_until_it_is_taken() {
        let sent = std::cell::Cell::new(0);
        let answer = resend_while_refused(
            Instant::now(),
            refused(),
            || true,
            || {
                sent.set(sent.get() + 1);
                let n = sent.get();
                async move {
                    if n < 3 {
                        refused()
                    } else {
                        Ok(Answer::new(firn_model::Response::Done))
                    }
                }
            },
        )
        .await;
        assert!(answer.is_ok(), "{answer:?}");
        assert_eq!(sent.get(), 3);
    }

    /// A write that no longer fits its plan (say a large value's key left the shard its value
    /// was uploaded to) is not sent again: its refusal is the answer. Nor is a write past
    /// `LEADER_WAIT`, nor one that was not refused for now.
    #[tokio::test]
    async fn a_write_is_not_sent_again_once_it_no_longer_fits_or_waited_enough() {
        let sent = std::cell::Cell::new(0);
        let send = || {
            sent.set(sent.get() + 1);
            async { refused() }
        };
        let answer = resend_while_refused(Instant::now(), refused(), || false, send).await;
        assert!(refused_for_now(&answer));
        assert_eq!(sent.get(), 0);
        let long_ago = Instant::now() - LEADER_WAIT;
        let answer = resend_while_refused(long_ago, refused(), || true, send).await;
        assert!(refused_for_now(&answer));
        assert_eq!(sent.get(), 0);
        let busy = Err(FirnError::Busy("node 2 is busy".into()));
        let answer = resend_while_refused(Instant::now(), busy, || true, send).await;
        assert!(matches!(answer, Err(FirnError::Busy(_))), "{answer:?}");
        assert_eq!(sent.get(), 0);
        // Fits for one more try only: sent once, still refused, and that is the answer.
        let fits = std::cell::Cell::new(1);
        let answer =
            resend_while_refused(Instant::now(), refused(), || fits.replace(0) > 0, send).await;
        assert!(refused_for_now(&answer));
        assert_eq!(sent.get(), 1);
    }

    #[test]
    fn only_a_refusal_for_now_is_sent_again_not_a_node_at_its_limit() {
        let err = |e: FirnError| -> Result<Answer, FirnError> { Err(e) };
        assert!(refused_for_now(&err(FirnError::TryAgain(
            "not the leader".into()
        ))));
        assert!(!refused_for_now(&err(FirnError::Busy(
            "node 2 is busy".into()
        ))));
        assert!(!refused_for_now(&err(FirnError::Indeterminate(
            "no answer".into()
        ))));
        assert!(!refused_for_now(&Ok(Answer::new(
            firn_model::Response::Done
        ))));
        // A client sees both as TRYAGAIN, 503.
        for e in [
            FirnError::TryAgain(String::new()),
            FirnError::Busy(String::new()),
        ] {
            assert_eq!((e.resp_code(), e.http_status()), ("TRYAGAIN", 503));
        }
    }
}
