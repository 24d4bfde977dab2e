//! Users and permissions on both front ends: with a users file, nothing is answered before
//! a client signs in (but AUTH, HELLO … AUTH and QUIT; over HTTP, the health probe and the
//! page), a wrong password or token is refused, and a user reaches only its prefixes with the
//! permissions it was given — on every command and endpoint family (keys, scans, snapshots,
//! watch, the log, streams, groups, publish/subscribe, services, keyspaces, the cluster). A
//! refused request changes nothing and the connection stays usable.

mod common;

use std::sync::Arc;

use firn_node::auth::Users;
use firn_node::{NodeConfig, RunningNode};
use redis::Value;

/// alice (password `wonderland`, token `alice-token`) reads and writes `sensor/`; ops
/// (`hunter2`, `ops-token`) may do everything.
const USERS: &str = include_str!("../../../tests/fixtures/users.toml");

async fn start() -> RunningNode {
    let config = NodeConfig {
        resp_addr: ([127, 0, 0, 1], 0).into(),
        http_addr: ([127, 0, 0, 1], 0).into(),
        peer_addr: ([127, 0, 0, 1], 0).into(),
        in_memory: true,
        allow_flushall: true,
        users: Some(Arc::new(Users::parse(USERS).unwrap())),
        ..NodeConfig::default()
    };
    RunningNode::start(config).await.expect("node starts")
}

async fn conn(node: &RunningNode, credentials: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(format!("redis://{credentials}{}/", node.resp_addr))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// The reply, or the error line's text.
async fn run(c: &mut redis::aio::MultiplexedConnection, args: &[&str]) -> Result<Value, String> {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query_async::<Value>(c).await.map_err(|e| e.to_string())
}

fn refused(result: Result<Value, String>, code: &str, what: &str) {
    match result {
        // The redis crate shows some codes by its own names (`NoPerm`).
        Err(e) => assert!(e.to_uppercase().contains(code), "{what}: {e}"),
        Ok(v) => panic!("{what}: not refused, answered {v:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resp_answers_nothing_before_a_sign_in_and_refuses_wrong_passwords() {
    let node = start().await;
    let mut c = conn(&node, "").await;
    refused(run(&mut c, &["GET", "sensor/1"]).await, "NOAUTH", "GET");
    refused(run(&mut c, &["PING"]).await, "NOAUTH", "PING");
    refused(run(&mut c, &["ACL", "WHOAMI"]).await, "NOAUTH", "WHOAMI");
    refused(
        run(&mut c, &["HELLO", "3"]).await,
        "NOAUTH",
        "HELLO without AUTH",
    );
    refused(
        run(&mut c, &["AUTH", "alice", "Wonderland"]).await,
        "WRONGPASS",
        "a wrong password",
    );
    refused(
        run(&mut c, &["AUTH", "nobody", "x"]).await,
        "WRONGPASS",
        "a user that is not",
    );
    refused(
        run(&mut c, &["HELLO", "3", "AUTH", "alice", "x"]).await,
        "WRONGPASS",
        "HELLO with a wrong password",
    );
    refused(
        run(&mut c, &["GET", "sensor/1"]).await,
        "NOAUTH",
        "still signed out",
    );
    assert_eq!(
        run(&mut c, &["AUTH", "alice", "wonderland"]).await,
        Ok(Value::Okay)
    );
    assert_eq!(
        run(&mut c, &["ACL", "WHOAMI"]).await,
        Ok(Value::BulkString(b"alice".to_vec()))
    );
    // HELLO … AUTH signs in as another user (and switches the protocol).
    let hello = run(&mut c, &["HELLO", "2", "AUTH", "ops", "hunter2"]).await;
    assert!(hello.is_ok(), "{hello:?}");
    assert_eq!(
        run(&mut c, &["ACL", "WHOAMI"]).await,
        Ok(Value::BulkString(b"ops".to_vec()))
    );
    // A client that signs in as it connects (redis://user:pass@host).
    let mut alice = conn(&node, "alice:wonderland@").await;
    assert_eq!(
        run(&mut alice, &["SET", "sensor/1", "21"]).await,
        Ok(Value::Okay)
    );
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resp_commands_reach_only_the_users_prefixes() {
    let node = start().await;
    let mut ops = conn(&node, "ops:hunter2@").await;
    let mut alice = conn(&node, "alice:wonderland@").await;
    for setup in [
        vec!["SET", "cfg:mode", "eco"],
        vec!["XADD", "other/s", "*", "f", "v"],
        vec!["XGROUP", "CREATE", "other/s", "g", "0"],
    ] {
        assert!(run(&mut ops, &setup).await.is_ok(), "{setup:?}");
    }
    // What alice may do.
    for allowed in [
        vec!["SET", "sensor/1", "21"],
        vec!["GET", "sensor/1"],
        vec!["FIRN.PUT", "sensor/2", "22"],
        vec!["MGET", "sensor/1", "sensor/2"],
        vec!["FIRN.HISTORY", "sensor/1"],
        vec!["SCAN", "0", "MATCH", "sensor/*"],
        vec!["FIRN.SNAPSHOT", "PREFIX", "sensor/"],
        vec!["XADD", "sensor/s", "*", "f", "v"],
        vec!["XRANGE", "sensor/s", "-", "+"],
        vec!["XGROUP", "CREATE", "sensor/s", "g", "0"],
        vec!["XREADGROUP", "GROUP", "g", "c", "STREAMS", "sensor/s", ">"],
        vec!["FIRN.LOG", "APPEND", "sensor/log", "TAGS", "1", "t", "x"],
        vec!["PUBLISH", "sensor/ch", "hi"],
        vec!["DEL", "sensor/2"],
        vec!["FIRN.KEYSPACE", "LIST"],
        vec!["FIRN.TWIN", "DESIRE", "sensor/d1", r#"{"a":1}"#],
        vec!["FIRN.TWIN", "GET", "sensor/d1"],
    ] {
        let r = run(&mut alice, &allowed).await;
        assert!(r.is_ok(), "{allowed:?}: {r:?}");
    }
    // And what she may not: every family, each refused with NOPERM.
    for (args, what) in [
        (vec!["GET", "cfg:mode"], "read outside her prefixes"),
        (vec!["SET", "cfg:mode", "turbo"], "write outside"),
        (vec!["FIRN.PUT", "cfg:mode", "turbo"], "FIRN.PUT outside"),
        (
            vec!["MSET", "sensor/3", "1", "cfg:mode", "turbo"],
            "MSET partly outside",
        ),
        (vec!["DEL", "cfg:mode"], "DEL outside"),
        (vec!["MGET", "sensor/1", "cfg:mode"], "MGET partly outside"),
        (vec!["FIRN.HISTORY", "cfg:mode"], "history"),
        (vec!["SCAN", "0"], "SCAN of everything"),
        (vec!["SCAN", "0", "MATCH", "cfg:*"], "SCAN outside"),
        (vec!["FIRN.SCAN", "cfg:"], "FIRN.SCAN outside"),
        (
            vec!["FIRN.SNAPSHOT", "PREFIX", ""],
            "a snapshot of everything",
        ),
        (
            vec!["FIRN.SNAPSHOT", "KEYS", "sensor/1", "cfg:mode"],
            "a snapshot partly outside",
        ),
        (vec!["DBSIZE"], "DBSIZE (every key)"),
        (vec!["FIRN.TWIN", "GET", "cfg/d1"], "a twin outside"),
        (
            vec!["FIRN.TWIN", "REPORT", "cfg/d1", "{}"],
            "a twin patch outside",
        ),
        (vec!["FIRN.WATCH", "cfg:mode"], "watch outside"),
        (
            vec!["FIRN.WATCH", "sens", "PREFIX"],
            "watch of a wider prefix",
        ),
        (vec!["XADD", "other/s", "*", "f", "v"], "XADD outside"),
        (vec!["XRANGE", "other/s", "-", "+"], "XRANGE outside"),
        (
            vec!["XREAD", "STREAMS", "sensor/s", "other/s", "0", "0"],
            "XREAD partly outside",
        ),
        (vec!["XLEN", "other/s"], "XLEN outside"),
        (vec!["XINFO", "GROUPS", "other/s"], "XINFO outside"),
        (
            vec!["XREADGROUP", "GROUP", "g", "c", "STREAMS", "other/s", ">"],
            "XREADGROUP outside",
        ),
        (
            vec!["XGROUP", "CREATE", "other/s", "g2", "0"],
            "XGROUP outside",
        ),
        (vec!["XACK", "other/s", "g", "0-1"], "XACK outside"),
        (
            vec!["FIRN.LOG", "APPEND", "other/log", "TAGS", "1", "t", "x"],
            "log append outside",
        ),
        (
            vec!["FIRN.LOG", "RANGE", "other/log", "t", "-", "+"],
            "log read outside",
        ),
        (vec!["FIRN.LOGS"], "the listing of every log"),
        (vec!["SUBSCRIBE", "other/ch"], "SUBSCRIBE outside"),
        (vec!["PSUBSCRIBE", "*"], "PSUBSCRIBE of everything"),
        (vec!["PUBLISH", "other/ch", "hi"], "PUBLISH outside"),
        (
            vec!["FIRN.REQUEST", "billing", "x", "TIMEOUT", "100"],
            "a service request",
        ),
        (
            vec!["FIRN.KEYSPACE", "CREATE", "sensor/", "MODE", "latest"],
            "keyspaces need admin",
        ),
        (
            vec!["FIRN.TRUNCATE", "KEY", "cfg:mode", "VERSION", "1"],
            "truncate outside",
        ),
        (vec!["FLUSHALL"], "FLUSHALL"),
        (vec!["FIRN.CLUSTER", "REMOVE", "1"], "removing a node"),
        (vec!["FIRN.LOCAL"], "the local region"),
    ] {
        refused(run(&mut alice, &args).await, "NOPERM", what);
    }
    // Nothing refused was written, and the connection is still usable.
    assert_eq!(
        run(&mut ops, &["GET", "cfg:mode"]).await,
        Ok(Value::BulkString(b"eco".to_vec()))
    );
    assert_eq!(
        run(&mut ops, &["EXISTS", "sensor/3"]).await,
        Ok(Value::Int(0))
    );
    assert_eq!(run(&mut ops, &["XLEN", "other/s"]).await, Ok(Value::Int(1)));
    assert_eq!(
        run(&mut alice, &["GET", "sensor/1"]).await,
        Ok(Value::BulkString(b"21".to_vec()))
    );
    // The admin user may do what alice may not.
    assert!(
        run(
            &mut ops,
            &["FIRN.KEYSPACE", "CREATE", "sensor/", "MODE", "latest"]
        )
        .await
        .is_ok()
    );
    node.shutdown().await;
}

fn http(
    node: &RunningNode,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&[u8]>,
) -> (u16, serde_json::Value) {
    let mut req = ureq::request(method, &format!("http://{}{path}", node.http_addr))
        .timeout(std::time::Duration::from_secs(10));
    if let Some(t) = token {
        req = req.set("Authorization", &format!("Bearer {t}"));
    }
    let result = match body {
        Some(b) => req.set("Content-Type", "application/json").send_bytes(b),
        None => req.call(),
    };
    let answer = match result {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("{method} {path}: {e}"),
    };
    let code = answer.status();
    let text = answer.into_string().unwrap_or_default();
    (
        code,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_needs_a_bearer_token_and_reaches_only_the_users_prefixes() {
    let node = start().await;
    let node = Arc::new(node);
    let n = node.clone();
    tokio::task::spawn_blocking(move || {
        let node = &*n;
        // Without a token, or with one no user has: 401 before any endpoint runs.
        let (code, body) = http(node, "GET", "/v1/kv/sensor/1", None, None);
        assert_eq!((code, body["error"].as_str()), (401, Some("NOAUTH")));
        let (code, body) = http(node, "GET", "/v1/cluster", Some("nope"), None);
        assert_eq!((code, body["error"].as_str()), (401, Some("WRONGPASS")));
        let (code, _) = http(node, "PUT", "/v1/kv/sensor/1", None, Some(b"1"));
        assert_eq!(code, 401);
        // The health probe and the page answer anyone.
        assert_eq!(http(node, "GET", "/healthz", None, None).0, 200);
        assert_eq!(http(node, "GET", "/", None, None).0, 200);

        let alice = Some("alice-token");
        let (code, _) = http(node, "PUT", "/v1/kv/sensor/1", alice, Some(b"21"));
        assert_eq!(code, 200);
        assert_eq!(http(node, "GET", "/v1/kv/sensor/1", alice, None).0, 200);
        assert_eq!(http(node, "GET", "/v1/cluster", alice, None).0, 200);
        assert_eq!(
            http(node, "GET", "/v1/scan?prefix=sensor/", alice, None).0,
            200
        );
        for (method, path, body, what) in [
            (
                "PUT",
                "/v1/kv/cfg:mode",
                Some(&b"turbo"[..]),
                "a put outside",
            ),
            ("GET", "/v1/kv/cfg:mode", None, "a get outside"),
            ("DELETE", "/v1/kv/cfg:mode", None, "a delete outside"),
            ("GET", "/v1/history/cfg:mode", None, "history outside"),
            ("GET", "/v1/scan?prefix=", None, "a scan of everything"),
            (
                "GET",
                "/v1/mget?key=sensor/1&key=cfg:mode",
                None,
                "mget partly outside",
            ),
            (
                "GET",
                "/v1/snapshot?prefix=cfg:",
                None,
                "a snapshot outside",
            ),
            ("GET", "/v1/watch?prefix=cfg:", None, "a watch outside"),
            (
                "POST",
                "/v1/truncate",
                Some(&br#"{"prefix":"cfg:","before_version":1}"#[..]),
                "truncate",
            ),
            (
                "POST",
                "/v1/log/other",
                Some(&br#"{"records":[{"tags":["t"],"value":"x"}]}"#[..]),
                "a log append",
            ),
            ("GET", "/v1/log/other/t/range", None, "a log read"),
            ("GET", "/v1/log/other/t", None, "a log's info"),
            ("DELETE", "/v1/log/other?before=1", None, "a log trim"),
            ("GET", "/v1/logs", None, "the listing of every log"),
            ("GET", "/v1/streams/other/groups", None, "a stream's groups"),
            (
                "POST",
                "/v1/streams/other/groups",
                Some(&br#"{"group":"g","mkstream":true}"#[..]),
                "a group create",
            ),
            (
                "POST",
                "/v1/streams/other/groups/g/read",
                Some(&br#"{"consumer":"c"}"#[..]),
                "a group read",
            ),
            (
                "GET",
                "/v1/streams/other/groups/g/consumers/c/events",
                None,
                "a group's event stream",
            ),
            (
                "POST",
                "/v1/services/billing?timeout_ms=100",
                Some(&b"x"[..]),
                "a service request",
            ),
            (
                "POST",
                "/v1/keyspaces",
                Some(&br#"{"prefix":"sensor/"}"#[..]),
                "a keyspace",
            ),
            ("DELETE", "/v1/keyspaces/sensor%2F", None, "a keyspace drop"),
            ("DELETE", "/v1/cluster/nodes/1", None, "removing a node"),
            ("GET", "/v1/local", None, "the local region"),
        ] {
            let (code, body) = http(node, method, path, alice, body);
            assert_eq!(
                (code, body["error"].as_str()),
                (403, Some("NOPERM")),
                "{what}: {body}"
            );
        }
        // Nothing refused was written.
        let ops = Some("ops-token");
        assert_eq!(http(node, "GET", "/v1/kv/cfg:mode", ops, None).0, 404);
        let (code, _) = http(
            node,
            "POST",
            "/v1/keyspaces",
            ops,
            Some(br#"{"prefix":"cfg:"}"#),
        );
        assert_eq!(code, 201);
    })
    .await
    .unwrap();
    Arc::try_unwrap(node).ok().unwrap().shutdown().await;
}

/// One `FIRN.SERVE service BLOCK 5000`: the request id it was given.
async fn served_id(c: &mut redis::aio::MultiplexedConnection, service: &str) -> Vec<u8> {
    match run(c, &["FIRN.SERVE", service, "BLOCK", "5000"]).await {
        Ok(Value::Array(parts)) => match &parts[0] {
            Value::BulkString(id) => id.clone(),
            other => panic!("FIRN.SERVE {service} answered an id of {other:?}"),
        },
        other => panic!("FIRN.SERVE {service} answered {other:?}"),
    }
}

/// A request to `service` sent on a connection of its own, answering the reply's text.
fn request(
    node: &RunningNode,
    service: &'static str,
    payload: &'static str,
) -> tokio::task::JoinHandle<Result<Value, String>> {
    let addr = node.resp_addr;
    tokio::spawn(async move {
        let mut c = redis::Client::open(format!("redis://ops:hunter2@{addr}/"))
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        run(
            &mut c,
            &["FIRN.REQUEST", service, payload, "TIMEOUT", "10000"],
        )
        .await
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_replies_only_to_requests_of_the_service_it_may_write() {
    let node = start().await;
    let mut worker = conn(&node, "billing-worker:ledger@").await;
    let mut ops = conn(&node, "ops:hunter2@").await;

    // Its own service: served and answered with write on firn.svc:{billing} alone.
    let billing = request(&node, "billing", "invoice 7");
    let id = served_id(&mut worker, "billing").await;
    assert_eq!(
        run(
            &mut worker,
            &["FIRN.REPLY", std::str::from_utf8(&id).unwrap(), "paid"]
        )
        .await,
        Ok(Value::Int(1))
    );
    assert_eq!(
        billing.await.unwrap(),
        Ok(Value::BulkString(b"paid".to_vec()))
    );

    // Another service's request: the id names `shipping`, which the worker may not write.
    let shipping = request(&node, "shipping", "parcel 9");
    let id = served_id(&mut ops, "shipping").await;
    let id = String::from_utf8(id).unwrap();
    refused(
        run(&mut worker, &["FIRN.REPLY", &id, "forged"]).await,
        "NOPERM",
        "a reply to another service's request",
    );
    // Nor may it pass that request's reply address off as one of its own service: the
    // waiting requester is not completed by it.
    let (address, _) = id.rsplit_once('/').unwrap();
    assert_eq!(
        run(
            &mut worker,
            &["FIRN.REPLY", &format!("{address}/billing"), "forged"]
        )
        .await,
        Ok(Value::Int(0))
    );
    assert_eq!(
        run(&mut ops, &["FIRN.REPLY", &id, "shipped"]).await,
        Ok(Value::Int(1))
    );
    assert_eq!(
        shipping.await.unwrap(),
        Ok(Value::BulkString(b"shipped".to_vec()))
    );
    node.shutdown().await;
}
