//! Local reads on a 3-node cluster of real processes: under concurrent writes, every answer
//! a node's region gives keeps the bound it states — a linearizable one shows every write
//! acknowledged before the read began, a stale one every write stamped up to its
//! `at_least` — on leaders and followers, and across a `kill -9` and restart of the node
//! whose region is being read.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Cluster, settled};
use firn_client::{Client, PutOptions};
use firn_local::{Bound, LocalRead, RegionReader};
use firn_model::CommitTs;

/// A write the cluster acknowledged: its version and stamp, and when the ack arrived.
#[derive(Clone, Copy, Debug)]
struct Acked {
    version: u64,
    commit_ts: CommitTs,
    at: Instant,
}

/// One answer a region gave for the key, with when its read began.
#[derive(Clone, Copy, Debug)]
struct Seen {
    began: Instant,
    version: u64,
    bound: Bound,
}

/// What a local answer must satisfy, given every acknowledged write of the key; the first
/// answer that breaks its bound, described.
fn check(acked: &[Acked], seen: &[Seen]) -> Result<(), String> {
    for s in seen {
        let owed = match s.bound {
            // Every write acknowledged before the read began.
            Bound::Linearizable { .. } => acked
                .iter()
                .filter(|a| a.at < s.began)
                .map(|a| a.version)
                .max(),
            // Every write stamped up to `at_least`, whenever it was acknowledged.
            Bound::Stale { at_least, .. } => acked
                .iter()
                .filter(|a| a.commit_ts <= at_least)
                .map(|a| a.version)
                .max(),
        };
        if let Some(owed) = owed
            && s.version < owed
        {
            return Err(format!(
                "a read answered version {} under {:?}, which owes version {owed}",
                s.version, s.bound
            ));
        }
    }
    Ok(())
}

#[test]
fn the_checker_rejects_an_answer_older_than_its_bound() {
    let t0 = Instant::now();
    let later = t0 + Duration::from_millis(5);
    let acked = [
        Acked {
            version: 1,
            commit_ts: CommitTs::new(10, 0),
            at: t0,
        },
        Acked {
            version: 2,
            commit_ts: CommitTs::new(20, 0),
            at: later,
        },
    ];
    let stale = |version, at_least| Seen {
        began: later + Duration::from_millis(1),
        version,
        bound: Bound::Stale {
            at_least,
            staleness_us_max: 0,
        },
    };
    assert!(check(&acked, &[stale(1, CommitTs::new(19, 0))]).is_ok());
    assert!(check(&acked, &[stale(1, CommitTs::new(20, 0))]).is_err());
    let linearizable = Seen {
        began: later + Duration::from_millis(1),
        version: 1,
        bound: Bound::Linearizable { lease_left_ns: 1 },
    };
    assert!(check(&acked, &[linearizable]).is_err());
    assert!(
        check(
            &acked,
            &[Seen {
                began: t0,
                ..linearizable
            }]
        )
        .is_ok()
    );
}

async fn reader_of(addr: &str) -> RegionReader {
    let info = Client::connect(addr)
        .await
        .unwrap()
        .local_region()
        .await
        .unwrap();
    firn_client::open_region(&info).unwrap()
}

/// Reads `key` from `region` for `how_long` off the async workers; hands the region back.
async fn read_blocking(
    region: RegionReader,
    key: &'static [u8],
    how_long: Duration,
) -> (RegionReader, Vec<Seen>) {
    tokio::task::spawn_blocking(move || {
        let seen = read_for(&region, key, Instant::now() + how_long);
        (region, seen)
    })
    .await
    .unwrap()
}

/// Runs `f` on the cluster off the async workers (starting and killing processes waits).
async fn with_cluster(cluster: Cluster, f: impl FnOnce(&mut Cluster) + Send + 'static) -> Cluster {
    tokio::task::spawn_blocking(move || {
        let mut cluster = cluster;
        f(&mut cluster);
        cluster
    })
    .await
    .unwrap()
}

/// Reads `key` from `region` until `until`, recording every answer.
fn read_for(region: &RegionReader, key: &[u8], until: Instant) -> Vec<Seen> {
    let mut seen = Vec::new();
    while Instant::now() < until {
        let began = Instant::now();
        if let LocalRead::Hit(v) = region.get(key, None) {
            seen.push(Seen {
                began,
                version: v.version,
                bound: v.bound,
            });
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_local_answer_keeps_its_bound_under_writes_and_across_a_kill_9() {
    let mut cluster = tokio::task::spawn_blocking(|| Cluster::start(3, &[]))
        .await
        .unwrap();
    cluster = with_cluster(cluster, |c| {
        c.wait_for_leaders(0, None);
    })
    .await;
    let writer = Client::connect(&cluster.resp_addr(0)).await.unwrap();
    settled(|| async {
        writer
            .raw(
                redis::cmd("FIRN.KEYSPACE")
                    .arg("CREATE")
                    .arg("s/")
                    .arg("LOCAL")
                    .arg("on"),
            )
            .await
    })
    .await
    .unwrap();
    let key: &'static [u8] = b"s/counter";
    let acked: Arc<Mutex<Vec<Acked>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writes = {
        let (acked, stop) = (acked.clone(), stop.clone());
        let addrs: Vec<String> = (0..3).map(|i| cluster.resp_addr(i)).collect();
        tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                // Through every node in turn: forwarded writes too.
                let put = async {
                    Client::connect(&addrs[n as usize % 3])
                        .await?
                        .put(key, n.to_string().as_bytes(), PutOptions::default())
                        .await
                };
                match put.await {
                    Ok(ack) => acked.lock().unwrap().push(Acked {
                        version: ack.version,
                        commit_ts: ack.commit_ts,
                        at: Instant::now(),
                    }),
                    // A node down or a leader change: the next write tries the next node.
                    Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
        })
    };

    let readers = [
        reader_of(&cluster.resp_addr(0)).await,
        reader_of(&cluster.resp_addr(1)).await,
        reader_of(&cluster.resp_addr(2)).await,
    ];
    let (seen, readers) = tokio::task::spawn_blocking(move || {
        let until = Instant::now() + Duration::from_secs(3);
        let seen: Vec<Vec<Seen>> = std::thread::scope(|s| {
            let handles: Vec<_> = readers
                .iter()
                .map(|r| s.spawn(move || read_for(r, key, until)))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        (seen, readers)
    })
    .await
    .unwrap();
    for (i, s) in seen.iter().enumerate() {
        assert!(
            s.len() > 10,
            "node {}'s region answered {} times in 3 s",
            i + 1,
            s.len()
        );
        check(&acked.lock().unwrap(), s).unwrap_or_else(|e| panic!("node {}: {e}", i + 1));
    }
    let kinds = |s: &[Seen]| s.iter().any(|x| matches!(x.bound, Bound::Stale { .. }));
    assert!(
        seen.iter().any(|s| kinds(s)),
        "followers answer with a stale bound"
    );
    assert!(
        seen.iter()
            .flatten()
            .any(|x| matches!(x.bound, Bound::Linearizable { .. })),
        "the shard's leader answers under its lease"
    );

    // Kill node 2 while its region is read (the mapping outlives the process), then
    // restart it: no answer before or after breaks its bound, and it serves again.
    let region = readers.into_iter().nth(1).unwrap();
    let (region, mut seen) = read_blocking(region, key, Duration::from_millis(300)).await;
    cluster = with_cluster(cluster, |c| c.kill_9(1)).await;
    let (region, after_kill) = read_blocking(region, key, Duration::from_millis(500)).await;
    seen.extend(after_kill);
    cluster = with_cluster(cluster, |c| {
        c.restart(1);
        c.wait_for_leaders(1, None);
    })
    .await;
    let (_region, after_restart) = read_blocking(region, key, Duration::from_secs(2)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writes.await.unwrap();
    let acked = acked.lock().unwrap().clone();
    assert!(
        acked.len() > 50,
        "the writer made progress: {}",
        acked.len()
    );
    check(&acked, &seen).unwrap();
    check(&acked, &after_restart).unwrap();
    assert!(
        !after_restart.is_empty(),
        "the restarted node's region serves the key again (the reader kept its mapping)"
    );
    drop(cluster);
}

fn mode_and_group(path: &std::path::Path) -> (u32, u32) {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let meta = std::fs::metadata(path).unwrap();
    (meta.permissions().mode() & 0o777, meta.gid())
}

/// A region holds every `LOCAL` keyspace, whatever prefixes users are granted: the node
/// makes it its user's alone, or readable by the group it is given, and a file that others
/// could read is made so again at start.
#[test]
fn the_region_file_is_the_node_users_alone_unless_a_group_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let region = dir.path().join("local.region");
    // SAFETY: getgid has no preconditions and cannot fail.
    let gid = unsafe { libc::getgid() };

    let node = common::FirnProcess::start(dir.path(), &[]);
    assert_eq!(mode_and_group(&region).0, 0o600);
    drop(node);

    let gid_text = gid.to_string();
    let node = common::FirnProcess::start(dir.path(), &["--local-region-group", &gid_text]);
    assert_eq!(mode_and_group(&region), (0o640, gid));
    drop(node);

    // Opened to everyone by hand while the node was down.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&region, std::fs::Permissions::from_mode(0o644)).unwrap();
    let _node = common::FirnProcess::start(dir.path(), &[]);
    assert_eq!(mode_and_group(&region).0, 0o600);
}
