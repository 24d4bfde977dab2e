//! Transactions across shards on a cluster of `firn` processes: a coordinator killed (its
//! process aborted, as kill -9) between two steps of a commit leaves nothing half-visible —
//! the survivors resolve what it left, as its anchor decided; and a bank of accounts on
//! every shard keeps its sum through concurrent transfers and leader kills, read whole by
//! snapshots and by transactions.

mod common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::{Cluster, key_in_shard, read_latest};
use firn_client::Client;

/// One key in each of the three shards.
fn keys_on_every_shard(tag: &str) -> Vec<String> {
    (0..3).map(|s| key_in_shard(s, tag)).collect()
}

/// SET of every key to `value` in one MULTI/EXEC through node `via`.
async fn exec_set(
    cluster: &Cluster,
    via: usize,
    keys: &[String],
    value: &str,
) -> redis::RedisResult<redis::Value> {
    let client = redis::Client::open(format!("redis://{}/", cluster.resp_addr(via)))?;
    let config =
        redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(30)));
    let mut c = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    let mut pipe = redis::pipe();
    pipe.atomic();
    for k in keys {
        pipe.set(k, value).ignore();
    }
    pipe.query_async::<redis::Value>(&mut c).await
}

/// The newest value and stamp of each key, read through node `via` (a read of a key a
/// transaction holds waits for it to be resolved).
async fn values(cluster: &Cluster, via: usize, keys: &[String]) -> Vec<(Option<String>, u64)> {
    let client = Client::connect(&cluster.resp_addr(via)).await.unwrap();
    let mut out = Vec::new();
    for k in keys {
        let v = read_latest(&client, k.as_bytes()).await;
        out.push((
            v.as_ref()
                .and_then(|v| v.value.clone())
                .map(|b| String::from_utf8_lossy(&b).into_owned()),
            v.map_or(0, |v| v.commit_ts.wall_us),
        ));
    }
    out
}

/// Restarts node index 0 with `FAIL_POINTS` set, sends a transaction over every shard
/// through it — it aborts itself at the point — and waits for its process to end.
async fn coordinator_dies_at(cluster: &mut Cluster, point: &str, keys: &[String], value: &str) {
    cluster.kill_9(0);
    cluster.restart_with_env(0, &[], &[("FAIL_POINTS", &format!("{point}=return"))]);
    cluster.wait_for_leaders(0, None);
    let sent = exec_set(cluster, 0, keys, value).await;
    eprintln!("the transaction through the coordinator dying at {point}: {sent:?}");
    assert!(
        sent.is_err(),
        "the coordinator answered though it died at {point}"
    );
    let node = cluster.nodes[0].as_mut().unwrap();
    let ended = common::wait_until(Duration::from_secs(10), || {
        node.child.try_wait().unwrap().is_some()
    });
    assert!(ended, "the coordinator did not stop at {point}");
    cluster.nodes[0] = None;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_killed_mid_commit_leaves_its_transaction_whole_or_not_at_all() {
    let mut cluster = Cluster::ready(3, &[]).await;
    let keys = keys_on_every_shard("acct");
    exec_set(&cluster, 1, &keys, "0")
        .await
        .expect("a first transaction");

    // Dead after every part is prepared, before the anchor decides: the survivors find
    // the parts past their deadline, the anchor aborts, nothing is applied.
    coordinator_dies_at(&mut cluster, "txn-after-prepare", &keys, "1").await;
    let started = Instant::now();
    let after = values(&cluster, 1, &keys).await;
    assert!(
        after.iter().all(|(v, _)| v.as_deref() == Some("0")),
        "a transaction whose coordinator died before the decision left {after:?}"
    );
    eprintln!(
        "resolved (aborted) {:?} after the coordinator died",
        started.elapsed()
    );

    // Dead after the anchor decided, before the others are resolved: the survivors
    // commit every part, at the one stamp.
    coordinator_dies_at(&mut cluster, "txn-after-decide", &keys, "2").await;
    let after = values(&cluster, 2, &keys).await;
    assert!(
        after.iter().all(|(v, _)| v.as_deref() == Some("2")),
        "a transaction decided before its coordinator died left {after:?}"
    );
    let stamps: HashSet<u64> = after.iter().map(|(_, t)| *t).collect();
    assert_eq!(
        stamps.len(),
        1,
        "one transaction, several stamps: {after:?}"
    );

    // The dead node, back, holds the same.
    cluster.restart(0);
    cluster.wait_for_leaders(0, None);
    assert_eq!(values(&cluster, 0, &keys).await, after);
}
