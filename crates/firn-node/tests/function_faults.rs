//! A function's read that the store cannot answer (the `function-read` fault point, as when a
//! shard's leader is unreachable) is not the function's failure: a timer stays and fires at
//! its next look, a trigger's round is made again — each with its writes, once. Alone in its
//! test binary: fault points are set for the whole process.

mod common;

use std::time::{Duration, Instant};

use common::{eventually_reads, function_load, ok, redis_conn, start_three_shard_node};

/// `incr("n/" + its first argument, 1)`: an incr reads the key's value first.
const COUNT: &str = r#"(module
    (import "firn" "arg" (func $arg (param i32 i32 i32) (result i32)))
    (import "firn" "incr" (func $incr (param i32 i32 i64) (result i32)))
    (memory (export "memory") 1)
    (data (i32.const 0) "n/")
    (func (export "run") (result i32)
        (local $n i32)
        (local.set $n (call $arg (i32.const 0) (i32.const 2) (i32.const 4000)))
        (if (i32.lt_s (local.get $n) (i32.const 0)) (then (return (i32.const 1))))
        (if (i32.lt_s (call $incr (i32.const 0) (i32.add (local.get $n) (i32.const 2)) (i64.const 1))
                      (i32.const 0))
            (then (return (i32.const 1))))
        (i32.const 0)))"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_the_store_cannot_answer_is_tried_again_not_dropped() {
    let node = start_three_shard_node().await;
    let mut c = redis_conn(&node).await;
    let module = wat::parse_str(COUNT).unwrap();
    function_load(&mut c, "count", &module).await.unwrap();

    // A timer whose first run's read fails: it fires later, with its write.
    fail::cfg("function-read", "1*return").unwrap();
    ok(
        &mut c,
        &[
            "FIRN.TIMER",
            "SET",
            "t",
            "IN",
            "50",
            "CALL",
            "count",
            "PAYLOAD",
            "timer",
        ],
    )
    .await;
    eventually_reads(&mut c, "n/timer", "1").await;

    // A trigger whose first input's read fails: the round is made again, not dead-lettered.
    ok(
        &mut c,
        &[
            "FIRN.TRIGGER",
            "CREATE",
            "counts",
            "ON",
            "PREFIX",
            "in/",
            "CALL",
            "count",
        ],
    )
    .await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    fail::cfg("function-read", "1*return").unwrap();
    ok(&mut c, &["SET", "in/a", "a"]).await;
    eventually_reads(&mut c, "n/a", "1").await;
    fail::remove("function-read");

    // Each once: nothing more comes, and nothing went to the dead letters.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (timer, input): (String, String) = redis::cmd("MGET")
        .arg(&["n/timer", "n/a"])
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!((timer.as_str(), input.as_str()), ("1", "1"));
    let dead: i64 = redis::cmd("XLEN")
        .arg("_firn/deadletter/counts")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(dead, 0);
    let deadline = Instant::now() + Duration::from_secs(5);
    while ok(&mut c, &["FIRN.TIMER", "LIST"]).await != redis::Value::Array(Vec::new()) {
        assert!(Instant::now() < deadline, "the fired timer is still listed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    node.shutdown().await;
}
