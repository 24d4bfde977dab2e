//! Request/response over RESP: FIRN.REQUEST answered by a worker's FIRN.SERVE + FIRN.REPLY
//! on another connection, hrw keeping a key on one worker, TIMEOUT with no worker, bad input
//! refused with nothing changed, and late, duplicate or orphaned replies dropped.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::*;
use redis::Value;
use redis::aio::MultiplexedConnection;
use tokio::io::AsyncWriteExt;

type Conn = MultiplexedConnection;

/// One FIRN.SERVE: the request's (id, payload, key), or None when BLOCK ran out.
async fn serve(c: &mut Conn, args: &[&str]) -> Option<(Vec<u8>, String, Option<String>)> {
    let mut words = vec!["FIRN.SERVE"];
    words.extend_from_slice(args);
    match ok(c, &words).await {
        Value::Nil => None,
        Value::Array(parts) => {
            let [Value::BulkString(id), payload, key] = &parts[..] else {
                panic!("FIRN.SERVE answered {parts:?}");
            };
            let key = match key {
                Value::Nil => None,
                k => Some(bulk_text(k)),
            };
            Some((id.clone(), bulk_text(payload), key))
        }
        other => panic!("FIRN.SERVE answered {other:?}"),
    }
}

async fn reply(c: &mut Conn, id: &[u8], payload: &str) -> i64 {
    let v: Value = redis::cmd("FIRN.REPLY")
        .arg(id)
        .arg(payload)
        .query_async(c)
        .await
        .unwrap();
    match v {
        Value::Int(n) => n,
        other => panic!("FIRN.REPLY answered {other:?}"),
    }
}

/// What is left of service `s`: its stream's length and its group's pending count.
async fn left(c: &mut Conn, s: &str) -> (i64, i64) {
    let stream = format!("firn.svc:{{{s}}}");
    let Value::Int(len) = ok(c, &["XLEN", &stream]).await else {
        panic!("XLEN answered no integer");
    };
    let Value::Array(summary) = ok(c, &["XPENDING", &stream, "workers"]).await else {
        panic!("XPENDING answered no array");
    };
    let Value::Int(pending) = summary[0] else {
        panic!("XPENDING's count is no integer");
    };
    (len, pending)
}

#[tokio::test]
async fn a_request_is_answered_by_a_worker_on_another_connection() {
    let node = start_node(false).await;
    let mut requester = redis_conn_patient(&node).await;
    let mut worker = redis_conn_patient(&node).await;
    // The request goes first: the group the first worker makes starts at the stream's
    // beginning, so a request sent before any worker is served.
    let asked = tokio::spawn(async move {
        ok(
            &mut requester,
            &["FIRN.REQUEST", "echo", "hello", "TIMEOUT", "10000"],
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (id, payload, key) = serve(&mut worker, &["echo", "BLOCK", "5000"])
        .await
        .expect("the worker gets the request");
    assert_eq!((payload.as_str(), key), ("hello", None));
    assert_eq!(reply(&mut worker, &id, "HELLO").await, 1);
    assert_eq!(bulk_text(&asked.await.unwrap()), "HELLO");
    assert_eq!(left(&mut worker, "echo").await, (0, 0), "acked and deleted");

    // A second request with a KEY, the worker already waiting.
    let mut requester = redis_conn_patient(&node).await;
    let served = tokio::spawn(async move {
        let got = serve(&mut worker, &["echo", "BLOCK", "5000"])
            .await
            .unwrap();
        assert_eq!(reply(&mut worker, &got.0, &got.1.to_uppercase()).await, 1);
        got
    });
    let answer = ok(
        &mut requester,
        &["FIRN.REQUEST", "echo", "two", "KEY", "k1"],
    )
    .await;
    assert_eq!(bulk_text(&answer), "TWO");
    assert_eq!(served.await.unwrap().2.as_deref(), Some("k1"));
}

/// Two workers serving `hrwsvc` (POLICY hrw) until `stop`: each answers with its own name,
/// and notes which keys it served.
fn spawn_hrw_workers(
    node: &firn_node::RunningNode,
    stop: Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<BTreeSet<String>>> {
    (0..2)
        .map(|w| {
            let stop = stop.clone();
            let addr = node.resp_addr;
            tokio::spawn(async move {
                let client = redis::Client::open(format!("redis://{addr}/")).unwrap();
                let config = redis::AsyncConnectionConfig::new()
                    .set_response_timeout(Some(Duration::from_secs(20)));
                let mut c = client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await
                    .unwrap();
                let mut keys = BTreeSet::new();
                while !stop.load(Ordering::Relaxed) {
                    let args = ["hrwsvc", "POLICY", "hrw", "BLOCK", "200"];
                    if let Some((id, _, key)) = serve(&mut c, &args).await {
                        keys.extend(key);
                        reply(&mut c, &id, &format!("w{w}")).await;
                    }
                }
                keys
            })
        })
        .collect()
}

/// Waits on the hrw policy being followed by the store (dealing by key to live consumers).
#[tokio::test]
async fn hrw_with_key_keeps_each_key_on_one_worker_of_two() {
    let node = start_node(false).await;
    let stop = Arc::new(AtomicBool::new(false));
    let workers = spawn_hrw_workers(&node, stop.clone());
    // Both workers are consumers (and live) before the requests come.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let mut c = redis_conn_patient(&node).await;
    let mut answered_by: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for round in 0..4 {
        for key in ["a", "b", "c", "d", "e", "f"] {
            let payload = format!("{key}{round}");
            let args = [
                "FIRN.REQUEST",
                "hrwsvc",
                &payload,
                "KEY",
                key,
                "TIMEOUT",
                "5000",
            ];
            let who = bulk_text(&ok(&mut c, &args).await);
            answered_by.entry(key.to_owned()).or_default().insert(who);
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut served: Vec<BTreeSet<String>> = Vec::new();
    for w in workers {
        served.push(w.await.unwrap());
    }
    for (key, who) in &answered_by {
        assert_eq!(who.len(), 1, "key {key} was answered by {who:?}");
    }
    assert!(
        served[0].is_disjoint(&served[1]),
        "no key on both: {served:?}"
    );
}

#[tokio::test]
async fn no_worker_means_timeout_and_the_expired_request_is_skipped_later() {
    let node = start_node(false).await;
    let mut c = redis_conn_patient(&node).await;
    assert_eq!(
        error_line(&mut c, &["FIRN.REQUEST", "nobody", "x", "TIMEOUT", "200"]).await,
        "TIMEOUT no reply from service 'nobody' within 200 ms"
    );
    assert_usable(&mut c).await;
    // The request is in the stream; a worker coming later acks and deletes it unserved.
    assert_eq!(
        serve(&mut c, &["nobody", "BLOCK", "300"]).await,
        None,
        "an expired request is not served"
    );
    assert_eq!(left(&mut c, "nobody").await, (0, 0));
}

#[tokio::test]
async fn bad_input_is_refused_and_changes_nothing() {
    let node = start_node(false).await;
    let mut c = redis_conn(&node).await;
    let long = "s".repeat(1_025);
    let big = "v".repeat(64 * 1024 + 1);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["FIRN.REQUEST", "svc"], "ERR wrong number of arguments"),
        (
            vec!["FIRN.REQUEST", "svc", "p", "TIMEOUT", "0"],
            "ERR TIMEOUT is 0 ms",
        ),
        (
            vec!["FIRN.REQUEST", "svc", "p", "TIMEOUT", "3600001"],
            "ERR TIMEOUT is 3600001 ms",
        ),
        (vec!["FIRN.REQUEST", "svc", "p", "TIMEOUT", "soon"], "ERR"),
        (vec!["FIRN.REQUEST", "svc", "p", "KEY"], "ERR"),
        (
            vec!["FIRN.REQUEST", "svc", "p", "COLOR", "red"],
            "ERR syntax error",
        ),
        (
            vec!["FIRN.REQUEST", &long, "p"],
            "ERR service name is 1025 bytes",
        ),
        (
            vec!["FIRN.REQUEST", "svc", &big],
            "ERR value is 65537 bytes",
        ),
        (
            vec!["FIRN.SERVE", "svc", "POLICY", "random"],
            "ERR POLICY is 'random'",
        ),
        (
            vec!["FIRN.SERVE", "svc", "ACKWAIT", "0"],
            "ERR ACKWAIT is 0 ms",
        ),
        (vec!["FIRN.SERVE", "svc", "BLOCK", "-1"], "ERR"),
        (
            vec!["FIRN.SERVE", "svc", "BLOCK", "1", "BLOCK", "1"],
            "ERR syntax error",
        ),
        (vec!["FIRN.SERVE", &long], "ERR service name is 1025 bytes"),
        (vec!["FIRN.REPLY", "garbage", "p"], "ERR not a request id"),
        (
            vec!["FIRN.REPLY", "1-0/1/2/", "p"],
            "ERR service name is 0 bytes",
        ),
        (
            vec!["FIRN.REPLY", "1-0/1/2/svc"],
            "ERR wrong number of arguments",
        ),
    ];
    for (args, prefix) in cases {
        let line = error_line(&mut c, &args).await;
        assert!(line.starts_with(prefix), "{args:.3?}: {line}");
        assert_usable(&mut c).await;
    }
    assert!(
        run(&mut c, &["XINFO", "GROUPS", "firn.svc:{svc}"])
            .await
            .is_err(),
        "no stream was made"
    );
}

#[tokio::test]
async fn late_duplicate_and_orphaned_replies_are_dropped() {
    let node = start_node(false).await;
    let mut worker = redis_conn_patient(&node).await;
    let mut requester = redis_conn_patient(&node).await;

    // Late: the worker takes the request but replies after the requester gave up.
    let asked = tokio::spawn(async move {
        error_line(
            &mut requester,
            &["FIRN.REQUEST", "slow", "x", "TIMEOUT", "400"],
        )
        .await
    });
    let (id, _, _) = serve(&mut worker, &["slow", "BLOCK", "5000"])
        .await
        .unwrap();
    assert!(asked.await.unwrap().starts_with("TIMEOUT "));
    assert_eq!(reply(&mut worker, &id, "late").await, 0, "nobody waits");
    assert_eq!(
        left(&mut worker, "slow").await,
        (0, 0),
        "acked and deleted all the same"
    );

    // Duplicate: the second reply to one request finds nobody waiting.
    let mut requester = redis_conn_patient(&node).await;
    let asked = tokio::spawn(async move {
        ok(
            &mut requester,
            &["FIRN.REQUEST", "slow", "y", "TIMEOUT", "5000"],
        )
        .await
    });
    let (id, _, _) = serve(&mut worker, &["slow", "BLOCK", "5000"])
        .await
        .unwrap();
    assert_eq!(reply(&mut worker, &id, "first").await, 1);
    assert_eq!(reply(&mut worker, &id, "second").await, 0);
    assert_eq!(bulk_text(&asked.await.unwrap()), "first");

    // Orphaned: the requester's connection goes away while it waits.
    let mut raw = tokio::net::TcpStream::connect(node.resp_addr)
        .await
        .unwrap();
    raw.write_all(
        b"*5\r\n$12\r\nFIRN.REQUEST\r\n$4\r\nslow\r\n$1\r\nz\r\n$7\r\nTIMEOUT\r\n$5\r\n10000\r\n",
    )
    .await
    .unwrap();
    let (id, payload, _) = serve(&mut worker, &["slow", "BLOCK", "5000"])
        .await
        .unwrap();
    assert_eq!(payload, "z");
    drop(raw);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        reply(&mut worker, &id, "orphan").await,
        0,
        "its slot went with it"
    );
    assert_eq!(node.router().services().reply_slots().waiting(), 0);
}
