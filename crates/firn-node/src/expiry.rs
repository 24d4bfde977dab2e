//! Writing down expiries (docs/architecture.md, "Keys that expire"): reads see an expired
//! key deleted at once; the leader of each shard writes the tombstones down, stamped at each
//! expiry, when the soonest is due (looking every [`LOOK_EVERY`]).

use std::sync::Arc;
use std::time::Duration;

use firn_model::{CommitTs, Response};
use firn_store::{Op, SystemOp};
use tokio::sync::watch;

use crate::exec::Kernel;

/// How often a leader looks at its shards' soonest expiry.
pub const LOOK_EVERY: Duration = Duration::from_millis(100);

/// Writes down due expiries on the shards this node leads, until `stop`.
pub async fn run(kernel: Arc<Kernel>, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(LOOK_EVERY) => {}
            _ = stop.changed() => return,
        }
        look(&kernel).await;
    }
}

async fn look(kernel: &Kernel) {
    for replica in kernel.replicas().all() {
        if replica.leader() != Some(kernel.node_id()) {
            continue;
        }
        loop {
            let now = CommitTs::new(firn_model::hlc::system_wall_us(), 0);
            match replica.store().next_expiry() {
                Ok(Some(soonest)) if soonest <= now => {}
                Ok(_) => break,
                Err(e) => {
                    tracing::warn!(
                        shard = replica.shard_id(),
                        "reading the soonest expiry: {e}"
                    );
                    break;
                }
            }
            match replica.write(Op::System(SystemOp::ExpireDue)).await {
                Ok(Response::Count(n)) => {
                    metrics::counter!("firn_expiries_written_total").increment(n);
                    // A full sweep leaves more due; otherwise what is left waits (a key a
                    // transaction holds) for the next look.
                    if n < firn_store::EXPIRE_DUE_MAX as u64 {
                        break;
                    }
                }
                Ok(_) => break,
                Err(e) => {
                    tracing::debug!(shard = replica.shard_id(), "writing down expiries: {e}");
                    break;
                }
            }
        }
    }
}
