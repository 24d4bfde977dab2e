//! Request/response over HTTP: `POST /v1/services/{name}` answered by a RESP worker with the
//! reply as the body; 504 `TIMEOUT` with no worker; bad parameters 400 and nothing sent.

mod common;

use std::time::Duration;

use common::*;
use redis::Value;

/// Status and body of a POST, whatever the status.
fn post(url: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(20))
        .build();
    let (code, r) = match agent.post(url).send_bytes(body) {
        Ok(r) => (r.status(), r),
        Err(ureq::Error::Status(code, r)) => (code, r),
        Err(e) => panic!("transport error: {e}"),
    };
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut r.into_reader(), &mut out).unwrap();
    (code, out)
}

fn json(body: &[u8]) -> serde_json::Value {
    serde_json::from_slice(body).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_to_a_service_answers_with_the_workers_reply() {
    let node = start_node(false).await;
    let base = format!("http://{}", node.http_addr);
    let mut worker = redis_conn_patient(&node).await;
    let served = tokio::spawn(async move {
        let Value::Array(parts) = ok(&mut worker, &["FIRN.SERVE", "upper", "BLOCK", "10000"]).await
        else {
            panic!("no request");
        };
        let [Value::BulkString(id), Value::BulkString(payload), key] = &parts[..] else {
            panic!("FIRN.SERVE answered {parts:?}");
        };
        let reply: i64 = redis::cmd("FIRN.REPLY")
            .arg(id)
            .arg(payload.to_ascii_uppercase())
            .query_async(&mut worker)
            .await
            .unwrap();
        assert_eq!(reply, 1);
        bulk_text(key)
    });
    let url = format!("{base}/v1/services/upper?key=k7&timeout_ms=10000");
    let (code, body) = tokio::task::spawn_blocking(move || post(&url, b"bytes \x00 too"))
        .await
        .unwrap();
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(body, b"BYTES \x00 TOO");
    assert_eq!(served.await.unwrap(), "k7");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_worker_is_504_and_bad_parameters_are_400_with_nothing_sent() {
    let node = start_node(false).await;
    let base = format!("http://{}", node.http_addr);
    let (code, body) = {
        let url = format!("{base}/v1/services/idle?timeout_ms=200");
        tokio::task::spawn_blocking(move || post(&url, b"x"))
            .await
            .unwrap()
    };
    assert_eq!(code, 504);
    assert_eq!(
        json(&body),
        serde_json::json!({"error": "TIMEOUT", "message": "no reply from service 'idle' within 200 ms"})
    );

    let long = "s".repeat(1_025);
    let bad = [
        (format!("{base}/v1/services/other?timeout_ms=0"), 400),
        (format!("{base}/v1/services/other?timeout_ms=soon"), 400),
        (format!("{base}/v1/services/other?timeout_ms=3600001"), 400),
        (format!("{base}/v1/services/other?color=red"), 400),
        (format!("{base}/v1/services/{long}"), 400),
    ];
    for (url, want) in bad {
        let (code, body) = tokio::task::spawn_blocking(move || post(&url, b"x"))
            .await
            .unwrap();
        assert_eq!(code, want, "{}", String::from_utf8_lossy(&body));
        assert_eq!(json(&body)["error"], "ERR");
    }
    let url = format!("{base}/v1/services/other");
    let (code, _) = tokio::task::spawn_blocking(move || post(&url, &vec![b'v'; 64 * 1024 + 1]))
        .await
        .unwrap();
    assert_eq!(code, 413);
    let mut c = redis_conn(&node).await;
    assert_eq!(
        ok(&mut c, &["XLEN", "firn.svc:{other}"]).await,
        Value::Int(0),
        "nothing was sent"
    );
}
