//! The node's clock against the bound on clock offsets, acted on (see `crate::clock`): a
//! look four times a second, and every replica here following what it finds.

use std::sync::Arc;

use firn_raft::{NodeId, ShardReplica};
use tokio::sync::watch;

use super::Kernel;

/// Looks at the clock every [`crate::clock::LOOK_EVERY`] until `stop`, and has every replica here (the
/// meta group's among them) follow what it finds: beyond the bound, a replica that leads
/// hands leadership to a node whose clock is within it (as that node says), if any.
pub async fn follow_clock(
    kernel: Arc<Kernel>,
    meta: Arc<ShardReplica>,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(crate::clock::LOOK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let bound = kernel.clock_bound();
        bound.read_offset_file();
        bound.look();
        let mut replicas = kernel.replicas().all();
        replicas.push(meta.clone());
        let leads = replicas
            .iter()
            .any(|r| r.leader() == Some(kernel.node_id()));
        let within: Vec<NodeId> = if !bound.clock().within_bound() && leads {
            kernel
                .cluster_view()
                .await
                .nodes
                .iter()
                .filter(|n| n.clock.as_ref().is_some_and(|c| c.within_bound))
                .map(|n| n.node_id)
                .collect()
        } else {
            Vec::new()
        };
        for replica in replicas {
            replica.follow_clock_bound(&within).await;
        }
    }
}
