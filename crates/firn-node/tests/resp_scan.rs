//! Redis `SCAN` on Firn: MATCH and COUNT visit every key once, and a scan's cursor goes on
//! on any node of the cluster and never lands in another scan's place.

mod common;

use common::*;
use redis::AsyncCommands;

#[tokio::test]
async fn scan_with_match_and_count_visits_every_key_once() {
    let node = start_node(false).await;
    let mut c = redis_conn(&node).await;
    for i in 0..57 {
        let _: () = c.set(format!("user:{i}"), i).await.unwrap();
        let _: () = c.set(format!("other:{i}"), i).await.unwrap();
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg("user:*")
            .arg("COUNT")
            .arg(10)
            .query_async(&mut c)
            .await
            .unwrap();
        for k in keys {
            assert!(k.starts_with("user:"));
            assert!(seen.insert(k), "a key was returned twice");
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
    assert_eq!(seen.len(), 57);
    // The crate's own iterator (what applications use) agrees.
    let mut iter: redis::AsyncIter<String> = c.scan_match("other:*").await.unwrap();
    let mut n = 0;
    while iter.next_item().await.is_some() {
        n += 1;
    }
    assert_eq!(n, 57);
    node.shutdown().await;
}

/// A client may continue a scan on any node (a pool behind a load balancer does): each page
/// goes to the next node, while another scan holds cursors of its own on every node.
#[tokio::test]
async fn a_scan_continues_on_any_node_and_never_in_another_scans_place() {
    let nodes = start_cluster(3, 3).await;
    let mut conns = Vec::new();
    for node in &nodes {
        conns.push(redis_conn_patient(node).await);
    }
    for i in 0..90 {
        let _: () = settle_set(&mut conns[0], &format!("a:{i:03}"), i).await;
        let _: () = settle_set(&mut conns[0], &format!("b:{i:03}"), i).await;
    }
    let page = |c: &mut redis::aio::MultiplexedConnection, cursor: u64, pattern: &str| {
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(10);
        let c = c.clone();
        async move {
            let mut c = c;
            cmd.query_async::<(u64, Vec<String>)>(&mut c).await.unwrap()
        }
    };
    // Another scan leaves cursors on every node.
    for c in conns.iter_mut() {
        let (next, _) = page(c, 0, "b:*").await;
        assert_ne!(next, 0);
        let _ = page(c, next, "b:*").await;
    }
    let (mut seen, mut cursor, mut turn) = (std::collections::BTreeSet::new(), 0u64, 0usize);
    loop {
        let (next, keys) = page(&mut conns[turn % 3], cursor, "a:*").await;
        turn += 1;
        for k in keys {
            assert!(k.starts_with("a:"), "{k} from another scan's place");
            seen.insert(k);
        }
        if next == 0 {
            break;
        }
        assert!(next < 1 << 53, "cursor {next} is not exact in every client");
        cursor = next;
    }
    assert!(
        turn > 3,
        "the scan took {turn} pages: it never changed nodes"
    );
    assert_eq!(seen.len(), 90, "{seen:?}");
    // A number no node issued is refused, not read as a place.
    let e: redis::RedisResult<(u64, Vec<String>)> = redis::cmd("SCAN")
        .arg(12345u64)
        .query_async(&mut conns[1])
        .await;
    assert!(e.unwrap_err().to_string().contains("invalid cursor"));
    for node in nodes {
        node.shutdown().await;
    }
}

/// SET, sent again while the cluster's leaders are still being elected.
async fn settle_set(c: &mut redis::aio::MultiplexedConnection, key: &str, value: i32) {
    for _ in 0..100 {
        let r: redis::RedisResult<()> = c.set(key, value).await;
        if r.is_ok() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("SET {key} never succeeded");
}
