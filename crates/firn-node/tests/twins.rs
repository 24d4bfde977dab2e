//! Device twins on a node of three shards: desired and reported documents patched (JSON
//! merge patches) over RESP and HTTP, read in one snapshot with their delta — now and as of
//! an earlier time —, concurrent patches that lose none of one another's members, the
//! documents as the plain keys they are, and bad input refused with nothing written.

mod common;

use common::http::{agent, call};
use common::*;
use redis::Value;
use serde_json::{Value as Json, json};

/// A bulk or text field of a map, as JSON.
fn json_field(v: &Value, name: &str) -> Json {
    serde_json::from_str(&bulk_text(field(v, name).unwrap_or(&Value::Nil))).unwrap()
}

/// The document a side of `FIRN.TWIN GET` holds (null: none).
fn document(twin: &Value, side: &str) -> Json {
    match field(twin, side) {
        Some(Value::Nil) | None => Json::Null,
        Some(version) => json_field(version, "value"),
    }
}

fn version(twin: &Value, side: &str) -> Option<i64> {
    match field(twin, side).and_then(|v| field(v, "version")) {
        Some(Value::Int(n)) => Some(*n),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_twin_is_patched_read_with_its_delta_and_kept_as_history() {
    let node = start_three_shard_node().await;
    let mut c = redis_conn(&node).await;

    let empty = ok(&mut c, &["FIRN.TWIN", "GET", "devices/d1"]).await;
    assert_eq!(document(&empty, "desired"), Json::Null);
    assert_eq!(json_field(&empty, "delta"), json!({}));

    let desired = r#"{"temp":21,"mode":"eco","fw":{"version":"2.1","channel":"stable"}}"#;
    let reported = r#"{"temp":20,"mode":"eco","fw":{"version":"2.0","channel":"stable"},"up":5}"#;
    ok(&mut c, &["FIRN.TWIN", "DESIRE", "devices/d1", desired]).await;
    ok(&mut c, &["FIRN.TWIN", "REPORT", "devices/d1", reported]).await;
    let before = ok(&mut c, &["FIRN.TWIN", "GET", "devices/d1"]).await;
    assert_eq!(
        json_field(&before, "delta"),
        json!({"temp": 21, "fw": {"version": "2.1"}})
    );
    assert_eq!(document(&before, "reported")["up"], json!(5));
    let then = bulk_text(field(&before, "at").unwrap());

    // The device catches up (a number as 21.0 is the same number) with a partial report.
    ok(
        &mut c,
        &[
            "FIRN.TWIN",
            "REPORT",
            "devices/d1",
            r#"{"temp":21.0,"fw":{"version":"2.1"}}"#,
        ],
    )
    .await;
    let now = ok(&mut c, &["FIRN.TWIN", "GET", "devices/d1"]).await;
    assert_eq!(json_field(&now, "delta"), json!({}));
    assert_eq!(
        document(&now, "reported"),
        json!({"temp": 21.0, "mode": "eco", "fw": {"version": "2.1", "channel": "stable"}, "up": 5})
    );
    assert_eq!(version(&now, "reported"), Some(2));
    // As of the earlier read, the twin is as it was then.
    let past = ok(&mut c, &["FIRN.TWIN", "GET", "devices/d1", "ASOF", &then]).await;
    assert_eq!(
        json_field(&past, "delta"),
        json!({"temp": 21, "fw": {"version": "2.1"}})
    );
    assert_eq!(version(&past, "reported"), Some(1));

    // null removes a member; the documents are plain keys with their history.
    ok(
        &mut c,
        &["FIRN.TWIN", "DESIRE", "devices/d1", r#"{"fw":null}"#],
    )
    .await;
    let plain = ok(&mut c, &["GET", "devices/d1/desired"]).await;
    assert_eq!(
        serde_json::from_str::<Json>(&bulk_text(&plain)).unwrap(),
        json!({"temp": 21, "mode": "eco"})
    );
    let Value::Array(history) = ok(&mut c, &["FIRN.HISTORY", "devices/d1/reported"]).await else {
        panic!("history")
    };
    assert_eq!(history.len(), 2);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patches_at_once_lose_none_of_one_anothers_members() {
    let node = start_three_shard_node().await;
    let mut writers = Vec::new();
    for i in 0..8 {
        let mut c = redis_conn(&node).await;
        writers.push(tokio::spawn(async move {
            let patch = format!(r#"{{"m{i}":{i}}}"#);
            run(&mut c, &["FIRN.TWIN", "REPORT", "devices/busy", &patch]).await
        }));
    }
    for w in writers {
        let written = w.await.unwrap();
        assert!(written.is_ok(), "{written:?}");
    }
    let mut c = redis_conn(&node).await;
    let twin = ok(&mut c, &["FIRN.TWIN", "GET", "devices/busy"]).await;
    let members = document(&twin, "reported");
    for i in 0..8 {
        assert_eq!(members[format!("m{i}")], json!(i), "{members}");
    }
    assert_eq!(version(&twin, "reported"), Some(8));
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_twin_input_is_refused_and_nothing_is_written() {
    let node = start_three_shard_node().await;
    let mut c = redis_conn(&node).await;
    ok(&mut c, &["FIRN.TWIN", "DESIRE", "devices/d1", r#"{"a":1}"#]).await;
    ok(&mut c, &["SET", "devices/d2/desired", "not json"]).await;
    ok(&mut c, &["SET", "devices/d3/reported", "[1,2]"]).await;
    let long = "n".repeat(8192);
    for (args, says) in [
        (
            vec!["FIRN.TWIN", "DESIRE", "devices/d1", "[1]"],
            "JSON object",
        ),
        (vec!["FIRN.TWIN", "DESIRE", "devices/d1", "{"], "not JSON"),
        (vec!["FIRN.TWIN", "DESIRE", "devices/d1"], "wrong number"),
        (vec!["FIRN.TWIN", "DESIRE", "devices/d1", "{}", "x"], ""),
        (vec!["FIRN.TWIN", "GET", "devices/d1", "ASOF"], ""),
        (vec!["FIRN.TWIN", "GET", "devices/d1", "AT", "5"], "ASOF"),
        (vec!["FIRN.TWIN", "GET", "devices/d1", "ASOF", "soon"], ""),
        (vec!["FIRN.TWIN", "FORGET", "devices/d1"], "FORGET"),
        (vec!["FIRN.TWIN", "GET", &long], "twin name"),
        (vec!["FIRN.TWIN", "GET", "devices/d2"], "devices/d2/desired"),
        (
            vec!["FIRN.TWIN", "REPORT", "devices/d3", "{}"],
            "devices/d3/reported",
        ),
        (
            vec!["FIRN.TWIN", "DESIRE", "devices/d2", r#"{"a":1}"#],
            "not a twin document",
        ),
    ] {
        let line = error_line(&mut c, &args).await;
        assert!(line.contains(says), "{args:?}: {line}");
    }
    // Not a step of a transaction.
    ok(&mut c, &["MULTI"]).await;
    let queued = error_line(&mut c, &["FIRN.TWIN", "DESIRE", "devices/d1", r#"{"b":2}"#]).await;
    assert!(!queued.is_empty());
    let exec = error_line(&mut c, &["EXEC"]).await;
    assert!(exec.contains("EXECABORT"), "{exec}");
    // Nothing changed: each key at its one version.
    for key in [
        "devices/d1/desired",
        "devices/d2/desired",
        "devices/d3/reported",
    ] {
        let Value::Array(h) = ok(&mut c, &["FIRN.HISTORY", key]).await else {
            panic!("history")
        };
        assert_eq!(h.len(), 1, "{key}");
    }
    assert_usable(&mut c).await;
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_twin_over_http_is_the_same_twin() {
    let node = start_three_shard_node().await;
    let base = format!("http://{}/v1/twins", node.http_addr);
    let mut c = redis_conn(&node).await;
    ok(
        &mut c,
        &["FIRN.TWIN", "REPORT", "pumps/p1", r#"{"rpm":900}"#],
    )
    .await;
    tokio::task::spawn_blocking(move || {
        let a = agent();
        let (code, written) = call(
            a.request("PATCH", &format!("{base}/pumps/p1")),
            Some(json!({"desired": {"rpm": 1200, "valve": "open"}})),
        );
        assert_eq!((code, &written["version"]), (200, &json!(1)), "{written}");
        let (code, twin) = call(a.get(&format!("{base}/pumps/p1")), None);
        assert_eq!(code, 200, "{twin}");
        assert_eq!(twin["delta"], json!({"rpm": 1200, "valve": "open"}));
        assert_eq!(
            twin["desired"]["document"],
            json!({"rpm": 1200, "valve": "open"})
        );
        assert_eq!(twin["reported"]["document"], json!({"rpm": 900}));
        assert_eq!(twin["reported"]["version"], json!(1));
        let at = twin["at"].as_str().unwrap().to_string();
        let (code, _) = call(
            a.request("PATCH", &format!("{base}/pumps/p1")),
            Some(json!({"reported": {"rpm": 1200, "valve": "open"}})),
        );
        assert_eq!(code, 200);
        let (_, now) = call(a.get(&format!("{base}/pumps/p1")), None);
        assert_eq!(now["delta"], json!({}));
        let (_, then) = call(a.get(&format!("{base}/pumps/p1?as_of={at}")), None);
        assert_eq!(
            then["delta"],
            json!({"rpm": 1200, "valve": "open"}),
            "as of {at}: {then}, before: {twin}"
        );
        // Bad bodies: 400, and the twin as it was.
        for body in [
            json!({}),
            json!({"desired": {"a": 1}, "reported": {"b": 2}}),
            json!({"desired": [1]}),
            json!({"desired": null}),
            json!({"wanted": {"a": 1}}),
        ] {
            let (code, e) = call(
                a.request("PATCH", &format!("{base}/pumps/p1")),
                Some(body.clone()),
            );
            assert_eq!(code, 400, "{body}: {e}");
        }
        let (_, after) = call(a.get(&format!("{base}/pumps/p1")), None);
        assert_eq!(after["desired"]["version"], json!(1));
        assert_eq!(after["reported"]["version"], json!(2));
        let (code, _) = call(a.get(&format!("{base}/pumps/p1?as_of=later")), None);
        assert_eq!(code, 400);
    })
    .await
    .unwrap();
    node.shutdown().await;
}
