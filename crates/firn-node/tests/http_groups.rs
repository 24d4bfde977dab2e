//! Consumer groups over HTTP (`/v1/streams/{key}/groups…`): create, read `>`, pending, ack,
//! the errors (NOGROUP 404, BUSYGROUP 409, bad JSON 400 changing nothing), the event stream
//! of a consumer (entries added after it opens, in order), and the Rust client's
//! `GroupClient`. Entries are added with XADD over RESP: both front ends share one core.

mod common;

use std::io::BufRead;
use std::time::Duration;

use common::http::{agent, call};
use common::*;
use firn_client::{GroupClient, GroupCreate, GroupReadOptions};
use serde_json::{Value as Json, json};

/// Status and JSON body of a POST of raw text (a body that is not the JSON asked for).
fn post_text(url: &str, text: &str) -> (u16, Json) {
    let req = agent().post(url).set("content-type", "application/json");
    match req.send_string(text) {
        Ok(r) => (r.status(), r.into_json().unwrap_or(Json::Null)),
        Err(ureq::Error::Status(code, r)) => (code, r.into_json().unwrap_or(Json::Null)),
        Err(e) => panic!("transport error: {e}"),
    }
}

async fn xadd(c: &mut redis::aio::MultiplexedConnection, key: &str, value: &str) -> String {
    bulk_text(&ok(c, &["XADD", key, "*", "v", value]).await)
}

fn ids(entries: &Json) -> Vec<String> {
    entries["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_read_pending_ack_and_the_errors_over_http() {
    let node = start_node(false).await;
    let mut c = redis_conn(&node).await;
    let base = format!("http://{}/v1/streams/orders/groups", node.http_addr);
    let b = base.clone();
    let (code, body) = tokio::task::spawn_blocking(move || {
        call(
            agent().post(&b),
            Some(json!({"group": "g", "start": "0", "mkstream": true})),
        )
    })
    .await
    .unwrap();
    assert_eq!(code, 201, "{body}");
    let first = xadd(&mut c, "orders", "one").await;
    let second = xadd(&mut c, "orders", "two").await;
    let (f, s) = (first.clone(), second.clone());
    tokio::task::spawn_blocking(move || {
        let a = agent();
        // BUSYGROUP: the group exists.
        let (code, body) = call(a.post(&base), Some(json!({"group": "g"})));
        assert_eq!(
            (code, body["error"].as_str()),
            (409, Some("BUSYGROUP")),
            "{body}"
        );
        // Read `>`: both entries, in order, with their fields.
        let (code, read) = call(
            a.post(&format!("{base}/g/read")),
            Some(json!({"consumer": "alice", "count": 10})),
        );
        assert_eq!(code, 200, "{read}");
        assert_eq!(ids(&read), vec![f.clone(), s.clone()]);
        assert_eq!(read["entries"][0]["fields"], json!({"v": "one"}));
        // Pending shows them as alice's.
        let (_, summary) = call(a.get(&format!("{base}/g/pending")), None);
        assert_eq!(summary["count"], 2, "{summary}");
        assert_eq!(summary["first"], f.as_str());
        assert_eq!(
            summary["consumers"],
            json!([{"name": "alice", "pending": 2}])
        );
        let (_, listed) = call(a.get(&format!("{base}/g/pending?start=-&end=%2B")), None);
        let pending = listed["pending"].as_array().unwrap();
        assert_eq!(pending.len(), 2, "{listed}");
        assert_eq!(pending[0]["consumer"], "alice");
        assert_eq!(pending[0]["deliveries"], 1);
        // Ack removes the first; acking it again counts nothing.
        let ack = |id: &str| call(a.post(&format!("{base}/g/ack")), Some(json!({"ids": [id]})));
        assert_eq!(ack(&f).1, json!({"acked": 1}));
        assert_eq!(ack(&f).1, json!({"acked": 0}));
        let (_, summary) = call(a.get(&format!("{base}/g/pending")), None);
        assert_eq!(summary["count"], 1, "{summary}");
        assert_eq!(summary["first"], s.as_str());
        // Info: the group and its consumer.
        let (_, groups) = call(a.get(&base), None);
        assert_eq!(groups["groups"][0]["name"], "g", "{groups}");
        assert_eq!(groups["groups"][0]["pending"], 1);
        assert_eq!(groups["groups"][0]["last_delivered"], s.as_str());
        let (_, consumers) = call(a.get(&format!("{base}/g/consumers")), None);
        assert_eq!(consumers["consumers"][0]["name"], "alice", "{consumers}");
        // NOGROUP: 404 for a read, pending and a destroy of a group that is not (an ack
        // answers 0, as XACK does).
        assert_eq!(
            call(
                a.post(&format!("{base}/nope/ack")),
                Some(json!({"ids": ["1-1"]}))
            )
            .1,
            json!({"acked": 0})
        );
        for (code, body) in [
            call(
                a.post(&format!("{base}/nope/read")),
                Some(json!({"consumer": "alice"})),
            ),
            call(a.get(&format!("{base}/nope/pending")), None),
            call(a.delete(&format!("{base}/nope")), None),
        ] {
            assert_eq!(
                (code, body["error"].as_str()),
                (404, Some("NOGROUP")),
                "{body}"
            );
        }
        // Bad input: 400 with the error JSON, and nothing changed.
        for (path, text) in [
            ("", r#"{"group": "h", "policy": "sideways"}"#),
            ("", r#"{"group": "h", "start": "yesterday"}"#),
            ("", r#"{"group": "h", "max_deliver": 3}"#),
            ("", r#"{"grop": "h"}"#),
            ("", "{not json"),
            ("/g/read", r#"{"consumer": "bob", "count": 0}"#),
            ("/g/read", r#"{"consumer": "bob", "block_ms": 0}"#),
            ("/g/read", r#"{"consumer": "bob", "id": "x-y"}"#),
            ("/g/ack", r#"{"ids": ["not-an-id"]}"#),
            ("/g/ack", r#"{"ids": []}"#),
        ] {
            let (code, body) = post_text(&format!("{base}{path}"), text);
            assert_eq!(code, 400, "{path} {text}: {body}");
            assert_eq!(body["error"], "ERR", "{body}");
            assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()));
        }
        let (_, groups) = call(a.get(&base), None);
        assert_eq!(groups["groups"].as_array().unwrap().len(), 1, "{groups}");
        let (_, summary) = call(a.get(&format!("{base}/g/pending")), None);
        assert_eq!(summary["count"], 1, "{summary}");
        assert_eq!(
            summary["consumers"],
            json!([{"name": "alice", "pending": 1}])
        );
        // Destroy, then it is gone.
        let (code, body) = call(a.delete(&format!("{base}/g")), None);
        assert_eq!((code, body), (200, json!({"destroyed": true})));
        let (code, _) = call(a.get(&format!("{base}/g/pending")), None);
        assert_eq!(code, 404);
    })
    .await
    .unwrap();
    node.shutdown().await;
}

/// The `data:` of the first `n` events of an event stream, and their `id:` lines.
fn read_events(reader: impl std::io::Read, n: usize) -> Vec<(String, Json)> {
    let mut lines = std::io::BufReader::new(reader).lines();
    let mut events = Vec::new();
    let mut id = String::new();
    while events.len() < n {
        let line = lines.next().expect("the stream ended early").unwrap();
        if let Some(i) = line.strip_prefix("id: ") {
            id = i.to_string();
        } else if let Some(d) = line.strip_prefix("data: ") {
            events.push((id.clone(), serde_json::from_str(d).unwrap()));
        }
    }
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_delivers_entries_added_after_it_opens_in_order() {
    let node = start_node(false).await;
    let mut c = redis_conn(&node).await;
    ok(
        &mut c,
        &["XGROUP", "CREATE", "jobs", "workers", "$", "MKSTREAM"],
    )
    .await;
    let base = format!("http://{}/v1/streams/jobs/groups", node.http_addr);
    // An unknown group is a 404 before any stream opens.
    let b = base.clone();
    let (code, body) = tokio::task::spawn_blocking(move || {
        call(agent().get(&format!("{b}/nope/consumers/w1/events")), None)
    })
    .await
    .unwrap();
    assert_eq!(
        (code, body["error"].as_str()),
        (404, Some("NOGROUP")),
        "{body}"
    );
    let (opened_tx, opened_rx) = tokio::sync::oneshot::channel();
    let b = base.clone();
    let reader = tokio::task::spawn_blocking(move || {
        let r = agent()
            .get(&format!("{b}/workers/consumers/w1/events?count=5"))
            .call()
            .unwrap();
        assert_eq!(r.header("content-type"), Some("text/event-stream"));
        opened_tx.send(()).unwrap();
        let mut reader = r.into_reader();
        let events = read_events(&mut reader, 5);
        // With `count` sent, the server ends the stream.
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut reader, &mut rest).unwrap();
        (events, rest)
    });
    opened_rx.await.unwrap();
    let mut added = Vec::new();
    for i in 0..5 {
        added.push(xadd(&mut c, "jobs", &format!("job-{i}")).await);
    }
    let (events, rest) = tokio::time::timeout(Duration::from_secs(30), reader)
        .await
        .expect("the events came in time")
        .unwrap();
    let ids: Vec<String> = events.iter().map(|(id, _)| id.clone()).collect();
    assert_eq!(ids, added);
    for (i, (id, data)) in events.iter().enumerate() {
        assert_eq!(data["id"], id.as_str());
        assert_eq!(data["fields"]["v"], format!("job-{i}"));
    }
    assert!(!rest.contains("data:"), "more events after count: {rest}");
    // The stream delivered through the group: the five are w1's, pending until acked.
    let client = GroupClient::new(&node.http_addr.to_string());
    let summary = client.pending_summary("jobs", "workers").await.unwrap();
    assert_eq!(summary.count, 5);
    // A new stream of w1 (a consumer that reconnects) sends its pending entries again first.
    let mut again = client
        .events("jobs", "workers", "w1", Some(5), false)
        .await
        .unwrap();
    let replayed = tokio::task::spawn_blocking(move || {
        (0..5)
            .map(|_| again.next_entry().unwrap().unwrap().id.to_string())
            .collect::<Vec<_>>()
    });
    let replayed = tokio::time::timeout(Duration::from_secs(30), replayed)
        .await
        .expect("the pending entries came again in time")
        .unwrap();
    assert_eq!(replayed, added);
    let acked = client.ack("jobs", "workers", &added).await.unwrap();
    assert_eq!(acked, 5);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_group_client_creates_reads_acks_and_reports() {
    let node = start_node(false).await;
    let mut c = redis_conn(&node).await;
    let client = GroupClient::new(&node.http_addr.to_string());
    let create = GroupCreate {
        start: "0".into(),
        mkstream: true,
        ..GroupCreate::default()
    };
    client.create("tasks", "g", &create).await.unwrap();
    match client.create("tasks", "g", &create).await {
        Err(firn_client::ClientError::Server { code, .. }) => assert_eq!(code, "BUSYGROUP"),
        other => panic!("a second create answered {other:?}"),
    }
    let id = xadd(&mut c, "tasks", "t1").await;
    let opts = GroupReadOptions {
        count: Some(10),
        ..GroupReadOptions::default()
    };
    let entries = client.read("tasks", "g", "c1", &opts).await.unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].id.to_string(), id);
    assert_eq!(entries[0].fields, vec![("v".into(), "t1".into())]);
    // A blocked read that nothing arrives for answers empty.
    let blocked = GroupReadOptions {
        block_ms: Some(100),
        ..GroupReadOptions::default()
    };
    assert!(
        client
            .read("tasks", "g", "c1", &blocked)
            .await
            .unwrap()
            .is_empty()
    );
    let pending = client
        .pending("tasks", "g", &Default::default())
        .await
        .unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].consumer, "c1");
    assert_eq!(client.ack("tasks", "g", &[id]).await.unwrap(), 1);
    let groups = client.groups("tasks").await.unwrap();
    assert_eq!(groups.len(), 1);
    assert_eq!((groups[0].name.as_str(), groups[0].pending), ("g", 0));
    assert!(client.destroy("tasks", "g").await.unwrap());
    assert!(client.groups("tasks").await.unwrap().is_empty());
    node.shutdown().await;
}
