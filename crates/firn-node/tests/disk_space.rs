//! A node whose data disk is low on space refuses the writes that add data, with NOSPACE
//! (HTTP 507), changes nothing, and goes on serving reads, deletes and truncations; writes
//! resume when space is back. The free space is the real one; the test moves the reserve
//! above it and back.

mod common;

use common::http::put_bytes as http_put;
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_low_disk_refuses_writes_that_add_data_and_serves_the_rest() {
    let node = start_node(false).await;
    let mut c = redis_conn(&node).await;
    let base = format!("http://{}", node.http_addr);
    ok(&mut c, &["SET", "kept", "v1"]).await;
    ok(&mut c, &["SET", "gone", "x"]).await;
    ok(&mut c, &["SET", "old", "a"]).await;
    ok(&mut c, &["SET", "old", "b"]).await;
    ok(&mut c, &["XADD", "events", "*", "f", "1"]).await;

    let disk = node.router().kernel().disk().clone();
    disk.set_reserve(u64::MAX).unwrap();

    // Writes that add data: refused, each with the same clear error.
    for cmd in [
        &["SET", "kept", "v2"][..],
        &["SET", "new", "v"],
        &["MSET", "a", "1", "b", "2"],
        &["FIRN.PUT", "kept", "v3", "IFVERSION", "1"],
        &["XADD", "events", "*", "f", "2"],
        &["FIRN.LOG", "APPEND", "audit", "TAGS", "1", "t", "payload"],
    ] {
        let line = error_line(&mut c, cmd).await;
        assert!(line.starts_with("NOSPACE "), "{cmd:?}: {line}");
        assert!(line.contains("reserve"), "{cmd:?}: {line}");
    }
    assert_usable(&mut c).await;
    let (code, body) = http_put(format!("{base}/v1/kv/kept"), b"v4".to_vec()).await;
    assert_eq!(code, 507, "{body}");
    assert_eq!(body["error"], "NOSPACE", "{body}");
    // A large value is refused before anything is sent to its holders.
    let (code, body) = http_put(format!("{base}/v1/kv/big"), vec![7; 200_000]).await;
    assert_eq!(code, 507, "{body}");

    // Nothing changed.
    assert_eq!(bulk_text(&ok(&mut c, &["GET", "kept"]).await), "v1");
    assert_eq!(
        ok(&mut c, &["EXISTS", "new", "a", "big"]).await,
        redis::Value::Int(0)
    );
    assert_eq!(ok(&mut c, &["XLEN", "events"]).await, redis::Value::Int(1));

    // What frees space, and reads, go on.
    assert_eq!(ok(&mut c, &["DEL", "gone"]).await, redis::Value::Int(1));
    assert_eq!(
        ok(&mut c, &["FIRN.TRUNCATE", "KEY", "old", "VERSION", "2"]).await,
        redis::Value::Int(1)
    );
    ok(&mut c, &["XTRIM", "events", "MAXLEN", "0"]).await;
    ok(
        &mut c,
        &["FIRN.KEYSPACE", "CREATE", "tmp/", "MAXVERSIONS", "1"],
    )
    .await;
    assert_eq!(bulk_text(&ok(&mut c, &["GET", "old"]).await), "b");

    // Space is back: writes go on, with no restart.
    disk.set_reserve(0).unwrap();
    ok(&mut c, &["SET", "kept", "v2"]).await;
    ok(&mut c, &["XADD", "events", "*", "f", "3"]).await;
    let (code, _) = http_put(format!("{base}/v1/kv/big"), vec![7; 200_000]).await;
    assert_eq!(code, 200);
    assert_eq!(bulk_text(&ok(&mut c, &["GET", "kept"]).await), "v2");
    node.shutdown().await;
}
