//! A function written in AssemblyScript with the SDK in `sdk/assemblyscript`: the
//! threshold-alert example, built here with npm and its `build.sh`, loads (it imports nothing
//! but `firn`), answers FCALL as the Go example does, and run by a trigger appends its alerts
//! and sends a reading that is not a number to the dead letters.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{error_line, function_load, ok, redis_conn, start_three_shard_node};
use redis::aio::MultiplexedConnection;

/// The example module, built once per test run; `None` when npm is not installed.
fn threshold_alert() -> Option<&'static [u8]> {
    static BUILT: OnceLock<Option<Vec<u8>>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            if Command::new("npm").arg("--version").output().is_err() {
                eprintln!(
                    "skipping: npm is not on the PATH, and the AssemblyScript example needs it"
                );
                return None;
            }
            let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../examples/functions/assemblyscript/threshold-alert/build.sh");
            let out =
                std::env::temp_dir().join(format!("firn-functions-as-{}", std::process::id()));
            let built = Command::new("bash")
                .arg(&script)
                .arg(&out)
                .output()
                .expect("bash runs the example's build.sh");
            assert!(
                built.status.success(),
                "building the AssemblyScript example failed:\n{}{}",
                String::from_utf8_lossy(&built.stdout),
                String::from_utf8_lossy(&built.stderr)
            );
            let module = std::fs::read(out.join("threshold-alert.wasm")).expect("it was built");
            let _ = std::fs::remove_dir_all(&out);
            Some(module)
        })
        .as_deref()
}

async fn load(c: &mut MultiplexedConnection, name: &str, module: &[u8]) -> i64 {
    function_load(c, name, module)
        .await
        .unwrap_or_else(|e| panic!("loading {name}: {e}"))
}

async fn xlen(c: &mut MultiplexedConnection, stream: &str) -> i64 {
    redis::cmd("XLEN").arg(stream).query_async(c).await.unwrap()
}

/// Waits until each stream holds `want` entries (or the deadline).
async fn until_lengths(c: &mut MultiplexedConnection, want: &[(&str, i64)]) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut got = Vec::new();
        for (stream, _) in want {
            got.push(xlen(c, stream).await);
        }
        if want.iter().zip(&got).all(|((_, w), g)| w == g) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "streams {want:?} hold {got:?}, 20 s on"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_assemblyscript_threshold_alert_answers_fcall_as_the_go_one_does() {
    let Some(module) = threshold_alert() else {
        return;
    };
    assert!(
        module.len() < 64 << 10,
        "the module is {} bytes; an AssemblyScript function is a few KB",
        module.len()
    );
    let node = start_three_shard_node().await;
    let mut c = redis_conn(&node).await;
    assert_eq!(load(&mut c, "alert", module).await, 1);

    // Below the threshold (30 by default): nothing, and no reply.
    let below = ok(&mut c, &["FCALL", "alert", "1", "sensor/1", "12.5"]).await;
    assert_eq!(below, redis::Value::Nil);
    assert_eq!(xlen(&mut c, "alerts").await, 0);
    // Above: one entry, its fields the reading's key and its text as sent (trimmed).
    ok(&mut c, &["FCALL", "alert", "1", "sensor/1", " 31.5 "]).await;
    assert_eq!(xlen(&mut c, "alerts").await, 1);
    let entries = ok(&mut c, &["XRANGE", "alerts", "-", "+"]).await;
    let text = format!("{entries:?}");
    for field in ["sensor", "sensor/1", "value", "31.5"] {
        assert!(text.contains(&format!("\"{field}\"")), "{text}");
    }
    assert!(!text.contains(" 31.5"), "the value was not trimmed: {text}");
    // The function reads config/threshold: raised, the same reading raises nothing.
    ok(&mut c, &["SET", "config/threshold", "40"]).await;
    ok(&mut c, &["FCALL", "alert", "1", "sensor/1", "31.5"]).await;
    assert_eq!(xlen(&mut c, "alerts").await, 1);
    ok(&mut c, &["FCALL", "alert", "1", "sensor/1", "4e1"]).await;
    assert_eq!(xlen(&mut c, "alerts").await, 1, "40 is not above 40");
    ok(&mut c, &["FCALL", "alert", "1", "sensor/1", "40.5"]).await;
    assert_eq!(xlen(&mut c, "alerts").await, 2);

    // Not a number (nor one with a tail, which parseFloat alone would take): the run fails
    // with the function's own log line, and writes nothing.
    for reading in ["warm", "41abc", ""] {
        let failed = error_line(&mut c, &["FCALL", "alert", "1", "sensor/1", reading]).await;
        assert!(
            failed.contains("function failed") && failed.contains("not a number"),
            "{reading:?}: {failed}"
        );
    }
    // A call without its one key and one value is refused by the function, not trapped on.
    let bare = error_line(&mut c, &["FCALL", "alert", "0"]).await;
    assert!(
        bare.contains("function failed") && bare.contains("wants one key and one value"),
        "{bare}"
    );
    assert_eq!(xlen(&mut c, "alerts").await, 2);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_runs_the_assemblyscript_function_for_each_reading() {
    let Some(module) = threshold_alert() else {
        return;
    };
    let node = start_three_shard_node().await;
    let mut c = redis_conn(&node).await;
    load(&mut c, "alert", module).await;
    let create =
        "FIRN.TRIGGER CREATE alerts ON PREFIX sensor/ CALL alert RETRIES 1 DEADLETTER bad-readings";
    ok(&mut c, &create.split(' ').collect::<Vec<_>>()).await;
    ok(&mut c, &["SET", "sensor/a", "12"]).await;
    ok(&mut c, &["SET", "sensor/x", "warm"]).await;
    ok(&mut c, &["SET", "sensor/b", "35"]).await;
    ok(&mut c, &["DEL", "sensor/b"]).await; // a delete raises nothing, and does not fail
    ok(&mut c, &["SET", "sensor/c", "99.9"]).await;
    until_lengths(&mut c, &[("alerts", 2), ("bad-readings", 1)]).await;

    let alerts = format!("{:?}", ok(&mut c, &["XRANGE", "alerts", "-", "+"]).await);
    assert!(
        alerts.contains("\"sensor/b\"") && alerts.contains("\"35\""),
        "{alerts}"
    );
    assert!(
        alerts.contains("\"sensor/c\"") && alerts.contains("\"99.9\""),
        "{alerts}"
    );
    assert!(!alerts.contains("sensor/a"), "{alerts}");
    let dead = format!(
        "{:?}",
        ok(&mut c, &["XRANGE", "bad-readings", "-", "+"]).await
    );
    assert!(
        dead.contains("sensor/x") && dead.contains("not a number"),
        "{dead}"
    );
    // Nothing more arrives: each input ran once.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(xlen(&mut c, "alerts").await, 2);
    assert_eq!(xlen(&mut c, "bad-readings").await, 1);
    node.shutdown().await;
}
