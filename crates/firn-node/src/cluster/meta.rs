//! The meta group: one openraft group, on up to five voters with every other node a learner,
//! whose state is the cluster layout (nodes, shards, slot ranges, replicas, keyspaces). Every
//! node thus holds the layout locally and follows it ([`super::follower`]); only the meta
//! leader changes it — when a node joins or is removed, a keyspace is defined, and step by
//! step as the steward moves replicas ([`super::steward`]).
//!
//! The group reuses the shard machinery: its state machine is a versioned store and the
//! layout is the JSON value of one key, changed by compare-and-set on its version. Its
//! history is therefore the history of the cluster's shape.

use firn_model::KvWrite;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use bytes::Bytes;
use firn_model::{FirnError, Key, KeyspaceDef, PutRequest, ReadAt, Version, WriteCondition};
use firn_raft::{NodeId, ShardReplica};
use firn_store::Op;

use super::layout::ClusterLayout;
use crate::rpc::{ListKeyspaces, MetaChange, PeerClient};

/// The key holding the layout in the meta group's store.
const LAYOUT_KEY: &[u8] = b"cluster/layout";
/// How long a change waits for a new cluster's first layout to be stored.
const FIRST_LAYOUT_WAIT: Duration = Duration::from_secs(5);

pub struct Meta {
    node_id: NodeId,
    replica: Arc<ShardReplica>,
    /// Steward rounds run here (some checks run every few rounds).
    pub(super) rounds: AtomicU64,
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

    /// The version of the layout this node's replica has applied, without decoding it: what
    /// the layout follower polls, reading the layout itself only when this moved.
    pub fn layout_version(&self) -> Result<Option<Version>, FirnError> {
        let meta = self.replica.store().meta(LAYOUT_KEY)?;
        Ok(meta.filter(|m| m.is_live()).map(|m| m.latest))
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
        self.replica
            .write(Op::Kv(KvWrite::Put(put)))
            .await
            .map(|_| ())
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
    pub async fn define_keyspace(&self, def: KeyspaceDef, drop: bool) -> Result<(), FirnError> {
        self.update(|layout| layout.define_keyspace(def.clone(), drop))
            .await
            .map(|_| ())
    }
}

/// Runs layout changes on the meta leader: here if this node leads the meta group, else
/// there (one hop).
pub struct MetaClient {
    meta: Arc<Meta>,
    peers: PeerClient,
}

impl MetaClient {
    pub fn new(meta: Arc<Meta>, peers: PeerClient) -> Self {
        MetaClient { meta, peers }
    }

    pub fn meta(&self) -> &Arc<Meta> {
        &self.meta
    }

    fn leader(&self) -> Result<NodeId, FirnError> {
        self.meta.leader().ok_or_else(|| {
            FirnError::Unavailable(
                "the meta group has no leader (no quorum, or not joined yet)".into(),
            )
        })
    }

    /// The keyspace definitions as the meta leader holds them now (linearizable: the
    /// leader confirms it leads before it answers).
    pub async fn keyspaces(&self) -> Result<Vec<KeyspaceDef>, FirnError> {
        let leader = self.leader()?;
        if leader != self.meta.node_id {
            return self.peers.call_read(leader, ListKeyspaces).await?;
        }
        self.meta.replica.linearizable_barrier(false).await?;
        let (_, layout) = self.meta.stored_layout().await?;
        layout.keyspace_defs().ok_or_else(|| {
            FirnError::TryAgain("the cluster is still taking over its keyspace list; retry".into())
        })
    }

    pub async fn change(&self, change: MetaChange) -> Result<(), FirnError> {
        let leader = self.leader()?;
        if leader != self.meta.node_id {
            return self.peers.call(leader, change).await?;
        }
        match change {
            MetaChange::Join { node, addr } => {
                tracing::info!(node, %addr, "node joins");
                self.meta.join(node, addr).await
            }
            MetaChange::Remove { node } => {
                tracing::info!(node, "node removal starts");
                self.meta.remove(node).await
            }
            MetaChange::Keyspace { def, drop } => self.meta.define_keyspace(def, drop).await,
        }
    }
}
