//! Shards this node holds no replica of. Their requests go to one of their replicas: the
//! leader this node last found, else the shard's first replica, which forwards to its leader.
//! This node sees nothing of the shard's elections, so when the replica it sent a request to
//! stays silent, it asks the shard's replicas themselves: if that replica does not answer
//! either and another replica names a leader, the request is given up (as a request to a
//! leader that moved is, see `Kernel::unless_leader_moves`), and the next goes to that leader.
//! Without this, a replica cut off from the others by a partition that drops its packets
//! would hold every request of this node for the shard until the call's timeout. And every
//! [`REFRESH_EVERY`] the node looks again at the shards it sent requests for lately
//! ([`Kernel::follow_remote_leaders`]), so that their requests go to the leader itself, not
//! through a replica that relays them (one more hop each), and follow the leader when it
//! moves.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use firn_raft::{NodeId, ShardId};
use tokio::sync::watch;

use super::Kernel;
use crate::cluster::layout::ShardLayout;
use crate::cluster::view::Describe;

/// How long a request to another node about a shard not held here runs before the shard's
/// replicas are asked about it: well past a healthy answer (milliseconds), well short of the
/// call's timeout.
const CHECK_AFTER: Duration = Duration::from_secs(1);
/// How long a replica asked has to describe itself before it counts as silent.
const CHECK_TIMEOUT: Duration = Duration::from_millis(800);
/// How long one look at a shard's replicas is good for: requests waiting on the same shard
/// share it, so a silent node is asked about once per this at most, however many wait.
const CHECK_EVERY: Duration = Duration::from_millis(500);

/// How often the leaders of the shards this node sent requests for lately are looked up.
const REFRESH_EVERY: Duration = Duration::from_secs(2);
/// How long after its last request a shard's leader is still looked up.
const REFRESH_WHILE_USED: Duration = Duration::from_secs(30);

/// What this node knows of the shards it holds no replica of.
#[derive(Default)]
pub(super) struct RemoteShards {
    shards: Mutex<HashMap<ShardId, Arc<RemoteShard>>>,
}

#[derive(Default)]
struct RemoteShard {
    /// The leader the last look found.
    leader: Mutex<Option<NodeId>>,
    /// When a request for the shard was last routed.
    used: Mutex<Option<Instant>>,
    /// The last look, shared by the requests that wait meanwhile.
    last: tokio::sync::Mutex<Option<Look>>,
}

/// One look at a shard's replicas.
#[derive(Clone, Debug, PartialEq)]
struct Look {
    at: Instant,
    /// The replicas that did not describe themselves within [`CHECK_TIMEOUT`].
    silent: Vec<NodeId>,
    /// The leader named by the replica of the newest term that names one.
    leader: Option<NodeId>,
}

impl Look {
    /// Whether `target` is silent and another replica leads: where to go instead.
    fn instead_of(&self, target: NodeId) -> Option<NodeId> {
        self.leader
            .filter(|l| *l != target && self.silent.contains(&target))
    }
}

impl RemoteShards {
    fn shard(&self, shard: ShardId) -> Arc<RemoteShard> {
        let mut shards = self.shards.lock().unwrap_or_else(|p| p.into_inner());
        shards.entry(shard).or_default().clone()
    }

    /// Where a request for `shard` goes: the leader last found, while it is one of the
    /// shard's replicas, else the first replica.
    pub(super) fn target(&self, shard: &ShardLayout) -> Option<NodeId> {
        let remote = self.shard(shard.id);
        *remote.used.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        let found = *remote.leader.lock().unwrap_or_else(|p| p.into_inner());
        found
            .filter(|l| shard.replicas.contains(l))
            .or_else(|| shard.replicas.first().copied())
    }

    /// The shards a request was routed for within the last `within`.
    fn used_within(&self, within: Duration) -> Vec<ShardId> {
        let shards = self.shards.lock().unwrap_or_else(|p| p.into_inner());
        shards
            .iter()
            .filter(|(_, s)| {
                let used = *s.used.lock().unwrap_or_else(|p| p.into_inner());
                used.is_some_and(|u| u.elapsed() < within)
            })
            .map(|(id, _)| *id)
            .collect()
    }
}

impl Kernel {
    /// Every [`REFRESH_EVERY`] until `stop`: looks up the leaders of the shards this node
    /// holds no replica of and routed requests for within [`REFRESH_WHILE_USED`], so that
    /// their next requests go straight to the leader.
    pub async fn follow_remote_leaders(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(REFRESH_EVERY) => {}
                _ = stop.changed() => return,
            }
            let shards = self.remote.used_within(REFRESH_WHILE_USED);
            futures::future::join_all(shards.into_iter().map(|s| self.look_at(s))).await;
        }
    }

    /// Resolves when `target`, sent a request about `shard` (held nowhere here), does not
    /// answer the shard's check and another replica names a leader: that leader. Never
    /// resolves while `target` answers or no other leader is known.
    pub(super) async fn silent_and_led_elsewhere(&self, shard: ShardId, target: NodeId) -> NodeId {
        tokio::time::sleep(CHECK_AFTER).await;
        loop {
            if let Some(look) = self.look_at(shard).await
                && let Some(leader) = look.instead_of(target)
            {
                return leader;
            }
            tokio::time::sleep(CHECK_EVERY).await;
        }
    }

    /// Asks the replicas of `shard` (held nowhere here) who leads it, for the requests that
    /// follow: after its replica could not be reached at all.
    pub(crate) async fn find_remote_leader(&self, shard: ShardId) -> Option<NodeId> {
        self.look_at(shard).await?.leader
    }

    /// The shard's replicas as they describe themselves: a look at most [`CHECK_EVERY`] old,
    /// or a new one. `None` when the layout no longer has the shard.
    async fn look_at(&self, shard: ShardId) -> Option<Look> {
        let replicas = self
            .layout()
            .shards
            .iter()
            .find(|s| s.id == shard)?
            .replicas
            .clone();
        let remote = self.remote.shard(shard);
        let mut last = remote.last.lock().await;
        if let Some(look) = last.as_ref().filter(|l| l.at.elapsed() < CHECK_EVERY) {
            return Some(look.clone());
        }
        let asked = replicas
            .iter()
            .filter(|r| **r != self.node_id)
            .map(|&r| async move {
                let view = self
                    .peers
                    .call_within(r, Describe, CHECK_TIMEOUT)
                    .await
                    .ok();
                let about = view.and_then(|v| v.replicas.into_iter().find(|x| x.shard_id == shard));
                (r, about.map(|x| (x.term, x.leader)))
            });
        let answers = futures::future::join_all(asked).await;
        let look = Look {
            at: Instant::now(),
            silent: answers
                .iter()
                .filter(|(_, a)| a.is_none())
                .map(|(r, _)| *r)
                .collect(),
            leader: newest_leader(answers.iter().filter_map(|(_, a)| *a)),
        };
        if let Some(l) = look.leader {
            *remote.leader.lock().unwrap_or_else(|p| p.into_inner()) = Some(l);
        }
        *last = Some(look.clone());
        Some(look)
    }
}

/// The leader named by the replica of the newest term that names one (a replica cut off
/// for a while still names the leader of its own, older term).
fn newest_leader(reports: impl Iterator<Item = (u64, Option<NodeId>)>) -> Option<NodeId> {
    reports
        .filter_map(|(term, leader)| Some((term, leader?)))
        .max_by_key(|(term, _)| *term)
        .map(|(_, leader)| leader)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_term_names_the_leader() {
        let reports = [(3, Some(1)), (5, Some(2)), (6, None), (4, Some(3))];
        assert_eq!(newest_leader(reports.into_iter()), Some(2));
        assert_eq!(newest_leader([(2, None)].into_iter()), None);
    }

    #[test]
    fn a_request_goes_elsewhere_only_when_its_node_is_silent_and_another_leads() {
        let look = |silent: Vec<NodeId>, leader| Look {
            at: Instant::now(),
            silent,
            leader,
        };
        assert_eq!(look(vec![1], Some(2)).instead_of(1), Some(2));
        // It answered: a relay that forwards, or a leader that is slow; wait for it.
        assert_eq!(look(vec![3], Some(2)).instead_of(1), None);
        // Silent, but still named the leader (no election yet), or no leader known.
        assert_eq!(look(vec![1], Some(1)).instead_of(1), None);
        assert_eq!(look(vec![1, 2, 3], None).instead_of(1), None);
    }

    #[test]
    fn requests_go_to_the_leader_found_while_it_is_a_replica() {
        let remote = RemoteShards::default();
        let mut shard = ShardLayout {
            id: 4,
            slots: 0..10,
            replicas: vec![1, 2, 3],
            formed_by: None,
            moving: None,
            durability: Default::default(),
        };
        assert_eq!(remote.target(&shard), Some(1));
        *remote.shard(4).leader.lock().unwrap() = Some(3);
        assert_eq!(remote.target(&shard), Some(3));
        shard.replicas = vec![1, 2, 5];
        assert_eq!(remote.target(&shard), Some(1));
    }
}
