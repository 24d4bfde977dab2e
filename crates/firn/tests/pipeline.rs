//! Pipelined replication in a running cluster: with `--appends-in-flight` above 1, a leader
//! keeps several appends out to each follower while writes keep coming, and every write
//! still reads back; `/metrics` counts the appends and shows the storage engine's work.

mod common;

use common::{Cluster, settled};
use firn_client::{Client, PutOptions};
use firn_model::{ReadAt, ReadConsistency};

/// With `--appends-in-flight` above 1, a leader sends a follower the next append before the
/// answer to the one before whenever writes keep coming (`crate::pipeline` in firn-raft);
/// `/metrics` counts how many were out at each send. Every write still reads back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_keep_several_appends_in_flight_to_each_follower() {
    let cluster = Cluster::ready(3, &["--appends-in-flight", "8"]).await;
    const WRITERS: usize = 32;
    const PUTS_EACH: usize = 40;
    let keys = common::keys_in_shard(0, "pipelined-", WRITERS);
    let mut writers = Vec::new();
    for key in keys.clone() {
        let client = Client::connect(&cluster.resp_addr(0)).await.unwrap();
        writers.push(tokio::spawn(async move {
            for i in 0..PUTS_EACH {
                let value = i.to_string();
                settled(|| client.put(key.as_bytes(), value.as_bytes(), PutOptions::default()))
                    .await
                    .unwrap();
            }
        }));
    }
    for w in writers {
        w.await.unwrap();
    }
    // Each send with entries records how many of its stream's appends were then out (it
    // included): with one in flight the sum equals the count.
    let sum: f64 = (0..3)
        .map(|i| cluster.counter(i, "firn_replication_appends_in_flight_sum"))
        .sum();
    let count: f64 = (0..3)
        .map(|i| cluster.counter(i, "firn_replication_appends_in_flight_count"))
        .sum();
    assert!(count > 0.0, "no append with entries was counted");
    assert!(
        sum > count,
        "never more than one append in flight: sum {sum}, count {count}"
    );
    // Every append a leader sends is counted by whether it carried entries: those with
    // entries are the sends the histogram above counted (read before, so at most as many),
    // and the heartbeats that went meanwhile carried none.
    let appends = |entries: &str| -> f64 {
        (0..3)
            .map(|i| {
                cluster.counter(
                    i,
                    &format!("firn_replication_appends_total{{entries=\"{entries}\"}}"),
                )
            })
            .sum()
    };
    let with_entries = appends("some");
    assert!(
        with_entries >= count,
        "{with_entries} appends with entries counted, {count} in the in-flight histogram"
    );
    assert!(appends("none") > 0.0, "no append without entries counted");
    // The writes sit in every node's state memtables, which `/metrics` shows with the rest
    // of the storage engine's work (`firn_storage_*`, refreshed every second).
    for i in 0..3 {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let buffered = loop {
            let bytes = cluster.counter(i, "firn_storage_write_buffer_bytes{db=\"state\"}");
            if bytes > 0.0 || std::time::Instant::now() > deadline {
                break bytes;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        };
        assert!(
            buffered > 0.0,
            "node {i}: no state memtable bytes in /metrics"
        );
        assert!(cluster.counter(i, "firn_storage_journals{db=\"log\"}") >= 1.0);
    }
    let reader = Client::connect(&cluster.resp_addr(1)).await.unwrap();
    let last = (PUTS_EACH - 1).to_string();
    for key in &keys {
        let read = settled(|| {
            reader.get(
                key.as_bytes(),
                ReadAt::Latest,
                ReadConsistency::Linearizable,
            )
        })
        .await
        .unwrap()
        .and_then(|v| v.value);
        assert_eq!(read.as_deref(), Some(last.as_bytes()), "{key}");
    }
}
