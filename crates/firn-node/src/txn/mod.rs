//! Transactions across shards, the coordinator's side (docs/architecture.md, "Transactions
//! across shards"): a transaction whose keys span shards is prepared on every shard it
//! touches, decided by the record on its anchor shard, and resolved on the others — all
//! before its client is answered. A transaction within one shard is one entry
//! (`KvWrite::Atomic`) and never comes here. What a coordinator leaves undecided when it
//! dies, the participants' leaders resolve ([`resolver`]).

pub mod resolver;
mod split;

use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use firn_model::limits::{TXN_DEADLINE_MS, TXN_TRIES_MAX};
use firn_model::{
    Answer, CallContext, CommitTs, Compare, FirnError, IdemKey, Response, TxnId, TxnOutcome,
    TxnStep,
};
use firn_raft::ShardId;
use firn_store::{Op, TxnOp, TxnPart};

use self::split::Split;
use crate::cluster::layout::ClusterLayout;
use crate::exec::Kernel;
use crate::exec::plan::AcrossShards;
use crate::rpc::ShardPart;

/// How long a coordinator keeps asking a shard whose answer it needs to finish (the
/// decision, a participant's resolution) while the shard's leadership moves.
const FINISH_WAIT: Duration = Duration::from_secs(5);

/// What one try of a transaction came to.
enum Tried {
    Done(Box<Result<Response, FirnError>>),
    /// Another transaction held a key: tried again after a pause.
    Conflict(FirnError),
}

impl Kernel {
    /// Runs a transaction over the shards its keys are in: when every compare holds,
    /// `steps`, else `otherwise` (without it: nothing, and `Steps(None)`), all or none, at
    /// one commit stamp. A transaction that meets keys another one holds is tried again,
    /// backing off, up to [`TXN_TRIES_MAX`] times, then refused with `TRYAGAIN`.
    async fn transact(
        &self,
        ctx: &CallContext,
        layout: &ClusterLayout,
        compares: Vec<Compare>,
        steps: Vec<TxnStep>,
        otherwise: Option<Vec<TxnStep>>,
    ) -> Result<Answer, FirnError> {
        let split = Split::new(layout, compares, steps, otherwise);
        // The prepares, decision and resolutions are the transaction's own writes: an
        // idempotency key names the transaction, and only its decision is remembered.
        let once = ctx.once.clone();
        let ctx = &ctx.without_once();
        let mut last = None;
        for attempt in 0..TXN_TRIES_MAX {
            if attempt > 0 {
                tokio::time::sleep(backoff(attempt)).await;
            }
            match self.try_transaction(ctx, &split, once.as_ref()).await {
                Tried::Done(done) => {
                    let response = (*done)?;
                    return Ok(Answer {
                        observed: last_stamp(&response),
                        ..Answer::new(response)
                    });
                }
                Tried::Conflict(e) => {
                    metrics::counter!("firn_txn_conflicts_total").increment(1);
                    last = Some(e);
                }
            }
        }
        Err(FirnError::TryAgain(format!(
            "the transaction's keys were held by other transactions {TXN_TRIES_MAX} times ({}); \
             nothing was applied; retry",
            last.map(|e| e.to_string()).unwrap_or_default()
        )))
    }

    /// Runs a write planned as a transaction across shards ([`AcrossShards`]) to its
    /// answer: the transaction's, or its one step's.
    pub(crate) async fn transact_planned(
        &self,
        ctx: &CallContext,
        layout: &ClusterLayout,
        txn: AcrossShards,
    ) -> Result<Answer, FirnError> {
        let AcrossShards {
            compares,
            steps,
            otherwise,
            one_step,
        } = txn;
        let answer = self
            .transact(ctx, layout, compares, steps, otherwise)
            .await?;
        if !one_step {
            return Ok(answer);
        }
        match answer.response {
            Response::Steps(Some(mut steps)) if steps.len() == 1 => Ok(Answer {
                response: steps.remove(0)?,
                ..answer
            }),
            other => Err(FirnError::Internal(format!(
                "a one-step transaction answered {other:?}"
            ))),
        }
    }

    async fn try_transaction(
        &self,
        ctx: &CallContext,
        split: &Split,
        once: Option<&IdemKey>,
    ) -> Tried {
        let txn = new_txn_id(self.node_id());
        let deadline_us = firn_model::hlc::system_wall_us() + TXN_DEADLINE_MS * 1_000;
        let anchor = split.anchor;
        let prepares = split.parts.iter().map(|(&shard, part)| {
            let op = Op::Txn(TxnOp::Prepare {
                txn,
                part: TxnPart {
                    anchor,
                    is_anchor: shard == anchor,
                    deadline_us,
                    compares: part.compares.clone(),
                    steps: part.steps.clone(),
                    otherwise: part.otherwise.clone(),
                },
            });
            async move { (shard, self.run_on(shard, op, ctx).await) }
        });
        let prepared = futures::future::join_all(prepares).await;
        let has_otherwise = split.parts.values().any(|p| p.otherwise.is_some());
        let (mut then, mut instead) = (BTreeMap::new(), BTreeMap::new());
        let mut at = CommitTs::ZERO;
        let mut all_held = true;
        let mut refused: Option<Result<Response, FirnError>> = None;
        let mut conflict = None;
        let mut ends = CommitTs::MAX;
        for (shard, outcome) in prepared {
            match outcome {
                Ok(Response::Prepared {
                    at: p,
                    compared,
                    steps,
                    otherwise,
                    ends: part_ends,
                }) => {
                    at = at.max(p);
                    ends = ends.min(part_ends.unwrap_or(CommitTs::MAX));
                    all_held &= compared;
                    then.insert(shard, (p, steps));
                    instead.insert(shard, (p, otherwise.unwrap_or_default()));
                }
                Err(e @ FirnError::TxnConflict(_)) => conflict = Some(e),
                Err(e) => {
                    refused.get_or_insert(Err(e));
                }
                Ok(other) => {
                    refused.get_or_insert(Err(FirnError::Internal(format!(
                        "a prepare answered {other:?}"
                    ))));
                }
            }
        }
        // A key the prepares read expires by the transaction's stamp: what they answered
        // is no longer true there. Tried again, the prepares find it expired.
        if refused.is_none() && conflict.is_none() && at >= ends {
            conflict = Some(FirnError::TxnConflict(format!(
                "a key of transaction {txn} expires at {ends}, before its stamp {at}"
            )));
        }
        // A compare failed and nothing else is to run: EXEC answers nil.
        if refused.is_none() && conflict.is_none() && !all_held && !has_otherwise {
            refused = Some(Ok(Response::Steps(None)));
        }
        if refused.is_some() || conflict.is_some() {
            self.abort(ctx, txn, split).await;
            return match (refused, conflict) {
                (Some(done), _) => Tried::Done(Box::new(done)),
                (None, Some(e)) => Tried::Conflict(e),
                (None, None) => unreachable!("one of them is set"),
            };
        }
        fail::fail_point!("txn-after-prepare", |_| std::process::abort());
        let otherwise = !all_held;
        let steps = split.answers(otherwise, if otherwise { instead } else { then }, at);
        let answer = if has_otherwise {
            Response::Branch {
                succeeded: !otherwise,
                steps,
            }
        } else {
            Response::Steps(Some(steps))
        };
        // With an idempotency key, the decision is remembered under it with the answer: a
        // transaction sent again finds it (see `Op::Once`), whatever its own id.
        let decide = Op::Txn(TxnOp::Decide {
            txn,
            decision: TxnOutcome::Committed { at, otherwise },
            answer: once.map(|_| Box::new(answer.clone())),
        });
        let decide = match once {
            Some(key) => Op::Once {
                key: key.clone(),
                op: Box::new(decide),
            },
            None => decide,
        };
        match self.finish_on(anchor, decide, ctx).await {
            Ok(Response::Decided {
                txn: decided,
                outcome: outcome @ TxnOutcome::Committed { .. },
                ..
            }) if decided == txn => {
                fail::fail_point!("txn-after-decide", |_| std::process::abort());
                self.resolve_others(ctx, txn, split, outcome).await;
                Tried::Done(Box::new(Ok(answer)))
            }
            // The same key's transaction was decided before: this one applies nothing.
            Ok(Response::Decided {
                answer: Some(first),
                ..
            }) => {
                metrics::counter!("firn_idempotent_repeats_total").increment(1);
                self.abort(ctx, txn, split).await;
                Tried::Done(Box::new(Ok(*first)))
            }
            Ok(Response::Decided {
                outcome: TxnOutcome::Aborted,
                ..
            })
            | Err(FirnError::TxnConflict(_)) => {
                self.resolve_others(ctx, txn, split, TxnOutcome::Aborted)
                    .await;
                Tried::Done(Box::new(Err(FirnError::TryAgain(format!(
                    "transaction {txn} passed its deadline before it was decided and was \
                     aborted; nothing was applied; retry"
                )))))
            }
            Ok(other) => Tried::Done(Box::new(Err(FirnError::Internal(format!(
                "a decision answered {other:?}"
            ))))),
            // Its shards resolve it once its deadline passes, as its record says.
            Err(e) => Tried::Done(Box::new(Err(FirnError::Indeterminate(format!(
                "transaction {txn}'s decision was not heard ({e}); it is committed or aborted \
                 as its anchor shard {anchor} decided, and resolved within {} s",
                TXN_DEADLINE_MS / 1_000 + 2
            ))))),
        }
    }

    /// Aborts `txn`: the anchor's record first (a prepare still on its way then holds
    /// nothing for long), then every other part.
    async fn abort(&self, ctx: &CallContext, txn: TxnId, split: &Split) {
        let decide = Op::Txn(TxnOp::Decide {
            txn,
            decision: TxnOutcome::Aborted,
            answer: None,
        });
        if let Err(e) = self.finish_on(split.anchor, decide, ctx).await {
            tracing::debug!(
                "transaction {txn}: the abort was not heard ({e}); its shards resolve it past its deadline"
            );
            return;
        }
        self.resolve_others(ctx, txn, split, TxnOutcome::Aborted)
            .await;
    }

    /// Resolves `txn` on every shard but the anchor (which its decision resolved), each
    /// asked until it answers: the client is answered only after every part is resolved,
    /// so that no write after the answer can be stamped below the transaction.
    async fn resolve_others(
        &self,
        ctx: &CallContext,
        txn: TxnId,
        split: &Split,
        outcome: TxnOutcome,
    ) {
        let resolves = split
            .parts
            .keys()
            .filter(|&&s| s != split.anchor)
            .map(|&shard| {
                let op = Op::Txn(TxnOp::Resolve { txn, outcome });
                async move {
                    if let Err(e) = self.finish_on(shard, op, ctx).await {
                        tracing::debug!(
                            "transaction {txn}: shard {shard} did not confirm its resolution \
                             ({e}); it resolves it past the deadline"
                        );
                    }
                }
            });
        futures::future::join_all(resolves).await;
    }

    /// Runs a transaction entry on `shard` to its answer, asking again while the shard
    /// cannot take it or its answer is lost (a decision and a resolution may be applied
    /// twice: the second finds the first's outcome).
    async fn finish_on(
        &self,
        shard: ShardId,
        op: Op,
        ctx: &CallContext,
    ) -> Result<Response, FirnError> {
        let since = Instant::now();
        loop {
            match self.run_on(shard, op.clone(), ctx).await {
                Err(
                    e @ (FirnError::TryAgain(_)
                    | FirnError::Indeterminate(_)
                    | FirnError::Unavailable(_)
                    | FirnError::Busy(_)),
                ) if since.elapsed() < FINISH_WAIT => {
                    tracing::debug!("shard {shard}: {e}; asking again");
                    tokio::time::sleep(crate::exec::LEADER_CHANGE_PAUSE).await;
                }
                other => return other,
            }
        }
    }

    /// Runs `op` on `shard`'s leader, to its answer.
    async fn run_on(
        &self,
        shard: ShardId,
        op: Op,
        ctx: &CallContext,
    ) -> Result<Response, FirnError> {
        self.on_shard(shard, ShardPart::Write(op), ctx.clone(), 0)
            .await
            .await
            .map(|a| a.response)
    }
}

/// A fresh transaction id: the node, a counter, and random bits.
fn new_txn_id(node: u64) -> TxnId {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish() as u32;
    TxnId(((node as u128) << 64) | ((n as u128) << 32) | random as u128)
}

/// The pause before try `attempt` (1…): 1, 2, 4 … 64 ms, with jitter of up to as much
/// again, so that two transactions that met do not meet again.
fn backoff(attempt: u32) -> Duration {
    let base = 1u64 << (attempt - 1).min(6);
    let jitter = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
        % (base * 1_000);
    Duration::from_micros(base * 1_000 + jitter)
}

/// The stamp the transaction's writes carry, for the client's causality token.
fn last_stamp(response: &Response) -> Option<CommitTs> {
    let (Response::Steps(Some(steps)) | Response::Branch { steps, .. }) = response else {
        return None;
    };
    steps
        .iter()
        .filter_map(|s| match s {
            Ok(Response::Written(ws)) => ws.iter().map(|w| w.commit_ts).max(),
            Ok(Response::Changed { written, .. }) => Some(written.commit_ts),
            _ => None,
        })
        .max()
}
