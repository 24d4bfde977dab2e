//! Firn's own commands over RESP: versions, history, reads at a time and by event time,
//! snapshots, truncation and keyspaces.

mod common;

use common::*;
use redis::Value;

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
