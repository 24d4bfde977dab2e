//! Leaders that follow their clients, on three real processes: DAL's worker (examples/follow)
//! works through node A, then node B; with `FOLLOW on` its shard's leader moves to A, then to
//! B, each within a stated time, and the worker's accesses through B become local once B leads;
//! on four nodes, a node without a replica of the shard gets one first. With `FOLLOW off` the
//! same worker moves no leader.

mod common;

use std::time::Duration;

use common::Cluster;
use firn_follow::{Config, Report, run};
use firn_model::{Follow, KeyspaceDef, KeyspacePlacement, KeyspaceSpec};

/// The nodes' least time between two follow moves of a shard (the default, 30 s, would make
/// the test wait that long between A and B).
const FOLLOW_INTERVAL: &str = "5s";
/// How long after the worker starts on a node its shard's leader must be there: 5 s of
/// window to reach 60%, 3 s sustained, steward rounds and the transfer are about 7 s; the
/// rest is slack for a loaded machine.
const FOLLOWED_WITHIN: Duration = Duration::from_secs(20);

/// `n` nodes, once node 1 knows every shard's leader; and their RESP addresses.
async fn nodes(n: usize) -> (Cluster, Vec<String>) {
    tokio::task::spawn_blocking(move || {
        let c = Cluster::start(n, &["--in-memory", "--follow-interval", FOLLOW_INTERVAL]);
        c.wait_for_leaders(0, None);
        let addrs = (0..n).map(|i| c.resp_addr(i)).collect();
        (c, addrs)
    })
    .await
    .unwrap()
}

/// A shard's replicas in a cluster view.
fn replicas_of(shard: &serde_json::Value) -> Vec<u64> {
    shard["replicas"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r.as_u64())
        .collect()
}

/// `shard` in the cluster view of node index 0.
fn shard_view(cluster: &Cluster, shard: u64) -> serde_json::Value {
    cluster.cluster_json(0).unwrap()["cluster"]["shards"][shard as usize].clone()
}

/// The worker's shard's leader before it starts, and two other nodes as indexes (A, B).
fn others_than_leader(cluster: &Cluster, config: &Config) -> (u64, usize, usize) {
    let layout = firn_node::cluster::layout::ClusterLayout::new(
        firn_node::cluster::layout::parse_peers("1=a,2=b,3=c").unwrap(),
        3,
        3,
    )
    .unwrap();
    let shard = layout.shard_of_key(config.key(0).as_bytes()) as usize;
    let leader = cluster.wait_for_leaders(0, None)[shard];
    let others: Vec<usize> = (0..3).filter(|i| *i as u64 + 1 != leader).collect();
    (leader, others[0], others[1])
}

fn print(report: &Report) {
    eprint!("{}", report.describe());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_leader_follows_its_worker_from_node_to_node_and_access_gets_local() {
    let (cluster, addrs) = nodes(3).await;
    let mut config = Config::new(addrs, Duration::from_secs(15), Duration::from_secs(18));
    let (leader, a, b) = others_than_leader(&cluster, &config);
    config.first = a;
    config.second = b;
    let report = run(&config).await.unwrap();
    print(&report);
    let (a, b) = (a as u64 + 1, b as u64 + 1);
    assert_eq!((report.first_node, report.second_node), (a, b));
    assert_eq!(
        report.leaders.first().and_then(|(_, l)| *l),
        Some(leader),
        "the leader starts away from both nodes the worker uses"
    );
    let on_a = report
        .leader_on(a, 0.0)
        .unwrap_or_else(|| panic!("the leader never moved to node {a}"));
    assert!(
        on_a <= FOLLOWED_WITHIN.as_secs_f64() * 1_000.0,
        "moved to node {a} after {on_a} ms"
    );
    let on_b = report
        .leader_on(b, report.switch_ms)
        .unwrap_or_else(|| panic!("the leader never moved to node {b}"));
    assert!(
        on_b - report.switch_ms <= FOLLOWED_WITHIN.as_secs_f64() * 1_000.0,
        "moved to node {b} {} ms after the worker did",
        on_b - report.switch_ms
    );
    // Through node B: remote until its leader moved there, local after; both kinds are
    // seen. How much faster local access is, is measured by the benchmark
    // (docs/benchmarks.md, "Leaders that follow their clients"), not asserted here: on a
    // loaded two-core machine one median can cross the other.
    let end = report.samples.last().unwrap().t_ms + 1.0;
    for (what, write) in [("writes", true), ("reads", false)] {
        for local in [false, true] {
            assert!(
                report
                    .median_us(report.switch_ms, end, local, Some(write))
                    .is_some(),
                "no {what} through node {b} with local={local}"
            );
        }
    }
    assert_eq!(
        report.failures(),
        0,
        "every access succeeds, moves included"
    );

    // The moves show in the cluster status and on the meta leader's /metrics.
    let shard = shard_view(&cluster, report.shard);
    assert_eq!(shard["followed"]["to"].as_u64(), Some(b), "{shard}");
    assert_eq!(shard["followed"]["from"].as_u64(), Some(a), "{shard}");
    assert_eq!(
        shard["followed"]["step"].as_str(),
        Some("leader"),
        "{shard}"
    );
    let moves = follow_moves(&cluster, report.shard, "leader");
    assert!(moves >= 2.0, "{moves} follow moves counted in /metrics");
}

/// `firn_leader_follow_moves_total{shard,step}` summed over the cluster's nodes' /metrics
/// (only the meta leader counts; 0 where absent).
fn follow_moves(cluster: &Cluster, shard: u64, step: &str) -> f64 {
    let (shard, step) = (format!("shard=\"{shard}\""), format!("step=\"{step}\""));
    (0..cluster.nodes.len())
        .map(|i| {
            ureq::get(&format!("http://{}/metrics", cluster.http_addr(i)))
                .call()
                .unwrap()
                .into_string()
                .unwrap()
        })
        .flat_map(|text| {
            text.lines()
                .filter(|l| {
                    l.starts_with("firn_leader_follow_moves_total")
                        && l.contains(&shard)
                        && l.contains(&step)
                })
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_follow_off_a_worker_moves_no_leader() {
    let (cluster, addrs) = nodes(3).await;
    // Each phase outlasts what a move under FOLLOW on takes (about 7 s).
    let mut config = Config::new(addrs, Duration::from_secs(10), Duration::from_secs(10));
    config.follow = Follow::Off;
    // Another keyspace follows: requests are counted, and the worker's keys must count as
    // `off`.
    let other = KeyspaceDef {
        spec: KeyspaceSpec {
            prefix: "other/".into(),
            ..KeyspaceSpec::default_keyspace()
        },
        placement: KeyspacePlacement {
            local: false,
            follow: Follow::On,
        },
    };
    let client = firn_client::Client::connect(&config.nodes[0])
        .await
        .unwrap();
    // A fresh cluster's meta group may still be electing (CLUSTERDOWN): retried.
    firn_client::retry_transient(|| client.keyspace_create(&other))
        .await
        .unwrap();
    let (leader, a, b) = others_than_leader(&cluster, &config);
    config.first = a;
    config.second = b;
    let report = run(&config).await.unwrap();
    print(&report);
    assert!(report.leaders.len() > 50, "the leader was polled");
    assert_eq!(
        report.leader_changes(),
        vec![(report.leaders[0].0, Some(leader))],
        "the leader stayed on node {leader}"
    );
    assert!(shard_view(&cluster, report.shard)["followed"].is_null());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_a_replica_gets_one_first_then_the_leadership() {
    // Four nodes, three replicas per shard: the worker's shard (1) is on nodes 2, 3, 4.
    let (cluster, addrs) = nodes(4).await;
    let mut config = Config::new(addrs, Duration::from_secs(25), Duration::ZERO);
    config.first = 0;
    config.second = 1;
    let shard = shard_view(&cluster, 1);
    assert!(!replicas_of(&shard).contains(&1), "{shard}");
    let report = run(&config).await.unwrap();
    print(&report);
    assert_eq!(report.shard, 1);
    let on_1 = report
        .leader_on(1, 0.0)
        .unwrap_or_else(|| panic!("the leader never moved to node 1"));
    // A replica caught up (the shard is nearly empty), then the transfer.
    assert!(
        on_1 <= FOLLOWED_WITHIN.as_secs_f64() * 1_000.0,
        "node 1 led after {on_1} ms"
    );
    let shard = shard_view(&cluster, report.shard);
    let replicas = replicas_of(&shard);
    assert_eq!(replicas.len(), 3, "the replication factor is kept: {shard}");
    assert!(replicas.contains(&1), "{shard}");
    assert_eq!(
        shard["followed"]["step"].as_str(),
        Some("leader"),
        "{shard}"
    );
    let added = follow_moves(&cluster, report.shard, "replica");
    assert_eq!(added, 1.0, "one replica added for the move");
}
