//! The shared log under leader kills. Appenders (records of 1 to 3 tags from a small set,
//! two tags per shard, so records span shards and tags have several homes) and readers
//! (one per tag following it from the start, and `read_next` at random seqs) talk to a
//! 3-node, 3-shard cluster over RESP while the leader of each shard in turn is killed with
//! SIGKILL and restarted. Once every append is over, each follower reads its tag to the
//! end, so that together they must find every acknowledged record. The recorded history
//! must keep the log's guarantees, as `firn_check::log` checks them: total order, no
//! skips, stable records.
//!
//! The processes are the fault soak's log workload (`firn_soak::workload::log`).
//! A failure prints the seed; FIRN_TEST_SEED replays the same choices of tags and seqs.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Cluster, keys_in_shard, kill_leaders, seed};
use firn_check::log::check;
use firn_soak::workload::log::Logs;

const LOG: &str = "events";
const SHARDS: u32 = 3;
const TAGS_PER_SHARD: usize = 2;
/// How long the processes go on after the last restart, so that the history covers the
/// recovery.
const AFTER_FAULTS: Duration = Duration::from_secs(3);
/// Fewest acknowledged appends and records read for the history to mean something.
const ACKNOWLEDGED_MIN: usize = 100;
const READS_RECORD_MIN: usize = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_history_under_leader_kills_keeps_order_no_skips_and_stability() {
    let seed = seed("log history");
    let cluster = Cluster::ready(3, &["--shards", "3"]).await;
    let tags: Vec<String> = (0..SHARDS)
        .flat_map(|shard| keys_in_shard(shard, "tag", TAGS_PER_SHARD))
        .collect();
    let addrs: Vec<String> = (0..3).map(|i| cluster.resp_addr(i)).collect();
    let cluster = Arc::new(Mutex::new(cluster));
    let t0 = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let logs = Logs::new(LOG, tags);
    let recording = {
        let stop = stop.clone();
        tokio::spawn(async move { logs.record(seed, &addrs, stop, t0).await })
    };
    // Each shard's leader in turn (the others stay up), then a little more running.
    kill_leaders(
        cluster.clone(),
        (0..SHARDS as usize).collect(),
        Duration::from_millis(300),
        Duration::from_millis(700),
    )
    .await;
    tokio::time::sleep(AFTER_FAULTS).await;
    stop.store(true, Ordering::Relaxed);
    let history = recording
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    drop(cluster);

    let summary =
        check(&history).unwrap_or_else(|v| panic!("seed {seed}: {}", history.explain(&v)));
    eprintln!(
        "log history: {} operations in {:?}: {summary:?}",
        history.operations.len(),
        t0.elapsed()
    );
    assert!(
        summary.appends_acknowledged >= ACKNOWLEDGED_MIN,
        "too few appends acknowledged to mean anything: {summary:?}"
    );
    assert!(
        summary.reads_record >= READS_RECORD_MIN,
        "too few reads answered a record to mean anything: {summary:?}"
    );
}
