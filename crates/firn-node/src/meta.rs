//! The meta group: one openraft group, on up to five voters with every other node a learner,
//! whose state is the cluster layout (nodes, shards, slot ranges, replicas). Every node thus
//! holds the layout locally and follows it ([`Router::apply_layout`]); only the meta leader
//! changes it — when a node joins or is removed, and step by step as the steward moves
//! replicas (see [`steward`]).
//!
//! The group reuses the shard machinery: its state machine is a versioned store and the
//! layout is the JSON value of one key, changed by compare-and-set on its version. Its
//! history is therefore the history of the cluster's shape.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use firn_model::{
    FirnError, Key, KeyspaceSpec, PutRequest, ReadAt, Request, Response, Version, WriteCondition,
};
use firn_raft::{NodeId, ShardReplica};
use firn_store::Op;

use crate::cluster::{ClusterLayout, Move, NodeRpc, NodeRpcReply, keyspace_repairs};
use crate::router::Router;

/// The key holding the layout in the meta group's store.
const LAYOUT_KEY: &[u8] = b"cluster/layout";
/// How often the meta leader looks for work (meta membership, replica moves, leaders).
pub const STEWARD_INTERVAL: Duration = Duration::from_millis(500);
/// How long a change waits for a new cluster's first layout to be stored.
const FIRST_LAYOUT_WAIT: Duration = Duration::from_secs(5);

pub struct Meta {
    node_id: NodeId,
    replica: Arc<ShardReplica>,
    /// Steward rounds run here (some checks run every few rounds).
    rounds: AtomicU64,
}

impl Meta {
    pub fn new(node_id: NodeId, replica: Arc<ShardReplica>) -> Self {
        Meta {
            node_id,
            replica,
            rounds: AtomicU64::new(0),
        }
    }

    pub fn replica(&self) -> &Arc<ShardReplica> {
        &self.replica
    }

    /// The layout as this node's replica has applied it, with its version.
    pub fn layout(&self) -> Result<Option<(Version, ClusterLayout)>, FirnError> {
        let Some(v) = self.replica.store().get_live(LAYOUT_KEY, ReadAt::Latest)? else {
            return Ok(None);
        };
        let value = v.value.unwrap_or_default();
        let layout = serde_json::from_slice(&value).map_err(|e| {
            FirnError::Internal(format!("stored cluster layout is unreadable: {e}"))
        })?;
        Ok(Some((v.version, layout)))
    }

    pub fn leader(&self) -> Option<NodeId> {
        self.replica.leader()
    }

    pub fn is_leader(&self) -> bool {
        self.leader() == Some(self.node_id)
    }

    async fn write(&self, layout: &ClusterLayout, if_version: Version) -> Result<(), FirnError> {
        let value = serde_json::to_vec(layout).map_err(|e| FirnError::Internal(e.to_string()))?;
        let mut put = PutRequest::new(Key::new(Bytes::from_static(LAYOUT_KEY))?, value.into());
        put.condition = WriteCondition::IfVersion(if_version);
        self.replica.write(Op::Put(put)).await.map(|_| ())
    }

    /// On the meta leader: stores the first layout, unless one exists already.
    pub async fn create(&self, layout: &ClusterLayout) -> Result<(), FirnError> {
        match self.write(layout, 0).await {
            Ok(()) | Err(FirnError::Conflict { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// On the meta leader: changes the newest layout with `change` (which answers whether it
    /// changed anything) and stores it, provided nobody changed it meanwhile.
    pub async fn update(
        &self,
        mut change: impl FnMut(&mut ClusterLayout) -> Result<bool, FirnError>,
    ) -> Result<ClusterLayout, FirnError> {
        for _ in 0..3 {
            self.replica.linearizable_barrier(false).await?;
            let (version, mut layout) = self.stored_layout().await?;
            if !change(&mut layout)? {
                return Ok(layout);
            }
            match self.write(&layout, version).await {
                Ok(()) => return Ok(layout),
                Err(FirnError::Conflict { .. }) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(FirnError::TryAgain(
            "the cluster layout kept changing; retry".into(),
        ))
    }

    /// The stored layout; a cluster just formed stores its first one within moments of
    /// electing a meta leader, so wait for it briefly.
    async fn stored_layout(&self) -> Result<(Version, ClusterLayout), FirnError> {
        let since = std::time::Instant::now();
        loop {
            if let Some(found) = self.layout()? {
                return Ok(found);
            }
            if since.elapsed() > FIRST_LAYOUT_WAIT {
                return Err(FirnError::Unavailable(
                    "the cluster has no layout yet".into(),
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A node asks to join: it is added with its peer address (again: nothing changes).
    pub async fn join(&self, node: NodeId, addr: String) -> Result<(), FirnError> {
        if node == 0 {
            return Err(FirnError::BadArgument("node ids start at 1".into()));
        }
        self.update(|layout| match layout.nodes.get(&node) {
            Some(known) if *known == addr => Ok(false),
            Some(known) => Err(FirnError::Refused(format!(
                "node {node} is already a member at {known}; give the new node another --node-id"
            ))),
            None if layout.nodes.values().any(|a| *a == addr) => Err(FirnError::Refused(format!(
                "another node is already a member at {addr}"
            ))),
            None => {
                layout.nodes.insert(node, addr.clone());
                Ok(true)
            }
        })
        .await
        .map(|_| ())
    }

    /// Starts removing `node`: the steward moves its replicas, then drops it.
    pub async fn remove(&self, node: NodeId) -> Result<(), FirnError> {
        self.update(|layout| {
            if !layout.nodes.contains_key(&node) {
                return Err(FirnError::BadArgument(format!(
                    "node {node} is not a member of the cluster"
                )));
            }
            if layout.leaving.contains(&node) {
                return Ok(false);
            }
            if layout.active().len() <= 1 {
                return Err(FirnError::Refused(format!(
                    "node {node} is the last active node; a cluster needs one"
                )));
            }
            layout.leaving.insert(node);
            Ok(true)
        })
        .await
        .map(|_| ())
    }
}

impl Meta {
    /// Records a keyspace definition (or its removal) in the layout.
    pub async fn define_keyspace(&self, spec: KeyspaceSpec, drop: bool) -> Result<(), FirnError> {
        self.update(|layout| layout.define_keyspace(spec.clone(), drop))
            .await
            .map(|_| ())
    }
}

/// One round of the meta leader's work. Each part is idempotent: a round cut short (a
/// leader change, a node down) is picked up by the next one, on whichever node leads then.
pub async fn steward(router: &Router, meta: &Meta) -> Result<(), FirnError> {
    let Some((_, layout)) = meta.layout()? else {
        return Ok(());
    };
    meta_membership(router, meta, &layout).await?;
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
    match layout.next_move() {
        Some((shard, step)) => move_replica(router, meta, &layout, shard, step).await,
        None if layout.spread_leaders => {
            if balance_leaders(router, &layout).await? {
                meta.update(|l| Ok(std::mem::replace(&mut l.spread_leaders, false)))
                    .await?;
            }
            Ok(())
        }
        None => Ok(()),
    }
}

/// Brings every shard's keyspaces in line with the layout's (a definition whose fan-out
/// failed part-way is finished here), checking a shard only every `KEYSPACE_CHECK_EVERY`
/// rounds. A layout from before keyspaces lived here first adopts shard 0's list.
async fn sync_keyspaces(
    router: &Router,
    meta: &Meta,
    layout: &ClusterLayout,
) -> Result<(), FirnError> {
    let round = meta.rounds.fetch_add(1, Ordering::Relaxed);
    let Some(want) = &layout.keyspaces else {
        let Some(first) = layout.shards.first() else {
            return Ok(());
        };
        let Response::Keyspaces(has) = router.execute_on(first.id, Request::KeyspaceList).await?
        else {
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
        let Response::Keyspaces(has) = router.execute_on(shard, Request::KeyspaceList).await?
        else {
            continue;
        };
        for fix in keyspace_repairs(want, &has) {
            tracing::info!(
                shard,
                fix = fix.name(),
                "bringing a shard's keyspaces in line"
            );
            router.execute_on(shard, fix).await?;
        }
    }
    Ok(())
}

/// Steward rounds between checks of the shards' keyspaces (500 ms each).
const KEYSPACE_CHECK_EVERY: u64 = 10;

/// Keeps every node in the meta group: the chosen few as voters, the rest as learners.
async fn meta_membership(
    router: &Router,
    meta: &Meta,
    layout: &ClusterLayout,
) -> Result<(), FirnError> {
    let replica = meta.replica();
    let (voters, learners) = replica.members();
    for (&node, addr) in &layout.nodes {
        if !voters.contains(&node) && !learners.contains(&node) {
            router.pool().set_addr(node, addr);
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
async fn move_replica(
    router: &Router,
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
    let with_addrs: BTreeMap<NodeId, String> = voters
        .iter()
        .filter_map(|n| layout.nodes.get(n).map(|a| (*n, a.clone())))
        .collect();
    let leader = shard_leader(router, shard).await?;
    match router
        .call(
            leader,
            NodeRpc::SetReplicas {
                shard,
                voters: with_addrs,
            },
        )
        .await?
    {
        NodeRpcReply::Done(r) => r?,
        other => {
            return Err(FirnError::Internal(format!(
                "node {leader} answered {other:?}"
            )));
        }
    }
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

/// The leader of `shard`, as its replicas report it.
async fn shard_leader(router: &Router, shard: u32) -> Result<NodeId, FirnError> {
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
async fn balance_leaders(router: &Router, layout: &ClusterLayout) -> Result<bool, FirnError> {
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
    for s in view.shards.iter().filter(|s| s.leader == Some(most)) {
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
            return match router
                .call(
                    most,
                    NodeRpc::TransferLeader {
                        shard: s.shard_id,
                        to,
                    },
                )
                .await?
            {
                NodeRpcReply::Done(r) => r.map(|()| false),
                other => Err(FirnError::Internal(format!(
                    "node {most} answered {other:?}"
                ))),
            };
        }
    }
    Ok(true)
}
