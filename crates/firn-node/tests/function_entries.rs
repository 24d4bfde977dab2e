//! Triggers on a stream's entries and on a log tag's records, through RESP as a client uses
//! them: each entry or record runs the function once, with its id and its fields (or its
//! payload) as arguments; what came before the trigger, or under another tag, does not.

mod common;

use std::time::{Duration, Instant};

use common::{error_line, eventually_reads, function_load, ok, redis_conn, start_three_shard_node};
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
    function_load(c, "copy", &module).await.unwrap();
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

/// For each put: `seen/<key>` = the page `log_read("events", "hot", "")` answers.
const READ_TAG: &str = r#"(module
    (import "firn" "key" (func $key (param i32 i32 i32) (result i32)))
    (import "firn" "log_read"
        (func $log_read (param i32 i32 i32 i32 i32 i32 i32 i32) (result i64)))
    (import "firn" "put" (func $put (param i32 i32 i32 i32) (result i32)))
    (memory (export "memory") 2)
    (data (i32.const 0) "events")
    (data (i32.const 16) "hot")
    (data (i32.const 32) "seen/")
    (func (export "run") (result i32)
        (local $k i32) (local $n i64)
        (local.set $k (call $key (i32.const 0) (i32.const 37) (i32.const 900)))
        (local.set $n (call $log_read (i32.const 0) (i32.const 6) (i32.const 16) (i32.const 3)
                                      (i32.const 0) (i32.const 0) (i32.const 1024) (i32.const 60000)))
        (if (i64.lt_s (local.get $n) (i64.const 0)) (then (return (i32.const 1))))
        (drop (call $put (i32.const 32) (i32.add (local.get $k) (i32.const 5))
                         (i32.const 1024) (i32.wrap_i64 (local.get $n))))
        (i32.const 0)))"#;

/// The ids of a `log_read` page: `[u32 LE length][id][u32 LE length][payload]…`.
fn page_ids(mut page: &[u8]) -> Vec<String> {
    let mut items = Vec::new();
    while !page.is_empty() {
        let len = u32::from_le_bytes(page[..4].try_into().unwrap()) as usize;
        items.push(String::from_utf8(page[4..4 + len].to_vec()).unwrap());
        page = &page[4 + len..];
    }
    items.into_iter().step_by(2).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_reads_a_log_tag_as_of_its_inputs_stamp() {
    let node = start_three_shard_node().await;
    let mut c = redis_conn(&node).await;
    let module = wat::parse_str(READ_TAG).unwrap();
    function_load(&mut c, "reader", &module).await.unwrap();
    // Paused while the history is written, so every run comes after all of it.
    ok(
        &mut c,
        &[
            "FIRN.TRIGGER",
            "CREATE",
            "readers",
            "ON",
            "PREFIX",
            "in/",
            "CALL",
            "reader",
        ],
    )
    .await;
    ok(&mut c, &["FIRN.TRIGGER", "PAUSE", "readers"]).await;
    let mut ids = Vec::new();
    for (record, input) in [("r1", "in/a"), ("r2", "in/b")] {
        let id: Vec<String> = redis::cmd("FIRN.LOG")
            .arg(&["APPEND", "events", "TAGS", "1", "hot", record])
            .query_async(&mut c)
            .await
            .unwrap();
        ids.push(id[0].clone());
        ok(&mut c, &["SET", input, "x"]).await;
    }
    ok(&mut c, &["FIRN.TRIGGER", "RESUME", "readers"]).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let seen = |c: &mut MultiplexedConnection, key: &'static str| {
        let mut c = c.clone();
        async move {
            let v: Option<Vec<u8>> = redis::cmd("GET")
                .arg(key)
                .query_async(&mut c)
                .await
                .unwrap();
            v
        }
    };
    let (a, b) = loop {
        if let (Some(a), Some(b)) = (
            seen(&mut c, "seen/in/a").await,
            seen(&mut c, "seen/in/b").await,
        ) {
            break (a, b);
        }
        assert!(
            Instant::now() < deadline,
            "the trigger wrote nothing in 20 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // Each run saw the tag as it was at its input's stamp, not as it is now.
    assert_eq!(page_ids(&a), ids[..1].to_vec());
    assert_eq!(page_ids(&b), ids.clone());
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_entry_is_added_once_when_its_timer_is_due() {
    let node = start_three_shard_node().await;
    let mut c = redis_conn(&node).await;
    ok(
        &mut c,
        &[
            "FIRN.TIMER",
            "SET",
            "wash",
            "IN",
            "300",
            "XADD",
            "jobs",
            "task",
            "wash",
            "car",
            "red",
        ],
    )
    .await;
    let listed = ok(&mut c, &["FIRN.TIMER", "LIST"]).await;
    assert!(format!("{listed:?}").contains("jobs"), "{listed:?}");
    let len = |c: &mut MultiplexedConnection| {
        let mut c = c.clone();
        async move {
            let n: i64 = redis::cmd("XLEN")
                .arg("jobs")
                .query_async(&mut c)
                .await
                .unwrap();
            n
        }
    };
    assert_eq!(len(&mut c).await, 0, "delivered before its time");
    let deadline = Instant::now() + Duration::from_secs(20);
    while len(&mut c).await < 1 {
        assert!(
            Instant::now() < deadline,
            "the delayed entry was not added in 20 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let entries: Vec<(String, Vec<String>)> = redis::cmd("XRANGE")
        .arg(&["jobs", "-", "+"])
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].1, ["task", "wash", "car", "red"]);
    // Once: the timer is gone, and no second entry comes.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(len(&mut c).await, 1);
    assert_eq!(
        ok(&mut c, &["FIRN.TIMER", "LIST"]).await,
        redis::Value::Array(Vec::new())
    );
    // Refused, and nothing set: a stream of Firn's own, no field, a field without a value.
    for bad in [
        &[
            "FIRN.TIMER",
            "SET",
            "t",
            "IN",
            "1",
            "XADD",
            "_firn/x",
            "f",
            "v",
        ][..],
        &["FIRN.TIMER", "SET", "t", "IN", "1", "XADD", "s"][..],
        &["FIRN.TIMER", "SET", "t", "IN", "1", "XADD", "s", "f"][..],
        &["FIRN.TIMER", "SET", "t", "IN", "1", "SEND", "s"][..],
    ] {
        let e = error_line(&mut c, bad).await;
        assert!(e.starts_with("ERR"), "{bad:?}: {e}");
    }
    assert_eq!(
        ok(&mut c, &["FIRN.TIMER", "LIST"]).await,
        redis::Value::Array(Vec::new())
    );
    node.shutdown().await;
}
