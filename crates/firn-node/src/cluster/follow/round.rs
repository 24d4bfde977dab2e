//! The steward's follow round, on the meta leader: gathers every node's origin counts, feeds
//! the [`FollowTracker`], and makes at most one follow move — recorded in the layout first,
//! then a leader transfer or a replica move. It never runs while no keyspace follows or is
//! pinned, and never moves anything while another replica move is pending.

use firn_model::FirnError;
use firn_raft::ShardId;

use super::{FollowAction, FollowMove, FollowTracker, decide, follows_any, tally};
use crate::cluster::ShardHost;
use crate::cluster::layout::ClusterLayout;
use crate::cluster::meta::Meta;
use crate::cluster::steward::move_replica;

/// One follow round. Answers whether it changed anything (the steward then ends its round).
pub async fn follow_round(
    host: &dyn ShardHost,
    meta: &Meta,
    layout: &ClusterLayout,
    tracker: &mut FollowTracker,
) -> Result<bool, FirnError> {
    if !follows_any(layout) {
        if tracker.forget() {
            for shard in layout.shard_ids() {
                share_gauge(shard, 0.0);
            }
        }
        if layout.followed.is_empty() {
            return Ok(false);
        }
        // Nothing follows any more: the leaders stay, and may be spread again.
        meta.update(|l| Ok(!std::mem::take(&mut l.followed).is_empty()))
            .await?;
        return Ok(true);
    }
    let tallies = tally(&host.origin_counts().await);
    for shard in layout.shard_ids() {
        let share = tallies
            .get(&shard)
            .and_then(|t| t.top_share())
            .map_or(0.0, |(_, s)| s);
        share_gauge(shard, share);
    }
    let now_ms = wall_ms();
    let wants = tracker.observe(now_ms, &tallies);
    if wants.is_empty() || layout.next_move().is_some() {
        return Ok(false);
    }
    // Asked of every node only when a shard may need a move: in the steady state the leader
    // this node's replica knows is already where the clients are.
    let mut view = None;
    for (shard, want) in wants {
        if host.known_leader(shard) == Some(want.node()) {
            continue;
        }
        if view.is_none() {
            view = Some(host.cluster_view().await);
        }
        let leader = view
            .iter()
            .flat_map(|v| &v.shards)
            .find(|s| s.shard_id == shard)
            .and_then(|s| s.leader);
        let Some(action) = decide(now_ms, shard, leader, want, layout, tracker.settings()) else {
            continue;
        };
        let record = action.record(now_ms, want);
        tracing::info!(shard, ?action, %want, "a shard's leader follows its clients");
        remember(meta, shard, record).await?;
        match action {
            FollowAction::Transfer { from, to } => host.transfer_leader(from, shard, to).await?,
            FollowAction::AddReplica(step) => move_replica(host, meta, layout, shard, step).await?,
        }
        metrics::counter!(
            "firn_leader_follow_moves_total",
            "shard" => shard.to_string(),
            "step" => record.step.name()
        )
        .increment(1);
        return Ok(true);
    }
    Ok(false)
}

/// Records a follow move in the layout before it is made: the minimum interval is measured
/// from it whichever node leads the meta group next, and replica balancing leaves it alone.
async fn remember(meta: &Meta, shard: ShardId, record: FollowMove) -> Result<(), FirnError> {
    meta.update(|l| Ok(l.followed.insert(shard, record) != Some(record)))
        .await
        .map(|_| ())
}

/// The busiest origin's share of `shard`'s following requests, on `/metrics`.
fn share_gauge(shard: ShardId, share: f64) {
    metrics::gauge!("firn_leader_follow_share", "shard" => shard.to_string()).set(share);
}

/// Wall-clock milliseconds since the Unix epoch: the time follow moves are recorded at.
fn wall_ms() -> u64 {
    firn_model::hlc::system_wall_us() / 1_000
}
