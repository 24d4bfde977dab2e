//! Local reads on one node: what a `LOCAL on` keyspace publishes in the node's region, what
//! a reader on the host gets from it (value, version, stamp, bound), and when it is told to
//! ask the node instead.

mod common;

use std::time::Duration;

use common::{redis_conn, run, start_node};
use firn_client::{Client, LocalClient, ReadBound};
use firn_local::{Bound, LocalRead, RegionReader, RemoteReason};
use firn_model::CommitTs;

/// A node with the keyspace `s/` local, and a connection to it.
async fn local_node() -> (firn_node::RunningNode, redis::aio::MultiplexedConnection) {
    let node = start_node(false).await;
    let mut c = redis_conn(&node).await;
    run(&mut c, &["FIRN.KEYSPACE", "CREATE", "s/", "LOCAL", "on"])
        .await
        .unwrap();
    (node, c)
}

async fn local_client(node: &firn_node::RunningNode) -> LocalClient {
    let remote = Client::connect(&node.resp_addr.to_string()).await.unwrap();
    LocalClient::open(remote).await.unwrap()
}

/// Where the node's region is (FIRN.LOCAL).
async fn region_info(node: &firn_node::RunningNode) -> firn_model::LocalRegionInfo {
    Client::connect(&node.resp_addr.to_string())
        .await
        .unwrap()
        .local_region()
        .await
        .unwrap()
}

fn hit(read: LocalRead) -> firn_local::LocalValue {
    match read {
        LocalRead::Hit(v) => v,
        other => panic!("expected a local hit, got {other:?}"),
    }
}

/// Waits (bounded) until the region answers `key` with `want`; publishing is synchronous
/// with apply, so this only covers the write's own round trip.
async fn settled(local: &LocalClient, key: &[u8]) -> LocalRead {
    for _ in 0..100 {
        let read = local.get_local(key);
        if matches!(read, LocalRead::Hit(_)) {
            return read;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    local.get_local(key)
}

#[tokio::test]
async fn a_local_keyspace_is_read_from_the_region_with_its_version_stamp_and_bound() {
    let (node, mut c) = local_node().await;
    let local = local_client(&node).await;

    let ack = local.put(b"s/1", b"warm").await.unwrap();
    let read = hit(local.get_local(b"s/1"));
    assert_eq!(read.value.as_deref(), Some(&b"warm"[..]));
    assert_eq!(read.version, ack.version);
    assert_eq!(read.commit_ts, ack.commit_ts);
    // One node leads its shard alone: the lease is its own, the read linearizable.
    assert!(
        matches!(read.bound, Bound::Linearizable { .. }),
        "{:?}",
        read.bound
    );

    // A write acknowledged through another connection is in the region when acknowledged.
    run(&mut c, &["SET", "s/1", "cold"]).await.unwrap();
    let read = hit(local.get_local(b"s/1"));
    assert_eq!(read.value.as_deref(), Some(&b"cold"[..]));
    assert_eq!(read.version, ack.version + 1);

    // A deletion is published as one: the key reads as absent, locally.
    run(&mut c, &["DEL", "s/1"]).await.unwrap();
    let read = hit(local.get_local(b"s/1"));
    assert_eq!(read.value, None);
    assert_eq!(read.version, ack.version + 2);

    // The async read answers the same, from the region.
    run(&mut c, &["SET", "s/2", "x"]).await.unwrap();
    let got = local.get(b"s/2").await.unwrap();
    assert_eq!(got.value.as_deref(), Some(&b"x"[..]));
    assert_eq!(got.bound, ReadBound::Linearizable);
    node.shutdown().await;
}

#[tokio::test]
async fn keys_outside_local_keyspaces_and_unknown_keys_are_read_from_the_node() {
    let (node, mut c) = local_node().await;
    run(&mut c, &["SET", "t/1", "plain"]).await.unwrap();
    let local = local_client(&node).await;
    assert!(matches!(
        local.get_local(b"t/1"),
        LocalRead::Remote(RemoteReason::NotPublished)
    ));
    let got = local.get(b"t/1").await.unwrap();
    assert_eq!(got.value.as_deref(), Some(&b"plain"[..]));
    assert_eq!(got.bound, ReadBound::Remote(RemoteReason::NotPublished));
    let missing = local.get(b"s/never").await.unwrap();
    assert_eq!((missing.value, missing.version), (None, 0));
    node.shutdown().await;
}

#[tokio::test]
async fn turning_local_off_withdraws_what_was_published() {
    let (node, mut c) = local_node().await;
    run(&mut c, &["SET", "s/1", "v"]).await.unwrap();
    let local = local_client(&node).await;
    hit(local.get_local(b"s/1"));
    run(&mut c, &["FIRN.KEYSPACE", "CREATE", "s/"])
        .await
        .unwrap();
    let mut read = local.get_local(b"s/1");
    for _ in 0..100 {
        if !matches!(read, LocalRead::Hit(_)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        read = local.get_local(b"s/1");
    }
    assert!(matches!(read, LocalRead::Remote(_)), "{read:?}");
    // New writes are not published either.
    run(&mut c, &["SET", "s/2", "v"]).await.unwrap();
    assert!(matches!(local.get_local(b"s/2"), LocalRead::Remote(_)));
    // And back on: published again from the next write.
    run(&mut c, &["FIRN.KEYSPACE", "CREATE", "s/", "LOCAL", "on"])
        .await
        .unwrap();
    run(&mut c, &["SET", "s/2", "w"]).await.unwrap();
    let read = hit(settled(&local, b"s/2").await);
    assert_eq!(read.value.as_deref(), Some(&b"w"[..]));
    node.shutdown().await;
}

#[tokio::test]
async fn a_token_ahead_of_the_region_sends_the_read_to_the_node() {
    let (node, mut c) = local_node().await;
    run(&mut c, &["SET", "s/1", "v"]).await.unwrap();
    let info = region_info(&node).await;
    let reader = firn_client::open_region(&info).unwrap();
    // A token the region has reached is met; one beyond it (a stamp this replica has not
    // applied, even under its lease) sends the read to the node.
    hit(reader.get(b"s/1", Some(CommitTs::new(1, 0))));
    assert!(matches!(
        reader.get(b"s/1", Some(CommitTs::new(u64::MAX / 2, 0))),
        LocalRead::Remote(RemoteReason::BehindToken { .. })
    ));
    // A reader expecting another cluster is refused.
    let mut other = firn_local::parse_cluster_id(&info.cluster_id).unwrap();
    other[0] ^= 0xff;
    let refused = RegionReader::open(std::path::Path::new(&info.path), Some(other));
    assert!(
        refused.is_err(),
        "a region of another cluster must be refused"
    );
    node.shutdown().await;
}

#[tokio::test]
async fn firn_local_answers_where_the_region_is_and_errors_when_it_is_off() {
    let node = start_node(false).await;
    let mut c = redis_conn(&node).await;
    let info = region_info(&node).await;
    assert!(info.path.ends_with("local.region"), "{info:?}");
    assert_eq!(info.node_id, 1);
    assert_eq!(info.cluster_id.len(), 32);
    assert_ne!(info.cluster_id, "0".repeat(32), "the cluster id is known");
    let wrong = run(&mut c, &["FIRN.LOCAL", "extra"]).await;
    assert!(wrong.is_err());
    node.shutdown().await;

    let config = firn_node::NodeConfig {
        resp_addr: ([127, 0, 0, 1], 0).into(),
        http_addr: ([127, 0, 0, 1], 0).into(),
        peer_addr: ([127, 0, 0, 1], 0).into(),
        in_memory: true,
        local_region: firn_node::config::LocalRegionSetting::Off,
        ..firn_node::NodeConfig::default()
    };
    let off = firn_node::RunningNode::start(config).await.unwrap();
    let mut c = redis_conn(&off).await;
    let e = run(&mut c, &["FIRN.LOCAL"]).await.unwrap_err().to_string();
    assert!(e.contains("local reads are off"), "{e}");
    off.shutdown().await;
}

#[tokio::test]
async fn the_region_is_kept_fresh_only_while_a_keyspace_is_local() {
    let node = start_node(false).await;
    let mut c = redis_conn(&node).await;
    let info = region_info(&node).await;
    let reader = firn_client::open_region(&info).unwrap();
    // Nothing is local, so nobody reads the region: the node renews neither its heartbeat
    // nor its leases (each lease renewal asks the shard's Raft core for a read index).
    tokio::time::sleep(Duration::from_millis(600)).await;
    let idle_age = reader.header().heartbeat_age_us;
    assert!(idle_age >= 400_000, "heartbeat {idle_age} µs old");

    // A keyspace made local starts the renewals at once: the heartbeat is fresh again and
    // the first value published reads as linearizable, under a lease.
    run(&mut c, &["FIRN.KEYSPACE", "CREATE", "s/", "LOCAL", "on"])
        .await
        .unwrap();
    let mut age = reader.header().heartbeat_age_us;
    for _ in 0..100 {
        if age < 200_000 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        age = reader.header().heartbeat_age_us;
    }
    assert!(
        age < 200_000,
        "heartbeat {age} µs old with a local keyspace"
    );
    run(&mut c, &["SET", "s/1", "v"]).await.unwrap();
    let read = hit(settled(&local_client(&node).await, b"s/1").await);
    assert!(
        matches!(read.bound, Bound::Linearizable { .. }),
        "{:?}",
        read.bound
    );
    node.shutdown().await;
}
