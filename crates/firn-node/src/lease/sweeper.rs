//! The end of leases that ran out: the leader of each shard looks at the leases its shard
//! keeps every [`SWEEP_EVERY`] and ends each one past its running-out time (record and
//! attached keys in one transaction, [`Kernel::end_lease`]).

use std::sync::Arc;
use std::time::Duration;

use firn_model::{CallContext, CommitTs};
use tokio::sync::watch;

use crate::exec::Kernel;

/// How often a leader looks for leases that ran out: a lease's keys go at most this long
/// (and one transaction) after it.
pub const SWEEP_EVERY: Duration = Duration::from_millis(250);

/// Leases one look ends per shard; the next look takes the rest.
const ENDS_PER_SWEEP: usize = 64;

/// Ends the leases that ran out on the shards this node leads, until `stop`.
pub async fn run(kernel: Arc<Kernel>, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(SWEEP_EVERY) => {}
            _ = stop.changed() => return,
        }
        sweep(&kernel).await;
    }
}

async fn sweep(kernel: &Kernel) {
    let now = CommitTs::new(firn_model::hlc::system_wall_us(), 0);
    let ctx = CallContext::default();
    for replica in kernel.replicas().all() {
        if replica.leader() != Some(kernel.node_id()) {
            continue;
        }
        let ran_out = match replica.store().leases_run_out(now, ENDS_PER_SWEEP) {
            Ok(ids) => ids,
            Err(e) => {
                tracing::warn!(
                    shard = replica.shard_id(),
                    "listing leases that ran out: {e}"
                );
                continue;
            }
        };
        for id in ran_out {
            match kernel.end_lease(&ctx, id, false).await {
                Ok(_) => metrics::counter!("firn_leases_ended_total", "by" => "ttl").increment(1),
                Err(e) => {
                    tracing::info!("lease {id} ran out; ending it: {e} (again at the next look)")
                }
            }
        }
    }
}
