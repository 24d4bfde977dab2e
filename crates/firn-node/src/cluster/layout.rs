//! The cluster's shape: which nodes exist, how the 16,384 slots split into shards, and which
//! nodes hold each shard's replicas.
//!
//! The layout lives in the meta group (see [`super::meta`]): it is created once, from the
//! `--peers`, `--shards` and `--replication` flags of the first node (a node without
//! `--peers` is a cluster of one with one shard), and changes when nodes join or leave.
//! [`ClusterLayout::next_move`] decides, one replica at a time, how replicas move so that
//! every shard has its replication factor and every node holds an even share.

use firn_store::SystemOp;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use firn_model::limits::KEYSPACES_MAX;
use firn_model::slot::{SLOT_COUNT, Slot, slot_of};
use firn_model::{Durability, FirnError, KeyspaceDef, KeyspacePlacement, KeyspaceSpec};
use firn_raft::{NodeId, ShardId};
use firn_store::Op;
use serde::{Deserialize, Serialize};

use super::follow::FollowMove;

/// Most shards a cluster may have: each is a Raft group with its own log and tasks.
pub const SHARDS_MAX: u32 = 256;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardLayout {
    pub id: ShardId,
    /// Slots `start..end` belong to this shard.
    pub slots: Range<Slot>,
    /// The group's voters.
    pub replicas: Vec<NodeId>,
    /// The node that forms the group when the cluster is created; cleared once the group
    /// has changed members (a replica added later must never form a second group).
    pub formed_by: Option<NodeId>,
    /// A replica move in progress.
    pub moving: Option<Move>,
    /// How its log acknowledges: fsync'd (`disk`) or held in a majority's memory. The
    /// keys of a keyspace go to the shards of its durability (see
    /// [`ClusterLayout::shard_of_key`]).
    #[serde(default)]
    pub durability: Durability,
}

/// One step of rebalancing: a replica added, removed, or both (moved).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Move {
    pub add: Option<NodeId>,
    pub remove: Option<NodeId>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterLayout {
    /// Node id → peer address.
    pub nodes: BTreeMap<NodeId, String>,
    /// Nodes being removed: their replicas move elsewhere, then they leave `nodes`.
    pub leaving: BTreeSet<NodeId>,
    /// Replicas per shard asked for at creation (capped by the number of active nodes).
    pub replication: usize,
    pub shards: Vec<ShardLayout>,
    /// The keyspace definitions, sorted by prefix: the authority every shard is brought in
    /// line with. `None` in a layout stored before keyspaces moved here: the steward adopts
    /// the shards' own list.
    #[serde(default)]
    pub keyspaces: Option<Vec<KeyspaceSpec>>,
    /// Replicas moved: leaders are to be spread again (elections after failures are left as
    /// they fell — moving a leader briefly pauses its shard's writes).
    #[serde(default)]
    pub spread_leaders: bool,
    /// Each keyspace's placement (shared-memory publication, leaders that follow), by
    /// prefix; a keyspace absent here has the default placement.
    #[serde(default)]
    pub placements: BTreeMap<String, KeyspacePlacement>,
    /// Names the cluster (hex of 16 bytes): a hash of the layout it was founded with, so
    /// every node of a `--peers` cluster derives the same one. `None` in a layout stored
    /// before it existed.
    #[serde(default)]
    pub cluster_id: Option<String>,
    /// The last move made because a shard's keyspaces follow their clients or are pinned
    /// (see [`super::follow`]), per shard: kept while any keyspace follows.
    #[serde(default)]
    pub followed: BTreeMap<ShardId, FollowMove>,
}

/// The keyspace of `specs` that `key` belongs to: the longest prefix of it.
pub fn keyspace_among<'a>(
    specs: impl IntoIterator<Item = &'a KeyspaceSpec>,
    key: &[u8],
) -> Option<&'a KeyspaceSpec> {
    specs
        .into_iter()
        .filter(|spec| key.starts_with(spec.prefix.as_bytes()))
        .max_by_key(|spec| spec.prefix.len())
}

/// Most meta-group voters: more only slows its commits.
pub const META_VOTERS_MAX: usize = 5;

impl ClusterLayout {
    /// `shard_count` shards over `nodes`, each on `replication` nodes (capped by the node
    /// count), spread round-robin so replicas and first replicas are even.
    pub fn new(
        nodes: BTreeMap<NodeId, String>,
        shard_count: u32,
        replication: usize,
    ) -> Result<Self, FirnError> {
        if nodes.is_empty() {
            return Err(FirnError::BadArgument(
                "a cluster needs at least one node".into(),
            ));
        }
        if shard_count == 0 || shard_count > SHARDS_MAX {
            return Err(FirnError::BadArgument(format!(
                "shards must be 1..={SHARDS_MAX}, got {shard_count}"
            )));
        }
        if shard_count as u16 > SLOT_COUNT {
            return Err(FirnError::BadArgument("more shards than slots".into()));
        }
        let ids: Vec<NodeId> = nodes.keys().copied().collect();
        let r = replication.clamp(1, ids.len());
        let shards = (0..shard_count)
            .map(|s| {
                let start = (s as u64 * SLOT_COUNT as u64 / shard_count as u64) as Slot;
                let end = ((s as u64 + 1) * SLOT_COUNT as u64 / shard_count as u64) as Slot;
                let replicas = (0..r).map(|j| ids[(s as usize + j) % ids.len()]).collect();
                ShardLayout {
                    id: s,
                    slots: start..end,
                    formed_by: Some(ids[s as usize % ids.len()]),
                    replicas,
                    moving: None,
                    durability: Durability::Disk,
                }
            })
            .collect();
        Ok(ClusterLayout {
            nodes,
            leaving: BTreeSet::new(),
            replication: replication.max(1),
            shards,
            keyspaces: Some(vec![KeyspaceSpec::default_keyspace()]),
            spread_leaders: false,
            placements: BTreeMap::new(),
            cluster_id: None,
            followed: BTreeMap::new(),
        }
        .founded())
    }

    /// A cluster of one: one node, one shard; nodes that join later bring it up to
    /// `replication` replicas.
    pub fn single(node_id: NodeId, peer_addr: String, replication: usize) -> Self {
        Self::new(BTreeMap::from([(node_id, peer_addr)]), 1, replication)
            .expect("a one-node layout is valid")
    }

    /// No layout yet (a joining node before it has heard from the meta group).
    pub fn empty() -> Self {
        ClusterLayout {
            nodes: BTreeMap::new(),
            leaving: BTreeSet::new(),
            replication: 1,
            shards: Vec::new(),
            keyspaces: None,
            spread_leaders: false,
            placements: BTreeMap::new(),
            cluster_id: None,
            followed: BTreeMap::new(),
        }
    }

    /// The layout with its cluster id: a hash of what it was founded with (nodes and their
    /// addresses, shards, replication). No clock and no randomness: every node of a new
    /// `--peers` cluster must derive the same id without talking.
    fn founded(mut self) -> Self {
        let founding = serde_json::json!([self.nodes, self.shards, self.replication]);
        let hash = xxhash_rust::xxh3::xxh3_128(founding.to_string().as_bytes());
        self.cluster_id = Some(firn_local::cluster_id_hex(&hash.to_be_bytes()));
        self
    }

    /// The cluster id as bytes, if the layout has one.
    pub fn cluster_id(&self) -> Option<[u8; 16]> {
        firn_local::parse_cluster_id(self.cluster_id.as_deref()?)
    }

    /// The disk shard that owns `slot`: where a log's or a group's records live, and what
    /// `CLUSTER SLOTS` shows. A layout without shards (a node still joining) owns no slot:
    /// it answers shard 0, which such a node does not know, so a request routed by it is
    /// refused as unavailable — callers check [`ClusterLayout::is_routable`] first.
    pub fn shard_of_slot(&self, slot: Slot) -> ShardId {
        Self::shard_in(self.lane(Durability::Disk), slot)
    }

    /// The shard in `lane` (shards holding contiguous slot ranges in order) that owns `slot`.
    fn shard_in(lane: &[ShardLayout], slot: Slot) -> ShardId {
        // The first whose range ends after `slot`.
        let i = lane.partition_point(|s| s.slots.end <= slot);
        lane.get(i.min(lane.len().saturating_sub(1)))
            .map_or(0, |s| s.id)
    }

    /// The shards of one durability, in slot order. Disk shards come first and cover every
    /// slot; memory shards, added when the first memory keyspace is defined, follow them and
    /// cover every slot again. Without memory shards, memory's lane is the disk lane.
    pub fn lane(&self, durability: Durability) -> &[ShardLayout] {
        let disk = self
            .shards
            .partition_point(|s| s.durability == Durability::Disk);
        match durability {
            Durability::Memory if disk < self.shards.len() => &self.shards[disk..],
            _ => &self.shards[..disk],
        }
    }

    /// Whether memory shards exist (a memory keyspace was defined).
    pub fn has_memory_shards(&self) -> bool {
        self.shards
            .last()
            .is_some_and(|s| s.durability == Durability::Memory)
    }

    /// Whether requests can be routed by this layout (it has shards).
    pub fn is_routable(&self) -> bool {
        !self.shards.is_empty()
    }

    /// The shard that holds `key`: by its slot, among the shards of its keyspace's
    /// durability.
    pub fn shard_of_key(&self, key: &[u8]) -> ShardId {
        Self::shard_in(self.lane(self.durability_for(key)), slot_of(key))
    }

    /// The durability of the keyspace `key` belongs to (its longest registered prefix).
    pub fn durability_for(&self, key: &[u8]) -> Durability {
        if !self.has_memory_shards() {
            return Durability::Disk;
        }
        self.keyspace_of(key)
            .map_or(Durability::Disk, |spec| spec.durability)
    }

    /// The keyspace `key` belongs to: the longest registered prefix of it.
    fn keyspace_of(&self, key: &[u8]) -> Option<&KeyspaceSpec> {
        keyspace_among(self.keyspaces.iter().flatten(), key)
    }

    /// The shard a log or a consumer group named `name` lives in (the disk shard of its
    /// slot: the log and groups are always fsync'd).
    pub fn shard_of_name(&self, name: &[u8]) -> ShardId {
        self.shard_of_slot(slot_of(name))
    }

    pub fn shard(&self, id: ShardId) -> &ShardLayout {
        &self.shards[id as usize]
    }

    pub fn shard_ids(&self) -> impl Iterator<Item = ShardId> + '_ {
        self.shards.iter().map(|s| s.id)
    }

    /// Nodes that hold (or are about to hold) replicas: members not being removed.
    pub fn active(&self) -> Vec<NodeId> {
        self.nodes
            .keys()
            .filter(|n| !self.leaving.contains(n))
            .copied()
            .collect()
    }

    /// Whether `node` should run a replica of `shard`: it is a voter, or one is being added
    /// there.
    pub fn holds(&self, shard: &ShardLayout, node: NodeId) -> bool {
        shard.replicas.contains(&node) || shard.moving.is_some_and(|m| m.add == Some(node))
    }

    /// How many replicas `node` holds.
    pub fn load(&self, node: NodeId) -> usize {
        self.shards.iter().filter(|s| self.holds(s, node)).count()
    }

    /// A move in progress that adds a replica on a node no longer active (being removed, or
    /// gone): it can never finish — its new replica cannot catch up on a node that is down
    /// for good — and, first in [`next_move`](Self::next_move)'s order, it would hold back
    /// every move after it, the removal of that very node included. The steward abandons it.
    pub fn stranded_move(&self) -> Option<(ShardId, Move)> {
        let active = self.active();
        self.shards.iter().find_map(|s| {
            let step = s.moving?;
            step.add
                .is_some_and(|n| !active.contains(&n))
                .then_some((s.id, step))
        })
    }

    /// The next replica change, if the layout is not yet where it should be: a move in
    /// progress first; then replicas off leaving (or unknown) nodes; then shards below the
    /// replication factor; then a move from the most to the least loaded node while they
    /// differ by more than one.
    pub fn next_move(&self) -> Option<(ShardId, Move)> {
        if let Some(s) = self.shards.iter().find(|s| s.moving.is_some()) {
            return Some((s.id, s.moving.expect("found by moving")));
        }
        let active = self.active();
        if active.is_empty() {
            return None;
        }
        let target = self.replication.clamp(1, active.len());
        // The least loaded active node that does not hold `shard` (lowest id on ties).
        let least_loaded = |shard: &ShardLayout| {
            active
                .iter()
                .filter(|n| !shard.replicas.contains(n))
                .min_by_key(|n| (self.load(**n), **n))
                .copied()
        };
        for s in &self.shards {
            if let Some(&gone) = s.replicas.iter().find(|n| !active.contains(n)) {
                let add = if s.replicas.len() <= target {
                    least_loaded(s)
                } else {
                    None
                };
                if add.is_none() && s.replicas.len() == 1 {
                    continue; // the last replica stays until another can take it
                }
                return Some((
                    s.id,
                    Move {
                        add,
                        remove: Some(gone),
                    },
                ));
            }
        }
        for s in &self.shards {
            if s.replicas.len() < target
                && let Some(add) = least_loaded(s)
            {
                return Some((
                    s.id,
                    Move {
                        add: Some(add),
                        remove: None,
                    },
                ));
            }
        }
        let by_load = |n: &NodeId| (self.load(*n), *n);
        let most = *active.iter().max_by_key(|n| by_load(n))?;
        let least = *active.iter().min_by_key(|n| by_load(n))?;
        if self.load(most) <= self.load(least) + 1 {
            return None;
        }
        // Never the replica a follow move put on `most`: another shard's moves instead.
        let s = self.shards.iter().find(|s| {
            s.replicas.contains(&most)
                && !s.replicas.contains(&least)
                && self.followed.get(&s.id).is_none_or(|f| f.to != most)
        })?;
        Some((
            s.id,
            Move {
                add: Some(least),
                remove: Some(most),
            },
        ))
    }

    /// The meta group's voters: the current ones that are still active, topped up (lowest
    /// ids first) or trimmed to the largest odd number ≤ 5 the active nodes allow.
    pub fn meta_voters(&self, current: &BTreeSet<NodeId>) -> BTreeSet<NodeId> {
        let active = self.active();
        let mut want = active.len().min(META_VOTERS_MAX);
        if want.is_multiple_of(2) {
            want -= 1;
        }
        let mut voters: Vec<NodeId> = current
            .iter()
            .filter(|n| active.contains(n))
            .copied()
            .collect();
        voters.extend(active.iter().filter(|n| !current.contains(n)));
        voters.into_iter().take(want.max(1)).collect()
    }

    /// Records a keyspace definition (new or changed) or, with `drop`, its removal — with
    /// the same checks a shard makes, so that every shard accepts what the layout holds.
    /// Answers whether anything changed.
    pub fn define_keyspace(&mut self, def: KeyspaceDef, drop: bool) -> Result<bool, FirnError> {
        let KeyspaceDef { spec, placement } = def;
        let prefix = spec.prefix.clone();
        let memory = !drop && spec.durability == Durability::Memory;
        let defined = self.define_spec(spec, drop)?;
        if memory && !self.has_memory_shards() {
            self.add_memory_shards();
        }
        let placed = if drop || placement == KeyspacePlacement::default() {
            self.placements.remove(&prefix).is_some()
        } else {
            self.placements.insert(prefix, placement) != Some(placement)
        };
        Ok(defined || placed)
    }

    /// Adds the memory lane: one memory shard beside each disk shard, with its slots and
    /// replicas, formed by its first replica. They stay once added (a memory keyspace
    /// dropped leaves them idle).
    fn add_memory_shards(&mut self) {
        let next = self.shards.len() as ShardId;
        let memory: Vec<ShardLayout> = self
            .lane(Durability::Disk)
            .iter()
            .enumerate()
            .map(|(i, disk)| ShardLayout {
                id: next + i as ShardId,
                slots: disk.slots.clone(),
                replicas: disk.replicas.clone(),
                formed_by: disk.replicas.first().copied(),
                moving: None,
                durability: Durability::Memory,
            })
            .collect();
        self.shards.extend(memory);
    }

    /// The keyspace definitions with their placements (`None` while the layout has not
    /// adopted the shards' list).
    pub fn keyspace_defs(&self) -> Option<Vec<KeyspaceDef>> {
        let specs = self.keyspaces.as_ref()?;
        Some(
            specs
                .iter()
                .map(|spec| KeyspaceDef {
                    placement: self.placement_of(&spec.prefix),
                    spec: spec.clone(),
                })
                .collect(),
        )
    }

    /// The placement of the keyspace registered as `prefix`.
    pub fn placement_of(&self, prefix: &str) -> KeyspacePlacement {
        self.placements.get(prefix).copied().unwrap_or_default()
    }

    /// The placement of the keyspace `key` belongs to (its longest registered prefix).
    pub fn placement_for(&self, key: &[u8]) -> KeyspacePlacement {
        if self.placements.is_empty() {
            return KeyspacePlacement::default();
        }
        self.keyspace_of(key)
            .map_or_else(KeyspacePlacement::default, |spec| {
                self.placement_of(&spec.prefix)
            })
    }

    fn define_spec(&mut self, spec: KeyspaceSpec, drop: bool) -> Result<bool, FirnError> {
        let list = self.keyspaces.as_mut().ok_or_else(|| {
            FirnError::TryAgain("the cluster is still taking over its keyspace list; retry".into())
        })?;
        let at = list.iter().position(|s| s.prefix == spec.prefix);
        if drop {
            if spec.prefix.is_empty() {
                return Err(FirnError::Refused(
                    "the default keyspace \"\" cannot be dropped".into(),
                ));
            }
            let i = at.ok_or_else(|| FirnError::KeyspaceNotFound(spec.prefix.clone()))?;
            list.remove(i);
            return Ok(true);
        }
        spec.validate()?;
        match at {
            Some(i) if list[i] == spec => Ok(false),
            Some(i) => {
                list[i] = spec;
                Ok(true)
            }
            None if list.len() >= KEYSPACES_MAX => Err(FirnError::Refused(format!(
                "there are already {KEYSPACES_MAX} keyspaces, the limit"
            ))),
            None => {
                list.push(spec);
                list.sort_by(|a, b| a.prefix.cmp(&b.prefix));
                Ok(true)
            }
        }
    }

    /// Leaving nodes that hold nothing any more: they can be dropped from the cluster.
    pub fn drained(&self) -> Vec<NodeId> {
        self.leaving
            .iter()
            .filter(|n| {
                self.load(**n) == 0
                    && !self
                        .shards
                        .iter()
                        .any(|s| s.moving.is_some_and(|m| m.remove == Some(**n)))
            })
            .copied()
            .collect()
    }
}

/// What a shard must apply to hold exactly the keyspaces `want` when it holds `has`.
pub fn keyspace_repairs(want: &[KeyspaceSpec], has: &[KeyspaceSpec]) -> Vec<Op> {
    let mut fixes: Vec<Op> = want
        .iter()
        .filter(|w| !has.contains(w))
        .map(|w| Op::System(SystemOp::KeyspaceCreate(w.clone())))
        .collect();
    fixes.extend(
        has.iter()
            .filter(|h| !h.prefix.is_empty() && !want.iter().any(|w| w.prefix == h.prefix))
            .map(|h| {
                Op::System(SystemOp::KeyspaceDrop {
                    prefix: h.prefix.clone(),
                })
            }),
    );
    fixes
}

/// Parses `--peers 1=127.0.0.1:7381,2=127.0.0.1:7391`.
pub fn parse_peers(text: &str) -> Result<BTreeMap<NodeId, String>, FirnError> {
    let mut nodes = BTreeMap::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (id, addr) = part
            .split_once('=')
            .ok_or_else(|| FirnError::BadArgument(format!("peer '{part}' is not ID=HOST:PORT")))?;
        let id: NodeId = id
            .trim()
            .parse()
            .map_err(|_| FirnError::BadArgument(format!("node id '{id}' is not a number")))?;
        if id == 0 {
            return Err(FirnError::BadArgument("node ids start at 1".into()));
        }
        if nodes.insert(id, addr.trim().to_string()).is_some() {
            return Err(FirnError::BadArgument(format!("node {id} is listed twice")));
        }
    }
    Ok(nodes)
}

#[cfg(test)]
mod tests;
