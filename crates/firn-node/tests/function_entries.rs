//! Triggers on a stream's entries and on a log tag's records, through RESP as a client uses
//! them: each entry or record runs the function once, with its id and its fields (or its
//! payload) as arguments; what came before the trigger, or under another tag, does not.

mod common;

use std::time::Duration;

use common::{error_line, eventually_reads, ok, redis_conn, start_three_shard_node};
use redis::aio::MultiplexedConnection;

/// For an entry (kind 4): puts its first argument (the id) under the key its last argument
/// names (a stream entry's last value, a record's payload), and counts the run in `entries`.
const COPY_ID: &str = r#"(module
    (import "firn" "kind" (func $kind (result i32)))
    (import "firn" "arg_count" (func $arg_count (result i32)))
    (import "firn" "arg" (func $arg (param i32 i32 i32) (result i32)))
    (import "firn" "put" (func $put (param i32 i32 i32 i32) (result i32)))
    (import "firn" "incr" (func $incr (param i32 i32 i64) (result i32)))
    (memory (export "memory") 1)
    (data (i32.const 4000) "entries")
    (func (export "run") (result i32)
        (local $k i32) (local $v i32)
        (if (i32.ne (call $kind) (i32.const 4)) (then (return (i32.const 1))))
        (local.set $v (call $arg (i32.const 0) (i32.const 0) (i32.const 900)))
        (local.set $k (call $arg (i32.sub (call $arg_count) (i32.const 1))
                                 (i32.const 1000) (i32.const 900)))
        (drop (call $put (i32.const 1000) (local.get $k) (i32.const 0) (local.get $v)))
        (drop (call $incr (i32.const 4000) (i32.const 7) (i64.const 1)))
        (i32.const 0)))"#;

async fn get(c: &mut MultiplexedConnection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query_async(c).await.unwrap()
}

async fn load_copy(c: &mut MultiplexedConnection) {
    let module = wat::parse_str(COPY_ID).unwrap();
    let _: i64 = redis::cmd("FIRN.FUNCTION")
        .arg("LOAD")
        .arg("copy")
        .arg(module)
        .query_async(c)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_on_a_stream_runs_once_for_each_entry_added_after_it() {
    let node = start_three_shard_node().await;
    let mut c = redis_conn(&node).await;
    load_copy(&mut c).await;
    let _: String = redis::cmd("XADD")
        .arg(&["readings", "*", "device", "early"])
        .query_async(&mut c)
        .await
        .unwrap();
    ok(
        &mut c,
        &[
            "FIRN.TRIGGER",
            "CREATE",
            "copier",
            "ON",
            "STREAM",
            "readings",
            "CALL",
            "copy",
        ],
    )
    .await;
    let mut ids = Vec::new();
    for device in ["d1", "d2", "d3"] {
        let id: String = redis::cmd("XADD")
            .arg(&["readings", "*", "value", "20", "device", device])
            .query_async(&mut c)
            .await
            .unwrap();
        ids.push(id);
    }
    for (device, id) in ["d1", "d2", "d3"].iter().zip(&ids) {
        eventually_reads(&mut c, device, id).await;
    }
    eventually_reads(&mut c, "entries", "3").await;
    // The entry from before the trigger was made is not its input.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(get(&mut c, "early").await, None);
    assert_eq!(get(&mut c, "entries").await.as_deref(), Some("3"));
    let info = ok(&mut c, &["FIRN.TRIGGER", "INFO", "copier"]).await;
    assert!(format!("{info:?}").contains("readings"), "{info:?}");
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_on_a_log_tag_runs_once_for_each_record_of_the_tag_on_every_shard() {
    let node = start_three_shard_node().await;
    let mut c = redis_conn(&node).await;
    load_copy(&mut c).await;
    ok(
        &mut c,
        &[
            "FIRN.TRIGGER",
            "CREATE",
            "tagged",
            "ON",
            "LOG",
            "events",
            "TAG",
            "hot",
            "CALL",
            "copy",
        ],
    )
    .await;
    let append = |tags: &[&str], payload: &str| {
        let mut cmd = redis::cmd("FIRN.LOG");
        cmd.arg("APPEND").arg("events").arg("TAGS").arg(tags.len());
        cmd.arg(tags).arg(payload);
        cmd
    };
    let mut seqs = Vec::new();
    // A record is stored in its first tag's shard: these two live apart, both tagged `hot`.
    for (tags, payload) in [(&["hot"][..], "k1"), (&["elsewhere", "hot"][..], "k2")] {
        let seq: Vec<String> = append(tags, payload).query_async(&mut c).await.unwrap();
        seqs.push(seq[0].clone());
    }
    let _: Vec<String> = append(&["cold"], "k3").query_async(&mut c).await.unwrap();
    eventually_reads(&mut c, "k1", &seqs[0]).await;
    eventually_reads(&mut c, "k2", &seqs[1]).await;
    eventually_reads(&mut c, "entries", "2").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(get(&mut c, "k3").await, None, "a record of another tag ran");
    assert_eq!(get(&mut c, "entries").await.as_deref(), Some("2"));
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_names_one_input_and_a_bad_one_is_refused() {
    let node = start_three_shard_node().await;
    let mut c = redis_conn(&node).await;
    load_copy(&mut c).await;
    let bad = error_line(
        &mut c,
        &[
            "FIRN.TRIGGER",
            "CREATE",
            "t",
            "ON",
            "TABLE",
            "x",
            "CALL",
            "copy",
        ],
    )
    .await;
    assert!(
        bad.contains("ON PREFIX p, ON LOG l TAG t or ON STREAM s"),
        "{bad}"
    );
    let no_tag = error_line(
        &mut c,
        &[
            "FIRN.TRIGGER",
            "CREATE",
            "t",
            "ON",
            "LOG",
            "events",
            "CALL",
            "copy",
        ],
    )
    .await;
    assert!(no_tag.contains("expected TAG"), "{no_tag}");
    let empty = error_line(
        &mut c,
        &[
            "FIRN.TRIGGER",
            "CREATE",
            "t",
            "ON",
            "STREAM",
            "",
            "CALL",
            "copy",
        ],
    )
    .await;
    assert!(empty.contains("not empty"), "{empty}");
    // Nothing was made, and the connection serves on.
    let list = ok(&mut c, &["FIRN.TRIGGER", "LIST"]).await;
    assert_eq!(list, redis::Value::Array(Vec::new()));
    node.shutdown().await;
}
