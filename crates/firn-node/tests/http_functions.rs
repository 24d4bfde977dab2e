//! Functions next to the data over HTTP (`/v1/functions`, `/v1/triggers`, `/v1/timers`),
//! with small modules written in WAT: a module loaded with a PUT of its bytes, listed,
//! called with keys and arguments as JSON, and refused or failing with the status a client
//! can act on; a trigger and a timer made over HTTP, seen running.

mod common;

use std::time::{Duration, Instant};

use common::http::{agent, call, put_bytes};
use common::start_three_shard_node;
use serde_json::{Value as Json, json};

/// Puts its first argument under its first key and replies with it.
const ECHO: &str = include_str!("../../../tests/fixtures/functions/echo.wat");

/// Replies two bytes that are not UTF-8.
const BINARY: &str = r#"(module
    (import "firn" "reply" (func $reply (param i32 i32)))
    (memory (export "memory") 1)
    (data (i32.const 0) "\ff\fe")
    (func (export "run") (result i32) (call $reply (i32.const 0) (i32.const 2)) (i32.const 0)))"#;

const TRAP: &str = r#"(module (func (export "run") (result i32) unreachable))"#;

/// A trigger's function: a put of `in/X` is copied to `out/X`.
const COPY: &str = include_str!("../../../tests/fixtures/functions/copy.wat");

/// A timer's function: its payload (its one argument) goes to `rang`.
const RING: &str = r#"(module
    (import "firn" "arg" (func $arg (param i32 i32 i32) (result i32)))
    (import "firn" "put" (func $put (param i32 i32 i32 i32) (result i32)))
    (memory (export "memory") 1)
    (data (i32.const 0) "rang")
    (func (export "run") (result i32)
        (local $pl i32)
        (local.set $pl (call $arg (i32.const 0) (i32.const 64) (i32.const 1024)))
        (if (i32.lt_s (local.get $pl) (i32.const 0)) (then (return (i32.const 1))))
        (call $put (i32.const 0) (i32.const 4) (i32.const 64) (local.get $pl))))"#;

fn wasm(wat: &str) -> Vec<u8> {
    wat::parse_str(wat).expect("the module is valid WAT")
}

/// Loads `wat` as the function `name`: status and answer.
async fn load(base: &str, name: &str, wat: &str) -> (u16, Json) {
    put_bytes(format!("{base}/v1/functions/{name}"), wasm(wat)).await
}

/// A JSON request off the async runtime's threads: status and answer.
async fn send(method: &'static str, url: String, body: Option<Json>) -> (u16, Json) {
    tokio::task::spawn_blocking(move || call(agent().request(method, &url), body))
        .await
        .unwrap()
}

/// The value of `key` as text (none while it has none).
async fn value(base: &str, key: &str) -> Option<String> {
    let url = format!("{base}/v1/kv/{key}");
    tokio::task::spawn_blocking(move || match agent().get(&url).call() {
        Ok(r) => Some(r.into_string().unwrap()),
        Err(ureq::Error::Status(404, _)) => None,
        Err(e) => panic!("GET {url}: {e}"),
    })
    .await
    .unwrap()
}

/// Polls `key` until it reads `want` (at most 20 s).
async fn eventually(base: &str, key: &str, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = value(base, key).await;
        if got.as_deref() == Some(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{key} reads {got:?}, not {want:?}, 20 s on"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_is_loaded_listed_called_and_deleted_over_http_with_clear_errors() {
    let node = start_three_shard_node().await;
    let base = format!("http://{}", node.http_addr);

    let (code, loaded) = load(&base, "echo", ECHO).await;
    assert_eq!(code, 201, "{loaded}");
    assert_eq!(loaded["name"], "echo");
    assert_eq!(loaded["version"], 1);
    assert_eq!(loaded["module_bytes"], wasm(ECHO).len());
    assert!(loaded["loaded_us"].as_u64().unwrap() > 0, "{loaded}");
    // Loaded again: the next version.
    let (code, again) = load(&base, "echo", ECHO).await;
    assert_eq!((code, &again["version"]), (201, &json!(2)), "{again}");

    let (code, list) = send("GET", format!("{base}/v1/functions"), None).await;
    assert_eq!(code, 200, "{list}");
    assert_eq!(list["functions"], json!([again]));
    let (code, info) = send("GET", format!("{base}/v1/functions/echo"), None).await;
    assert_eq!((code, &info), (200, &again));

    // A call's keys and arguments; its writes commit; its reply is the answer.
    let body = json!({ "keys": ["greeting/1"], "args": ["hello"] });
    let (code, called) = send("POST", format!("{base}/v1/functions/echo/call"), Some(body)).await;
    assert_eq!((code, called), (200, json!({ "reply": "hello" })));
    assert_eq!(value(&base, "greeting/1").await.as_deref(), Some("hello"));
    // Without keys or arguments the run fails (it returns 1): 422, nothing written.
    let (code, failed) = send(
        "POST",
        format!("{base}/v1/functions/echo/call"),
        Some(json!({})),
    )
    .await;
    assert_eq!(code, 422, "{failed}");
    assert!(
        failed["message"]
            .as_str()
            .unwrap()
            .starts_with("function failed"),
        "{failed}"
    );
    // A reply that is not UTF-8 comes in base64.
    assert_eq!(load(&base, "binary", BINARY).await.0, 201);
    let (code, called) = send(
        "POST",
        format!("{base}/v1/functions/binary/call"),
        Some(json!({})),
    )
    .await;
    assert_eq!((code, called), (200, json!({ "reply_base64": "//4=" })));

    // Refusals: not a module (400, saying why), an unknown function (404), a trap (422).
    let (code, refused) = put_bytes(
        format!("{base}/v1/functions/junk"),
        b"this is not a module".to_vec(),
    )
    .await;
    assert_eq!(code, 400, "{refused}");
    assert_eq!(refused["error"], "ERR");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("not a function module"),
        "{refused}"
    );
    let (code, missing) = send(
        "POST",
        format!("{base}/v1/functions/nope/call"),
        Some(json!({})),
    )
    .await;
    assert_eq!(code, 404, "{missing}");
    assert_eq!(missing["message"], "function not found: nope");
    assert_eq!(load(&base, "trap", TRAP).await.0, 201);
    let (code, trapped) = send(
        "POST",
        format!("{base}/v1/functions/trap/call"),
        Some(json!({})),
    )
    .await;
    assert_eq!(code, 422, "{trapped}");
    assert!(
        trapped["message"].as_str().unwrap().contains("unreachable"),
        "{trapped}"
    );
    // A body it does not take, and a name no function can have: 400.
    let (code, bad) = send(
        "POST",
        format!("{base}/v1/functions/echo/call"),
        Some(json!({ "key": ["k"] })),
    )
    .await;
    assert_eq!(code, 400, "{bad}");
    assert!(
        bad["message"].as_str().unwrap().contains("unknown field"),
        "{bad}"
    );
    let (code, bad) = load(&base, "a%20b", ECHO).await;
    assert_eq!(code, 400, "{bad}");

    let (code, deleted) = send("DELETE", format!("{base}/v1/functions/echo"), None).await;
    assert_eq!((code, deleted), (200, json!({ "deleted": true })));
    let (code, gone) = send("GET", format!("{base}/v1/functions/echo"), None).await;
    assert_eq!(
        (code, &gone["message"]),
        (404, &json!("function not found: echo"))
    );
    let (code, _) = send("DELETE", format!("{base}/v1/functions/echo"), None).await;
    assert_eq!(code, 404);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_and_a_timer_made_over_http_run() {
    let node = start_three_shard_node().await;
    let base = format!("http://{}", node.http_addr);
    assert_eq!(load(&base, "copy", COPY).await.0, 201);
    assert_eq!(load(&base, "ring", RING).await.0, 201);

    let trigger = json!({ "name": "copier", "prefix": "in/", "function": "copy", "retries": 1 });
    let (code, created) = send("POST", format!("{base}/v1/triggers"), Some(trigger.clone())).await;
    assert_eq!((code, created), (201, json!({ "created": true })));
    let (code, exists) = send("POST", format!("{base}/v1/triggers"), Some(trigger)).await;
    assert_eq!(code, 400, "{exists}");
    for key in ["in/a", "in/b", "in/c"] {
        let (code, _) = put_bytes(format!("{base}/v1/kv/{key}"), key.as_bytes().to_vec()).await;
        assert_eq!(code, 200);
    }
    for key in ["a", "b", "c"] {
        eventually(&base, &format!("out/{key}"), &format!("in/{key}")).await;
    }
    let (code, info) = send("GET", format!("{base}/v1/triggers/copier"), None).await;
    assert_eq!(code, 200, "{info}");
    for (field, want) in [
        ("name", json!("copier")),
        ("prefix", json!("in/")),
        ("function", json!("copy")),
        ("version", json!(null)),
        ("from", json!("now")),
        ("retries", json!(1)),
        ("deadletter", json!("_firn/deadletter/copier")),
        ("paused", json!(false)),
        ("errors", json!(0)),
        ("last_error", json!(null)),
    ] {
        assert_eq!(info[field], want, "{field} in {info}");
    }
    assert!(info["runs"].as_u64().unwrap() >= 3, "{info}");
    let (code, list) = send("GET", format!("{base}/v1/triggers"), None).await;
    assert_eq!(code, 200, "{list}");
    assert_eq!(list["triggers"].as_array().unwrap().len(), 1, "{list}");

    // Paused, it leaves a new put; resumed, it copies it.
    let (code, paused) = send("POST", format!("{base}/v1/triggers/copier/pause"), None).await;
    assert_eq!((code, paused), (200, json!({ "paused": true })));
    let (_, info) = send("GET", format!("{base}/v1/triggers/copier"), None).await;
    assert_eq!(info["paused"], true);
    tokio::time::sleep(Duration::from_millis(500)).await;
    put_bytes(format!("{base}/v1/kv/in/d"), b"later".to_vec()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(value(&base, "out/d").await, None, "a paused trigger ran");
    let (code, resumed) = send("POST", format!("{base}/v1/triggers/copier/resume"), None).await;
    assert_eq!((code, resumed), (200, json!({ "paused": false })));
    eventually(&base, "out/d", "later").await;

    // A replay over the last hour: a trigger of its own, named after this one.
    let now = firn_model::hlc::system_wall_us();
    let replay = json!({ "from": (now - 3_600_000_000).to_string(), "to": now.to_string(), "into": "again/" });
    let (code, started) = send(
        "POST",
        format!("{base}/v1/triggers/copier/replay"),
        Some(replay),
    )
    .await;
    assert_eq!(
        (code, &started),
        (201, &json!({ "replay": "copier~replay" }))
    );
    let (code, _) = send("GET", format!("{base}/v1/triggers/copier~replay"), None).await;
    assert_eq!(code, 200);
    let backwards = json!({ "from": now.to_string(), "to": "0", "into": "again/" });
    let (code, refused) = send(
        "POST",
        format!("{base}/v1/triggers/copier/replay"),
        Some(backwards),
    )
    .await;
    assert_eq!(code, 400, "{refused}");
    let (code, _) = send("DELETE", format!("{base}/v1/triggers/copier~replay"), None).await;
    assert_eq!(code, 200);
    let (code, dropped) = send("DELETE", format!("{base}/v1/triggers/copier"), None).await;
    assert_eq!((code, dropped), (200, json!({ "deleted": true })));
    let (code, gone) = send("GET", format!("{base}/v1/triggers/copier"), None).await;
    assert_eq!(
        (code, &gone["message"]),
        (404, &json!("trigger not found: copier"))
    );
    // A trigger of a function that is not there, and one whose `from` is no time.
    let (code, missing) = send(
        "POST",
        format!("{base}/v1/triggers"),
        Some(json!({ "name": "t", "prefix": "in/", "function": "nope" })),
    )
    .await;
    assert_eq!(code, 404, "{missing}");
    let (code, bad) = send(
        "POST",
        format!("{base}/v1/triggers"),
        Some(json!({ "name": "t", "prefix": "in/", "function": "copy", "from": "soon" })),
    )
    .await;
    assert_eq!(code, 400, "{bad}");
    // Two inputs at once, or none, are refused; a stream is one.
    for body in [
        json!({ "name": "t", "prefix": "in/", "stream": "s", "function": "copy" }),
        json!({ "name": "t", "log": "l", "function": "copy" }),
        json!({ "name": "t", "function": "copy" }),
    ] {
        let (code, refused) = send("POST", format!("{base}/v1/triggers"), Some(body)).await;
        assert_eq!(code, 400, "{refused}");
        assert!(
            refused["message"]
                .as_str()
                .unwrap()
                .contains("exactly one of"),
            "{refused}"
        );
    }
    let on_stream = json!({ "name": "entries", "stream": "jobs", "function": "copy" });
    let (code, created) = send("POST", format!("{base}/v1/triggers"), Some(on_stream)).await;
    assert_eq!(code, 201, "{created}");
    let (_, info) = send("GET", format!("{base}/v1/triggers/entries"), None).await;
    assert_eq!(
        (&info["stream"], &info["prefix"]),
        (&json!("jobs"), &json!(null)),
        "{info}"
    );
    let (code, _) = send("DELETE", format!("{base}/v1/triggers/entries"), None).await;
    assert_eq!(code, 200);

    // A delayed entry: set, then added to its stream once.
    let later = json!({ "name": "later", "in_ms": 200, "stream": "jobs", "fields": ["task", "x"] });
    let (code, set) = send("POST", format!("{base}/v1/timers"), Some(later)).await;
    assert_eq!(code, 201, "{set}");
    assert_eq!(
        (&set["stream"], &set["fields"]),
        (&json!("jobs"), &json!(["task", "x"]))
    );
    for bad in [
        json!({ "name": "b", "in_ms": 1, "stream": "jobs", "fields": ["odd"] }),
        json!({ "name": "b", "in_ms": 1, "stream": "jobs", "function": "ring", "fields": ["f", "v"] }),
        json!({ "name": "b", "in_ms": 1 }),
    ] {
        let (code, refused) = send("POST", format!("{base}/v1/timers"), Some(bad)).await;
        assert_eq!(code, 400, "{refused}");
    }

    // A timer: set, listed, fired once with its payload, then gone.
    let (code, set) = send(
        "POST",
        format!("{base}/v1/timers"),
        Some(json!({ "name": "bell", "in_ms": 300, "function": "ring", "payload": "ding" })),
    )
    .await;
    assert_eq!(code, 201, "{set}");
    assert_eq!(
        (&set["name"], &set["payload"]),
        (&json!("bell"), &json!("ding"))
    );
    let (_, timers) = send("GET", format!("{base}/v1/timers"), None).await;
    assert!(
        timers["timers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "bell"),
        "{timers}"
    );
    eventually(&base, "rang", "ding").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, timers) = send("GET", format!("{base}/v1/timers"), None).await;
        if timers["timers"] == json!([]) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a fired timer is still listed: {timers}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // One far off is cancelled; then it is not there to cancel.
    let (code, _) = send(
        "POST",
        format!("{base}/v1/timers"),
        Some(json!({ "name": "later", "at": "2099-01-01T00:00:00Z", "function": "ring" })),
    )
    .await;
    assert_eq!(code, 201);
    let (code, cancelled) = send("DELETE", format!("{base}/v1/timers/later"), None).await;
    assert_eq!((code, cancelled), (200, json!({ "deleted": true })));
    let (code, _) = send("DELETE", format!("{base}/v1/timers/later"), None).await;
    assert_eq!(code, 404);
    // Both `at` and `in_ms`, or neither: 400.
    let (code, both) = send(
        "POST",
        format!("{base}/v1/timers"),
        Some(json!({ "name": "x", "at": "0", "in_ms": 1, "function": "ring" })),
    )
    .await;
    assert_eq!(code, 400, "{both}");
    node.shutdown().await;
}
