//! A data disk that fills, for real: a node on a small tmpfs. With its reserve, the node
//! refuses writes (NOSPACE) before the disk is full, keeps serving reads, and takes writes
//! again as soon as the filesystem grows. Without one, the write that finds no space stops
//! the node with a clear reason, and a restart with room loses nothing acknowledged.
//!
//! In a cluster, a node whose disk is low stops the writes that add data to every shard it
//! holds a replica of, whichever node leads it, until it has room again.
//!
//! A replica that fell behind a purged log takes a snapshot only when its disk has room for
//! it, and takes it once it has.
//!
//! The first two need root (they mount tmpfs filesystems).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Cluster, FirnProcess, read_latest};
use firn_client::{Client, ClientError, PutOptions, retry_transient};
use firn_model::{ReadAt, ReadConsistency};

/// Bounds: writes stop at the first refusal or failure, and never go past these.
const WRITES_MAX: usize = 40_000;
const WRITING_FOR_MAX: Duration = Duration::from_secs(90);
const VALUE_BYTES: usize = 4_000;

/// A tmpfs of `mib` MiB mounted on a new directory, unmounted when dropped.
struct SmallDisk {
    _dir: tempfile::TempDir,
    mount: PathBuf,
}

impl SmallDisk {
    fn new(mib: u64) -> SmallDisk {
        let dir = tempfile::tempdir().unwrap();
        let mount = dir.path().join("disk");
        std::fs::create_dir(&mount).unwrap();
        mount_tmpfs(&mount, &format!("size={mib}m"));
        SmallDisk { _dir: dir, mount }
    }

    fn data_dir(&self) -> PathBuf {
        self.mount.join("data")
    }

    fn grow(&self, mib: u64) {
        mount_tmpfs(&self.mount, &format!("remount,size={mib}m"));
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
    }
}

fn mount_tmpfs(at: &Path, options: &str) {
    let status = Command::new("mount")
        .args(["-t", "tmpfs", "-o", options, "tmpfs"])
        .arg(at)
        .status()
        .expect("run mount");
    assert!(
        status.success(),
        "mount -o {options} failed (this test needs root)"
    );
}

/// Writes distinct keys until the first error (or the bounds); returns the acknowledged
/// keys and that error.
async fn fill(client: &Client) -> (Vec<String>, Option<ClientError>) {
    let value = vec![b'v'; VALUE_BYTES];
    let started = Instant::now();
    let mut acked = Vec::new();
    for i in 0..WRITES_MAX {
        if started.elapsed() > WRITING_FOR_MAX {
            break;
        }
        let key = format!("reading/{i}");
        match client
            .put(key.as_bytes(), &value, PutOptions::default())
            .await
        {
            Ok(_) => acked.push(key),
            Err(e) => return (acked, Some(e)),
        }
    }
    (acked, None)
}

async fn assert_all_present(client: &Client, keys: &[String]) {
    for key in keys {
        let got = read_latest(client, key.as_bytes()).await;
        assert_eq!(
            got.and_then(|v| v.value).map(|v| v.len()),
            Some(VALUE_BYTES),
            "acknowledged {key} is not there"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_stop_before_the_disk_fills_and_resume_when_it_grows() {
    let disk = SmallDisk::new(96);
    // A 32 MiB reserve on a 96 MiB disk.
    let node = FirnProcess::start(&disk.data_dir(), &["--disk-reserve-bytes", "33554432"]);
    let client = Client::connect(&node.resp_addr()).await.unwrap();

    let (acked, refusal) = fill(&client).await;
    let refusal = refusal.expect("the writes were never refused");
    match &refusal {
        ClientError::Server { code, message } => {
            assert_eq!(code, "NOSPACE", "{message}");
            assert!(message.contains("reserve"), "{message}");
        }
        other => panic!("refused with {other:?}, not NOSPACE"),
    }
    assert!(acked.len() > 1_000, "refused after {} writes", acked.len());
    // Refused, not failed: the node serves every acknowledged write.
    assert_all_present(&client, &acked).await;
    eprintln!(
        "disk full: {} writes of {VALUE_BYTES} bytes, then NOSPACE",
        acked.len()
    );

    // The disk grows: writes go on within a few looks at it, with no restart.
    disk.grow(512);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match client.put(b"after", b"grown", PutOptions::default()).await {
            Ok(_) => break,
            Err(e) => assert!(Instant::now() < deadline, "still refused: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_stops_the_node_and_a_restart_loses_nothing() {
    let disk = SmallDisk::new(64);
    let log = tempfile::NamedTempFile::new().unwrap();
    // No reserve: the writes run the disk out of space.
    let mut node = FirnProcess::start_logging_to(
        &disk.data_dir(),
        &["--disk-reserve-bytes", "0"],
        Stdio::from(log.reopen().unwrap()),
    );
    let client = Client::connect(&node.resp_addr()).await.unwrap();
    let (acked, failure) = fill(&client).await;
    assert!(failure.is_some(), "the disk never filled");
    assert!(acked.len() > 1_000, "failed after {} writes", acked.len());

    // The node stops by itself, saying why.
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = node.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the node did not stop");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(!status.success(), "it stopped as if all were well");
    let said = std::fs::read_to_string(log.path()).unwrap();
    // The engine names the error itself, or only that an earlier one (a flush's, in the
    // background) poisoned it; the node adds the free space either way. (A failed flush
    // may have removed its partial table by then: a few MiB.)
    let free_mib = said
        .split("the data disk has ")
        .nth(1)
        .and_then(|rest| rest.split(" MiB free").next())
        .and_then(|n| n.parse::<u64>().ok());
    assert!(
        said.contains("storage failed") && free_mib.is_some_and(|f| f < 16),
        "the node's last words: {}",
        &said[said.len().saturating_sub(2_000)..]
    );

    // Room again, and a restart: every acknowledged write is there.
    disk.grow(512);
    let restarted = FirnProcess::start(&disk.data_dir(), &[]);
    let client = Client::connect(&restarted.resp_addr()).await.unwrap();
    assert_all_present(&client, &acked).await;
    client
        .put(b"after", b"restart", PutOptions::default())
        .await
        .unwrap();
    eprintln!(
        "disk full without a reserve: {} acknowledged writes, all present after a restart",
        acked.len()
    );
}

/// Puts `value` under every key through `client` until each answers as `wanted` says, or
/// `within` passes; answers the keys whose last put was accepted (TRYAGAIN and CLUSTERDOWN
/// while leaders settle are tried again).
async fn put_until(
    client: &Client,
    keys: &[String],
    value: &str,
    within: Duration,
    wanted: impl Fn(&Result<(), ClientError>) -> bool,
) -> Vec<String> {
    let deadline = Instant::now() + within;
    let mut accepted = Vec::new();
    for key in keys {
        loop {
            let put = client
                .put(key.as_bytes(), value.as_bytes(), PutOptions::default())
                .await
                .map(|_| ());
            if put.is_ok() {
                accepted.push(key.clone());
            }
            if wanted(&put) {
                break;
            }
            assert!(Instant::now() < deadline, "{key}: still {put:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    accepted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_low_on_disk_stops_writes_to_its_shards_at_every_leader() {
    let mut cluster = Cluster::start(3, &[]);
    cluster.wait_for_leaders(0, None);
    let client = Client::connect(&cluster.resp_addr(0)).await.unwrap();
    let keys: Vec<String> = (0..24).map(|i| format!("sensor/{i}")).collect();
    for key in &keys {
        retry_transient(|| client.put(key.as_bytes(), b"before", PutOptions::default()))
            .await
            .unwrap();
    }

    // Node 3 comes back with a reserve no disk has: it is low from its first look.
    cluster.stop(2);
    cluster.restart_with(2, &["--disk-reserve-bytes", "1000000000000000000"]);
    let refused_by_node_3 = |put: &Result<(), ClientError>| {
        matches!(put, Err(ClientError::Server { code, message })
            if code == "NOSPACE" && message.starts_with("node 3's data disk"))
    };
    // Node 3 holds a replica of every shard (three nodes, three replicas): each refuses,
    // whichever node leads it, once node 3's word has arrived.
    let early = put_until(
        &client,
        &keys,
        "refused",
        Duration::from_secs(30),
        refused_by_node_3,
    )
    .await;
    // Nothing refused was written; reads and deletes go on.
    for key in &keys {
        let got = read_latest(&client, key.as_bytes())
            .await
            .and_then(|v| v.value);
        let expected: &[u8] = if early.contains(key) {
            b"refused"
        } else {
            b"before"
        };
        assert_eq!(got.as_deref(), Some(expected), "{key}");
    }
    retry_transient(|| client.delete(keys[0].as_bytes()))
        .await
        .unwrap();
    // The cluster view shows whose disk it is.
    let view = cluster.cluster_json(0).expect("the cluster view");
    let low: Vec<(u64, bool)> = view["cluster"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["node_id"].as_u64().unwrap(),
                n["disk"]["low"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(low, [(1, false), (2, false), (3, true)], "{view}");

    // Room again: node 3 says so when it starts, and writes go on.
    cluster.stop(2);
    cluster.restart(2);
    put_until(
        &client,
        &keys,
        "after",
        Duration::from_secs(30),
        Result::is_ok,
    )
    .await;
}

/// Shard 0 as node `i` sees it in the cluster view.
fn shard0(cluster: &Cluster, i: usize) -> serde_json::Value {
    cluster.cluster_json(i).expect("the cluster view")["shards"][0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_without_room_for_a_snapshot_refuses_it_and_takes_it_once_it_has_room() {
    // Snapshots every 100 entries, the log purged up to each: a replica that was down
    // catches up only through a snapshot.
    let mut cluster = Cluster::start(
        3,
        &["--snapshot-every", "100", "--snapshot-catchup-entries", "0"],
    );
    cluster.wait_for_leaders(0, None);
    let client = Client::connect(&cluster.resp_addr(0)).await.unwrap();
    let key = common::key_in_shard(0, "snap");
    retry_transient(|| client.put(key.as_bytes(), b"first", PutOptions::default()))
        .await
        .unwrap();
    let applied = |c: &Cluster, i| shard0(c, i)["last_applied_index"].as_u64().unwrap_or(0);
    let before = applied(&cluster, 2);
    cluster.stop(2);
    for i in 0..300 {
        let k = format!("{key}-{i}");
        retry_transient(|| client.put(k.as_bytes(), b"x", PutOptions::default()))
            .await
            .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while shard0(&cluster, 0)["purged_index"].as_u64().unwrap_or(0) <= before {
        assert!(Instant::now() < deadline, "node 1 did not purge its log");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Node 3 comes back with a reserve no disk has: no snapshot fits above it.
    cluster.restart_with(2, &["--disk-reserve-bytes", "1000000000000000000"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while cluster.counter(2, "firn_snapshots_refused_total") == 0.0 {
        assert!(Instant::now() < deadline, "node 3 refused no snapshot");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        applied(&cluster, 2) < applied(&cluster, 0),
        "node 3 applied shard 0 as far as node 1: {} and {}",
        shard0(&cluster, 2),
        shard0(&cluster, 0)
    );

    // With room, it takes the snapshot at the leader's next offer and has every write.
    cluster.stop(2);
    cluster.restart(2);
    let at_node_3 = Client::connect(&cluster.resp_addr(2)).await.unwrap();
    let last = format!("{key}-299");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = at_node_3
            .get(last.as_bytes(), ReadAt::Latest, ReadConsistency::Local)
            .await;
        if matches!(&got, Ok(Some(v)) if v.value.as_deref() == Some(b"x".as_slice())) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node 3 did not catch up: {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
