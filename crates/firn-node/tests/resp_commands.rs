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
async fn scan_with_match_and_count_visits_every_key_once() {
    let node = start_node(false).await;
    let mut c = redis_conn(&node).await;
    for i in 0..57 {
        let _: () = c.set(format!("user:{i}"), i).await.unwrap();
        let _: () = c.set(format!("other:{i}"), i).await.unwrap();
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg("user:*")
            .arg("COUNT")
            .arg(10)
            .query_async(&mut c)
            .await
            .unwrap();
        for k in keys {
            assert!(k.starts_with("user:"));
            assert!(seen.insert(k), "a key was returned twice");
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
    assert_eq!(seen.len(), 57);
    // The crate's own iterator (what applications use) agrees.
    let mut iter: redis::AsyncIter<String> = c.scan_match("other:*").await.unwrap();
    let mut n = 0;
    while iter.next_item().await.is_some() {
        n += 1;
    }
    assert_eq!(n, 57);
    node.shutdown().await;
}

/// A client may continue a scan on any node (a pool behind a load balancer does): each page
/// goes to the next node, while another scan holds cursors of its own on every node.
#[tokio::test]
async fn a_scan_continues_on_any_node_and_never_in_another_scans_place() {
    let nodes = start_cluster(3, 3).await;
    let mut conns = Vec::new();
    for node in &nodes {
        conns.push(redis_conn_patient(node).await);
    }
    for i in 0..90 {
        let _: () = settle_set(&mut conns[0], &format!("a:{i:03}"), i).await;
        let _: () = settle_set(&mut conns[0], &format!("b:{i:03}"), i).await;
    }
    let page = |c: &mut redis::aio::MultiplexedConnection, cursor: u64, pattern: &str| {
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(10);
        let c = c.clone();
        async move {
            let mut c = c;
            cmd.query_async::<(u64, Vec<String>)>(&mut c).await.unwrap()
        }
    };
    // Another scan leaves cursors on every node.
    for c in conns.iter_mut() {
        let (next, _) = page(c, 0, "b:*").await;
        assert_ne!(next, 0);
        let _ = page(c, next, "b:*").await;
    }
    let (mut seen, mut cursor, mut turn) = (std::collections::BTreeSet::new(), 0u64, 0usize);
    loop {
        let (next, keys) = page(&mut conns[turn % 3], cursor, "a:*").await;
        turn += 1;
        for k in keys {
            assert!(k.starts_with("a:"), "{k} from another scan's place");
            seen.insert(k);
        }
        if next == 0 {
            break;
        }
        assert!(next < 1 << 53, "cursor {next} is not exact in every client");
        cursor = next;
    }
    assert!(
        turn > 3,
        "the scan took {turn} pages: it never changed nodes"
    );
    assert_eq!(seen.len(), 90, "{seen:?}");
    // A number no node issued is refused, not read as a place.
    let e: redis::RedisResult<(u64, Vec<String>)> = redis::cmd("SCAN")
        .arg(12345u64)
        .query_async(&mut conns[1])
        .await;
    assert!(e.unwrap_err().to_string().contains("invalid cursor"));
    for node in nodes {
        node.shutdown().await;
    }
}

/// SET, sent again while the cluster's leaders are still being elected.
async fn settle_set(c: &mut redis::aio::MultiplexedConnection, key: &str, value: i32) {
    for _ in 0..100 {
        let r: redis::RedisResult<()> = c.set(key, value).await;
        if r.is_ok() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("SET {key} never succeeded");
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

#[tokio::test]
async fn firn_commands_expose_versions_time_and_keyspaces() {
    let node = start_node(false).await;
    let mut c = redis_conn(&node).await;
    let (v1, ts1): (u64, String) = redis::cmd("FIRN.PUT")
        .arg("s")
        .arg("a")
        .arg("EVENTTIME")
        .arg(100)
        .query_async(&mut c)
        .await
        .unwrap();
    let (v2, _): (u64, String) = redis::cmd("FIRN.PUT")
        .arg("s")
        .arg("b")
        .arg("IFVERSION")
        .arg(1)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!((v1, v2), (1, 2));
    let conflict: redis::RedisResult<Value> = redis::cmd("FIRN.PUT")
        .arg("s")
        .arg("c")
        .arg("IFVERSION")
        .arg(1)
        .query_async(&mut c)
        .await;
    let err = conflict.unwrap_err();
    assert_eq!(err.code(), Some("CONFLICT"));
    assert!(err.to_string().contains("version is 2"));

    let by_version: Vec<Value> = redis::cmd("FIRN.GET")
        .arg("s")
        .arg("VERSION")
        .arg(1)
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(by_version.contains(&Value::BulkString(b"a".to_vec())));
    let as_of: Vec<Value> = redis::cmd("FIRN.GET")
        .arg("s")
        .arg("ASOF")
        .arg(&ts1)
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(as_of.contains(&Value::BulkString(b"a".to_vec())));
    let by_event: Vec<Value> = redis::cmd("FIRN.GET")
        .arg("s")
        .arg("EVENTTIME")
        .arg(150)
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(by_event.contains(&Value::BulkString(b"a".to_vec())));
    let local: Vec<Value> = redis::cmd("FIRN.GET")
        .arg("s")
        .arg("CONSISTENCY")
        .arg("local")
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(local.contains(&Value::BulkString(b"b".to_vec())));

    let mget: Vec<Value> = redis::cmd("FIRN.MGET")
        .arg("ASOF")
        .arg(&ts1)
        .arg("s")
        .arg("none")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(mget.len(), 2);
    assert_eq!(mget[1], Value::Nil);
    // By event time: version 1 carries event time 100, version 2 none.
    let by_event: Vec<Value> = redis::cmd("FIRN.MGET")
        .arg("EVENTTIME")
        .arg(150)
        .arg("s")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(field(&by_event[0], "version"), Some(&Value::Int(1)));
    for (t, expected) in [(150, vec![b"s".to_vec()]), (99, vec![])] {
        let (_, keys): (Vec<u8>, Vec<Vec<u8>>) = redis::cmd("FIRN.SCAN")
            .arg("")
            .arg("EVENTTIME")
            .arg(t)
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(keys, expected, "scan by event time {t}");
    }

    // One cut at ts1: the value then, nil for an absent key, and the time it was read at.
    let snap: Value = redis::cmd("FIRN.SNAPSHOT")
        .arg("AT")
        .arg(&ts1)
        .arg("KEYS")
        .arg("s")
        .arg("none")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(
        field(&snap, "at"),
        Some(&Value::BulkString(ts1.clone().into_bytes()))
    );
    match field(&snap, "values") {
        Some(Value::Array(values)) => {
            assert_eq!(values.len(), 2);
            assert_eq!(
                field(&values[0], "value"),
                Some(&Value::BulkString(b"a".to_vec()))
            );
            assert_eq!(values[1], Value::Nil);
        }
        other => panic!("values: {other:?}"),
    }
    let bad: redis::RedisResult<Value> = redis::cmd("FIRN.SNAPSHOT")
        .arg("NOPE")
        .arg("s")
        .query_async(&mut c)
        .await;
    assert!(
        bad.unwrap_err()
            .to_string()
            .contains("unknown FIRN.SNAPSHOT option 'NOPE'")
    );
    let pong: String = redis::cmd("PING").query_async(&mut c).await.unwrap();
    assert_eq!(pong, "PONG");

    let removed: i64 = redis::cmd("FIRN.TRUNCATE")
        .arg("KEY")
        .arg("s")
        .arg("VERSION")
        .arg(2)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(removed, 1);
    let compacted: redis::RedisResult<Value> = redis::cmd("FIRN.GET")
        .arg("s")
        .arg("VERSION")
        .arg(1)
        .query_async(&mut c)
        .await;
    assert_eq!(compacted.unwrap_err().code(), Some("COMPACTED"));

    let (cursor, keys): (String, Vec<String>) = redis::cmd("FIRN.SCAN")
        .arg("s")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!((cursor.as_str(), keys), ("", vec!["s".to_string()]));

    let _: () = redis::cmd("FIRN.KEYSPACE")
        .arg("CREATE")
        .arg("last/")
        .arg("MODE")
        .arg("latest")
        .arg("MAXAGE")
        .arg("1h")
        .arg("LOCAL")
        .arg("on")
        .arg("FOLLOW")
        .arg("1")
        .query_async(&mut c)
        .await
        .unwrap();
    let list: Vec<Value> = redis::cmd("FIRN.KEYSPACE")
        .arg("LIST")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(list.len(), 2);
    let shown = format!("{list:?}");
    for field in [
        "'\"local\"'), bulk-string('\"on\"')",
        "'\"follow\"'), bulk-string('\"1\"')",
    ] {
        assert!(shown.contains(field), "{field} in {shown}");
    }
    let _: () = redis::cmd("FIRN.KEYSPACE")
        .arg("DROP")
        .arg("last/")
        .query_async(&mut c)
        .await
        .unwrap();
    let missing: redis::RedisResult<()> = redis::cmd("FIRN.KEYSPACE")
        .arg("DROP")
        .arg("last/")
        .query_async(&mut c)
        .await;
    assert!(missing.unwrap_err().to_string().contains("no keyspace"));
    let (dv, _): (u64, String) = redis::cmd("FIRN.DEL")
        .arg("s")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(dv, 3);
    let gone: Value = redis::cmd("FIRN.DEL")
        .arg("s")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(gone, Value::Nil);
    node.shutdown().await;
}

/// `FIRN.GET key EVENTTIME e ASOF t` (either order), and over HTTP `event_time` with
/// `as_of`: the value at event time e as it was known at t — a late write after t changes
/// the plain read by event time, not this one. Other pairs of options are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_by_event_time_as_of_a_time_is_what_was_known_then() {
    let node = start_node(false).await;
    let mut c = redis_conn(&node).await;
    let put = |value: &'static str, event: u64| {
        redis::cmd("FIRN.PUT")
            .arg("temp")
            .arg(value)
            .arg("EVENTTIME")
            .arg(event)
            .clone()
    };
    let (_, first): (u64, String) = put("on time", 100).query_async(&mut c).await.unwrap();
    let _: (u64, String) = put("next", 200).query_async(&mut c).await.unwrap();
    let _: (u64, String) = put("corrected late", 100)
        .query_async(&mut c)
        .await
        .unwrap();
    let value_of = |v: &Value| match field(v, "value") {
        Some(Value::BulkString(b)) => String::from_utf8(b.clone()).unwrap(),
        other => panic!("{other:?}"),
    };
    let now: Value = redis::cmd("FIRN.GET")
        .arg("temp")
        .arg("EVENTTIME")
        .arg(150)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(value_of(&now), "corrected late");
    for args in [
        ["EVENTTIME", "150", "ASOF", first.as_str()],
        ["ASOF", first.as_str(), "EVENTTIME", "150"],
    ] {
        let then: Value = redis::cmd("FIRN.GET")
            .arg("temp")
            .arg(&args[..])
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(value_of(&then), "on time", "{args:?}");
    }
    for args in [
        ["VERSION", "1", "ASOF", first.as_str()],
        ["EVENTTIME", "1", "EVENTTIME", "2"],
    ] {
        let e = redis::cmd("FIRN.GET")
            .arg("temp")
            .arg(&args[..])
            .query_async::<Value>(&mut c)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("at most one"), "{args:?}: {e}");
    }
    let base = format!("http://{}", node.http_addr);
    let first_q = first.clone();
    let (then, refused) = tokio::task::spawn_blocking(move || {
        let then = ureq::get(&format!("{base}/v1/kv/temp?event_time=150&as_of={first_q}"))
            .call()
            .unwrap()
            .into_string()
            .unwrap();
        let refused =
            match ureq::get(&format!("{base}/v1/kv/temp?version=1&as_of={first_q}")).call() {
                Err(ureq::Error::Status(code, _)) => code,
                other => panic!("{other:?}"),
            };
        (then, refused)
    })
    .await
    .unwrap();
    assert_eq!((then.as_str(), refused), ("on time", 400));
}
