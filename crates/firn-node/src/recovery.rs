//! Recovery of a memory replica after a restart (Viewstamped Replication's rule, as SplitFT
//! uses it): a replica of a `memory` shard acknowledged entries it held only in memory, so
//! after a crash its log may be shorter than what it promised. Until it has caught up it
//! refuses every vote and stands for no election (`ShardReplica::is_recovering`); this task
//! decides when it has:
//!
//! - **Caught up**: a leader other than itself answers its read index (everything committed,
//!   so everything acknowledged, before the ask) and this replica has applied it.
//! - **A majority is recovering too**: no leader answers (none is known, or the one known —
//!   after a restart, the leader from before it — cannot serve a read index) and a majority
//!   of the group's voters (this one included) say they restarted and have seen no leader
//!   since: recovering, or recovered by this same count. The group then goes on from what
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
                    replica.recovered_by_count();
                } else {
                    replica.recovered();
                }
                return;
            }
            None => continue,
        }
    }
}

/// One look: how the replica recovered, if it has.
///
/// The leader this replica knows may be no leader at all: right after a restart it is the
/// one its stored vote names, the leader from before the restart, which may be restarting
/// too (recovering, or a candidate whose votes the recovering refuse) and can answer no read
/// index. So a leader that does not answer is no reason to stop looking: the majority count
/// runs next, whatever `leader()` says. Waiting only on that leader deadlocked a group whose
/// every replica restarted — the old leader ended its recovery by the count and stood for
/// election; its followers, asking it for a read index, never counted and refused its votes.
/// A leader that answers leads: the replica catches up from it and does not count.
async fn step(replica: &Arc<ShardReplica>, peers: &PeerClient) -> Option<&'static str> {
    match ask_leader(replica, peers).await {
        LeaderSays::CaughtUp => Some("caught_up"),
        // A leader leads: catching up from it is the way; counting would not be.
        LeaderSays::Behind => None,
        LeaderSays::Nothing => majority_recovering(replica, peers)
            .await
            .then_some("majority_recovering"),
    }
}

/// What asking the leader this replica knows for its read index came to.
enum LeaderSays {
    /// It answered, and this replica has applied its read index.
    CaughtUp,
    /// It answered, and this replica has not applied its read index yet.
    Behind,
    /// None is known other than this replica, or the one known did not answer.
    Nothing,
}

async fn ask_leader(replica: &Arc<ShardReplica>, peers: &PeerClient) -> LeaderSays {
    let Some(leader) = replica.leader().filter(|l| *l != replica.node_id()) else {
        return LeaderSays::Nothing;
    };
    let asked = peers.call_within(
        leader,
        ReadIndex {
            shard: replica.shard_id(),
            lease: false,
        },
        ASK_WAIT,
    );
    let Ok(Ok(index)) = asked.await else {
        return LeaderSays::Nothing;
    };
    match replica.wait_applied(index, CATCH_UP_WAIT).await {
        Ok(()) => LeaderSays::CaughtUp,
        Err(_) => LeaderSays::Behind,
    }
}

/// Whether a majority of the group's voters, this replica included, say they restarted
/// and have seen no leader since (recovering, or recovered by this same count: see
/// `ShardReplica::restarted_without_leader`): a majority restarted, and no replica can
/// vouch for more than the disks hold.
async fn majority_recovering(replica: &Arc<ShardReplica>, peers: &PeerClient) -> bool {
    let shard = replica.shard_id();
    let me = replica.node_id();
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
    recovering > voters.len() / 2
}
