//! The Redis commands Firn supports, through the `redis` crate, RESP2 and RESP3.

mod common;

use common::*;
use redis::{AsyncCommands, Value};

#[tokio::test]
async fn connection_commands_answer_like_redis() {
    let node = start_node(false).await;
    let mut c = redis_conn(&node).await;
    let pong: String = redis::cmd("PING").query_async(&mut c).await.unwrap();
    assert_eq!(pong, "PONG");
    let echo: String = redis::cmd("ECHO")
        .arg("hi")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(echo, "hi");
    let _: () = redis::cmd("SELECT")
        .arg(0)
        .query_async(&mut c)
        .await
        .unwrap();
    let bad_db: redis::RedisResult<()> = redis::cmd("SELECT").arg(1).query_async(&mut c).await;
    assert!(bad_db.unwrap_err().to_string().contains("out of range"));
    let _: () = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg("sensor-7")
        .query_async(&mut c)
        .await
        .unwrap();
    let name: String = redis::cmd("CLIENT")
        .arg("GETNAME")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(name, "sensor-7");
    let id: i64 = redis::cmd("CLIENT")
        .arg("ID")
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(id > 0);
    let count: i64 = redis::cmd("COMMAND")
        .arg("COUNT")
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(count > 20);
    let docs: Value = redis::cmd("COMMAND")
        .arg("DOCS")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(docs, Value::Array(vec![]));
    let info: String = redis::cmd("INFO").query_async(&mut c).await.unwrap();
    assert!(
        info.contains("redis_version:") && info.contains("raft_state:Leader"),
        "{info}"
    );
    let keyspace: String = redis::cmd("INFO")
        .arg("keyspace")
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(keyspace.starts_with("# Keyspace") && !keyspace.contains("# Server"));
    // CONFIG GET answers the Redis settings that describe Firn (as name/value pairs).
    for (patterns, expected) in [
        (vec!["save"], vec!["save", ""]),
        (
            vec!["APPEND*"],
            vec!["appendfsync", "always", "appendonly", "yes"],
        ),
        (vec!["maxmemory", "save"], vec!["save", ""]),
        (vec!["maxmemory"], vec![]),
    ] {
        let got: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg(&patterns)
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(got, expected, "CONFIG GET {patterns:?}");
    }
    let bare: redis::RedisResult<Value> = redis::cmd("CONFIG").arg("GET").query_async(&mut c).await;
    assert!(
        bare.unwrap_err()
            .to_string()
            .contains("wrong number of arguments")
    );
    node.shutdown().await;
}

#[tokio::test]
async fn hello_switches_to_resp3_and_maps_come_back_as_maps() {
    let node = start_node(false).await;
    let mut c = redis_conn_resp3(&node).await;
    let _: () = c.set("k", "v").await.unwrap();
    let v: Value = redis::cmd("FIRN.GET")
        .arg("k")
        .query_async(&mut c)
        .await
        .unwrap();
    let Value::Map(pairs) = v else {
        panic!("expected a RESP3 map, got {v:?}")
    };
    assert!(pairs.contains(&(
        Value::BulkString(b"value".to_vec()),
        Value::BulkString(b"v".to_vec())
    )));
    let hello: Value = redis::cmd("HELLO")
        .arg(3)
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(matches!(hello, Value::Map(_)));
    let bad: redis::RedisResult<Value> = redis::cmd("HELLO").arg(4).query_async(&mut c).await;
    assert_eq!(bad.unwrap_err().code(), Some("NOPROTO"));
    node.shutdown().await;
}

#[tokio::test]
async fn string_commands_behave_as_in_redis() {
    let node = start_node(false).await;
    let mut c = redis_conn(&node).await;
    let _: () = c.set("a", "1").await.unwrap();
    assert_eq!(
        c.get::<_, Option<String>>("a").await.unwrap().as_deref(),
        Some("1")
    );
    assert_eq!(c.get::<_, Option<String>>("missing").await.unwrap(), None);

    // NX / XX / GET
    let nx: Option<String> = redis::cmd("SET")
        .arg("a")
        .arg("2")
        .arg("NX")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(nx, None);
    let nx_new: String = redis::cmd("SET")
        .arg("b")
        .arg("1")
        .arg("NX")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(nx_new, "OK");
    let xx_missing: Option<String> = redis::cmd("SET")
        .arg("c")
        .arg("1")
        .arg("XX")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(xx_missing, None);
    let old: Option<String> = redis::cmd("SET")
        .arg("a")
        .arg("3")
        .arg("GET")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(old.as_deref(), Some("1"));
    // NX with GET (Redis 7): a present key keeps its value and answers it; an absent one
    // is set and answers nil.
    for (key, expected) in [("a", Some("3")), ("nxget", None)] {
        let got: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg("nx-get")
            .arg("NX")
            .arg("GET")
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(got.as_deref(), expected, "SET {key} NX GET");
    }
    assert_eq!(c.get::<_, String>("a").await.unwrap(), "3");
    assert_eq!(c.get::<_, String>("nxget").await.unwrap(), "nx-get");
    let _: () = redis::cmd("SET")
        .arg("a")
        .arg("4")
        .arg("EX")
        .arg(10)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(c.get::<_, String>("a").await.unwrap(), "4");
    assert_eq!(c.ttl::<_, i64>("a").await.unwrap(), 10);
    let _: () = c.set("a", "3").await.unwrap();
    assert_eq!(
        c.ttl::<_, i64>("a").await.unwrap(),
        -1,
        "a plain SET clears the expiry"
    );

    let _: () = redis::cmd("MSET")
        .arg("m1")
        .arg("x")
        .arg("m2")
        .arg("y")
        .query_async(&mut c)
        .await
        .unwrap();
    let got: Vec<Option<String>> = redis::cmd("MGET")
        .arg("m1")
        .arg("nope")
        .arg("m2")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(got, vec![Some("x".into()), None, Some("y".into())]);
    let exists: i64 = redis::cmd("EXISTS")
        .arg("m1")
        .arg("m2")
        .arg("nope")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(exists, 2);
    let t: String = redis::cmd("TYPE")
        .arg("m1")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(t, "string");
    let t: String = redis::cmd("TYPE")
        .arg("nope")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(t, "none");
    let deleted: i64 = redis::cmd("DEL")
        .arg("m1")
        .arg("nope")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(deleted, 1);
    let size: i64 = redis::cmd("DBSIZE").query_async(&mut c).await.unwrap();
    assert_eq!(size, 4); // a, b, m2, nxget
    // Redis SCAN runs in the connection's session too: what it showed raises the token.
    let mut fresh = redis_conn(&node).await;
    let (_, scanned): (String, Vec<String>) = redis::cmd("SCAN")
        .arg(0)
        .arg("COUNT")
        .arg(100)
        .query_async(&mut fresh)
        .await
        .unwrap();
    assert_eq!(scanned.len(), 4);
    let token: String = redis::cmd("FIRN.TOKEN")
        .query_async(&mut fresh)
        .await
        .unwrap();
    assert_ne!(token, "0-0", "SCAN left the session's token unraised");

    let flush: redis::RedisResult<()> = redis::cmd("FLUSHALL").query_async(&mut c).await;
    assert!(flush.unwrap_err().to_string().contains("--allow-flushall"));
    assert_eq!(
        redis::cmd("DBSIZE")
            .query_async::<i64>(&mut c)
            .await
            .unwrap(),
        4
    );
    node.shutdown().await;
}

#[tokio::test]
async fn flushall_works_when_enabled() {
    let node = start_node(true).await;
    let mut c = redis_conn(&node).await;
    let _: () = c.set("a", "1").await.unwrap();
    let _: () = redis::cmd("FLUSHALL").query_async(&mut c).await.unwrap();
    assert_eq!(
        redis::cmd("DBSIZE")
            .query_async::<i64>(&mut c)
            .await
            .unwrap(),
        0
    );
    node.shutdown().await;
}

#[tokio::test]
async fn pipelined_writes_apply_in_order_and_a_read_sees_them() {
    let node = start_node(false).await;
    let mut c = redis_conn(&node).await;
    let mut pipe = redis::pipe();
    pipe.cmd("GET").arg("p");
    for i in 0..25 {
        pipe.cmd("SET").arg("p").arg(i).ignore();
    }
    pipe.cmd("GET").arg("p").cmd("GET").arg("p");
    for i in 25..50 {
        pipe.cmd("SET").arg("p").arg(i).ignore();
    }
    pipe.cmd("GET").arg("p");
    let (before, mid, mid_again, last): (Option<String>, String, String, String) =
        pipe.query_async(&mut c).await.unwrap();
    assert_eq!(before, None, "a read does not see writes sent after it");
    assert_eq!((mid.as_str(), mid_again.as_str()), ("24", "24"));
    assert_eq!(last, "49");
    let history: Vec<Value> = redis::cmd("FIRN.HISTORY")
        .arg("p")
        .arg("LIMIT")
        .arg(100)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(history.len(), 50);
    node.shutdown().await;
}
