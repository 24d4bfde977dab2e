//! Membership changes under load, with real processes: a fourth node joins a three-node
//! cluster and takes an even share of the replicas; then a node is removed (its replicas
//! move first) and stopped. Writers run throughout; every acknowledged write must be there
//! at the end, read linearizably at the remaining nodes.
//! A node whose id another member has is refused, and stops with the reason.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::Cluster;
use firn_client::{Client, PutOptions};
use firn_model::{ReadAt, ReadConsistency};

const WRITERS: usize = 4;
/// Each writer stops after this many writes even if the test has not told it to.
const WRITES_PER_WRITER_MAX: usize = 20_000;

/// A writer's acknowledged (key, value) pairs and its count of refused or uncertain writes.
type WriterOutcome = (Vec<(String, String)>, usize);

/// Starts writers over the given nodes; each returns the keys and values it had
/// acknowledged (every key is written once, so the value read back must be that one).
fn start_writers(
    addrs: Vec<String>,
    stop: Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<WriterOutcome>> {
    (0..WRITERS)
        .map(|w| {
            let addr = addrs[w % addrs.len()].clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                let client = Client::connect(&addr).await.unwrap();
                let mut acked = Vec::new();
                let mut failed = 0;
                for i in 0..WRITES_PER_WRITER_MAX {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let (k, v) = (format!("m{w}-{i}"), format!("v{w}-{i}"));
                    match client
                        .put(k.as_bytes(), v.as_bytes(), PutOptions::default())
                        .await
                    {
                        Ok(_) => acked.push((k, v)),
                        Err(_) => {
                            failed += 1;
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                }
                (acked, failed)
            })
        })
        .collect()
}

/// Replicas per node and whether any move is under way, from node index `i`'s view.
fn placement(cluster: &Cluster, i: usize) -> Option<(BTreeMap<u64, usize>, bool, usize)> {
    let v = cluster.cluster_json(i)?;
    let c = &v["cluster"];
    let mut load = BTreeMap::new();
    for n in c["nodes"].as_array()? {
        load.insert(n["node_id"].as_u64()?, 0);
    }
    let mut moving = false;
    for s in c["shards"].as_array()? {
        moving |= !s["moving"].is_null() || s["leader"].is_null();
        for r in s["replicas"].as_array()? {
            *load.entry(r.as_u64()?).or_default() += 1;
        }
    }
    Some((load, moving, c["shards"].as_array()?.len()))
}

fn wait_for_placement(
    cluster: &Cluster,
    i: usize,
    what: &str,
    ok: impl Fn(&BTreeMap<u64, usize>) -> bool,
) -> BTreeMap<u64, usize> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some((load, moving, _)) = placement(cluster, i)
            && !moving
            && ok(&load)
        {
            return load;
        }
        assert!(
            Instant::now() < deadline,
            "{what} not reached in 120 s: {:?}",
            placement(cluster, i)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `firn cluster remove NODE --timeout T` through node index 0, which waits until the node's
/// replicas have moved and it has left; panics if it fails.
fn cluster_remove(cluster: &Cluster, node: u64, timeout: &str) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_firn"))
        .args([
            "cluster",
            "remove",
            &node.to_string(),
            "--timeout",
            timeout,
            "--addr",
        ])
        .arg(cluster.resp_addr(0))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "firn cluster remove {node} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_join_and_leave_under_load_without_losing_acknowledged_writes() {
    // Small snapshots: a joining replica catches up through a snapshot, not only the log.
    let cluster = Cluster::ready(
        3,
        &[
            "--snapshot-every",
            "500",
            "--snapshot-catchup-entries",
            "0",
            "--shards",
            "4",
        ],
    )
    .await;
    let addrs: Vec<String> = (0..3).map(|i| cluster.resp_addr(i)).collect();
    // A keyspace defined before the changes holds on the replicas that move.
    let two = Client::connect(&cluster.resp_addr(1)).await.unwrap();
    let mut latest = firn_model::KeyspaceSpec::default_keyspace();
    latest.prefix = "cam/".into();
    latest.mode = firn_model::KeyspaceMode::Latest;
    // A fresh cluster's meta group may still be electing (CLUSTERDOWN): retried.
    let def = firn_model::KeyspaceDef::new(latest);
    firn_client::retry_transient(|| two.keyspace_create(&def))
        .await
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = start_writers(addrs, stop.clone());
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Node 4 joins through node 1 and takes an even share: 4 shards × 3 replicas over 4
    // nodes is 3 each.
    let joined_at = Instant::now();
    let (mut cluster, load) = tokio::task::spawn_blocking(move || {
        let mut cluster = cluster;
        let four = cluster.join(0);
        assert_eq!(four, 3);
        let load = wait_for_placement(&cluster, 0, "an even spread over 4 nodes", |l| {
            l.len() == 4 && l.values().all(|n| *n == 3)
        });
        // Leaders spread too: no node leads two shards more than another.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let leaders: Vec<Option<u64>> = cluster
                .cluster_json(0)
                .and_then(|v| {
                    v["cluster"]["shards"]
                        .as_array()
                        .map(|a| a.iter().map(|s| s["leader"].as_u64()).collect())
                })
                .unwrap_or_default();
            let mut led: BTreeMap<u64, usize> = (1..=4).map(|n| (n, 0)).collect();
            for l in leaders.iter().flatten() {
                *led.entry(*l).or_default() += 1;
            }
            let (max, min) = (led.values().max().unwrap(), led.values().min().unwrap());
            if leaders.len() == 4 && leaders.iter().all(Option::is_some) && max - min <= 1 {
                eprintln!(
                    "join: leaders spread after {:?}: {led:?}",
                    joined_at.elapsed()
                );
                break;
            }
            assert!(Instant::now() < deadline, "leaders not spread: {led:?}");
            std::thread::sleep(Duration::from_millis(200));
        }
        (cluster, load)
    })
    .await
    .unwrap();
    eprintln!(
        "join: node 4 holds its share after {:?}: {load:?}",
        joined_at.elapsed()
    );
    // The new node serves reads and writes.
    let four = Client::connect(&cluster.resp_addr(3)).await.unwrap();
    four.put(b"via-four", b"yes", PutOptions::default())
        .await
        .unwrap();

    // Node 2 is removed with the CLI, which waits until its replicas have moved.
    let removed_at = Instant::now();
    cluster_remove(&cluster, 2, "120s");
    eprintln!("remove: node 2 left after {:?}", removed_at.elapsed());
    let cluster = tokio::task::spawn_blocking(move || {
        let load = wait_for_placement(&cluster, 0, "node 2 drained", |l| {
            !l.contains_key(&2) && l.len() == 3 && l.values().all(|n| *n == 4)
        });
        eprintln!("after removal: {load:?}");
        // The removed node, still running, serves nothing and says why; its health is 503.
        let health = || match ureq::get(&format!("http://{}/healthz", cluster.http_addr(1)))
            .timeout(Duration::from_secs(2))
            .call()
        {
            Ok(r) => (r.status(), r.into_string().unwrap_or_default()),
            Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap_or_default()),
            Err(e) => (0, e.to_string()),
        };
        assert!(
            common::wait_until(Duration::from_secs(10), || {
                let (code, body) = health();
                code == 503 && body.contains("\"removed\"")
            }),
            "a removed node's health: {:?}",
            health()
        );
        let mut con = redis::Client::open(format!("redis://{}/", cluster.resp_addr(1)))
            .unwrap()
            .get_connection()
            .unwrap();
        let refused: redis::RedisResult<()> = redis::cmd("SET").arg("k").arg("v").query(&mut con);
        let e = refused.expect_err("a removed node took a write");
        assert!(e.to_string().contains("not in the cluster"), "{e}");
        cluster.kill_9(1);
        cluster
    })
    .await
    .unwrap();

    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let mut acked = Vec::new();
    let mut failed = 0;
    for w in writers.drain(..) {
        let (a, f) = w.await.unwrap();
        acked.extend(a);
        failed += f;
    }
    eprintln!(
        "{} writes acknowledged, {failed} refused or uncertain",
        acked.len()
    );
    assert!(acked.len() > 200, "the writers made progress");

    for i in [0, 2, 3] {
        let client = Client::connect(&cluster.resp_addr(i)).await.unwrap();
        let listed = client.keyspace_list().await.unwrap();
        assert!(
            listed
                .iter()
                .any(|d| d.spec.prefix == "cam/" && d.spec.mode == firn_model::KeyspaceMode::Latest),
            "node {} lists {listed:?}",
            i + 1
        );
        for round in 0..2 {
            client
                .put(
                    format!("cam/{i}").as_bytes(),
                    format!("f{round}").as_bytes(),
                    PutOptions::default(),
                )
                .await
                .unwrap();
        }
        let kept = client
            .history(format!("cam/{i}").as_bytes(), 1, None, 10, None)
            .await
            .unwrap();
        assert_eq!(
            kept.len(),
            1,
            "a latest keyspace keeps one version at node {}",
            i + 1
        );
        for (k, v) in &acked {
            let got = client
                .get(k.as_bytes(), ReadAt::Latest, ReadConsistency::Linearizable)
                .await
                .unwrap_or_else(|e| panic!("node {} reading {k}: {e}", i + 1))
                .and_then(|x| x.value);
            assert_eq!(
                got.as_deref(),
                Some(v.as_bytes()),
                "acknowledged write {k} missing at node {}",
                i + 1
            );
        }
    }
    drop(cluster);
}

/// A node that joins and dies while replicas move onto it is removed all the same: the move
/// onto it, which can never finish, is abandoned, its finished replicas move off, and it
/// leaves the cluster. Before, the move came first in every round of the meta leader's work
/// and the node never drained: `firn cluster remove` waited out its timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_died_while_replicas_moved_onto_it_can_be_removed() {
    let cluster = Cluster::ready(3, &["--shards", "2"]).await;
    // More than openraft's replication lag threshold (5,000 entries) in each shard's log:
    // below it a learner counts as caught up whatever it holds, and a move onto a dead
    // node finishes (leaving a dead voter) instead of waiting for it.
    let writers: Vec<_> = (0..32)
        .map(|w| {
            let addr = cluster.resp_addr(w % 3);
            tokio::spawn(async move {
                let client = Client::connect(&addr).await.unwrap();
                for i in 0..400 {
                    let key = format!("fill/{w}/{i}");
                    firn_client::retry_transient(|| {
                        client.put(key.as_bytes(), b"v", PutOptions::default())
                    })
                    .await
                    .unwrap_or_else(|e| panic!("writing {key}: {e}"));
                }
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
    let mut cluster = tokio::task::spawn_blocking(move || {
        let mut cluster = cluster;
        let four = cluster.join(0);
        // Killed as soon as it is a member, before a replica it is given can catch up:
        // the move onto it stays unfinished.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let member = cluster.cluster_json(0).is_some_and(|v| {
                v["cluster"]["nodes"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|n| n["node_id"] == 4))
            });
            if member {
                break;
            }
            assert!(Instant::now() < deadline, "node 4 did not become a member");
            std::thread::sleep(Duration::from_millis(20));
        }
        cluster.kill_9(four);
        // A move onto it is recorded all the same (the meta leader does not know it died).
        let deadline = Instant::now() + Duration::from_secs(30);
        while !cluster.cluster_json(0).is_some_and(|v| {
            v["cluster"]["shards"]
                .as_array()
                .is_some_and(|a| a.iter().any(|s| s["moving"]["add"] == 4))
        }) {
            assert!(Instant::now() < deadline, "no replica move onto node 4");
            std::thread::sleep(Duration::from_millis(50));
        }
        cluster
    })
    .await
    .unwrap();
    cluster_remove(&cluster, 4, "90s");
    cluster = tokio::task::spawn_blocking(move || {
        let load = wait_for_placement(&cluster, 0, "node 4 gone", |l| {
            !l.contains_key(&4) && l.len() == 3 && l.values().all(|n| *n == 2)
        });
        eprintln!("after removing the dead node: {load:?}");
        cluster
    })
    .await
    .unwrap();
    let client = Client::connect(&cluster.resp_addr(1)).await.unwrap();
    for i in 0..20 {
        let key = format!("after/{i}");
        firn_client::retry_transient(|| client.put(key.as_bytes(), b"v", PutOptions::default()))
            .await
            .unwrap_or_else(|e| panic!("writing {key} after the removal: {e}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_peers_does_not_list_joins_through_them() {
    // A StatefulSet scaled up past the `peers` it was created with: its new pod starts with
    // the same list, which does not name it.
    let cluster = tokio::task::spawn_blocking(|| {
        let mut c = Cluster::start(3, &["--shards", "3"]);
        c.wait_for_leaders(0, None);
        let four = c.add_unlisted();
        assert_eq!(four, 3);
        let load = wait_for_placement(&c, 0, "node 4 holding replicas", |l| {
            l.len() == 4 && l.get(&4).is_some_and(|n| *n > 0)
        });
        eprintln!("node 4 joined: {load:?}");
        // Restarted with the same list, it is a member already and stays one.
        c.kill_9(3);
        c.restart(3);
        c.wait_for_leaders(3, None);
        c
    })
    .await
    .unwrap();
    let four = Client::connect(&cluster.resp_addr(3)).await.unwrap();
    firn_client::retry_transient(|| four.put(b"via-four", b"yes", PutOptions::default()))
        .await
        .unwrap();
    let one = Client::connect(&cluster.resp_addr(0)).await.unwrap();
    let got = one
        .get(b"via-four", ReadAt::Latest, ReadConsistency::Linearizable)
        .await
        .unwrap()
        .and_then(|x| x.value);
    assert_eq!(got.as_deref(), Some(&b"yes"[..]));
    drop(cluster);
}

#[test]
fn a_node_whose_id_is_taken_is_refused_and_stops_with_the_reason() {
    // Node 1 of a cluster; a second process told to join it as node 1 too, from another
    // address (a copy-pasted command line): the cluster must refuse it, and the new process
    // must stop and say why, not retry forever.
    let cluster = Cluster::start(1, &["--shards", "1"]);
    cluster.wait_for_leaders(0, None);
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(common::firn_bin())
        .arg("serve")
        .arg("--data-dir")
        .arg(dir.path())
        .args(["--node-id", "1", "--join", &cluster.peer_addr(0)])
        .args(["--resp-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
        .args(["--peer-addr", "127.0.0.1:0"])
        .env("RUST_LOG", "off")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn firn");
    let stopped = common::wait_until(Duration::from_secs(60), || {
        child.try_wait().unwrap().is_some()
    });
    if !stopped {
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    assert!(stopped, "a refused node kept running");
    assert!(!out.status.success(), "a refused node exited with success");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("node 1 is already a member") && said.contains("--node-id"),
        "the reason is not what the node said: {said}"
    );
    // The cluster is as it was: one node, the first one, at its own addresses.
    let layout = cluster.cluster_json(0).expect("cluster view");
    let nodes = layout["cluster"]["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 1, "{layout}");
    assert_eq!(nodes[0]["node_id"], 1, "{layout}");
    assert_eq!(
        nodes[0]["resp_addr"].as_str(),
        Some(cluster.resp_addr(0).as_str()),
        "{layout}"
    );
}
