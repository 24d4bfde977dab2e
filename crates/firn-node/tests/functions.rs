//! Functions next to the data, through RESP as a client uses them: the example modules (Go,
//! built here with `examples/functions/build.sh`) loaded, called with FCALL and run by
//! triggers and timers; and modules that misbehave (an endless loop, a huge allocation, a
//! trap, bytes that are not Wasm), each stopped or refused with a clear error while the node
//! goes on serving.

mod common;

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{
    bulk_text, error_line, eventually_reads, function_load, ok, redis_conn_patient,
    start_three_shard_node,
};
use redis::aio::MultiplexedConnection;

/// The example functions, built once per test run (Go's `wasip1` port).
fn examples() -> &'static PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
        let out = std::env::temp_dir().join(format!("firn-functions-{}", std::process::id()));
        let status = std::process::Command::new("bash")
            .arg(root.join("examples/functions/build.sh"))
            .arg(&out)
            .status()
            .expect("bash runs examples/functions/build.sh (Go 1.24 or later must be installed)");
        assert!(status.success(), "building the example functions failed");
        out
    })
}

fn example(name: &str) -> Vec<u8> {
    std::fs::read(examples().join(format!("{name}.wasm"))).expect("the example was built")
}

/// `FIRN.TRIGGER CREATE name ON PREFIX prefix CALL function`.
async fn prefix_trigger(c: &mut MultiplexedConnection, name: &str, prefix: &str, function: &str) {
    ok(
        c,
        &[
            "FIRN.TRIGGER",
            "CREATE",
            name,
            "ON",
            "PREFIX",
            prefix,
            "CALL",
            function,
        ],
    )
    .await;
}

async fn xlen(c: &mut MultiplexedConnection, stream: &str) -> i64 {
    redis::cmd("XLEN").arg(stream).query_async(c).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loaded_function_is_a_versioned_key_and_fcall_runs_it() {
    let node = start_three_shard_node().await;
    let mut c = redis_conn_patient(&node).await;
    let alert = example("threshold-alert");
    assert_eq!(function_load(&mut c, "alert", &alert).await.unwrap(), 1);
    assert_eq!(function_load(&mut c, "alert", &alert).await.unwrap(), 2);
    let info = ok(&mut c, &["FIRN.FUNCTION", "INFO", "alert"]).await;
    let text = format!("{info:?}");
    assert!(text.contains(r#""version"'), int(2)"#), "{text}");
    // The module is the key's value, with the key's history.
    let history = ok(&mut c, &["FIRN.HISTORY", "_firn/fn/alert"]).await;
    assert!(format!("{history:?}").matches("version").count() >= 2);
    // A client may not write Firn's own keys.
    let refused = error_line(&mut c, &["SET", "_firn/fn/alert", "x"]).await;
    assert!(refused.contains("kept by Firn"), "{refused}");

    // Below the threshold (30 by default): nothing; above: an alert entry.
    let _: redis::Value = redis::cmd("FCALL")
        .arg(&["alert", "1", "sensor/1", "12.5"])
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(xlen(&mut c, "alerts").await, 0);
    let _: redis::Value = redis::cmd("FCALL")
        .arg(&["alert", "1", "sensor/1", "31.5"])
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(xlen(&mut c, "alerts").await, 1);
    // The function reads config/threshold: raised, the same reading raises nothing.
    ok(&mut c, &["SET", "config/threshold", "40"]).await;
    let _: redis::Value = redis::cmd("FCALL")
        .arg(&["alert", "1", "sensor/1", "31.5"])
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(xlen(&mut c, "alerts").await, 1);
    // A value that is not a number: the run fails, with the function's own log line.
    let failed = error_line(&mut c, &["FCALL", "alert", "1", "sensor/1", "warm"]).await;
    assert!(
        failed.contains("function failed") && failed.contains("not a number"),
        "{failed}"
    );
    let missing = error_line(&mut c, &["FCALL", "nope", "0"]).await;
    assert!(missing.contains("function not found: nope"), "{missing}");
    ok(&mut c, &["FIRN.FUNCTION", "DELETE", "alert"]).await;
    let gone = error_line(&mut c, &["FCALL", "alert", "1", "sensor/1", "50"]).await;
    assert!(gone.contains("not found"), "{gone}");
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_runs_once_for_each_committed_change_and_reads_at_its_stamp() {
    let node = start_three_shard_node().await;
    let mut c = redis_conn_patient(&node).await;
    function_load(&mut c, "average", &example("rolling-average"))
        .await
        .unwrap();
    prefix_trigger(&mut c, "averages", "sensor/", "average").await;
    // Readings of three devices (on different shards, most likely).
    for (i, v) in ["10", "20", "30", "40", "50", "60"].iter().enumerate() {
        for device in ["a", "b", "c"] {
            ok(&mut c, &["SET", &format!("sensor/{device}"), v]).await;
        }
        let _ = i;
    }
    for device in ["a", "b", "c"] {
        // Six readings, each counted once; the last average is of the last five.
        eventually_reads(&mut c, &format!("count/{device}"), "6").await;
        eventually_reads(&mut c, &format!("avg/{device}"), "40.00").await;
    }
    let info = ok(&mut c, &["FIRN.TRIGGER", "INFO", "averages"]).await;
    assert!(format!("{info:?}").contains("runs"), "{info:?}");
    // Paused, it leaves new readings; resumed, it takes them.
    ok(&mut c, &["FIRN.TRIGGER", "PAUSE", "averages"]).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    ok(&mut c, &["SET", "sensor/a", "100"]).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let count: String = redis::cmd("GET")
        .arg("count/a")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(count, "6", "a paused trigger ran");
    ok(&mut c, &["FIRN.TRIGGER", "RESUME", "averages"]).await;
    eventually_reads(&mut c, "count/a", "7").await;
    ok(&mut c, &["FIRN.TRIGGER", "DROP", "averages"]).await;
    let gone = error_line(&mut c, &["FIRN.TRIGGER", "INFO", "averages"]).await;
    assert!(gone.contains("trigger not found"), "{gone}");
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_input_goes_to_the_dead_letters_and_the_trigger_goes_on() {
    let node = start_three_shard_node().await;
    let mut c = redis_conn_patient(&node).await;
    function_load(&mut c, "alert", &example("threshold-alert"))
        .await
        .unwrap();
    ok(
        &mut c,
        &[
            "FIRN.TRIGGER",
            "CREATE",
            "alerts",
            "ON",
            "PREFIX",
            "sensor/",
            "CALL",
            "alert",
            "RETRIES",
            "1",
            "DEADLETTER",
            "bad-readings",
        ],
    )
    .await;
    ok(&mut c, &["SET", "sensor/x", "warm"]).await;
    ok(&mut c, &["SET", "sensor/x", "35"]).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while xlen(&mut c, "alerts").await < 1 || xlen(&mut c, "bad-readings").await < 1 {
        assert!(
            Instant::now() < deadline,
            "no alert or no dead letter after 20 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let dead = ok(&mut c, &["XRANGE", "bad-readings", "-", "+"]).await;
    let text = format!("{dead:?}");
    assert!(
        text.contains("sensor/x") && text.contains("not a number"),
        "{text}"
    );
    assert_eq!(xlen(&mut c, "alerts").await, 1);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_fires_once() {
    let node = start_three_shard_node().await;
    let mut c = redis_conn_patient(&node).await;
    function_load(&mut c, "alert", &example("threshold-alert"))
        .await
        .unwrap();
    // A timer's run has no key: the example refuses it (a failing timer still goes).
    let counter = wat::parse_str(
        r#"(module
            (import "firn" "incr" (func $incr (param i32 i32 i64) (result i32)))
            (memory (export "memory") 1)
            (data (i32.const 0) "fired")
            (func (export "run") (result i32)
                (drop (call $incr (i32.const 0) (i32.const 5) (i64.const 1)))
                (i32.const 0)))"#,
    )
    .unwrap();
    function_load(&mut c, "count", &counter).await.unwrap();
    ok(
        &mut c,
        &["FIRN.TIMER", "SET", "soon", "IN", "200", "CALL", "count"],
    )
    .await;
    let listed = ok(&mut c, &["FIRN.TIMER", "LIST"]).await;
    assert!(format!("{listed:?}").contains("soon"));
    eventually_reads(&mut c, "fired", "1").await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let fired: String = redis::cmd("GET")
        .arg("fired")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(fired, "1", "the timer fired more than once");
    let listed = ok(&mut c, &["FIRN.TIMER", "LIST"]).await;
    assert!(!format!("{listed:?}").contains("soon"), "{listed:?}");
    // A timer whose function was deleted goes when it is due, without a run.
    ok(
        &mut c,
        &["FIRN.TIMER", "SET", "orphan", "IN", "300", "CALL", "count"],
    )
    .await;
    ok(&mut c, &["FIRN.FUNCTION", "DELETE", "count"]).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while format!("{:?}", ok(&mut c, &["FIRN.TIMER", "LIST"]).await).contains("orphan") {
        assert!(
            Instant::now() < deadline,
            "a timer without its function stays"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let fired: String = redis::cmd("GET")
        .arg("fired")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(fired, "1");
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modules_that_misbehave_are_stopped_or_refused_and_the_node_serves_on() {
    let node = start_three_shard_node().await;
    // An endless loop burns its fuel for a second or so before it is stopped.
    let mut c = common::redis_conn_patient(&node).await;
    let not_wasm = function_load(&mut c, "junk", b"this is not a module")
        .await
        .unwrap_err();
    assert!(
        not_wasm.to_string().contains("not a function module"),
        "{not_wasm}"
    );
    let no_run =
        wat::parse_str(r#"(module (func (export "start") (result i32) (i32.const 0)))"#).unwrap();
    let refused = function_load(&mut c, "norun", &no_run).await.unwrap_err();
    assert!(
        refused.to_string().contains("exports no function `run`"),
        "{refused}"
    );
    let strange_import = wat::parse_str(
        r#"(module (import "env" "system" (func (param i32)))
            (func (export "run") (result i32) (i32.const 0)))"#,
    )
    .unwrap();
    let refused = function_load(&mut c, "env", &strange_import)
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("not a function module"),
        "{refused}"
    );

    let looping = wat::parse_str(
        r#"(module (func (export "run") (result i32) (loop $l (br $l)) (i32.const 0)))"#,
    )
    .unwrap();
    let hungry = wat::parse_str(
        r#"(module (memory (export "memory") 1)
            (func (export "run") (result i32)
                (drop (memory.grow (i32.const 4096)))
                (if (i32.eq (memory.size) (i32.const 1)) (then unreachable))
                (i32.const 0)))"#,
    )
    .unwrap();
    let trapping =
        wat::parse_str(r#"(module (func (export "run") (result i32) unreachable))"#).unwrap();
    for (name, module, says) in [
        ("loop", &looping, "out of fuel"),
        ("hungry", &hungry, "unreachable"),
        ("trap", &trapping, "unreachable"),
    ] {
        function_load(&mut c, name, module).await.unwrap();
        let started = Instant::now();
        let error = common::run(&mut c, &["FCALL", name, "0"])
            .await
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("function failed") && error.contains(says),
            "{name}: {error}"
        );
        assert!(started.elapsed() < Duration::from_secs(30));
        // The connection and the node go on.
        ok(&mut c, &["SET", "still", name]).await;
        let v = ok(&mut c, &["GET", "still"]).await;
        assert_eq!(bulk_text(&v), name);
    }
    node.shutdown().await;
}

/// The versions' values of `key`, oldest first.
async fn values_of(c: &mut MultiplexedConnection, key: &str) -> Vec<String> {
    let history = ok(c, &["FIRN.HISTORY", key]).await;
    let text = format!("{history:?}");
    // Each version is a map holding its value; the values are the readings' averages.
    text.split("bulk-string('\"value\"'), bulk-string('\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_over_history_writes_what_the_live_trigger_wrote() {
    let node = start_three_shard_node().await;
    let mut c = redis_conn_patient(&node).await;
    function_load(&mut c, "average", &example("rolling-average"))
        .await
        .unwrap();
    prefix_trigger(&mut c, "averages", "sensor/", "average").await;
    let from = firn_model::hlc::system_wall_us();
    for v in ["10", "35", "20", "80", "15", "40", "22"] {
        for device in ["a", "b"] {
            ok(&mut c, &["SET", &format!("sensor/{device}"), v]).await;
        }
    }
    eventually_reads(&mut c, "count/a", "7").await;
    eventually_reads(&mut c, "count/b", "7").await;
    let to = firn_model::hlc::system_wall_us();
    ok(
        &mut c,
        &[
            "FIRN.TRIGGER",
            "REPLAY",
            "averages",
            "FROM",
            &from.to_string(),
            "TO",
            &to.to_string(),
            "INTO",
            "replay/",
        ],
    )
    .await;
    eventually_reads(&mut c, "replay/count/a", "7").await;
    eventually_reads(&mut c, "replay/count/b", "7").await;
    for device in ["a", "b"] {
        let live = values_of(&mut c, &format!("avg/{device}")).await;
        let replayed = values_of(&mut c, &format!("replay/avg/{device}")).await;
        assert_eq!(live.len(), 7, "{live:?}");
        assert_eq!(
            replayed, live,
            "the replay of {device} differs from the live run"
        );
    }
    // The replay is a trigger of its own, named after the one it replays.
    let info = ok(&mut c, &["FIRN.TRIGGER", "INFO", "averages~replay"]).await;
    assert!(format!("{info:?}").contains("replay/"), "{info:?}");
    ok(&mut c, &["FIRN.TRIGGER", "DROP", "averages~replay"]).await;
    node.shutdown().await;
}

/// Puts "x" under the key its first argument names (a trigger's: the new value).
const PUT_NAMED: &str = r#"(module
    (import "firn" "arg" (func $arg (param i32 i32 i32) (result i32)))
    (import "firn" "put" (func $put (param i32 i32 i32 i32) (result i32)))
    (memory (export "memory") 1)
    (data (i32.const 0) "x")
    (func (export "run") (result i32)
        (local $n i32)
        (local.set $n (call $arg (i32.const 0) (i32.const 16) (i32.const 1000)))
        (if (i32.lt_s (local.get $n) (i32.const 0)) (then (return (i32.const 1))))
        (drop (call $put (i32.const 16) (local.get $n) (i32.const 0) (i32.const 1)))
        (i32.const 0)))"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_runs_with_its_callers_rights_and_a_trigger_with_its_creators() {
    let users = r#"
        [users.ops]
        password = "ops"
        read = [""]
        write = [""]
        admin = [""]
        [users.dev]
        password = "dev"
        read = ["sensor/", "derived/", "_firn/"]
        write = ["sensor/", "derived/"]
        admin = ["_firn/trigger/"]
    "#;
    let config = firn_node::NodeConfig {
        resp_addr: ([127, 0, 0, 1], 0).into(),
        http_addr: ([127, 0, 0, 1], 0).into(),
        peer_addr: ([127, 0, 0, 1], 0).into(),
        in_memory: true,
        users: Some(std::sync::Arc::new(
            firn_node::auth::Users::parse(users).unwrap(),
        )),
        ..firn_node::NodeConfig::default()
    };
    let node = firn_node::RunningNode::start(config).await.unwrap();
    let conn = |who: &str| {
        redis::Client::open(format!("redis://{who}:{who}@{}/", node.resp_addr)).unwrap()
    };
    let mut ops = conn("ops")
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let mut dev = conn("dev")
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let module = wat::parse_str(PUT_NAMED).unwrap();
    // Loading needs the administrator of _firn/fn/.
    let refused = function_load(&mut dev, "put", &module).await.unwrap_err();
    assert!(
        refused.to_string().to_uppercase().contains("NOPERM"),
        "{refused}"
    );
    function_load(&mut ops, "put", &module).await.unwrap();

    ok(&mut dev, &["FCALL", "put", "0", "derived/a"]).await;
    let refused = common::run(&mut dev, &["FCALL", "put", "0", "secret/a"])
        .await
        .unwrap_err();
    assert!(
        refused.to_string().to_uppercase().contains("NOPERM"),
        "{refused}"
    );
    let secret = ok(&mut ops, &["EXISTS", "secret/a"]).await;
    assert_eq!(secret, redis::Value::Int(0), "a refused run wrote");
    // ops may write anywhere, and so may its calls.
    ok(&mut ops, &["FCALL", "put", "0", "secret/b"]).await;

    // dev's trigger writes what dev may, and sends the rest to its dead letters.
    ok(
        &mut dev,
        &[
            "FIRN.TRIGGER",
            "CREATE",
            "puts",
            "ON",
            "PREFIX",
            "sensor/",
            "CALL",
            "put",
        ],
    )
    .await;
    ok(&mut dev, &["SET", "sensor/1", "secret/t"]).await;
    ok(&mut dev, &["SET", "sensor/2", "derived/t"]).await;
    eventually_reads(&mut dev, "derived/t", "x").await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while xlen(&mut ops, "_firn/deadletter/puts").await < 1 {
        assert!(
            Instant::now() < deadline,
            "no dead letter for the refused write"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let secret = ok(&mut ops, &["EXISTS", "secret/t"]).await;
    assert_eq!(
        secret,
        redis::Value::Int(0),
        "the trigger wrote beyond its creator's rights"
    );
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_value_as_input_goes_to_the_dead_letters_with_its_reason() {
    let node = start_three_shard_node().await;
    let mut c = redis_conn_patient(&node).await;
    let module = wat::parse_str(PUT_NAMED).unwrap();
    function_load(&mut c, "put", &module).await.unwrap();
    ok(
        &mut c,
        &[
            "FIRN.TRIGGER",
            "CREATE",
            "big",
            "ON",
            "PREFIX",
            "in/",
            "CALL",
            "put",
            "RETRIES",
            "0",
        ],
    )
    .await;
    // Above the inline limit (1 MiB): kept beside the log, not given to a run.
    let large = "x".repeat(2 << 20);
    ok(&mut c, &["SET", "in/large", &large]).await;
    ok(&mut c, &["SET", "in/small", "out/small"]).await;
    eventually_reads(&mut c, "out/small", "x").await;
    // The two may be on different shards, whose rounds go their own pace.
    let deadline = Instant::now() + Duration::from_secs(20);
    while xlen(&mut c, "_firn/deadletter/big").await < 1 {
        assert!(Instant::now() < deadline, "no dead letter after 20 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let dead = ok(&mut c, &["XRANGE", "_firn/deadletter/big", "-", "+"]).await;
    let text = format!("{dead:?}");
    assert!(
        text.contains("in/large") && text.contains("large value"),
        "{text}"
    );
    node.shutdown().await;
}

/// The payloads of the records of `tag` in `log`, oldest first (none while the log is not
/// known yet).
async fn log_payloads(c: &mut MultiplexedConnection, log: &str, tag: &str) -> Vec<String> {
    let range = ["FIRN.LOG", "RANGE", log, tag, "-", "+", "LIMIT", "1000"];
    match common::run(c, &range).await {
        Err(e) if e.code() == Some("NOLOG") => Vec::new(),
        Err(e) => panic!("{range:?}: {e}"),
        Ok(redis::Value::Array(records)) => records
            .iter()
            .map(|r| match r {
                redis::Value::Array(parts) => bulk_text(&parts[2]),
                other => panic!("not a record: {other:?}"),
            })
            .collect(),
        Ok(other) => panic!("not an array: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fan_out_appends_each_input_once_to_its_log_tag() {
    let node = start_three_shard_node().await;
    let mut c = redis_conn_patient(&node).await;
    function_load(&mut c, "fanout", &example("fan-out"))
        .await
        .unwrap();
    prefix_trigger(&mut c, "orders", "orders/", "fanout").await;
    // Orders whose keys are on every shard, for two regions.
    let mut want: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
    for i in 0..24 {
        let region = if i % 3 == 0 { "us" } else { "eu" };
        let order = format!(r#"{{"region":"{region}","item":"i{i}"}}"#);
        ok(&mut c, &["SET", &format!("orders/{i}"), &order]).await;
        want.entry(region).or_default().push(order);
    }
    for (region, orders) in &want {
        let tag = format!("region:{region}");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let mut got = log_payloads(&mut c, "orders", &tag).await;
            if got.len() >= orders.len() || Instant::now() > deadline {
                // Each order once (the order of records follows the commits, not the puts).
                got.sort();
                let mut orders = orders.clone();
                orders.sort();
                assert_eq!(got, orders, "the records of {tag}");
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // Called directly, the record commits with the call.
    let _: redis::Value = redis::cmd("FCALL")
        .arg("fanout")
        .arg(1)
        .arg("orders/direct")
        .arg(r#"{"region":"ap","item":"x"}"#)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(
        log_payloads(&mut c, "orders", "region:ap").await,
        [r#"{"region":"ap","item":"x"}"#]
    );
    // Nothing more arrives later: every input was appended exactly once.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        log_payloads(&mut c, "orders", "region:eu").await.len(),
        want["eu"].len()
    );
    node.shutdown().await;
}
