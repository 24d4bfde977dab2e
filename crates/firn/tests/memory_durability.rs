//! `DURABILITY memory` (SplitFT): writes acknowledged once a majority holds them in memory.
//! A restarted replica refuses to vote until it has caught up (Viewstamped Replication's
//! recovery rule), and killing a majority of a shard's processes at once loses nothing
//! acknowledged: each append reaches the OS before it is acknowledged, only its fsync waits
//! for the checkpoint (a machine crash of a majority can lose what was acknowledged since
//! the last checkpoint; no test here can crash a machine). A minority killed under load
//! loses nothing either: see `linearizability.rs`,
//! `memory_cluster_history_under_leader_kills_is_linearizable`.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Cluster, wait_until};
use firn_client::{Client, PutOptions, retry_transient};
use firn_model::{Durability, KeyspaceDef, KeyspaceSpec};

/// A 3-node cluster of one disk shard (and so one memory shard, shard 1) with the keyspace
/// `m/` in memory.
async fn memory_cluster(extra: &'static [&'static str]) -> (Cluster, Client) {
    let mut args = vec!["--shards", "1"];
    args.extend_from_slice(extra);
    let cluster = Cluster::ready(3, &args).await;
    let client = Client::connect(&cluster.resp_addr(0)).await.unwrap();
    let spec = KeyspaceSpec {
        prefix: "m/".into(),
        durability: Durability::Memory,
        ..KeyspaceSpec::default_keyspace()
    };
    let def = KeyspaceDef::new(spec);
    retry_transient(|| client.keyspace_create(&def))
        .await
        .unwrap();
    (cluster, client)
}

/// The memory shard's leader as node index `i` sees it (`None`: no leader, or no answer).
fn memory_leader(cluster: &Cluster, i: usize) -> Option<u64> {
    let view = cluster.cluster_json(i)?;
    view["shards"]
        .as_array()?
        .iter()
        .find(|s| s["durability"] == "memory")?["leader"]
        .as_u64()
}

/// The memory shard's leader once node index 0 knows one (bounded).
fn settled_memory_leader(cluster: &Cluster) -> u64 {
    let mut leader = None;
    assert!(
        wait_until(Duration::from_secs(20), || {
            leader = memory_leader(cluster, 0);
            leader.is_some()
        }),
        "the memory shard has no leader"
    );
    leader.unwrap()
}

fn disk_leader(cluster: &Cluster, i: usize) -> Option<u64> {
    cluster.leaders(i).first().copied().flatten()
}

/// Writes `m/{i}` for `n` keys, each acknowledged.
async fn write_keys(client: &Client, n: usize) {
    for i in 0..n {
        let key = format!("m/{i}");
        retry_transient(|| client.put(key.as_bytes(), b"v", PutOptions::default()))
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_memory_replica_refuses_to_vote_until_it_has_caught_up() {
    let (cluster, client) = memory_cluster(&[]).await;
    write_keys(&client, 50).await;
    let cluster = tokio::task::spawn_blocking(move || {
        let mut cluster = cluster;
        // Everything is checkpointed on every node (100 ms), so nothing is lost below.
        std::thread::sleep(Duration::from_millis(500));
        let leader = settled_memory_leader(&cluster);
        let l = (leader - 1) as usize;
        let f1 = (l + 1) % 3;
        let f2 = (l + 2) % 3;
        cluster.kill_9(l);
        cluster.kill_9(f1);
        // One of the two comes back: with the survivor it is a majority, but it may have
        // lost what it held in memory, so it refuses the survivor's vote requests.
        cluster.restart(f1);
        assert!(
            wait_until(Duration::from_secs(20), || disk_leader(&cluster, f2)
                .is_some()),
            "the disk shard elected no leader from the two running nodes"
        );
        assert!(
            wait_until(Duration::from_secs(10), || cluster
                .counter(f1, "firn_memory_votes_refused_total")
                > 0.0),
            "the restarted replica refused no vote"
        );
        let began = Instant::now();
        while began.elapsed() < Duration::from_secs(3) {
            assert_eq!(
                memory_leader(&cluster, f2),
                None,
                "the memory shard elected a leader while one of its two running replicas \
                 was recovering"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        // The other comes back too: a majority is recovering, so the group goes on.
        cluster.restart(l);
        assert!(
            wait_until(Duration::from_secs(30), || memory_leader(&cluster, f2)
                .is_some()),
            "the memory shard elected no leader once a majority had restarted"
        );
        cluster
    })
    .await
    .unwrap();
    let client = Client::connect(&cluster.resp_addr(0)).await.unwrap();
    for i in 0..50 {
        let key = format!("m/{i}");
        let got = common::read_latest(&client, key.as_bytes()).await;
        assert!(got.is_some(), "{key}, written and checkpointed, was lost");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_killed_at_once_loses_no_acknowledged_write() {
    // Checkpoints a second apart: what the kill would lose if appends waited for them.
    let (cluster, client) = memory_cluster(&["--memory-checkpoint-every", "1s"]).await;
    let t0 = Instant::now();
    let acked: Arc<Mutex<Vec<(String, Duration)>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..4 {
        let (client, acked, stop) = (client.clone(), acked.clone(), stop.clone());
        writers.push(tokio::spawn(async move {
            for i in 0..20_000 {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    return;
                }
                let key = format!("m/{w}/{i}");
                match client
                    .put(key.as_bytes(), b"v", PutOptions::default())
                    .await
                {
                    Ok(_) => acked.lock().unwrap().push((key, t0.elapsed())),
                    Err(_) => return,
                }
            }
        }));
    }
    // At least two and a half seconds (past two checkpoints) and at least 300 acknowledged
    // writes before the kill, however slow the machine: the count, not the clock, makes the
    // history worth checking.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let enough = Instant::now() + Duration::from_secs(60);
    while acked.lock().unwrap().len() < 300 && Instant::now() < enough {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Kill the memory shard's leader and one follower at once; the third keeps running.
    let (cluster, killed_at) = tokio::task::spawn_blocking(move || {
        let mut cluster = cluster;
        let leader = settled_memory_leader(&cluster);
        let l = (leader - 1) as usize;
        let other = (l + 1) % 3;
        let killed_at = t0.elapsed();
        cluster.kill_9(l);
        cluster.kill_9(other);
        (cluster, killed_at)
    })
    .await
    .unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in writers {
        let _ = tokio::time::timeout(Duration::from_secs(15), w).await;
    }
    let cluster = tokio::task::spawn_blocking(move || {
        let mut cluster = cluster;
        for i in 0..3 {
            if cluster.nodes[i].is_none() {
                cluster.restart(i);
            }
        }
        assert!(
            wait_until(Duration::from_secs(30), || memory_leader(&cluster, 0)
                .is_some()),
            "the memory shard elected no leader after the restarts"
        );
        cluster
    })
    .await
    .unwrap();
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() > 200, "too few writes: {}", acked.len());
    let reader = Client::connect(&cluster.resp_addr(0)).await.unwrap();
    let mut lost = Vec::new();
    for (key, at) in &acked {
        let got = common::read_latest(&reader, key.as_bytes()).await;
        if got.is_none() {
            lost.push((key.clone(), *at));
        }
    }
    eprintln!(
        "majority kill: {} of {} acknowledged writes lost",
        lost.len(),
        acked.len()
    );
    assert!(
        lost.is_empty(),
        "{} acknowledged writes were lost, e.g. (key, acknowledged at) {:?}; killed at {killed_at:?}",
        lost.len(),
        &lost[..lost.len().min(3)]
    );
}

/// A write at a node that has not yet learned of a new memory keyspace (a layout poll, at
/// most 200 ms) goes to a disk shard, which refuses it: `TRYAGAIN`, nothing applied. The
/// node its client reached plans it again (`Router::again_while_refused`), routed right by
/// then, so the client — over RESP and over HTTP — sees the write taken, not the refusal.
/// Before, a client writing at the disk shard's leader heard the `TRYAGAIN` at once, and one
/// writing at another node heard it after 5 s of tries sent to the same disk shard (and an
/// HTTP `PUT` skipped the retry at first: it runs the write itself). Most
/// definitions are learned everywhere before they are answered (every shard applies them
/// first), so the test defines several and writes at once after each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_routed_before_its_keyspace_was_learned_is_sent_again_not_refused() {
    let cluster = Cluster::ready(3, &["--shards", "1"]).await;
    let mut clients = Vec::new();
    for i in 0..3 {
        clients.push(Client::connect(&cluster.resp_addr(i)).await.unwrap());
    }
    let mut keys = Vec::new();
    let mut piped = Vec::new();
    for round in 0..9 {
        let spec = KeyspaceSpec {
            prefix: format!("m{round}/"),
            durability: Durability::Memory,
            ..KeyspaceSpec::default_keyspace()
        };
        let def = KeyspaceDef::new(spec);
        retry_transient(|| clients[round % 3].keyspace_create(&def))
            .await
            .unwrap();
        // At once, at every node (some may not have polled the new layout yet), one write
        // each, a different kind at each node in turn.
        for (i, client) in clients.iter().enumerate() {
            match (round + i) % 3 {
                0 => {
                    let key = format!("m{round}/resp-{i}");
                    let written = client
                        .put(key.as_bytes(), b"v", PutOptions::default())
                        .await;
                    assert!(
                        written.is_ok(),
                        "RESP write of {key} at node {i}: {written:?}"
                    );
                    keys.push(key);
                }
                1 => {
                    let key = format!("m{round}/http-{i}");
                    let url = format!("http://{}/v1/kv/{key}", cluster.http_addr(i));
                    match ureq::put(&url).send_bytes(b"v") {
                        Ok(r) => assert_eq!(r.status(), 200, "HTTP write of {key} at node {i}"),
                        Err(ureq::Error::Status(code, r)) => panic!(
                            "HTTP write of {key} at node {i}: {code} {}",
                            r.into_string().unwrap()
                        ),
                        Err(e) => panic!("HTTP write of {key} at node {i}: {e}"),
                    }
                    keys.push(key);
                }
                _ => {
                    // Two writes of one key pipelined in one segment: a refused first one is
                    // not sent again behind the second (it would overtake it), so the value
                    // is the second's whenever the second was taken, with one version per
                    // write taken.
                    let key = format!("m{round}/piped-{i}");
                    let answers = set_twice_pipelined(&cluster.resp_addr(i), &key).await;
                    piped.push((key, answers));
                }
            }
        }
    }
    for (key, answers) in piped {
        let taken = answers.iter().filter(|a| a.as_str() == "+OK").count();
        // The value of the last write taken ("1" or "2"), at one version per write taken.
        let expected = answers
            .iter()
            .rposition(|a| a.as_str() == "+OK")
            .map(|last_taken| (taken as u64, format!("{}", last_taken + 1)));
        assert_eq!(
            latest(&clients[0], &key).await,
            expected,
            "{key} after the pipelined answers {answers:?}"
        );
    }
    // Each applied once: one version of each key.
    for key in keys {
        let version = latest(&clients[0], &key).await.map(|(version, _)| version);
        assert_eq!(version, Some(1), "{key}");
    }
}

/// The newest version of `key` and its value, read linearizably.
async fn latest(client: &Client, key: &str) -> Option<(u64, String)> {
    let got = client
        .get(
            key.as_bytes(),
            firn_model::ReadAt::Latest,
            firn_model::ReadConsistency::Linearizable,
        )
        .await
        .unwrap()?;
    let value = String::from_utf8_lossy(&got.value.unwrap_or_default()).into_owned();
    Some((got.version, value))
}

/// `SET key 1` and `SET key 2` sent in one write on a new connection; their two answers'
/// first lines (`+OK`, `-TRYAGAIN …`).
async fn set_twice_pipelined(addr: &str, key: &str) -> Vec<String> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let set = |v: &str| {
        format!(
            "*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n$1\r\n{v}\r\n",
            key.len()
        )
    };
    stream
        .write_all(format!("{}{}", set("1"), set("2")).as_bytes())
        .await
        .unwrap();
    let mut lines = BufReader::new(stream).lines();
    let mut answers = Vec::new();
    while answers.len() < 2 {
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("an answer within 30 s")
            .unwrap()
            .expect("the connection open");
        answers.push(line);
    }
    answers
}

/// Longest a memory keyspace may take, after its nodes restart, to take a write again: an
/// election or two (300–600 ms each) after the recovering replicas have counted each other
/// (a look every 200 ms, each ask at most 2 s). Measured here: about 1–3 s.
const BACK_WITHIN: Duration = Duration::from_secs(30);

/// How the test takes nodes down.
#[derive(Clone, Copy, Debug)]
enum Down {
    /// SIGTERM, every node: a clean stop.
    StopAll,
    /// SIGKILL, every node at once.
    KillAll,
    /// SIGKILL, the memory shard's leader and one follower at once.
    KillTwo,
    /// SIGKILL, every node at once; then two of them start, a second apart, and the third
    /// stays down: the first to count a majority must go on counting for the second.
    KillAllTwoBack,
}

/// Takes nodes down as `down` says and starts them again; returns how long after the starts
/// the memory keyspace took a write (through node index 0), or panics past [`BACK_WITHIN`].
async fn down_and_back(cluster: Cluster, down: Down, probe: &str) -> (Cluster, Duration) {
    let cluster = tokio::task::spawn_blocking(move || {
        let mut cluster = cluster;
        match down {
            Down::StopAll => (0..3).for_each(|i| cluster.stop(i)),
            Down::KillAll => (0..3).for_each(|i| cluster.kill_9(i)),
            Down::KillTwo => {
                let l = (settled_memory_leader(&cluster) - 1) as usize;
                cluster.kill_9(l);
                cluster.kill_9((l + 1) % 3);
            }
            Down::KillAllTwoBack => {
                (0..3).for_each(|i| cluster.kill_9(i));
                cluster.restart(0);
                std::thread::sleep(Duration::from_secs(1));
                cluster.restart(1);
                return cluster;
            }
        }
        for i in 0..3 {
            if cluster.nodes[i].is_none() {
                cluster.restart(i);
            }
        }
        cluster
    })
    .await
    .unwrap();
    let began = Instant::now();
    let mut last_error = String::from("no answer yet");
    while began.elapsed() < BACK_WITHIN {
        match Client::connect(&cluster.resp_addr(0)).await {
            Ok(client) => match client
                .put(probe.as_bytes(), b"p", PutOptions::default())
                .await
            {
                Ok(_) => return (cluster, began.elapsed()),
                Err(e) => last_error = e.to_string(),
            },
            Err(e) => last_error = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "after {down:?} the memory keyspace took no write within {BACK_WITHIN:?}; \
         the last answer: {last_error}"
    );
}

/// Every node of a memory shard's group restarts — a clean stop of all, a kill of all, a
/// kill of two at once, a kill of all with two of three back — and each time the keyspace
/// takes writes again within [`BACK_WITHIN`], with every write acknowledged before still
/// there; the third node, back last, ends its recovery. The leader from before a restart
/// used to end its recovery by the majority count while its followers, asking it (the
/// leader their stored vote named) for a read index, never counted and refused its votes:
/// the shard stayed leaderless for good. And a replica that ended its recovery by the count
/// used to stop counting as restarted, so that with one voter missing the replica after it
/// never reached a majority and refused every vote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_keyspace_serves_again_with_every_acknowledged_write_after_all_nodes_restart() {
    let (mut cluster, client) = memory_cluster(&[]).await;
    let mut acked: Vec<String> = Vec::new();
    let write_batch = |client: Client, round: usize| async move {
        let mut keys = Vec::new();
        for i in 0..40 {
            let key = format!("m/{round}/{i}");
            retry_transient(|| client.put(key.as_bytes(), b"v", PutOptions::default()))
                .await
                .unwrap_or_else(|e| panic!("writing {key} before restart {round}: {e}"));
            keys.push(key);
        }
        keys
    };
    acked.extend(write_batch(client, 0).await);
    for (round, down) in [
        Down::StopAll,
        Down::KillAll,
        Down::KillTwo,
        Down::KillAllTwoBack,
    ]
    .into_iter()
    .enumerate()
    {
        let probe = format!("m/probe/{round}");
        let (back, took) = down_and_back(cluster, down, &probe).await;
        cluster = back;
        eprintln!("{down:?}: the memory keyspace took a write {took:?} after the restarts");
        acked.push(probe);
        let reader = Client::connect(&cluster.resp_addr(1)).await.unwrap();
        let lost: Vec<&String> = {
            let mut lost = Vec::new();
            for key in &acked {
                if common::read_latest(&reader, key.as_bytes()).await.is_none() {
                    lost.push(key);
                }
            }
            lost
        };
        assert!(
            lost.is_empty(),
            "after {down:?}, {} of {} acknowledged writes were lost, e.g. {:?}",
            lost.len(),
            acked.len(),
            &lost[..lost.len().min(3)]
        );
        let writer = Client::connect(&cluster.resp_addr(0)).await.unwrap();
        acked.extend(write_batch(writer, round + 1).await);
    }
    // The node left down comes back and catches up from the leader.
    let cluster = tokio::task::spawn_blocking(move || {
        let mut cluster = cluster;
        cluster.restart(2);
        assert!(
            wait_until(BACK_WITHIN, || memory_replica_recovered(&cluster, 2)),
            "the memory replica of the node started last did not end its recovery"
        );
        cluster
    })
    .await
    .unwrap();
    let reader = Client::connect(&cluster.resp_addr(2)).await.unwrap();
    for key in &acked {
        assert!(
            common::read_latest(&reader, key.as_bytes()).await.is_some(),
            "{key}, acknowledged, is not there after the last node came back"
        );
    }
}

/// Whether node index `i` answers and its memory replica is not recovering.
fn memory_replica_recovered(cluster: &Cluster, i: usize) -> bool {
    cluster.cluster_json(i).is_some_and(|view| {
        view["shards"].as_array().is_some_and(|shards| {
            shards
                .iter()
                .any(|s| s["durability"] == "memory" && s["recovering"] == false)
        })
    })
}
