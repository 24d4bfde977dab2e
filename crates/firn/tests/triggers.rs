//! A trigger's effects happen once per input, and timers fire once, through kill -9 of the
//! leaders that run them: a trigger counts each key written under `in/` into `seen/<key>` and
//! appends the key to the log `seen` under the tag `all`, writers put keys on every shard
//! while the leader of each shard is killed and restarted in turn, and at the end every input
//! key is counted exactly once and appended exactly once (none missed, none doubled) and
//! nothing else is; timers due during the kills each fire exactly once, and are gone after.
//! The workload is the fault soak's (`firn_soak::workload::effects`).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::Cluster;
use firn_soak::workload::effects::{Effects, settled};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_counts_every_input_once_and_timers_fire_once_through_leader_kills() {
    let cluster = Cluster::ready(3, &[]).await;
    let addrs: Vec<String> = (0..3).map(|i| cluster.resp_addr(i)).collect();
    let cluster = Arc::new(std::sync::Mutex::new(cluster));
    // Timers due while the leaders are killed one after another (over about 9 s).
    let effects = Effects::default();
    effects.set_up(&addrs).await.unwrap();

    // Writers on every node (their keys land on every shard), until the kills are over.
    let stop = Arc::new(AtomicBool::new(false));
    let recording = {
        let (addrs, stop) = (addrs.clone(), stop.clone());
        tokio::spawn(async move { effects.record(&addrs, stop).await })
    };
    common::kill_leaders(
        cluster.clone(),
        vec![0, 1, 2],
        Duration::from_secs(2),
        Duration::from_secs(1),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    let outcome = recording.await.unwrap().unwrap();
    assert!(
        outcome.violations.is_empty(),
        "effects not once per input: {:#?}",
        outcome.violations
    );
    assert!(
        outcome.inputs >= 100,
        "only {} writes applied",
        outcome.inputs
    );
    let listed = settled(&addrs, redis::cmd("FIRN.TIMER").arg("LIST"))
        .await
        .unwrap();
    assert_eq!(listed, redis::Value::Array(vec![]), "fired timers are gone");
    eprintln!(
        "{} inputs, each counted once and appended once; {} timers fired once each",
        outcome.inputs, outcome.timers
    );
}
