//! A restart after `kill -9` loses no acknowledged write.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::FirnProcess;
use firn_client::{Client, PutOptions};
use firn_model::{ReadAt, ReadConsistency};

const WRITERS: usize = 8;
/// Bounds: the kill comes after this long, and no writer writes more than this many keys.
const KILL_AFTER: Duration = Duration::from_millis(1500);
const WRITES_PER_WRITER_MAX: usize = 20_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_writes_loses_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    kill_9_during_writes(dir.path(), &[]).await;
}

/// The same with the node's groups spread over four stripes (a log and a state database
/// each): every group's log and state are found again where they were written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_with_four_stripes_loses_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    kill_9_during_writes(dir.path(), &["--stripes", "4", "--shards", "6"]).await;
    let format = std::fs::read_to_string(dir.path().join("FORMAT")).unwrap();
    assert_eq!(format, "firn-data 5\nstripes 4\n");
    for db in ["log", "log-1", "log-2", "log-3", "state", "state-3"] {
        assert!(dir.path().join(db).is_dir(), "no {db} database");
    }
    assert!(!dir.path().join("log-4").exists());
}

async fn kill_9_during_writes(dir: &std::path::Path, extra: &[&str]) {
    // Snapshot often, so that recovery also goes through a snapshot and a purged log.
    let args = [
        &["--snapshot-every", "500", "--snapshot-catchup-entries", "0"],
        extra,
    ]
    .concat();
    let node = FirnProcess::start(dir, &args);
    let client = Client::connect(&node.resp_addr()).await.unwrap();
    let acked: Arc<Mutex<Vec<(String, u64, String)>>> = Arc::default();
    let started = Instant::now();
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let client = client.clone();
        let acked = acked.clone();
        writers.push(tokio::spawn(async move {
            for i in 0..WRITES_PER_WRITER_MAX {
                // Each writer also overwrites one shared key, so versions matter too.
                let (key, value) = if i % 4 == 0 {
                    (format!("shared/{w}"), format!("{w}-{i}"))
                } else {
                    (format!("w{w}/{i}"), format!("v{i}"))
                };
                match client
                    .put(key.as_bytes(), value.as_bytes(), PutOptions::default())
                    .await
                {
                    Ok(ack) => acked.lock().unwrap().push((key, ack.version, value)),
                    Err(_) => return, // the node died: every later write is unacknowledged
                }
            }
        }));
    }
    tokio::time::sleep(KILL_AFTER.saturating_sub(started.elapsed())).await;
    node.kill_9();
    for w in writers {
        w.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(
        acked.len() > 100,
        "too few writes were acknowledged before the kill ({})",
        acked.len()
    );

    let restarted = FirnProcess::start(dir, &[]);
    let client = Client::connect(&restarted.resp_addr()).await.unwrap();
    let mut missing = Vec::new();
    for (key, version, value) in &acked {
        let got = client
            .get(
                key.as_bytes(),
                ReadAt::Version(*version),
                ReadConsistency::Linearizable,
            )
            .await
            .unwrap();
        if got.as_ref().and_then(|i| i.value.as_deref()) != Some(value.as_bytes()) {
            missing.push((key.clone(), *version, got));
        }
    }
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged writes lost, e.g. {:?}",
        missing.len(),
        acked.len(),
        &missing[..missing.len().min(3)]
    );
    // Versions continue after the restart; none is reused.
    let last_shared = acked
        .iter()
        .filter(|(k, _, _)| k == "shared/0")
        .map(|(_, v, _)| *v)
        .max()
        .unwrap_or(0);
    let ack = client
        .put(b"shared/0", b"after-restart", PutOptions::default())
        .await
        .unwrap();
    assert!(ack.version > last_shared);
    eprintln!(
        "kill -9 recovery: {} acknowledged writes, all present after restart",
        acked.len()
    );
}
