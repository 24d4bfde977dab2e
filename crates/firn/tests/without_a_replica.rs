//! A node holding no replica of a shard (a cluster of more nodes than a shard has replicas)
//! sends the shard's requests to one of its replicas. When that replica is killed, the node
//! finds the shard's leader among the others: reads, writes and watches through it go on.
//! (The same with that replica cut off by a partition: `partition.rs`.)

mod common;

use std::time::{Duration, Instant};

use common::{Cluster, key_in_shard, read_latest, settled};
use firn_client::{Client, PutOptions};
use firn_model::{ReadAt, ReadConsistency};

/// A put through `client`, tried again while the cluster answers that it cannot take it now.
async fn put(client: &Client, key: &str, value: &[u8]) {
    settled(|| client.put(key.as_bytes(), value, PutOptions::default()))
        .await
        .unwrap();
}

/// Four nodes, and a shard one of them holds no replica of: a client of that node (the
/// outsider), which has written `before` to a key of the shard.
struct Outsider {
    cluster: Cluster,
    shard: u64,
    /// The node without a replica, and the replica it sends the shard's requests to first.
    node: u64,
    asked: u64,
    key: String,
    client: Client,
}

impl Outsider {
    async fn start() -> Outsider {
        let cluster = Cluster::ready(4, &[]).await;
        let (shard, replicas, node) = cluster.shard_missing_from_a_node();
        let key = key_in_shard(shard as u32, "outside");
        let client = Client::connect(&cluster.resp_addr(node as usize - 1))
            .await
            .unwrap();
        put(&client, &key, b"before").await;
        Outsider {
            cluster,
            shard,
            node,
            asked: replicas[0],
            key,
            client,
        }
    }

    /// Kills (SIGKILL) the replica the outsider asks first.
    fn kill_asked(&mut self) -> Instant {
        self.cluster.kill_9(self.asked as usize - 1);
        Instant::now()
    }
}

/// A node without a replica of a shard sends its requests to one of the shard's replicas.
/// Killed, that replica refuses connections: the node finds the shard's leader among the
/// others, and its client sees a delay, not an error — for a read sent at once, then writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_a_replica_reads_and_writes_on_when_the_replica_it_asks_is_killed() {
    let mut o = Outsider::start().await;
    let (shard, node, asked, key, client) =
        (o.shard, o.node, o.asked, o.key.clone(), o.client.clone());
    let killed_at = o.kill_asked();
    // Sent once, with no retry of the client's own.
    let read = client
        .get(
            key.as_bytes(),
            ReadAt::Latest,
            ReadConsistency::Linearizable,
        )
        .await;
    assert!(
        matches!(&read, Ok(Some(item)) if item.value.as_deref() == Some(&b"before"[..])),
        "a read through node {node} of shard {shard}, whose replica node {asked} was \
         killed, answered {read:?} {:?} after the kill",
        killed_at.elapsed()
    );
    for i in 0..5 {
        let wanted = format!("after {i}");
        let written = client
            .put(key.as_bytes(), wanted.as_bytes(), PutOptions::default())
            .await;
        assert!(
            written.is_ok(),
            "write {i} through node {node} to shard {shard}, whose replica node {asked} \
             was killed, answered {written:?} {:?} after the kill",
            killed_at.elapsed()
        );
        let read = read_latest(&client, key.as_bytes())
            .await
            .and_then(|i| i.value);
        assert_eq!(read.as_deref(), Some(wanted.as_bytes()));
    }
    eprintln!(
        "outsider: a read and five writes to shard {shard} through node {node} {:?} after \
         node {asked} was killed",
        killed_at.elapsed()
    );
}

/// A watch at a node without a replica of the shard polls one of its replicas: killed, the
/// watch goes on from another (the only request of that node for the shard meanwhile: the
/// writes go through a node that holds a replica).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_at_a_node_without_a_replica_goes_on_when_the_replica_it_polls_is_killed() {
    let mut o = Outsider::start().await;
    let (node, asked, key) = (o.node, o.asked, o.key.clone());
    let (at_outsider, watched) = (o.client.clone(), key.clone());
    let mut watcher = tokio::task::spawn_blocking(move || {
        let w = at_outsider
            .watch(watched.as_bytes(), false, firn_model::WatchFrom::Version(1))
            .unwrap();
        w.set_timeout(Some(Duration::from_secs(15))).unwrap();
        w
    })
    .await
    .unwrap();
    let holder = (1..=4).find(|n| *n != node && *n != asked).unwrap();
    let writer = Client::connect(&o.cluster.resp_addr(holder as usize - 1))
        .await
        .unwrap();
    let killed_at = o.kill_asked();
    for i in 0..5 {
        put(&writer, &key, format!("after {i}").as_bytes()).await;
    }
    let versions = tokio::task::spawn_blocking(move || {
        (0..6)
            .map(|_| watcher.next_event().map(|e| e.info.version))
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    assert_eq!(
        versions.iter().flatten().copied().collect::<Vec<_>>(),
        (1..=6).collect::<Vec<u64>>(),
        "the watch through node {node} after node {asked} was killed: {versions:?}"
    );
    eprintln!(
        "outsider: the watch through node {node} had every version {:?} after node {asked} \
         was killed",
        killed_at.elapsed()
    );
}
