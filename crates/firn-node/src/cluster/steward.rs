//! The meta leader's steward: one round at a time, it keeps every node in the meta group,
//! brings every shard's keyspaces in line with the layout, drops drained nodes, advances
//! one replica move, moves leaders toward their clients ([`super::follow`]) and spreads shard
//! leaders.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::time::Duration;

use firn_model::{FirnError, Response};
use firn_raft::NodeId;

use super::ShardHost;
use super::follow::FollowTracker;
use super::follow::round::follow_round;
use super::layout::{ClusterLayout, Move, keyspace_repairs};
use super::meta::Meta;
use crate::rpc::{PeerClient, ShardPart};

/// How often the meta leader looks for work (meta membership, replica moves, leaders).
pub const STEWARD_INTERVAL: Duration = Duration::from_millis(500);

/// One round of the meta leader's work. Each part is idempotent: a round cut short (a
/// leader change, a node down) is picked up by the next one, on whichever node leads then.
pub async fn steward(
    host: &dyn ShardHost,
    peers: &PeerClient,
    meta: &Meta,
    follow: &mut FollowTracker,
) -> Result<(), FirnError> {
    let router = host;
    let Some((_, layout)) = meta.layout()? else {
        return Ok(());
    };
    meta_membership(peers, meta, &layout).await?;
    sync_keyspaces(router, meta, &layout).await?;
    let drained = layout.drained();
    if !drained.is_empty() {
        meta.update(|l| {
            for n in &drained {
                l.nodes.remove(n);
                l.leaving.remove(n);
            }
            Ok(true)
        })
        .await?;
        tracing::info!(nodes = ?drained, "removed from the cluster");
        return Ok(());
    }
    // Every round, so that a dominance is seen to hold round after round; it moves
    // nothing while a replica move is pending.
    if follow_round(router, meta, &layout, follow).await? {
        return Ok(());
    }
    if let Some((shard, step)) = layout.stranded_move() {
        return abandon_move(router, meta, &layout, shard, step).await;
    }
    match layout.next_move() {
        Some((shard, step)) => move_replica(router, meta, &layout, shard, step).await,
        None if layout.spread_leaders => {
            if balance_leaders(router, &layout).await? {
                meta.update(|l| Ok(std::mem::replace(&mut l.spread_leaders, false)))
                    .await?;
            }
            Ok(())
        }
        // Leaders also drift after the moves are done (an election when a node restarts,
        // stalls or catches up): looked at again now and then, and moved only where one
        // node leads at least two shards more than a replica of one of them does.
        None if meta
            .rounds
            .load(Ordering::Relaxed)
            .is_multiple_of(LEADER_CHECK_EVERY) =>
        {
            balance_leaders(router, &layout).await.map(|_| ())
        }
        None => Ok(()),
    }
}

/// Brings every shard's keyspaces in line with the layout's (a definition whose fan-out
/// failed part-way is finished here), checking a shard only every `KEYSPACE_CHECK_EVERY`
/// rounds. A layout from before keyspaces lived here first adopts shard 0's list.
async fn sync_keyspaces(
    router: &dyn ShardHost,
    meta: &Meta,
    layout: &ClusterLayout,
) -> Result<(), FirnError> {
    let round = meta.rounds.fetch_add(1, Ordering::Relaxed);
    let Some(want) = &layout.keyspaces else {
        let Some(first) = layout.shards.first() else {
            return Ok(());
        };
        let Response::Keyspaces(has) = router.run_on(first.id, ShardPart::Keyspaces).await? else {
            return Err(FirnError::Internal("a keyspace list was expected".into()));
        };
        meta.update(|l| {
            if l.keyspaces.is_some() {
                return Ok(false);
            }
            l.keyspaces = Some(has.clone());
            Ok(true)
        })
        .await?;
        return Ok(());
    };
    if !round.is_multiple_of(KEYSPACE_CHECK_EVERY) {
        return Ok(());
    }
    for shard in layout.shard_ids() {
        let Response::Keyspaces(has) = router.run_on(shard, ShardPart::Keyspaces).await? else {
            continue;
        };
        for fix in keyspace_repairs(want, &has) {
            tracing::info!(shard, ?fix, "bringing a shard's keyspaces in line");
            router.run_on(shard, ShardPart::Write(fix)).await?;
        }
    }
    Ok(())
}

/// Steward rounds between looks at how leaders are spread once no move is pending (500 ms
/// each: 10 s).
const LEADER_CHECK_EVERY: u64 = 20;

/// Steward rounds between checks of the shards' keyspaces (500 ms each).
const KEYSPACE_CHECK_EVERY: u64 = 10;

/// Keeps every node in the meta group: the chosen few as voters, the rest as learners.
async fn meta_membership(
    peers: &PeerClient,
    meta: &Meta,
    layout: &ClusterLayout,
) -> Result<(), FirnError> {
    let replica = meta.replica();
    let (voters, learners) = replica.members();
    for (&node, addr) in &layout.nodes {
        if !voters.contains(&node) && !learners.contains(&node) {
            peers.set_addr(node, addr);
            replica.add_learner(node, addr, false).await?;
        }
    }
    let want = layout.meta_voters(&voters);
    if want != voters {
        for node in want.difference(&voters) {
            replica
                .add_learner(*node, &layout.nodes[node], true)
                .await?;
        }
        tracing::info!(from = ?voters, to = ?want, "changing the meta group's voters");
        replica.set_voters(want.clone(), true).await?;
    }
    let gone: BTreeSet<NodeId> = replica
        .members()
        .1
        .into_iter()
        .filter(|n| !layout.nodes.contains_key(n))
        .collect();
    if !gone.is_empty() {
        replica.remove_learners(gone).await?;
    }
    Ok(())
}

/// Advances one replica move: record it (the added node opens its replica when it sees the
/// record), have the shard's leader change the group's voters (the new replica catches up
/// first), then record the new replica set (the removed node closes its replica).
pub(super) async fn move_replica(
    router: &dyn ShardHost,
    meta: &Meta,
    layout: &ClusterLayout,
    shard: u32,
    step: Move,
) -> Result<(), FirnError> {
    let current = layout.shard(shard);
    if current.moving.is_none() {
        tracing::info!(shard, add = ?step.add, remove = ?step.remove, "moving a replica");
        meta.update(|l| {
            let s = &mut l.shards[shard as usize];
            if s.moving.is_some() {
                return Ok(false);
            }
            s.moving = Some(step);
            s.formed_by = None;
            Ok(true)
        })
        .await?;
        return Ok(());
    }
    let mut voters: Vec<NodeId> = current.replicas.clone();
    if let Some(a) = step.add
        && !voters.contains(&a)
    {
        voters.push(a);
    }
    voters.retain(|n| Some(*n) != step.remove);
    set_shard_voters(router, layout, shard, &voters).await?;
    meta.update(|l| {
        let s = &mut l.shards[shard as usize];
        if s.moving != Some(step) {
            return Ok(false);
        }
        s.replicas = voters.clone();
        s.moving = None;
        l.spread_leaders = true;
        Ok(true)
    })
    .await?;
    tracing::info!(shard, replicas = ?voters, "replica move done");
    Ok(())
}

/// Abandons a move whose new replica's node is no longer active ([`ClusterLayout::
/// stranded_move`]): the shard's leader sets the group's voters back to the layout's
/// replicas (the leader may have added the new one already), then the layout forgets the
/// move. Needs the shard's leader, as every move does; a round that fails is retried.
async fn abandon_move(
    router: &dyn ShardHost,
    meta: &Meta,
    layout: &ClusterLayout,
    shard: u32,
    step: Move,
) -> Result<(), FirnError> {
    tracing::warn!(
        shard,
        add = ?step.add,
        "abandoning a replica move: the node it adds a replica on is being removed"
    );
    set_shard_voters(router, layout, shard, &layout.shard(shard).replicas).await?;
    meta.update(|l| {
        let s = &mut l.shards[shard as usize];
        if s.moving != Some(step) {
            return Ok(false);
        }
        s.moving = None;
        Ok(true)
    })
    .await?;
    Ok(())
}

/// Has the shard's leader make `voters` (with their addresses from the layout) its group's
/// voters and only members.
async fn set_shard_voters(
    router: &dyn ShardHost,
    layout: &ClusterLayout,
    shard: u32,
    voters: &[NodeId],
) -> Result<(), FirnError> {
    let with_addrs: BTreeMap<NodeId, String> = voters
        .iter()
        .filter_map(|n| layout.nodes.get(n).map(|a| (*n, a.clone())))
        .collect();
    let leader = shard_leader(router, shard).await?;
    router.set_voters(leader, shard, with_addrs).await
}

/// The leader of `shard`, as its replicas report it.
async fn shard_leader(router: &dyn ShardHost, shard: u32) -> Result<NodeId, FirnError> {
    // A replica here that knows its leader; not one just opened for a move, which learns
    // of the group only once the leader adds it.
    if let Some(leader) = router.known_leader(shard) {
        return Ok(leader);
    }
    router
        .cluster_view()
        .await
        .shards
        .iter()
        .find(|s| s.shard_id == shard)
        .and_then(|s| s.leader)
        .ok_or_else(|| FirnError::Unavailable(format!("shard {shard} has no known leader")))
}

/// Spreads shard leaders: while one node leads two more shards than another node that holds
/// a replica of one of them, hand that shard's leadership over. Answers whether leaders are
/// spread.
async fn balance_leaders(
    router: &dyn ShardHost,
    layout: &ClusterLayout,
) -> Result<bool, FirnError> {
    if layout.shards.len() < 2 {
        return Ok(true);
    }
    let view = router.cluster_view().await;
    // Moving leaders briefly pauses writes to the shard: only in a cluster at rest.
    if view.nodes.iter().any(|n| !n.up) || view.shards.iter().any(|s| s.moving.is_some()) {
        return Ok(false);
    }
    let mut led: BTreeMap<NodeId, usize> = layout.active().into_iter().map(|n| (n, 0)).collect();
    for s in &view.shards {
        match s.leader {
            Some(l) => *led.entry(l).or_default() += 1,
            None => return Ok(false), // an election is under way: wait for it
        }
    }
    let Some((&most, &n_most)) = led.iter().max_by_key(|(n, c)| (**c, **n)) else {
        return Ok(true);
    };
    // Leaders placed by a follow move stay where their clients are.
    for s in view
        .shards
        .iter()
        .filter(|s| s.leader == Some(most) && !layout.followed.contains_key(&s.shard_id))
    {
        let to = s
            .replicas
            .iter()
            .filter(|r| led.get(r).is_some_and(|c| c + 1 < n_most))
            .min_by_key(|r| led[r]);
        if let Some(&to) = to {
            tracing::info!(
                shard = s.shard_id,
                from = most,
                to,
                "moving a shard's leadership"
            );
            return router
                .transfer_leader(most, s.shard_id, to)
                .await
                .map(|()| false);
        }
    }
    Ok(true)
}
