//! Request/response across a three-node cluster of real processes: a request made at one
//! node is served by a worker at another and its reply comes back by a peer call (RESP and
//! `firn request`); a worker that dies holding a request has it given to another worker
//! after ACKWAIT (this one needs the group's ACKWAIT to be followed by the store).

mod common;

use std::time::Duration;

use common::Cluster;
use redis::Value;
use redis::aio::MultiplexedConnection;

async fn conn(addr: &str) -> MultiplexedConnection {
    let client = redis::Client::open(format!("redis://{addr}/")).unwrap();
    let config =
        redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(70)));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap()
}

/// One FIRN.SERVE: the request's id and payload, or None when BLOCK ran out.
async fn serve(c: &mut MultiplexedConnection, args: &[&str]) -> Option<(Vec<u8>, String)> {
    let mut cmd = redis::cmd("FIRN.SERVE");
    for a in args {
        cmd.arg(*a);
    }
    match cmd.query_async(c).await.unwrap() {
        Value::Nil => None,
        Value::Array(parts) => match &parts[..] {
            [Value::BulkString(id), Value::BulkString(p), _] => {
                Some((id.clone(), String::from_utf8(p.clone()).unwrap()))
            }
            other => panic!("FIRN.SERVE answered {other:?}"),
        },
        other => panic!("FIRN.SERVE answered {other:?}"),
    }
}

async fn reply(c: &mut MultiplexedConnection, id: &[u8], payload: &str) -> i64 {
    redis::cmd("FIRN.REPLY")
        .arg(id)
        .arg(payload)
        .query_async(c)
        .await
        .unwrap()
}

async fn start_cluster() -> Cluster {
    Cluster::ready(3, &[]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_at_one_node_is_served_at_another_and_answered_back() {
    let cluster = start_cluster().await;
    let mut worker = conn(&cluster.resp_addr(1)).await;
    let serving = tokio::spawn(async move {
        for _ in 0..2 {
            let (id, payload) = serve(&mut worker, &["echo", "BLOCK", "10000"])
                .await
                .expect("a request comes");
            assert_eq!(reply(&mut worker, &id, &format!("echo:{payload}")).await, 1);
        }
    });

    let mut requester = conn(&cluster.resp_addr(0)).await;
    let answer: String = redis::cmd("FIRN.REQUEST")
        .arg("echo")
        .arg("over there")
        .arg("TIMEOUT")
        .arg(10_000)
        .query_async(&mut requester)
        .await
        .unwrap();
    assert_eq!(answer, "echo:over there");

    // The CLI, at the third node.
    let addr = cluster.resp_addr(2);
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(common::firn_bin())
            .args(["request", "echo", "from cli", "--timeout-ms", "10000"])
            .args(["--addr", &addr])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "echo:from cli\n");
    tokio::time::timeout(Duration::from_secs(10), serving)
        .await
        .unwrap()
        .unwrap();

    // No worker: the CLI says TIMEOUT and fails.
    let addr = cluster.resp_addr(0);
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(common::firn_bin())
            .args([
                "request",
                "nobody",
                "x",
                "--timeout-ms",
                "300",
                "--addr",
                &addr,
            ])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("TIMEOUT no reply from service 'nobody'"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_dies_holding_a_request_has_it_served_by_another_after_ackwait() {
    let cluster = start_cluster().await;
    // The first worker makes the group with ACKWAIT 1000 and takes the request.
    let mut doomed = conn(&cluster.resp_addr(1)).await;
    let mut requester = conn(&cluster.resp_addr(0)).await;
    let asked = tokio::spawn(async move {
        redis::cmd("FIRN.REQUEST")
            .arg("jobs")
            .arg("work")
            .arg("TIMEOUT")
            .arg(60_000)
            .query_async::<String>(&mut requester)
            .await
    });
    let (first_id, payload) = serve(&mut doomed, &["jobs", "ACKWAIT", "1000", "BLOCK", "10000"])
        .await
        .expect("the first worker takes the request");
    assert_eq!(payload, "work");
    drop(doomed); // it dies without replying

    // The dead worker is still live (LIVENESS, 30 s, after its last read), but a due
    // request goes to another live worker, not back to the one that let it fall due.
    let mut second = conn(&cluster.resp_addr(2)).await;
    let (id, payload) = serve(&mut second, &["jobs", "BLOCK", "10000"])
        .await
        .expect("the request comes back after ACKWAIT");
    assert_eq!(payload, "work");
    assert_eq!(id, first_id, "the same request");
    assert_eq!(reply(&mut second, &id, "done").await, 1);
    let answer = tokio::time::timeout(Duration::from_secs(20), asked)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(answer.unwrap(), "done");
}
