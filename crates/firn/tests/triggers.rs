//! A trigger's effects happen once per input through kill -9 of the leaders that run it: a
//! trigger counts each key written under `in/` into `seen/<key>` and appends the key to the
//! log `seen` under the tag `all`, writers put keys on every shard while the leader of each
//! shard is killed and restarted in turn, and at the end every input key is counted exactly
//! once and appended exactly once (none missed, none doubled) and nothing else is. And a
//! timer set before its shard's leader is killed fires once.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::Cluster;

type Shared = Arc<std::sync::Mutex<Cluster>>;

/// On each put, `incr("seen/" + key, 1)` — a count of the runs whose effects committed —
/// and `log_append("seen", ["all"], key)`, in the run's one transaction.
const COUNTER: &str = r#"(module
    (import "firn" "kind" (func $kind (result i32)))
    (import "firn" "key" (func $key (param i32 i32 i32) (result i32)))
    (import "firn" "incr" (func $incr (param i32 i32 i64) (result i32)))
    (import "firn" "log_append" (func $append (param i32 i32 i32 i32 i32 i32) (result i32)))
    (memory (export "memory") 1)
    (data (i32.const 0) "seen/")
    (data (i32.const 8000) "seen")
    (data (i32.const 8010) "\03\00\00\00all")
    (func (export "run") (result i32)
        (local $n i32)
        (if (i32.ne (call $kind) (i32.const 1)) (then (return (i32.const 0))))
        (local.set $n (call $key (i32.const 0) (i32.const 5) (i32.const 4000)))
        (if (i32.lt_s (call $incr (i32.const 0) (i32.add (local.get $n) (i32.const 5)) (i64.const 1))
                      (i32.const 0))
            (then (return (i32.const 1))))
        (if (i32.lt_s (call $append (i32.const 8000) (i32.const 4) (i32.const 8010) (i32.const 7)
                                    (i32.const 5) (local.get $n))
                      (i32.const 0))
            (then (return (i32.const 1))))
        (i32.const 0)))"#;

async fn connect(addr: &str) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    let config =
        redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(20)));
    redis::Client::open(format!("redis://{addr}/"))?
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

/// A command sent to the nodes in turn until one answers it (a write sent again is a SET of
/// the same value, or of a definition that compares before it writes).
async fn settled(addrs: &[String], cmd: &redis::Cmd) -> redis::Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = String::new();
    for i in 0.. {
        assert!(Instant::now() < deadline, "no node took {cmd:?}: {last}");
        let addr = &addrs[i % addrs.len()];
        match connect(addr).await {
            Ok(mut c) => match cmd.query_async::<redis::Value>(&mut c).await {
                Ok(v) => return v,
                Err(e) => last = e.to_string(),
            },
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    unreachable!()
}

/// Every key under `prefix`, through SCAN.
async fn keys(addrs: &[String], prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut cursor = "0".to_string();
    loop {
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(&cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(1000);
        let redis::Value::Array(reply) = settled(addrs, &cmd).await else {
            panic!("SCAN answered no array")
        };
        let next: String = redis::from_redis_value(reply[0].clone()).unwrap();
        let found: Vec<String> = redis::from_redis_value(reply[1].clone()).unwrap();
        out.extend(found);
        if next == "0" {
            return out;
        }
        cursor = next;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_counts_every_input_once_through_leader_kills() {
    let cluster = Cluster::ready(3, &[]).await;
    let addrs: Vec<String> = (0..3).map(|i| cluster.resp_addr(i)).collect();
    let cluster: Shared = Arc::new(std::sync::Mutex::new(cluster));
    let module = wat::parse_str(COUNTER).unwrap();
    settled(
        &addrs,
        redis::cmd("FIRN.FUNCTION")
            .arg("LOAD")
            .arg("count")
            .arg(module),
    )
    .await;
    settled(
        &addrs,
        redis::cmd("FIRN.TRIGGER").arg(&[
            "CREATE", "counts", "ON", "PREFIX", "in/", "CALL", "count", "FROM", "0",
        ]),
    )
    .await;

    // Writers on every node (their keys land on every shard), until the kills are over.
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let (addrs, stop) = (addrs.clone(), stop.clone());
            tokio::spawn(async move {
                let mut attempted = 0usize;
                let mut conn = None;
                while !stop.load(Ordering::Relaxed) {
                    let addr = &addrs[(w + attempted) % addrs.len()];
                    if conn.is_none() {
                        conn = connect(addr).await.ok();
                    }
                    let Some(c) = conn.as_mut() else {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    };
                    let key = format!("in/{w}-{attempted}");
                    attempted += 1;
                    let set: redis::RedisResult<()> =
                        redis::cmd("SET").arg(&key).arg("1").query_async(c).await;
                    if set.is_err() {
                        conn = None;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                attempted
            })
        })
        .collect();
    common::kill_leaders(
        cluster.clone(),
        vec![0, 1, 2],
        Duration::from_secs(2),
        Duration::from_secs(1),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    let mut attempted = 0;
    for w in writers {
        attempted += w.await.unwrap();
    }

    // The inputs are the keys that exist (a write answered with an error may have applied).
    let inputs = keys(&addrs, "in/").await;
    assert!(
        inputs.len() >= 100,
        "only {} of {attempted} writes applied",
        inputs.len()
    );
    let want: BTreeSet<String> = inputs.iter().map(|k| format!("seen/{k}")).collect();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let seen = keys(&addrs, "seen/").await;
        assert!(
            seen.is_subset(&want),
            "counted keys that were never written: {:?}",
            seen.difference(&want).take(5).collect::<Vec<_>>()
        );
        if seen == want {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {} inputs counted 90 s after the writes",
            seen.len(),
            want.len()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Once caught up, a while more: a doubled run would show as a count of 2.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let want: Vec<String> = want.into_iter().collect();
    for chunk in want.chunks(500) {
        let counts = settled(&addrs, redis::cmd("MGET").arg(chunk)).await;
        let counts: Vec<Option<String>> = redis::from_redis_value(counts).unwrap();
        for (key, count) in chunk.iter().zip(counts) {
            assert_eq!(count.as_deref(), Some("1"), "{key} counted {count:?} times");
        }
    }
    // And appended once each: the log's tag holds every input key exactly once.
    let range = redis::cmd("FIRN.LOG")
        .arg(&["RANGE", "seen", "all", "-", "+", "LIMIT", "10000"])
        .clone();
    let redis::Value::Array(records) = settled(&addrs, &range).await else {
        panic!("FIRN.LOG RANGE answered no array")
    };
    let mut appended: Vec<String> = records
        .iter()
        .map(|r| match r {
            redis::Value::Array(parts) => redis::from_redis_value(parts[2].clone()).unwrap(),
            other => panic!("not a record: {other:?}"),
        })
        .collect();
    appended.sort();
    let inputs: Vec<String> = inputs.into_iter().collect();
    assert_eq!(
        appended.len(),
        inputs.len(),
        "{} records for {} inputs",
        appended.len(),
        inputs.len()
    );
    assert_eq!(
        appended, inputs,
        "the records are not the inputs, once each"
    );
    eprintln!(
        "{} inputs of {attempted} writes, each counted once and appended once",
        want.len()
    );
}

/// On each firing, `incr("fired/" + payload, 1)`.
const FIRED: &str = r#"(module
    (import "firn" "arg" (func $arg (param i32 i32 i32) (result i32)))
    (import "firn" "incr" (func $incr (param i32 i32 i64) (result i32)))
    (memory (export "memory") 1)
    (data (i32.const 0) "fired/")
    (func (export "run") (result i32)
        (local $n i32)
        (local.set $n (call $arg (i32.const 0) (i32.const 6) (i32.const 4000)))
        (if (i32.lt_s (call $incr (i32.const 0) (i32.add (local.get $n) (i32.const 6)) (i64.const 1))
                      (i32.const 0))
            (then (return (i32.const 1))))
        (i32.const 0)))"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_fire_once_through_leader_kills() {
    let cluster = Cluster::ready(3, &[]).await;
    let addrs: Vec<String> = (0..3).map(|i| cluster.resp_addr(i)).collect();
    let cluster: Shared = Arc::new(std::sync::Mutex::new(cluster));
    let module = wat::parse_str(FIRED).unwrap();
    settled(
        &addrs,
        redis::cmd("FIRN.FUNCTION")
            .arg("LOAD")
            .arg("fired")
            .arg(module),
    )
    .await;
    // Timers due while the leaders are killed one after another (over about 9 s).
    let timers: Vec<String> = (0..12).map(|i| format!("t{i}")).collect();
    for (i, name) in timers.iter().enumerate() {
        let in_ms = (1_000 + 700 * i).to_string();
        settled(
            &addrs,
            redis::cmd("FIRN.TIMER")
                .arg(&["SET", name, "IN", &in_ms, "CALL", "fired", "PAYLOAD", name]),
        )
        .await;
    }
    common::kill_leaders(
        cluster.clone(),
        vec![0, 1, 2],
        Duration::from_secs(2),
        Duration::from_secs(1),
    )
    .await;
    let want: Vec<String> = timers.iter().map(|t| format!("fired/{t}")).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let counts = settled(&addrs, redis::cmd("MGET").arg(&want)).await;
        let counts: Vec<Option<String>> = redis::from_redis_value(counts).unwrap();
        for (key, count) in want.iter().zip(&counts) {
            assert!(
                matches!(count.as_deref(), None | Some("1")),
                "{key} fired {count:?} times"
            );
        }
        if counts.iter().all(|c| c.is_some()) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "timers still not fired: {counts:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let listed = settled(&addrs, redis::cmd("FIRN.TIMER").arg("LIST")).await;
    assert_eq!(listed, redis::Value::Array(vec![]), "fired timers are gone");
}
