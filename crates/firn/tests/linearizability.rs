//! Concurrent clients run put / get / conditional put on a few keys while the node is killed
//! with SIGKILL and restarted; the recorded history must be linearizable. (The cluster adds
//! leader kills and partitions to the same harness.)

mod common;

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Cluster, FirnProcess, free_ports, kill_leaders, seed};
use firn_check::check_per_key;
use firn_check::register::Register;
use firn_client::Client;
use firn_soak::workload::register::{History, ReadPath, Registers, check_history};

const CLIENTS: usize = 6;
const OPS_PER_CLIENT: usize = 150;
/// Pause between one client's operations, so the run spans the kill and the restart.
const THINK: Duration = Duration::from_millis(3);
const KEYS: u64 = 3;

/// The clients: put / get / conditional put on keys k0..k2.
fn registers(reads: ReadPath, ops_per_client: usize) -> Registers {
    Registers {
        prefix: "k".into(),
        keys: KEYS,
        clients: CLIENTS,
        think: THINK,
        ops_per_client,
        value_bytes: 0,
        reads,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_under_kill_and_restart_is_linearizable() {
    let seed = seed("linearizability");
    let dir = tempfile::tempdir().unwrap();
    // The same ports after the restart, so that the clients find the node again.
    let ports = free_ports(3);
    let args: Vec<String> = ["--resp-addr", "--http-addr", "--peer-addr"]
        .iter()
        .zip(&ports)
        .flat_map(|(flag, port)| [flag.to_string(), format!("127.0.0.1:{port}")])
        .collect();
    let start = move |dir: std::path::PathBuf| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        FirnProcess::start_with(&dir, &args)
    };
    let node = start(dir.path().to_path_buf());
    let addrs = vec![node.resp_addr()];
    let faults = async move {
        // SIGKILL the node mid-run, then restart it on the same data.
        tokio::time::sleep(Duration::from_millis(300)).await;
        node.kill_9();
        let path = dir.path().to_path_buf();
        let again = tokio::task::spawn_blocking(move || start(path))
            .await
            .unwrap();
        (again, dir)
    };
    let (history, _node) = record_history(
        seed,
        registers(ReadPath::Linearizable, OPS_PER_CLIENT),
        addrs,
        faults,
    )
    .await;
    assert_linearizable(seed, &history, "single node, kill -9 and restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checker_rejects_the_history_of_a_stale_read_path() {
    let seed = seed("linearizability");
    let dir = tempfile::tempdir().unwrap();
    let node = FirnProcess::start(dir.path(), &[]);
    let stale = registers(
        ReadPath::StaleBy(Duration::from_millis(150)),
        OPS_PER_CLIENT,
    );
    let (history, ()) = record_history(seed, stale, vec![node.resp_addr()], async {}).await;
    assert!(
        check_per_key(&Register::default(), &history).is_err(),
        "reads 150 ms in the past went unnoticed (seed {seed})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_history_under_leader_kills_is_linearizable() {
    let seed = seed("linearizability");
    // Pipelined replication (the default only from 4 cores): appends go out before the
    // answers to those before them, and a killed leader leaves some unanswered.
    let (cluster, addrs) = three_nodes(&["--appends-in-flight", "8"]).await;
    // Kill the leader of shard 0, restart it, then do the same to shard 1's leader.
    let faults = kill_leaders(
        cluster.clone(),
        vec![0, 1],
        Duration::from_millis(300),
        Duration::from_millis(700),
    );
    // FIRN_LIN_OPS lengthens the run for manual soak runs (scripts/fault-soak).
    let ops = std::env::var("FIRN_LIN_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let clients = registers(ReadPath::Linearizable, ops);
    let (history, ()) = record_history(seed, clients, addrs, faults).await;
    drop(cluster);
    assert_linearizable(seed, &history, "3-node cluster, leader kills");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_cluster_history_under_leader_kills_is_linearizable() {
    let seed = seed("linearizability");
    let (cluster, addrs) = three_nodes(&[]).await;
    // The keys k0..k2 are in memory: acknowledged once a majority holds them in memory.
    let client = Client::connect(&addrs[0]).await.unwrap();
    let spec = firn_model::KeyspaceSpec {
        prefix: "k".into(),
        durability: firn_model::Durability::Memory,
        ..firn_model::KeyspaceSpec::default_keyspace()
    };
    let def = firn_model::KeyspaceDef::new(spec);
    firn_client::retry_transient(|| client.keyspace_create(&def))
        .await
        .unwrap();
    // SIGKILL the leader of a memory shard, restart it, and once it has recovered do the
    // same to another memory shard's leader: a minority down at any one time.
    let faults = {
        let cluster = cluster.clone();
        async move {
            for _ in 0..2 {
                tokio::time::sleep(Duration::from_millis(300)).await;
                let c = cluster.clone();
                tokio::task::spawn_blocking(move || {
                    let mut c = c.lock().unwrap();
                    let alive = (0..3).find(|i| c.nodes[*i].is_some()).unwrap();
                    let memory = memory_shards(&c, alive);
                    let leader = c.wait_for_leaders(alive, None)[memory[0]];
                    c.kill_9((leader - 1) as usize);
                    std::thread::sleep(Duration::from_millis(700));
                    c.restart((leader - 1) as usize);
                    assert!(
                        common::wait_until(Duration::from_secs(30), || !recovering(&c)),
                        "the restarted memory replicas never recovered"
                    );
                })
                .await
                .unwrap();
            }
        }
    };
    let clients = registers(ReadPath::Linearizable, 200);
    let (history, ()) = record_history(seed, clients, addrs, faults).await;
    drop(cluster);
    assert_linearizable(
        seed,
        &history,
        "3-node cluster, memory keyspace, leader kills",
    );
}

/// A 3-node cluster with leaders, and its RESP addresses.
async fn three_nodes(extra: &[&str]) -> (Arc<Mutex<Cluster>>, Vec<String>) {
    let extra: Vec<String> = extra.iter().map(|a| a.to_string()).collect();
    let cluster = tokio::task::spawn_blocking(move || {
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let c = Cluster::start(3, &extra);
        c.wait_for_leaders(0, None);
        c
    })
    .await
    .unwrap();
    let addrs = (0..3).map(|i| cluster.resp_addr(i)).collect::<Vec<_>>();
    (Arc::new(Mutex::new(cluster)), addrs)
}

/// The indexes (in `/v1/cluster`'s shard list) of the memory shards, as node `i` sees them.
fn memory_shards(cluster: &Cluster, i: usize) -> Vec<usize> {
    let view = cluster.cluster_json(i).expect("a cluster view");
    let shards = view["shards"].as_array().unwrap();
    (0..shards.len())
        .filter(|s| shards[*s]["durability"] == "memory")
        .collect()
}

/// Whether any running node reports a replica still recovering.
fn recovering(cluster: &Cluster) -> bool {
    (0..cluster.nodes.len())
        .filter(|i| cluster.nodes[*i].is_some())
        .any(|i| {
            cluster.cluster_json(i).is_none_or(|v| {
                v["shards"]
                    .as_array()
                    .is_none_or(|s| s.iter().any(|r| r["recovering"] == true))
            })
        })
}

/// Runs `clients` against `addrs` while `faults` runs, and returns what they saw, per key,
/// with what the faults left.
async fn record_history<T>(
    seed: u64,
    clients: Registers,
    addrs: Vec<String>,
    faults: impl std::future::Future<Output = T>,
) -> (History, T) {
    let stop = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let recording = tokio::spawn(async move { clients.record(seed, &addrs, stop, t0).await });
    let left = faults.await;
    (recording.await.unwrap(), left)
}

fn assert_linearizable(seed: u64, history: &History, what: &str) {
    let completed = history
        .iter()
        .filter(|(_, o)| o.completed_at.is_some())
        .count();
    eprintln!(
        "{what}: checked {} operations ({} completed) on {KEYS} keys",
        history.len(),
        completed
    );
    assert!(
        completed > history.len() / 2,
        "too few operations completed ({completed})"
    );
    let checked = check_history(&registers(ReadPath::Linearizable, 0), history);
    assert!(
        checked.violations.is_empty() && checked.unchecked_keys.is_empty(),
        "{what} (seed {seed}): {:?}",
        checked
    );
}

/// Shard 0's replica on node index `i`, as that node reports it: (Raft state, term).
fn shard_0_here(cluster: &Cluster, i: usize) -> Option<(String, u64)> {
    let view = cluster.cluster_json(i)?;
    let replica = view["shards"]
        .as_array()?
        .iter()
        .find(|s| s["shard_id"] == 0)?
        .clone();
    Some((
        replica["state"].as_str()?.to_string(),
        replica["term"].as_u64()?,
    ))
}

/// A leader killed and restarted before its followers elect another must not resume
/// leading: its state may be behind writes it acknowledged (applying does not fsync, and
/// the commit position is stored lazily), and a resumed leader would serve reads from it
/// under a lease its followers still honour. It stands for election like any other node.
/// (Its followers are frozen meanwhile, so nobody else can have been elected.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_leader_stands_for_election_rather_than_resuming() {
    tokio::task::spawn_blocking(|| {
        let mut cluster = Cluster::start(3, &[]);
        let leader = cluster.wait_for_leaders(0, None)[0] as usize - 1;
        let (_, term) = shard_0_here(&cluster, leader).expect("shard 0 on its leader");
        let followers: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
        for f in &followers {
            cluster.signal(*f, "-STOP");
        }
        cluster.kill_9(leader);
        cluster.restart(leader);
        // Longer than an election timeout: a leader that resumed would be one all along.
        let deadline = Instant::now() + Duration::from_millis(1_500);
        while Instant::now() < deadline {
            if let Some((state, now_term)) = shard_0_here(&cluster, leader) {
                assert!(
                    state != "Leader",
                    "the restarted node leads shard 0 again (term {now_term}, {term} before) \
                     with no follower awake to elect it"
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        for f in &followers {
            cluster.signal(*f, "-CONT");
        }
        // The group elects a leader again, in a later term.
        let elected = common::wait_until(Duration::from_secs(20), || {
            shard_0_here(&cluster, leader).is_some_and(|(_, t)| t > term)
                && cluster.leaders(leader)[0].is_some()
        });
        assert!(elected, "no leader of shard 0 after the followers woke");
    })
    .await
    .unwrap();
}
