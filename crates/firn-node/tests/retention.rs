//! Retention by age runs in the background and keeps the newest version of every key.

mod common;

use std::time::{Duration, Instant};

use common::*;
use redis::Value;

#[tokio::test]
async fn max_age_retention_drops_old_versions_in_the_background() {
    let node = start_node(false).await; // retention runs every 200 ms
    let mut c = redis_conn(&node).await;
    let _: () = redis::cmd("FIRN.KEYSPACE")
        .arg("CREATE")
        .arg("tmp/")
        .arg("MAXAGE")
        .arg("300ms")
        .query_async(&mut c)
        .await
        .unwrap();
    for i in 0..3 {
        let _: () = redis::cmd("SET")
            .arg("tmp/k")
            .arg(i)
            .query_async(&mut c)
            .await
            .unwrap();
        let _: () = redis::cmd("SET")
            .arg("keep/k")
            .arg(i)
            .query_async(&mut c)
            .await
            .unwrap();
    }
    // Bounded wait for the background task; no timing is asserted.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut versions = usize::MAX;
    while Instant::now() < deadline {
        let h: Vec<Value> = redis::cmd("FIRN.HISTORY")
            .arg("tmp/k")
            .query_async(&mut c)
            .await
            .unwrap();
        versions = h.len();
        if versions == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(versions, 1, "old versions were not expired");
    let latest: String = redis::cmd("GET")
        .arg("tmp/k")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(latest, "2", "the newest version is always kept");
    let other: Vec<Value> = redis::cmd("FIRN.HISTORY")
        .arg("keep/k")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(
        other.len(),
        3,
        "keys outside the keyspace keep their history"
    );
    node.shutdown().await;
}
