//! A node holding no replica of a shard (a cluster of more nodes than a shard has replicas)
//! sends the shard's requests to one of its replicas. When that replica is killed, the node
//! finds the shard's leader among the others: reads, writes and watches through it go on.
//! (The same with that replica cut off by a partition: `partition.rs`.)

mod common;

use std::time::{Duration, Instant};

use common::{Cluster, key_in_shard, read_latest, settled, wait_until};
use firn_client::{Client, ClientError, PutOptions};
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
    // A write the holder forwarded to the killed node as it died can be UNCERTAIN (sent on a
    // connection the kill was closing): it is written again, and the watch must show every
    // version the key has, however many applied.
    let (mut taken, mut tries) = (0, 0);
    while taken < 5 {
        tries += 1;
        assert!(
            tries <= 20,
            "five writes of {key} were not taken in 20 tries"
        );
        let value = format!("after {tries}");
        match settled(|| writer.put(key.as_bytes(), value.as_bytes(), PutOptions::default())).await
        {
            Ok(_) => taken += 1,
            Err(ClientError::Server { code, .. }) if code == "UNCERTAIN" => {}
            Err(e) => panic!("write {tries} of {key} through node {holder}: {e}"),
        }
    }
    let newest = read_latest(&writer, key.as_bytes()).await.unwrap().version;
    let versions = tokio::task::spawn_blocking(move || {
        (0..newest)
            .map(|_| watcher.next_event().map(|e| e.info.version))
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    assert_eq!(
        versions.iter().flatten().copied().collect::<Vec<_>>(),
        (1..=newest).collect::<Vec<u64>>(),
        "the watch through node {node} after node {asked} was killed: {versions:?}"
    );
    eprintln!(
        "outsider: the watch through node {node} had every version {:?} after node {asked} \
         was killed",
        killed_at.elapsed()
    );
}

/// A node without a replica of a shard first sends the shard's requests to the replica it
/// knows, which relays them to the leader — one more hop each. It looks the leader up every
/// 2 s while it has such requests (`Router::follow_remote_leaders`), and then sends them to
/// the leader itself: before, only trouble (a replica that did not answer) made it look.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_a_replica_sends_to_the_leader_itself_once_it_looked_it_up() {
    let mut o = Outsider::start().await;
    let (shard, node, asked) = (o.shard, o.node, o.asked);
    // The leader must not be the replica asked first, or nothing tells the two apart: if it
    // is, it is killed until another replica leads, then started again.
    let leader_seen_by = |cluster: &Cluster, i: u64| -> Option<u64> {
        let view = cluster.cluster_json(i as usize - 1)?;
        view["cluster"]["shards"]
            .as_array()?
            .iter()
            .find(|s| s["shard_id"].as_u64() == Some(shard))?["leader"]
            .as_u64()
    };
    let holder = (1..=4).find(|n| *n != node && *n != asked).unwrap();
    let mut leader = None;
    assert!(
        wait_until(Duration::from_secs(20), || {
            leader = leader_seen_by(&o.cluster, holder);
            leader.is_some()
        }),
        "shard {shard} has no leader"
    );
    if leader == Some(asked) {
        o.kill_asked();
        assert!(
            wait_until(Duration::from_secs(20), || {
                leader = leader_seen_by(&o.cluster, holder);
                leader.is_some_and(|l| l != asked)
            }),
            "shard {shard} elected no leader after node {asked} was killed"
        );
        tokio::task::block_in_place(|| o.cluster.restart(asked as usize - 1));
    }
    let leader = leader.unwrap();
    let sent_to = |to: u64| {
        o.cluster.counter(
            node as usize - 1,
            &format!("firn_forwarded_total{{to=\"{to}\"}}"),
        )
    };
    // Writes (of the one key: the shard's) until one goes to the leader itself; the first
    // ones go through `asked`.
    let started = Instant::now();
    let before = sent_to(leader);
    let mut i = 0;
    while sent_to(leader) == before {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "node {node} still sends shard {shard}'s writes to node {asked}, not to its leader \
             node {leader}, {:?} on",
            started.elapsed()
        );
        put(&o.client, &o.key, format!("v{i}").as_bytes()).await;
        i += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "outsider: node {node} sent shard {shard}'s writes to its leader {:?} on",
        started.elapsed()
    );
    // And the following ones too, none through the replica it asked first.
    let (to_leader, to_asked) = (sent_to(leader), sent_to(asked));
    for i in 0..10 {
        put(&o.client, &o.key, format!("then {i}").as_bytes()).await;
    }
    assert_eq!(sent_to(leader), to_leader + 10.0);
    assert_eq!(sent_to(asked), to_asked);
}
