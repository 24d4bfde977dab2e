//! The follow rules with made-up times and counts: no clock, no cluster.

use std::collections::BTreeMap;
use std::time::Duration;

use firn_raft::{NodeId, ShardId};

use super::*;
use crate::cluster::layout::{ClusterLayout, parse_peers};

/// A steward round is 500 ms.
const ROUND_MS: u64 = 500;
const WINDOW_MS: u64 = 5_000;

fn settings() -> FollowSettings {
    FollowSettings {
        interval: Duration::from_secs(30),
    }
}

/// One shard (0) on nodes 1, 2, 3 (`nodes` of them in the cluster), replication 3.
fn layout(nodes: u64) -> ClusterLayout {
    let peers = (1..=nodes)
        .map(|n| format!("{n}=h:{n}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut l = ClusterLayout::new(parse_peers(&peers).unwrap(), 1, 3).unwrap();
    l.shards[0].replicas = vec![1, 2, 3];
    l
}

/// Shard 0's counts: following requests per node over the window.
fn follow_counts(per_node: &[(NodeId, u64)]) -> BTreeMap<ShardId, ShardTally> {
    let reports: Vec<OriginReport> = per_node
        .iter()
        .map(|&(node, n)| OriginReport {
            node,
            window_ms: WINDOW_MS,
            counts: vec![(0, Pull::Follow, n)],
        })
        .collect();
    tally(&reports)
}

/// Feeds `counts` every round from `from_ms` (inclusive) to `to_ms` (exclusive), and answers
/// the first time shard 0's want was handed on, if any.
fn feed(
    tracker: &mut FollowTracker,
    from_ms: u64,
    to_ms: u64,
    counts: &BTreeMap<ShardId, ShardTally>,
) -> Option<(u64, Want)> {
    (from_ms..to_ms)
        .step_by(ROUND_MS as usize)
        .find_map(|t| tracker.observe(t, counts).get(&0).map(|w| (t, *w)))
}

#[test]
fn a_dominant_origin_sustained_moves_the_leader_there() {
    let mut tracker = FollowTracker::new(settings());
    // Node 2 sends 90 of 100 requests over 5 s (18/s).
    let counts = follow_counts(&[(1, 10), (2, 90)]);
    let (at, want) = feed(&mut tracker, 0, 10_000, &counts).expect("handed on");
    assert_eq!(
        at,
        DOMINANCE_SUSTAIN.as_millis() as u64,
        "after 3 s, not before"
    );
    assert_eq!(
        want,
        Want::Follow {
            node: 2,
            share_pct: 90
        }
    );
    let l = layout(3);
    assert_eq!(
        decide(at, 0, Some(1), want, &l, settings()),
        Some(FollowAction::Transfer { from: 1, to: 2 })
    );
    // Hysteresis: the leader already there keeps it; nothing to do.
    assert_eq!(decide(at, 0, Some(2), want, &l, settings()), None);
    // An election under way: wait for it.
    assert_eq!(decide(at, 0, None, want, &l, settings()), None);
}

#[test]
fn a_short_burst_moves_nothing() {
    let mut tracker = FollowTracker::new(settings());
    let burst = follow_counts(&[(1, 10), (2, 90)]);
    let before = follow_counts(&[(1, 90), (2, 10)]);
    // 2.5 s of node 2, then node 1 again, then node 2 again for 2.5 s: never 3 s in a row.
    assert_eq!(feed(&mut tracker, 0, 2_500, &burst), None);
    assert_eq!(
        feed(&mut tracker, 2_500, 3_000, &before).map(|(_, w)| w.node()),
        None,
        "node 1 has not held for 3 s either"
    );
    assert_eq!(feed(&mut tracker, 3_000, 5_500, &burst), None);
    // A gap in observations (a new meta leader) starts over.
    assert_eq!(feed(&mut tracker, 5_500, 6_000, &burst), None);
    assert_eq!(
        feed(&mut tracker, 9_000, 11_500, &burst),
        None,
        "3 s after the burst began, but not seen between 6 and 9 s"
    );
}

#[test]
fn an_even_split_or_a_trickle_is_not_dominant() {
    assert_eq!(follow_counts(&[(1, 50), (2, 50)])[&0].want(), None);
    assert_eq!(
        follow_counts(&[(1, 41), (2, 59)])[&0].want(),
        None,
        "59% < 60%"
    );
    assert!(follow_counts(&[(1, 40), (2, 60)])[&0].want().is_some());
    // 20 requests over 5 s is 4/s, below the least rate; 25 is enough.
    assert_eq!(follow_counts(&[(2, 20)])[&0].want(), None);
    assert_eq!(
        follow_counts(&[(2, 25)])[&0].want(),
        Some(Want::Follow {
            node: 2,
            share_pct: 100
        })
    );
    assert!(follow_counts(&[]).is_empty());
}

/// A simulated shard whose workload alternates between nodes 2 and 3 every 4 s for two
/// minutes: each move the rules allow is made at once. Moves to a new node must be at least
/// the interval apart.
#[test]
fn alternating_origins_do_not_oscillate_within_the_interval() {
    let mut tracker = FollowTracker::new(settings());
    let mut l = layout(3);
    let mut leader = 1;
    let mut moves: Vec<(u64, NodeId)> = Vec::new();
    for t in (0..120_000).step_by(ROUND_MS as usize) {
        let from = if (t / 4_000) % 2 == 0 { 2 } else { 3 };
        let counts = follow_counts(&[(from, 95), (5 - from, 5)]);
        let wants = tracker.observe(t, &counts);
        if let Some(want) = wants.get(&0)
            && let Some(action) = decide(t, 0, Some(leader), *want, &l, settings())
        {
            let FollowAction::Transfer { to, .. } = action else {
                panic!("every node holds a replica: {action:?}");
            };
            l.followed.insert(0, action.record(t, *want));
            leader = to;
            moves.push((t, to));
        }
    }
    assert!(!moves.is_empty(), "the workload is followed at all");
    for pair in moves.windows(2) {
        assert!(
            pair[1].0 - pair[0].0 >= 30_000,
            "moves {pair:?} closer than the 30 s interval"
        );
    }
    assert!(moves.len() <= 4, "{moves:?}");
}

#[test]
fn the_same_target_is_retried_sooner_and_a_new_one_waits_the_interval() {
    let mut l = layout(3);
    let to2 = Want::Follow {
        node: 2,
        share_pct: 90,
    };
    let to3 = Want::Follow {
        node: 3,
        share_pct: 90,
    };
    let t0 = 1_000_000;
    l.followed
        .insert(0, FollowAction::Transfer { from: 1, to: 2 }.record(t0, to2));
    // The transfer did not take (node 1 still leads): again after 5 s, not before.
    assert_eq!(decide(t0 + 4_999, 0, Some(1), to2, &l, settings()), None);
    assert!(decide(t0 + 5_000, 0, Some(1), to2, &l, settings()).is_some());
    // Elsewhere: only after the interval.
    assert_eq!(decide(t0 + 29_999, 0, Some(2), to3, &l, settings()), None);
    assert_eq!(
        decide(t0 + 30_000, 0, Some(2), to3, &l, settings()),
        Some(FollowAction::Transfer { from: 2, to: 3 })
    );
    let short = FollowSettings {
        interval: Duration::from_secs(10),
    };
    assert!(decide(t0 + 10_000, 0, Some(2), to3, &l, short).is_some());
}

#[test]
fn a_pin_wins_at_once_and_never_adds_a_replica() {
    let reports = vec![
        OriginReport {
            node: 1,
            window_ms: WINDOW_MS,
            counts: vec![(0, Pull::Follow, 500), (0, Pull::Pin(3), 1)],
        },
        OriginReport {
            node: 2,
            window_ms: WINDOW_MS,
            counts: vec![(0, Pull::Pin(2), 1)],
        },
    ];
    let counts = tally(&reports);
    // Two pins with one request each: the lowest node id.
    assert_eq!(counts[&0].want(), Some(Want::Pin(2)));
    let mut tracker = FollowTracker::new(settings());
    assert_eq!(
        tracker.observe(0, &counts).get(&0),
        Some(&Want::Pin(2)),
        "no sustain for a pin"
    );
    let l = layout(4);
    assert_eq!(
        decide(0, 0, Some(1), Want::Pin(2), &l, settings()),
        Some(FollowAction::Transfer { from: 1, to: 2 })
    );
    // Node 4 holds no replica of shard 0: a pin does not add one.
    assert_eq!(decide(0, 0, Some(1), Want::Pin(4), &l, settings()), None);
    // A pin to a node that is not in the cluster does nothing.
    assert_eq!(decide(0, 0, Some(1), Want::Pin(9), &l, settings()), None);
}

#[test]
fn a_replica_is_added_first_where_the_dominant_node_has_none() {
    let mut l = layout(4);
    let to4 = Want::Follow {
        node: 4,
        share_pct: 80,
    };
    // At the replication factor: the replica that leaves is neither the leader (2) nor
    // node 4 — the most loaded of 1 and 3, then the highest id.
    let Some(FollowAction::AddReplica(m)) = decide(0, 0, Some(2), to4, &l, settings()) else {
        panic!("a replica is added");
    };
    assert_eq!(m.add, Some(4));
    assert_eq!(m.remove, Some(3));
    // Once recorded and moving, nothing more until the move is done.
    l.followed
        .insert(0, FollowAction::AddReplica(m).record(0, to4));
    l.shards[0].moving = Some(m);
    assert_eq!(decide(1, 0, Some(2), to4, &l, settings()), None);
    // Done: the transfer that completes it waits for nothing.
    l.shards[0].moving = None;
    l.shards[0].replicas = vec![1, 2, 4];
    assert_eq!(
        decide(1, 0, Some(2), to4, &l, settings()),
        Some(FollowAction::Transfer { from: 2, to: 4 })
    );
    // Below the replication factor, nothing leaves.
    let mut short = layout(4);
    short.shards[0].replicas = vec![1, 2];
    let Some(FollowAction::AddReplica(m)) = decide(0, 0, Some(1), to4, &short, settings()) else {
        panic!("a replica is added");
    };
    assert_eq!(m.remove, None);
    // With one replica (the leader) nothing can leave: nothing is added.
    let mut single = layout(4);
    single.replication = 1;
    single.shards[0].replicas = vec![1];
    assert_eq!(decide(0, 0, Some(1), to4, &single, settings()), None);
}

#[test]
fn replica_balancing_leaves_a_followed_replica_where_it_is() {
    // Four nodes, four shards of three replicas: every node holds three.
    let peers = parse_peers("1=a:1,2=b:2,3=c:3,4=d:4").unwrap();
    let mut l = ClusterLayout::new(peers, 4, 3).unwrap();
    assert_eq!(l.next_move(), None);
    // A follow move put shard 0's replica on node 4 instead of node 2.
    let want = Want::Follow {
        node: 4,
        share_pct: 90,
    };
    let s0 = l.shards[0].replicas.clone();
    assert!(!s0.contains(&4), "{s0:?}");
    let m = Move {
        add: Some(4),
        remove: Some(2),
    };
    l.shards[0].replicas = vec![1, 3, 4];
    l.followed
        .insert(0, FollowAction::AddReplica(m).record(0, want));
    // Node 4 now holds one more than its share, node 2 one less: balancing moves another
    // shard's replica, never shard 0's.
    while let Some((shard, step)) = l.next_move() {
        assert!(
            !(shard == 0 && step.remove == Some(4)),
            "balancing undid the follow move"
        );
        let s = &mut l.shards[shard as usize];
        s.replicas.retain(|n| Some(*n) != step.remove);
        s.replicas.extend(step.add);
    }
    assert!(l.shards[0].replicas.contains(&4));
}
