//! Recovery of a memory replica after a restart (Viewstamped Replication's rule, as SplitFT
//! uses it): a replica of a `memory` shard acknowledged entries it held only in memory, so
//! after a crash its log may be shorter than what it promised. Until it has caught up it
//! refuses every vote and stands for no election (`ShardReplica::is_recovering`); this task
//! decides when it has:
//!
//! - **Caught up**: a leader other than itself answers its read index (everything committed,
//!   so everything acknowledged, before the ask) and this replica has applied it.
//! - **A majority is recovering too**: no leader can be found and a majority of the group's
//!   voters (this one included) say they are recovering. The group then goes on from what
//!   its disks hold; writes since the last checkpoint that no surviving replica still holds
//!   are lost. This is the documented loss of a majority crash.

use std::sync::{Arc, Weak};
use std::time::Duration;

use firn_raft::ShardReplica;

use crate::rpc::{PeerClient, ReadIndex, Recovering};

/// How often a recovering replica looks for a leader or counts the recovering.
const RECOVERY_TICK: Duration = Duration::from_millis(200);
/// Longest one ask (a read index, a peer's state) may take.
const ASK_WAIT: Duration = Duration::from_secs(2);
/// Longest the replica waits to apply a leader's read index before asking again.
const CATCH_UP_WAIT: Duration = Duration::from_secs(10);

/// Runs until `replica` has recovered or is closed.
pub async fn run(replica: Weak<ShardReplica>, peers: PeerClient) {
    let mut tick = tokio::time::interval(RECOVERY_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(replica) = replica.upgrade() else {
            return;
        };
        if !replica.is_recovering() {
            return;
        }
        match step(&replica, &peers).await {
            Some(outcome) => {
                metrics::counter!("firn_memory_recoveries_total", "outcome" => outcome)
                    .increment(1);
                if outcome == "majority_recovering" {
                    tracing::warn!(
                        shard = replica.shard_id(),
                        "a majority of this memory shard's replicas restarted: it goes on \
                         from what their disks hold; writes acknowledged since the last \
                         checkpoint that no running replica holds are lost"
                    );
                }
                replica.recovered();
                return;
            }
            None => continue,
        }
    }
}

/// One look: how the replica recovered, if it has.
async fn step(replica: &Arc<ShardReplica>, peers: &PeerClient) -> Option<&'static str> {
    let shard = replica.shard_id();
    let me = replica.node_id();
    if let Some(leader) = replica.leader().filter(|l| *l != me) {
        let asked = peers.call_within(
            leader,
            ReadIndex {
                shard,
                lease: false,
            },
            ASK_WAIT,
        );
        if let Ok(Ok(index)) = asked.await
            && replica.wait_applied(index, CATCH_UP_WAIT).await.is_ok()
        {
            return Some("caught_up");
        }
        return None;
    }
    let (voters, _) = replica.members();
    let mut recovering = usize::from(voters.contains(&me));
    for voter in voters.iter().filter(|v| **v != me) {
        if let Ok(true) = peers
            .call_within(*voter, Recovering { shard }, ASK_WAIT)
            .await
        {
            recovering += 1;
        }
    }
    (recovering > voters.len() / 2).then_some("majority_recovering")
}
