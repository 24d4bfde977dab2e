//! A consumer group under crashes and a leader kill, checked as a history. Producers `XADD`
//! to one stream (with a payload unique to each add) and consumers connected to different
//! nodes of a 3-node cluster read it with `XREADGROUP … >` and `XACK` each entry, over RESP
//! with standard Redis commands only. Some consumers crash: they drop their connection
//! holding entries they did not ack, and come back under a new name. Every consumer claims
//! what has been idle a while with `XAUTOCLAIM`. Midway, the stream's shard leader is killed
//! with SIGKILL and restarted. Once the producers and consumers stop, a drainer claims every
//! pending entry and reads `>` until the group holds nothing, acking all. The recorded
//! history must keep the group's guarantees as `firn_check::groups` checks them: nothing
//! acknowledged lost, acked means done, one holder at a time, redeliveries counted.
//!
//! The same run is made twice: with a group of policy `first` (Redis's semantics) and the
//! claims above, and with a group `POLICY roundrobin ACKWAIT` and no `XAUTOCLAIM` at all:
//! crashed consumers' entries come back only as the server gives them again by `>` once
//! ACKWAIT has passed, and the drainer only reads `>` (with BLOCK) until nothing is pending.
//! The checker then takes a `>` of an id delivered before as a redelivery, due no sooner
//! than ACKWAIT after the id's last delivery.
//!
//! A call that was refused (TRYAGAIN, CLUSTERDOWN, no connection) is recorded as such; one
//! whose answer never came (a dropped connection, a timeout, UNCERTAIN) as unknown, not as a
//! failure. The processes are the fault soak's consumer-group workload
//! (`firn_soak::workload::groups`). A failure prints the seed; FIRN_TEST_SEED replays the
//! same crashes.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Cluster, key_in_shard, kill_leaders, seed};
use firn_check::groups::{Summary, check_with};
use firn_soak::workload::groups::{Groups, Redelivery};

/// Running before the leader kill, how long the leader stays down, and running after the
/// restart, so that the history covers the recovery and crashed consumers' entries are
/// claimed by the survivors.
const BEFORE_KILL: Duration = Duration::from_millis(1_500);
const DOWN: Duration = Duration::from_millis(700);
const AFTER_RESTART: Duration = Duration::from_secs(3);
/// Fewest acknowledged adds for the history to mean something.
const ACKNOWLEDGED_MIN: usize = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_history_under_crashes_and_a_leader_kill_loses_nothing_and_holds_once() {
    let summary = run_history(Redelivery::Claims).await;
    assert!(
        summary.redeliveries >= 1 && summary.deliveries_claim >= 1,
        "a crashed consumer's entries were never claimed again: {summary}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roundrobin_ackwait_group_history_under_crashes_and_a_leader_kill_redelivers_by_itself() {
    let summary = run_history(Redelivery::AckWait).await;
    assert_eq!(summary.deliveries_claim, 0, "nobody claims: {summary}");
    assert!(
        summary.redeliveries >= 1,
        "no entry was given again after ACKWAIT: {summary}"
    );
}

/// Starts a cluster, runs producers and consumers through the faults, drains the group and
/// checks the history; what it held.
async fn run_history(redelivery: Redelivery) -> Summary {
    let seed = seed(&format!("group history ({redelivery:?})"));
    let cluster = Cluster::ready(3, &[]).await;
    let addrs: Vec<String> = (0..3).map(|i| cluster.resp_addr(i)).collect();
    let cluster = Arc::new(Mutex::new(cluster));
    // After the restart, the run goes on until 200 adds were acknowledged (a slow machine
    // adds slowly), for at most 15 s from its start; the drain takes at most 20 s. With the
    // cluster's start, a test stays under 60 s (about 25 s on an idle 2-core machine, 40 s on
    // a loaded one).
    let groups = Groups::new(&key_in_shard(0, "jobs"), redelivery);
    let options = groups.options();
    let t0 = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let recording = {
        let stop = stop.clone();
        tokio::spawn(async move { groups.record(seed, &addrs, stop, t0).await })
    };
    kill_leaders(cluster.clone(), vec![0], BEFORE_KILL, DOWN).await;
    tokio::time::sleep(AFTER_RESTART).await;
    stop.store(true, Ordering::Relaxed);
    let history = recording
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    drop(cluster);

    let summary = check_with(&history, options)
        .unwrap_or_else(|v| panic!("seed {seed}: {}", history.explain(&v)));
    eprintln!(
        "group history ({redelivery:?}): {} operations in {:?}: {summary}",
        history.operations.len(),
        t0.elapsed()
    );
    assert!(
        summary.adds_acknowledged >= ACKNOWLEDGED_MIN,
        "too few adds acknowledged to mean anything: {summary}"
    );
    summary
}
