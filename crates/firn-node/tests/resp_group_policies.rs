//! Delivery options of consumer groups through the `redis` crate: `XGROUP CREATE … POLICY …
//! ACKWAIT … MAXDELIVER … DEADLETTER … LIVENESS …`, `XGROUP CONFIGURE`, their errors, XINFO
//! GROUPS' extra fields, and a blocked XREADGROUP that wakes for an entry dealt to it or
//! fallen due — with no XCLAIM anywhere.

mod common;

use common::*;
use redis::Value;

fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

/// XINFO GROUPS' map for the only group of `key`, as (field, value) pairs.
async fn group_fields(
    c: &mut redis::aio::MultiplexedConnection,
    key: &str,
) -> Vec<(String, Value)> {
    let Value::Array(groups) = ok(c, &["FIRN.GROUPS", key]).await else {
        panic!("FIRN.GROUPS answers an array")
    };
    let Value::Array(fields) = &groups[0] else {
        panic!("a group is a map")
    };
    fields
        .chunks(2)
        .map(|kv| (bulk_text(&kv[0]), kv[1].clone()))
        .collect()
}

fn field<'a>(fields: &'a [(String, Value)], name: &str) -> &'a Value {
    &fields.iter().find(|(f, _)| f == name).unwrap().1
}

/// The ids of an XREADGROUP answer over one stream.
fn ids(reply: &Value) -> Vec<String> {
    let Value::Array(streams) = reply else {
        return Vec::new();
    };
    let Value::Array(stream) = &streams[0] else {
        panic!()
    };
    let Value::Array(entries) = &stream[1] else {
        panic!()
    };
    entries
        .iter()
        .map(|e| match e {
            Value::Array(e) => bulk_text(&e[0]),
            other => panic!("{other:?}"),
        })
        .collect()
}

/// XGROUP CREATE key g $ MKSTREAM with these delivery options.
async fn create(c: &mut redis::aio::MultiplexedConnection, key: &str, options: &[&str]) {
    let mut args = vec!["XGROUP", "CREATE", key, "g", "$", "MKSTREAM"];
    args.extend_from_slice(options);
    assert_eq!(ok(c, &args).await, Value::Okay);
}

fn read<'a>(consumer: &'a str, key: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["XREADGROUP", "GROUP", "g", consumer];
    args.extend_from_slice(extra);
    args.extend(["STREAMS", key, ">"]);
    args
}

#[tokio::test]
async fn options_are_set_shown_changed_and_bad_ones_refused_without_change() {
    let node = start_node(false).await;
    let mut c = redis_conn(&node).await;
    let create_args = |rest: &[&'static str]| {
        let mut args = vec!["XGROUP", "CREATE", "{q}s", "g", "$", "MKSTREAM"];
        args.extend_from_slice(rest);
        args
    };
    for (bad, line) in [
        (create_args(&["KEYFIELD", "k"]), "ERR syntax error"),
        (create_args(&["POLICY", "random"]), "ERR syntax error"),
        (
            create_args(&["POLICY", "roundrobin", "KEYTAG"]),
            "ERR syntax error",
        ),
        (create_args(&["MAXDELIVER", "3"]), "ERR syntax error"),
        (
            create_args(&["ACKWAIT", "5", "ACKWAIT", "6"]),
            "ERR syntax error",
        ),
        (
            create_args(&["ACKWAIT", "soon"]),
            "ERR value is not an integer or out of range",
        ),
        (
            create_args(&["ACKWAIT", "0"]),
            "ERR ACKWAIT is 0 ms; it must be 1 to 86400000",
        ),
        (
            create_args(&["LIVENESS", "86400001"]),
            "ERR LIVENESS is 86400001 ms; it must be 1 to 86400000",
        ),
        (
            create_args(&["MAXDELIVER", "0", "DEADLETTER", "{q}d"]),
            "ERR MAXDELIVER is 0; it must be 1 to 1000000",
        ),
        (
            create_args(&["MAXDELIVER", "2", "DEADLETTER", "{q}s"]),
            "ERR DEADLETTER must name a stream other than the group's own",
        ),
        (
            create_args(&["MAXDELIVER", "2", "DEADLETTER", "elsewhere"]),
            "CROSSSLOT Keys in request don't hash to the same slot",
        ),
    ] {
        assert_eq!(error_line(&mut c, &bad).await, line, "{bad:?}");
    }
    assert_usable(&mut c).await;
    // None of them made the stream MKSTREAM asked for.
    assert_eq!(ok(&mut c, &["EXISTS", "{q}s"]).await, Value::Int(0));

    ok(
        &mut c,
        &create_args(&[
            "LIVENESS",
            "9000",
            "POLICY",
            "hrw",
            "KEYFIELD",
            "user",
            "ACKWAIT",
            "2000",
            "MAXDELIVER",
            "4",
            "DEADLETTER",
            "{q}dead",
        ]),
    )
    .await;
    let fields = group_fields(&mut c, "{q}s").await;
    assert_eq!(field(&fields, "policy"), &bulk("hrw"));
    assert_eq!(field(&fields, "key"), &bulk("user"));
    assert_eq!(field(&fields, "ack-wait-ms"), &Value::Int(2000));
    assert_eq!(field(&fields, "max-deliver"), &Value::Int(4));
    assert_eq!(field(&fields, "dead-letter"), &bulk("{q}dead"));
    assert_eq!(field(&fields, "liveness-ms"), &Value::Int(9000));

    // A refused CONFIGURE changes nothing; a good one replaces every option.
    assert_eq!(
        error_line(
            &mut c,
            &["XGROUP", "CONFIGURE", "{q}s", "g", "ACKWAIT", "-1"]
        )
        .await,
        "ERR value is not an integer or out of range"
    );
    assert_eq!(group_fields(&mut c, "{q}s").await, fields);
    assert_eq!(
        error_line(
            &mut c,
            &["XGROUP", "CONFIGURE", "{q}s", "nog", "POLICY", "first"]
        )
        .await,
        "NOGROUP No such consumer group 'nog' for key name '{q}s'"
    );
    assert_eq!(
        ok(
            &mut c,
            &["XGROUP", "CONFIGURE", "{q}s", "g", "POLICY", "roundrobin"]
        )
        .await,
        Value::Okay
    );
    let fields = group_fields(&mut c, "{q}s").await;
    assert_eq!(field(&fields, "policy"), &bulk("roundrobin"));
    assert_eq!(field(&fields, "key"), &Value::Nil);
    assert_eq!(field(&fields, "ack-wait-ms"), &Value::Nil);
    assert_eq!(field(&fields, "dead-letter"), &Value::Nil);
    assert_eq!(field(&fields, "liveness-ms"), &Value::Int(30_000));
    assert_usable(&mut c).await;
}

#[tokio::test]
async fn ackwait_hands_an_unacked_entry_to_a_blocked_consumer_without_xclaim() {
    let node = start_node(false).await;
    let mut a = redis_conn(&node).await;
    let mut b = redis_conn_patient(&node).await;
    create(&mut a, "s", &["ACKWAIT", "300"]).await;
    ok(&mut a, &["XADD", "s", "1-0", "n", "1"]).await;
    assert_eq!(ids(&ok(&mut a, &read("a", "s", &[])).await), ["1-0"]);
    // b waits: nothing new comes, but a's entry falls due and b gets it.
    let got = ok(&mut b, &read("b", "s", &["BLOCK", "10000"])).await;
    assert_eq!(ids(&got), ["1-0"]);
    let Value::Array(pending) = ok(&mut b, &["XPENDING", "s", "g", "-", "+", "10"]).await else {
        panic!()
    };
    let Value::Array(p) = &pending[0] else {
        panic!()
    };
    assert_eq!((bulk_text(&p[1]), &p[3]), ("b".to_string(), &Value::Int(2)));
}

#[tokio::test]
async fn roundrobin_deals_to_a_blocked_consumer_and_wakes_it() {
    let node = start_node(false).await;
    let mut a = redis_conn(&node).await;
    let mut b = redis_conn_patient(&node).await;
    create(&mut a, "s", &["POLICY", "roundrobin"]).await;
    for name in ["a", "b"] {
        ok(&mut a, &["XGROUP", "CREATECONSUMER", "s", "g", name]).await;
    }
    let waiting = tokio::spawn(async move {
        let got = ok(&mut b, &read("b", "s", &["COUNT", "5", "BLOCK", "10000"])).await;
        ids(&got)
    });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    for i in 1..=2 {
        ok(&mut a, &["XADD", "s", &format!("{i}-0"), "n", "x"]).await;
    }
    // a asks for one: it gets 1-0, and 2-0 is dealt to b, which wakes for it.
    let mine = ids(&ok(&mut a, &read("a", "s", &["COUNT", "1"])).await);
    let theirs = waiting.await.unwrap();
    let mut all = [mine.clone(), theirs.clone()].concat();
    all.sort();
    assert_eq!(all, ["1-0", "2-0"], "a got {mine:?}, b got {theirs:?}");
    assert_eq!(mine.len(), 1);
    assert_eq!(theirs.len(), 1);
}

#[tokio::test]
async fn maxdeliver_moves_an_entry_to_its_dead_letter_stream_after_n_deliveries() {
    let node = start_node(false).await;
    let mut c = redis_conn_patient(&node).await;
    create(
        &mut c,
        "{q}s",
        &["ACKWAIT", "100", "MAXDELIVER", "2", "DEADLETTER", "{q}dead"],
    )
    .await;
    ok(&mut c, &["XADD", "{q}s", "1-0", "n", "1"]).await;
    let mut handed = 0;
    for _ in 0..4 {
        let got = ok(&mut c, &read("a", "{q}s", &["BLOCK", "400"])).await;
        handed += ids(&got).len();
    }
    assert_eq!(handed, 2, "delivered exactly MAXDELIVER times");
    let Value::Array(dead) = ok(&mut c, &["XRANGE", "{q}dead", "-", "+"]).await else {
        panic!()
    };
    assert_eq!(dead.len(), 1);
    let Value::Array(entry) = &dead[0] else {
        panic!()
    };
    let Value::Array(fields) = &entry[1] else {
        panic!()
    };
    let fields: Vec<String> = fields.iter().map(bulk_text).collect();
    assert_eq!(
        fields,
        [
            "n",
            "1",
            "firn-from",
            "{q}s 1-0",
            "firn-group",
            "g",
            "firn-deliveries",
            "2"
        ]
    );
    let Value::Array(summary) = ok(&mut c, &["XPENDING", "{q}s", "g"]).await else {
        panic!()
    };
    assert_eq!(summary[0], Value::Int(0));
}

#[tokio::test]
async fn a_blocked_consumer_of_a_roundrobin_group_stays_live() {
    let node = start_node(false).await;
    let mut a = redis_conn(&node).await;
    let mut b = redis_conn_patient(&node).await;
    create(&mut a, "s", &["POLICY", "roundrobin", "LIVENESS", "600"]).await;
    let waiting =
        tokio::spawn(async move { ok(&mut b, &read("b", "s", &["BLOCK", "2000"])).await });
    // Well past its liveness, b is still seen: its blocked read notes it every 200 ms.
    tokio::time::sleep(std::time::Duration::from_millis(1_300)).await;
    let Value::Array(consumers) = ok(&mut a, &["XINFO", "CONSUMERS", "s", "g"]).await else {
        panic!()
    };
    let Value::Array(b_info) = &consumers[0] else {
        panic!()
    };
    assert_eq!(b_info[1], bulk("b"));
    let Value::Int(idle) = b_info[5] else {
        panic!()
    };
    assert!(idle < 600, "b idle {idle} ms while blocked");
    assert_eq!(waiting.await.unwrap(), Value::Nil);
}
