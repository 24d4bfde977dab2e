//! Leaders that follow their clients (DAL): where a shard's leader should be, from where its
//! requests come from. It owns the rules — the dominant origin, how long it must hold, the
//! minimum interval between moves, pins, the replica to add first — as pure functions of the
//! counts, the layout, the leader and a time passed in; it never reads a clock, counts a
//! request or moves anything (the router counts, `exec/origin.rs`; the steward's
//! [`round`] gathers the counts and acts).

pub mod round;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use firn_model::Follow;
use firn_raft::{NodeId, ShardId};
use serde::{Deserialize, Serialize};

use super::layout::{ClusterLayout, Move};

/// A following keyspace's request pulls its shard's leader toward its origin; a pinned one's
/// toward the pin.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Pull {
    Follow,
    Pin(NodeId),
}

impl Pull {
    /// The pull of a keyspace's requests (`FOLLOW off` pulls nothing).
    pub fn of(follow: Follow) -> Option<Pull> {
        match follow {
            Follow::Off => None,
            Follow::On => Some(Pull::Follow),
            Follow::Pin(node) => Some(Pull::Pin(node)),
        }
    }
}

/// The peer call that asks a node for its [`OriginReport`].
#[derive(Debug, Serialize, Deserialize)]
pub struct OriginCounts;

crate::rpc::rpc! {
    OriginCounts => OriginReport;
}

/// One node's counts: the requests it received from clients over its last `window_ms`, per
/// shard and pull.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OriginReport {
    pub node: NodeId,
    pub window_ms: u64,
    pub counts: Vec<(ShardId, Pull, u64)>,
}

/// Whether any keyspace follows its clients or is pinned: if none, nothing is counted,
/// gathered or moved.
pub fn follows_any(layout: &ClusterLayout) -> bool {
    layout
        .placements
        .values()
        .any(|p| Pull::of(p.follow).is_some())
}

/// The least share of a shard's following requests the dominant node must send, in percent.
/// A clear majority: only one node can hold it, and a shard used evenly from two nodes stays.
pub const DOMINANT_SHARE_MIN_PCT: u64 = 60;
/// The least rate of requests the dominant node must send, per second over the window: a
/// trickle (a probe, an operator's `GET`) must not move a leader, since a move pauses the
/// shard's writes briefly.
pub const DOMINANT_RATE_MIN_PER_S: u64 = 5;
/// How long the same node must stay dominant before the leader moves to it: a burst shorter
/// than this (a batch, a client reconnecting elsewhere) moves nothing.
pub const DOMINANCE_SUSTAIN: Duration = Duration::from_secs(3);
/// A dominance not observed for this long (the steward stopped, the meta leader changed)
/// starts over: "sustained" means seen in consecutive rounds (500 ms apart).
pub const OBSERVATION_GAP_MAX: Duration = Duration::from_secs(2);
/// The default least time between two follow moves of one shard to different nodes
/// (`--follow-interval`): a workload that alternates faster is followed at most once per
/// interval, which bounds what it costs — the oscillation that made CockroachDB retire its
/// follow-the-workload placement.
pub const FOLLOW_INTERVAL_DEFAULT: Duration = Duration::from_secs(30);
/// A move to the node the last move went to may be tried again after this: a transfer that
/// did not take, or a failover that took the leader away from the followed node, is no
/// oscillation and need not wait the whole interval.
pub const RETRY_SAME_TARGET: Duration = Duration::from_secs(5);

/// Where a shard's leader should be, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Want {
    /// A keyspace of the shard is pinned to this node.
    Pin(NodeId),
    /// This node sends `share_pct` percent of the shard's following requests.
    Follow { node: NodeId, share_pct: u8 },
}

impl Want {
    pub fn node(self) -> NodeId {
        match self {
            Want::Pin(node) | Want::Follow { node, .. } => node,
        }
    }
}

impl fmt::Display for Want {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Want::Pin(node) => write!(f, "pinned to node {node}"),
            Want::Follow { node, share_pct } => {
                write!(f, "node {node} sent {share_pct}% of its requests")
            }
        }
    }
}

/// One shard's requests summed over the nodes' reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShardTally {
    /// Following requests per origin node, with that node's window (ms).
    pub follow: BTreeMap<NodeId, (u64, u64)>,
    /// Pinned requests per pin node.
    pub pins: BTreeMap<NodeId, u64>,
}

/// The reports summed per shard.
pub fn tally(reports: &[OriginReport]) -> BTreeMap<ShardId, ShardTally> {
    let mut shards: BTreeMap<ShardId, ShardTally> = BTreeMap::new();
    for report in reports {
        for &(shard, pull, n) in &report.counts {
            let t = shards.entry(shard).or_default();
            match pull {
                Pull::Follow => {
                    let e = t.follow.entry(report.node).or_default();
                    e.0 += n;
                    e.1 = e.1.max(report.window_ms);
                }
                Pull::Pin(node) => *t.pins.entry(node).or_default() += n,
            }
        }
    }
    shards
}

impl ShardTally {
    /// The node sending the most following requests (the lowest id on ties), its requests
    /// and window, and the following requests of all nodes.
    fn top(&self) -> Option<(NodeId, u64, u64, u64)> {
        let total: u64 = self.follow.values().map(|(n, _)| n).sum();
        let (&node, &(n, window_ms)) = self
            .follow
            .iter()
            .max_by_key(|(node, (n, _))| (*n, std::cmp::Reverse(**node)))?;
        (total > 0).then_some((node, n, window_ms, total))
    }

    /// The node sending the most following requests and its share of them (0–1).
    pub fn top_share(&self) -> Option<(NodeId, f64)> {
        self.top()
            .map(|(node, n, _, total)| (node, n as f64 / total as f64))
    }

    /// Where the shard's leader should be, by this round's counts alone: a pin wins (the one
    /// with most requests, then the lowest node id); else a dominant origin, if any.
    pub fn want(&self) -> Option<Want> {
        if let Some((&node, _)) = self
            .pins
            .iter()
            .filter(|(_, n)| **n > 0)
            .max_by_key(|(node, n)| (**n, std::cmp::Reverse(**node)))
        {
            return Some(Want::Pin(node));
        }
        let (node, n, window_ms, total) = self.top()?;
        let dominant = n * 100 >= DOMINANT_SHARE_MIN_PCT * total
            && n * 1_000 >= DOMINANT_RATE_MIN_PER_S * window_ms.max(1_000);
        dominant.then(|| Want::Follow {
            node,
            share_pct: (n * 100 / total) as u8,
        })
    }
}

/// How the steward's follow rounds are tuned on this node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FollowSettings {
    /// Least time between two follow moves of one shard to different nodes.
    pub interval: Duration,
}

impl Default for FollowSettings {
    fn default() -> Self {
        FollowSettings {
            interval: FOLLOW_INTERVAL_DEFAULT,
        }
    }
}

/// Since when each shard has wanted the same node, round after round. Lives with the steward
/// on the meta leader; a new meta leader starts with none (dominance must hold again there).
#[derive(Debug, Default)]
pub struct FollowTracker {
    settings: FollowSettings,
    shards: BTreeMap<ShardId, Held>,
    /// Whether counts were observed since the last [`FollowTracker::forget`].
    observed: bool,
}

#[derive(Clone, Copy, Debug)]
struct Held {
    want: Want,
    since_ms: u64,
    seen_ms: u64,
}

impl FollowTracker {
    pub fn new(settings: FollowSettings) -> Self {
        FollowTracker {
            settings,
            shards: BTreeMap::new(),
            observed: false,
        }
    }

    pub fn settings(&self) -> FollowSettings {
        self.settings
    }

    /// Takes this round's counts at `now_ms` and answers the wants that have held: a pin at
    /// once, a dominant origin once the same node has been dominant for
    /// [`DOMINANCE_SUSTAIN`] of rounds no more than [`OBSERVATION_GAP_MAX`] apart.
    pub fn observe(
        &mut self,
        now_ms: u64,
        tallies: &BTreeMap<ShardId, ShardTally>,
    ) -> BTreeMap<ShardId, Want> {
        self.observed = true;
        let gap_ms = OBSERVATION_GAP_MAX.as_millis() as u64;
        let sustain_ms = DOMINANCE_SUSTAIN.as_millis() as u64;
        let mut held = BTreeMap::new();
        for (&shard, tally) in tallies {
            let Some(want) = tally.want() else {
                continue;
            };
            let since_ms = match self.shards.get(&shard) {
                Some(h)
                    if h.want.node() == want.node()
                        && matches!(h.want, Want::Pin(_)) == matches!(want, Want::Pin(_))
                        && now_ms.saturating_sub(h.seen_ms) <= gap_ms =>
                {
                    h.since_ms
                }
                _ => now_ms,
            };
            held.insert(
                shard,
                Held {
                    want,
                    since_ms,
                    seen_ms: now_ms,
                },
            );
        }
        self.shards = held;
        self.shards
            .iter()
            .filter(|(_, h)| matches!(h.want, Want::Pin(_)) || h.seen_ms - h.since_ms >= sustain_ms)
            .map(|(&s, h)| (s, h.want))
            .collect()
    }

    /// Forgets every shard (no keyspace follows any more); answers whether there were
    /// counts to forget.
    pub fn forget(&mut self) -> bool {
        self.shards.clear();
        std::mem::replace(&mut self.observed, false)
    }
}

/// A follow move as the layout keeps it: the last one per shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FollowMove {
    /// When the steward made it: wall-clock milliseconds since the Unix epoch, by the meta
    /// leader's clock.
    pub at_ms: u64,
    pub step: FollowStep,
    /// The leader it moved from (`leader`), or the replica that left (`replica`).
    pub from: Option<NodeId>,
    /// The node the leader (or the new replica) went to.
    pub to: NodeId,
    pub why: Want,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FollowStep {
    /// The leadership was handed over.
    Leader,
    /// A replica was added on the node first (the leadership follows once it has caught up).
    Replica,
}

impl FollowStep {
    pub fn name(self) -> &'static str {
        match self {
            FollowStep::Leader => "leader",
            FollowStep::Replica => "replica",
        }
    }
}

/// What the steward does for one shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FollowAction {
    /// Hand the leadership from `from` to `to` (a replica of the shard).
    Transfer { from: NodeId, to: NodeId },
    /// Add a replica where the leader should go (and, at the replication factor, take one
    /// off a node that is neither the leader nor that one).
    AddReplica(Move),
}

impl FollowAction {
    /// The record the layout keeps of it.
    pub fn record(self, at_ms: u64, why: Want) -> FollowMove {
        let (step, from, to) = match self {
            FollowAction::Transfer { from, to } => (FollowStep::Leader, Some(from), to),
            FollowAction::AddReplica(m) => (FollowStep::Replica, m.remove, why.node()),
        };
        FollowMove {
            at_ms,
            step,
            from,
            to,
            why,
        }
    }
}

/// What to do, at `now_ms`, for `shard`, led by `leader`, whose leader should be where `want`
/// says (a want that has held): nothing while a replica moves, an election is under way, the
/// leader is already there (hysteresis: the leader's node keeps it until another node is
/// dominant), or the last follow move is too recent; else a transfer if that node holds a
/// replica, or a replica added there first (never for a pin, never with one replica).
pub fn decide(
    now_ms: u64,
    shard: ShardId,
    leader: Option<NodeId>,
    want: Want,
    layout: &ClusterLayout,
    settings: FollowSettings,
) -> Option<FollowAction> {
    let s = layout.shards.iter().find(|s| s.id == shard)?;
    let to = want.node();
    let leader = leader?;
    if s.moving.is_some() || leader == to || !layout.active().contains(&to) {
        return None;
    }
    if let Some(last) = layout.followed.get(&shard) {
        let wait = match last.step {
            // The transfer that completes a replica added there.
            FollowStep::Replica if last.to == to => Duration::ZERO,
            _ if last.to == to => RETRY_SAME_TARGET,
            _ => settings.interval,
        };
        if now_ms < last.at_ms.saturating_add(wait.as_millis() as u64) {
            return None;
        }
    }
    if s.replicas.contains(&to) {
        return Some(FollowAction::Transfer { from: leader, to });
    }
    if matches!(want, Want::Pin(_)) {
        return None;
    }
    let remove = if s.replicas.len() < layout.replication.min(layout.active().len()) {
        None
    } else {
        Some(
            s.replicas
                .iter()
                .copied()
                .filter(|r| *r != leader && *r != to)
                .max_by_key(|r| (layout.load(*r), *r))?,
        )
    };
    Some(FollowAction::AddReplica(Move {
        add: Some(to),
        remove,
    }))
}
