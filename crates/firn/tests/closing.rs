//! Closing time on an idle cluster: closes slow down when nobody reads closed time, a read
//! at a time on an idle shard asks the leader to close it at once (rather than waiting for
//! the slow close), a snapshot without a time is as fresh as on a busy cluster, and after
//! such a read the closes go on every interval for a while.

mod common;

use std::time::{Duration, Instant};

use common::{Cluster, key_in_shard, settled};
use firn_client::{Client, PutOptions};
use firn_model::{CommitTs, Key, ReadAt, ReadConsistency, SnapshotOf};

/// Each shard's last applied index on node `i`.
fn applied(cluster: &Cluster, i: usize) -> Vec<u64> {
    let view = cluster.cluster_json(i).expect("the node answers");
    let mut shards: Vec<(u64, u64)> = view["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["shard_id"].as_u64().unwrap(),
                s["last_applied_index"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    shards.sort();
    shards.into_iter().map(|(_, a)| a).collect()
}

/// Entries each shard applied on node `i` over `span`.
async fn entries_over(cluster: &Cluster, i: usize, span: Duration) -> Vec<u64> {
    let before = applied(cluster, i);
    tokio::time::sleep(span).await;
    let after = applied(cluster, i);
    after.iter().zip(&before).map(|(a, b)| a - b).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_cluster_closes_time_rarely_and_at_once_when_a_read_asks() {
    // 5 s when nobody asks: a read at now that waited for it would run past its 2 s wait.
    let cluster = Cluster::ready(3, &["--close-time-idle-every", "5s"]).await;
    let key = key_in_shard(0, "idle");
    let writer = Client::connect(&cluster.resp_addr(0)).await.unwrap();
    settled(|| writer.put(key.as_bytes(), b"v", PutOptions::default()))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Idle and unread: at most one close a shard in 3 s (not 60 at every 50 ms).
    let idle = entries_over(&cluster, 0, Duration::from_secs(3)).await;
    assert!(
        idle.iter().all(|n| *n <= 2),
        "entries a shard while idle: {idle:?}"
    );

    // A read at now, on a node that does not lead the key's shard: answered within a commit
    // or so, not after the 5 s close (or a TRYAGAIN at 2 s).
    let leader = cluster.wait_for_leaders(0, None)[0];
    let follower = (leader as usize) % 3;
    let reader = Client::connect(&cluster.resp_addr(follower)).await.unwrap();
    let now = CommitTs::new(firn_model::hlc::system_wall_us(), 0);
    let started = Instant::now();
    let got = reader
        .get(key.as_bytes(), ReadAt::AsOf(now), ReadConsistency::Local)
        .await
        .expect("the read at now is answered")
        .and_then(|v| v.value);
    let took = started.elapsed();
    assert_eq!(got.as_deref(), Some(&b"v"[..]));
    assert!(
        took < Duration::from_millis(1500),
        "the read at now took {took:?}"
    );

    // Asked once, the shard closes every interval for a while.
    let wanted = entries_over(&cluster, 0, Duration::from_secs(1)).await;
    assert!(
        wanted[0] >= 5,
        "entries of the asked shard in 1 s: {wanted:?}"
    );

    // A snapshot without a time, through the third node, over every shard (the others idle
    // and unasked): at a time no older than three intervals, not their last slow close.
    let other = (follower + 1) % 3;
    let snapshotter = Client::connect(&cluster.resp_addr(other)).await.unwrap();
    let keys: Vec<Key> = (0..3)
        .map(|s| Key::new(bytes::Bytes::from(key_in_shard(s, "snap"))).unwrap())
        .collect();
    let before = firn_model::hlc::system_wall_us();
    let started = Instant::now();
    let (at, _) = snapshotter
        .snapshot(&SnapshotOf::Keys(keys), None)
        .await
        .expect("the snapshot is answered");
    let took = started.elapsed();
    assert!(
        at.wall_us + 200_000 >= before,
        "the snapshot is {} ms old",
        (before - at.wall_us) / 1_000
    );
    assert!(
        took < Duration::from_millis(1500),
        "the snapshot took {took:?}"
    );
}
