//! The region under concurrency: one writer publishing as fast as it can while readers
//! read — every answer checked (never torn, never older than its bound claims) — and a
//! reader in another process.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use firn_local::{
    Bound, LocalRead, RegionConfig, RegionReader, RegionReaders, RegionWriter, ShardState,
};
use firn_model::CommitTs;

const KEYS: usize = 64;

fn key(k: usize) -> Vec<u8> {
    format!("key-{k:03}").into_bytes()
}

/// Key `k`'s value at stamp `n`: 1 to 8 copies of one word naming both, so that a torn copy
/// (words of two writes, or a length of another) shows.
fn value(k: usize, n: u64) -> Vec<u8> {
    let word = (n << 16 | k as u64).to_le_bytes();
    word.repeat(1 + (n as usize + k) % 8)
}

/// One hit: the key, what the region answered, and the `at_least` its bound stated.
#[derive(Clone, Debug)]
struct Hit {
    key: usize,
    version: u64,
    commit_wall: u64,
    value: Vec<u8>,
    at_least: u64,
}

/// Checks every hit against the writes made (`writes[k]`: the stamps key `k` was written
/// at, rising): the value is whole and is the write its version names, and no write to
/// the key stamped at or below `at_least` is newer than it.
fn verify(writes: &[Vec<u64>], hits: &[Hit]) -> Result<(), String> {
    for h in hits {
        if h.value != value(h.key, h.version) || h.commit_wall != h.version {
            return Err(format!("torn or mislabelled answer: {h:?}"));
        }
        let stamps = &writes[h.key];
        let owed = match stamps.partition_point(|n| *n <= h.at_least) {
            0 => 0,
            i => stamps[i - 1],
        };
        if h.version < owed {
            return Err(format!(
                "key {} answered version {} with at_least {}, which owes {owed}",
                h.key, h.version, h.at_least
            ));
        }
    }
    Ok(())
}

#[test]
fn the_checker_rejects_torn_and_too_old_answers() {
    let writes = vec![vec![1, 5, 9]];
    let good = Hit {
        key: 0,
        version: 5,
        commit_wall: 5,
        value: value(0, 5),
        at_least: 8,
    };
    assert!(verify(&writes, std::slice::from_ref(&good)).is_ok());
    let old = Hit {
        at_least: 9,
        ..good.clone()
    };
    assert!(verify(&writes, &[old]).is_err(), "version 9 was owed");
    let mut torn = good.clone();
    torn.value[0] ^= 1;
    assert!(verify(&writes, &[torn]).is_err());
    let short = Hit {
        value: value(0, 5)[..8].to_vec(),
        ..good
    };
    assert!(verify(&writes, &[short]).is_err());
}

#[test]
fn readers_racing_a_writer_never_see_a_torn_value_or_one_older_than_its_bound() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.region");
    let config = RegionConfig {
        entries: 256,
        key_bytes_max: 16,
        value_bytes_max: 64,
        shards_max: 2,
    };
    let mut writer = RegionWriter::open(&path, config, 1, RegionReaders::Owner).unwrap();
    writer.open_shard(0);
    let writes: Arc<Mutex<Vec<Vec<u64>>>> = Arc::new(Mutex::new(vec![Vec::new(); KEYS]));
    let done = Arc::new(AtomicBool::new(false));
    let run_for = Duration::from_secs(2);

    let readers: Vec<_> = (0..3)
        .map(|r| {
            let (path, done) = (path.clone(), done.clone());
            std::thread::spawn(move || {
                let region = RegionReader::open(&path, None).unwrap();
                let mut hits = Vec::new();
                let mut i = r;
                while !done.load(Ordering::Relaxed) && hits.len() < 300_000 {
                    i = (i * 7 + 3) % KEYS;
                    if let LocalRead::Hit(v) = region.get(&key(i), None) {
                        let Bound::Stale { at_least, .. } = v.bound else {
                            panic!("no lease was published: {:?}", v.bound);
                        };
                        hits.push(Hit {
                            key: i,
                            version: v.version,
                            commit_wall: v.commit_ts.wall_us,
                            value: v.value.unwrap(),
                            at_least: at_least.wall_us,
                        });
                    }
                }
                hits
            })
        })
        .collect();

    let started = Instant::now();
    let mut n = 0u64;
    while started.elapsed() < run_for {
        // A batch of a few keys, then the shard row that covers it.
        for j in 0..4 {
            n += 1;
            let k = (n as usize * 13 + j * 5) % KEYS;
            // Logged before it is published: a reader's claim is checked against it.
            writes.lock().unwrap()[k].push(n);
            writer.publish(0, &key(k), Some(&value(k, n)), n, CommitTs::new(n, 0));
        }
        writer.set_shard_state(
            0,
            ShardState {
                applied: CommitTs::new(n, 0),
                closed: CommitTs::new(n, 0),
                lease_until_mono_ns: 0,
            },
        );
    }
    done.store(true, Ordering::Relaxed);
    let writes = writes.lock().unwrap().clone();
    let mut total = 0;
    for r in readers {
        let hits = r.join().unwrap();
        total += hits.len();
        verify(&writes, &hits).unwrap();
    }
    assert!(n > 10_000, "the writer published {n} versions");
    assert!(total > 10_000, "the readers checked {total} answers");
}

/// The child half of the cross-process test: reads `key` from the region named in the
/// environment until it sees version 100, then prints what it saw.
#[test]
fn child_reader() {
    let Ok(path) = std::env::var("FIRN_LOCAL_CHILD_REGION") else {
        return; // run as part of the suite: nothing to do
    };
    let region = RegionReader::open(std::path::Path::new(&path), Some([3; 16])).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut versions_seen = 0;
    let mut last = 0;
    while Instant::now() < deadline {
        if let LocalRead::Hit(v) = region.get(b"shared", None) {
            assert!(
                v.version >= last,
                "versions never go back: {} after {last}",
                v.version
            );
            assert_eq!(v.value.unwrap(), value(1, v.version), "whole values only");
            if v.version != last {
                versions_seen += 1;
                last = v.version;
            }
            if last == 100 {
                println!("CHILD-SAW version={last} distinct={versions_seen}");
                return;
            }
        }
    }
    panic!("the child never saw version 100 (last {last})");
}

#[test]
fn a_reader_in_another_process_sees_the_writers_values() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.region");
    let mut writer =
        RegionWriter::open(&path, RegionConfig::default(), 1, RegionReaders::Owner).unwrap();
    writer.set_cluster_id([3; 16]);
    writer.open_shard(0);
    writer.publish(0, b"shared", Some(&value(1, 1)), 1, CommitTs::new(1, 0));
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_reader", "--nocapture", "--test-threads=1"])
        .env("FIRN_LOCAL_CHILD_REGION", &path)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    for n in 2..=100 {
        std::thread::sleep(Duration::from_millis(5));
        writer.publish(0, b"shared", Some(&value(1, n)), n, CommitTs::new(n, 0));
    }
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed: {text}");
    assert!(text.contains("CHILD-SAW version=100"), "{text}");
}
