//! What a coordinator that died leaves behind: parts prepared and never resolved. The leader
//! of each shard looks at its undecided parts every [`SWEEP_EVERY`]; one past its deadline
//! is decided by its anchor (which aborts a transaction still undecided — one entry, so the
//! decision is made once) and then resolved here as the anchor says.

use std::sync::Arc;
use std::time::Duration;

use firn_model::{CallContext, TxnOutcome};
use firn_store::{Op, TxnOp};
use tokio::sync::watch;

use crate::exec::Kernel;

/// How often a leader looks for parts past their deadline.
pub const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Resolves the parts past their deadline on the shards this node leads, until `stop`.
pub async fn run(kernel: Arc<Kernel>, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(SWEEP_EVERY) => {}
            _ = stop.changed() => return,
        }
        sweep(&kernel).await;
    }
}

/// One look at every shard this node leads.
pub(crate) async fn sweep(kernel: &Kernel) {
    let now_us = firn_model::hlc::system_wall_us();
    let ctx = CallContext::default();
    for replica in kernel.replicas().all() {
        if replica.leader() != Some(kernel.node_id()) {
            continue;
        }
        let shard = replica.shard_id();
        for part in replica.store().undecided() {
            if part.deadline_us > now_us {
                continue;
            }
            let txn = part.txn;
            let decide = Op::Txn(TxnOp::Decide {
                txn,
                decision: TxnOutcome::Aborted,
                answer: None,
            });
            let outcome = match kernel.finish_on(part.anchor, decide, &ctx).await {
                Ok(firn_model::Response::Decided { outcome, .. }) => outcome,
                Ok(other) => {
                    tracing::warn!("transaction {txn}: its anchor answered {other:?}");
                    continue;
                }
                Err(e) => {
                    tracing::info!(
                        "transaction {txn}: its anchor shard {} could not be asked ({e}); \
                         asking again",
                        part.anchor
                    );
                    continue;
                }
            };
            metrics::counter!("firn_txn_resolved_by_survivors_total").increment(1);
            tracing::info!(
                "transaction {txn} was left undecided on shard {shard} past its deadline: \
                 {outcome:?}, as its anchor shard {} holds",
                part.anchor
            );
            if part.anchor != shard {
                let resolve = Op::Txn(TxnOp::Resolve { txn, outcome });
                if let Err(e) = kernel.finish_on(shard, resolve, &ctx).await {
                    tracing::info!("transaction {txn}: resolving it on shard {shard}: {e}");
                }
            }
        }
    }
}
