//! Consumer groups through the `redis` crate: XGROUP, XREADGROUP (blocking too), XACK,
//! XPENDING, XCLAIM, XAUTOCLAIM and XINFO GROUPS|CONSUMERS answer as Redis 7 does, errors
//! carry Redis's words, and a connection goes on after any of them.

mod common;

use std::time::{Duration, Instant};

use common::*;
use redis::Value;

fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

fn entry(id: &str, fields: &[&str]) -> Value {
    Value::Array(vec![
        bulk(id),
        Value::Array(fields.iter().map(|f| bulk(f)).collect()),
    ])
}

fn stream_reply(key: &str, entries: Vec<Value>) -> Value {
    Value::Array(vec![Value::Array(vec![bulk(key), Value::Array(entries)])])
}

async fn fill(c: &mut redis::aio::MultiplexedConnection, key: &str, n: u64) {
    for i in 1..=n {
        let id = format!("{i}-0");
        ok(c, &["XADD", key, &id, "n", &i.to_string()]).await;
    }
}

#[tokio::test]
async fn xgroup_makes_and_drops_groups_and_consumers_with_redis_replies_and_errors() {
    let node = start_node(false).await;
    let mut c = redis_conn(&node).await;

    assert_eq!(
        error_line(&mut c, &["XGROUP", "CREATE", "none", "g", "$"]).await,
        "ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically."
    );
    assert_usable(&mut c).await;
    assert_eq!(
        ok(&mut c, &["XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"]).await,
        Value::Okay
    );
    assert_eq!(ok(&mut c, &["XLEN", "s"]).await, Value::Int(0));
    assert_eq!(
        error_line(&mut c, &["XGROUP", "CREATE", "s", "g", "0"]).await,
        "BUSYGROUP Consumer Group name already exists"
    );
    assert_eq!(
        error_line(&mut c, &["XGROUP", "CREATE", "s", "h", "bad"]).await,
        "ERR Invalid stream ID specified as stream command argument"
    );
    assert_eq!(
        ok(&mut c, &["XGROUP", "CREATECONSUMER", "s", "g", "alice"]).await,
        Value::Int(1)
    );
    assert_eq!(
        ok(&mut c, &["XGROUP", "CREATECONSUMER", "s", "g", "alice"]).await,
        Value::Int(0)
    );
    assert_eq!(
        error_line(&mut c, &["XGROUP", "CREATECONSUMER", "s", "nog", "alice"]).await,
        "NOGROUP No such consumer group 'nog' for key name 's'"
    );
    assert_eq!(
        ok(&mut c, &["XGROUP", "SETID", "s", "g", "0"]).await,
        Value::Okay
    );
    assert_eq!(
        ok(&mut c, &["XGROUP", "DELCONSUMER", "s", "g", "alice"]).await,
        Value::Int(0)
    );
    assert_eq!(
        ok(&mut c, &["XGROUP", "DESTROY", "s", "g"]).await,
        Value::Int(1)
    );
    assert_eq!(
        ok(&mut c, &["XGROUP", "DESTROY", "s", "g"]).await,
        Value::Int(0)
    );
    assert_eq!(
        error_line(&mut c, &["XGROUP", "NOPE", "s"]).await,
        "ERR unknown subcommand 'NOPE' for 'xgroup'"
    );
    assert_usable(&mut c).await;
}

#[tokio::test]
async fn xreadgroup_delivers_new_entries_once_and_rereads_a_consumers_pending_ones() {
    let node = start_node(false).await;
    let mut c = redis_conn(&node).await;
    fill(&mut c, "s", 3).await;
    ok(&mut c, &["XGROUP", "CREATE", "s", "g", "0"]).await;

    let read = |consumer: &'static str, id: &'static str| {
        [
            "XREADGROUP",
            "GROUP",
            "g",
            consumer,
            "COUNT",
            "2",
            "STREAMS",
            "s",
            id,
        ]
    };
    assert_eq!(
        ok(&mut c, &read("a", ">")).await,
        stream_reply(
            "s",
            vec![entry("1-0", &["n", "1"]), entry("2-0", &["n", "2"])]
        )
    );
    assert_eq!(
        ok(&mut c, &read("b", ">")).await,
        stream_reply("s", vec![entry("3-0", &["n", "3"])])
    );
    assert_eq!(ok(&mut c, &read("b", ">")).await, Value::Nil);
    // The consumer's own pending entries, from an id (deleted ones show nil).
    ok(&mut c, &["XDEL", "s", "2-0"]).await;
    assert_eq!(
        ok(&mut c, &read("a", "0")).await,
        stream_reply(
            "s",
            vec![
                entry("1-0", &["n", "1"]),
                Value::Array(vec![bulk("2-0"), Value::Nil])
            ]
        )
    );
    assert_eq!(
        ok(&mut c, &read("a", "2-0")).await,
        stream_reply("s", vec![])
    );

    assert_eq!(
        error_line(&mut c, &read("a", "$"))
            .await
            .split(':')
            .next()
            .unwrap(),
        "ERR The $ ID is meaningless in the context of XREADGROUP"
    );
    assert_eq!(
        error_line(
            &mut c,
            &["XREADGROUP", "GROUP", "nog", "a", "STREAMS", "s", ">"]
        )
        .await,
        "NOGROUP No such key 's' or consumer group 'nog' in XREADGROUP with GROUP option"
    );
    assert_eq!(
        error_line(
            &mut c,
            &["XREADGROUP", "GROUP", "g", "a", "STREAMS", "s", "t", ">"]
        )
        .await,
        "ERR Unbalanced 'xreadgroup' list of streams: for each stream key an ID or '>' must be specified."
    );
    assert_eq!(
        error_line(
            &mut c,
            &[
                "XREADGROUP",
                "COUNT",
                "1",
                "BLOCK",
                "1",
                "STREAMS",
                "s",
                ">"
            ]
        )
        .await,
        "ERR Missing GROUP option for XREADGROUP"
    );
    assert_usable(&mut c).await;

    // NOACK: delivered, never pending.
    ok(&mut c, &["XADD", "s", "4-0", "n", "4"]).await;
    ok(
        &mut c,
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "a",
            "NOACK",
            "STREAMS",
            "s",
            ">",
        ],
    )
    .await;
    let Value::Array(summary) = ok(&mut c, &["XPENDING", "s", "g"]).await else {
        panic!()
    };
    assert_eq!(summary[0], Value::Int(3));
}

#[tokio::test]
async fn a_blocked_xreadgroup_wakes_for_a_new_entry_and_times_out_with_nil() {
    let node = start_node(false).await;
    let mut c = redis_conn_patient(&node).await;
    let mut writer = redis_conn(&node).await;
    ok(&mut c, &["XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"]).await;

    let started = Instant::now();
    assert_eq!(
        ok(
            &mut c,
            &[
                "XREADGROUP",
                "GROUP",
                "g",
                "a",
                "BLOCK",
                "300",
                "STREAMS",
                "s",
                ">"
            ]
        )
        .await,
        Value::Nil
    );
    assert!(started.elapsed() >= Duration::from_millis(290));

    let add = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        ok(&mut writer, &["XADD", "s", "7-0", "k", "v"]).await;
    });
    assert_eq!(
        ok(
            &mut c,
            &[
                "XREADGROUP",
                "GROUP",
                "g",
                "a",
                "BLOCK",
                "5000",
                "STREAMS",
                "s",
                ">"
            ]
        )
        .await,
        stream_reply("s", vec![entry("7-0", &["k", "v"])])
    );
    add.await.unwrap();
    assert_usable(&mut c).await;
}

#[tokio::test]
async fn xack_xpending_and_xinfo_show_the_pending_list_as_redis_does() {
    let node = start_node(false).await;
    let mut c = redis_conn(&node).await;
    fill(&mut c, "s", 3).await;
    ok(&mut c, &["XGROUP", "CREATE", "s", "g", "0"]).await;
    assert_eq!(
        ok(&mut c, &["XPENDING", "s", "g"]).await,
        Value::Array(vec![Value::Int(0), Value::Nil, Value::Nil, Value::Nil])
    );
    ok(
        &mut c,
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "a",
            "COUNT",
            "2",
            "STREAMS",
            "s",
            ">",
        ],
    )
    .await;
    ok(
        &mut c,
        &["XREADGROUP", "GROUP", "g", "b", "STREAMS", "s", ">"],
    )
    .await;
    assert_eq!(
        ok(&mut c, &["XPENDING", "s", "g"]).await,
        Value::Array(vec![
            Value::Int(3),
            bulk("1-0"),
            bulk("3-0"),
            Value::Array(vec![
                Value::Array(vec![bulk("a"), bulk("2")]),
                Value::Array(vec![bulk("b"), bulk("1")]),
            ])
        ])
    );
    let Value::Array(rows) = ok(&mut c, &["XPENDING", "s", "g", "-", "+", "10", "a"]).await else {
        panic!()
    };
    assert_eq!(rows.len(), 2);
    let Value::Array(first) = &rows[0] else {
        panic!()
    };
    assert_eq!(first[0], bulk("1-0"));
    assert_eq!(first[1], bulk("a"));
    assert!(matches!(first[2], Value::Int(_)));
    assert_eq!(first[3], Value::Int(1));
    assert_eq!(
        ok(
            &mut c,
            &["XPENDING", "s", "g", "IDLE", "100000", "-", "+", "10"]
        )
        .await,
        Value::Array(vec![])
    );
    assert_eq!(
        ok(&mut c, &["XACK", "s", "g", "1-0", "1-0", "9-0"]).await,
        Value::Int(1)
    );
    assert_eq!(
        ok(&mut c, &["XACK", "s", "nog", "2-0"]).await,
        Value::Int(0)
    );
    assert_eq!(
        error_line(&mut c, &["XACK", "s", "g", "x"]).await,
        "ERR Invalid stream ID specified as stream command argument"
    );
    assert_eq!(
        error_line(&mut c, &["XPENDING", "s", "nog"]).await,
        "NOGROUP No such key 's' or consumer group 'nog'"
    );
    assert_usable(&mut c).await;

    let Value::Array(groups) = ok(&mut c, &["XINFO", "GROUPS", "s"]).await else {
        panic!()
    };
    // Redis's six fields, no more.
    let redis_fields = vec![Value::Array(vec![
        bulk("name"),
        bulk("g"),
        bulk("consumers"),
        Value::Int(2),
        bulk("pending"),
        Value::Int(2),
        bulk("last-delivered-id"),
        bulk("3-0"),
        bulk("entries-read"),
        Value::Int(3),
        bulk("lag"),
        Value::Int(0),
    ])];
    assert_eq!(groups, redis_fields);
    // FIRN.GROUPS: the same, then Firn's delivery options.
    let Value::Array(with_options) = ok(&mut c, &["FIRN.GROUPS", "s"]).await else {
        panic!()
    };
    let Value::Array(mut fields) = redis_fields[0].clone() else {
        panic!()
    };
    fields.extend([
        bulk("policy"),
        bulk("first"),
        bulk("key"),
        Value::Nil,
        bulk("ack-wait-ms"),
        Value::Nil,
        bulk("max-deliver"),
        Value::Nil,
        bulk("dead-letter"),
        Value::Nil,
        bulk("liveness-ms"),
        Value::Int(30_000),
    ]);
    assert_eq!(with_options, vec![Value::Array(fields)]);
    let Value::Array(stream) = ok(&mut c, &["XINFO", "STREAM", "s"]).await else {
        panic!()
    };
    assert_eq!(&stream[14..16], &[bulk("groups"), Value::Int(1)]);
    let Value::Array(consumers) = ok(&mut c, &["XINFO", "CONSUMERS", "s", "g"]).await else {
        panic!()
    };
    assert_eq!(consumers.len(), 2);
    let Value::Array(a) = &consumers[0] else {
        panic!()
    };
    assert_eq!(
        &a[..4],
        &[bulk("name"), bulk("a"), bulk("pending"), Value::Int(1)]
    );
    assert_eq!(a[4], bulk("idle"));
    assert_eq!(a[6], bulk("inactive"));
    assert_eq!(
        error_line(&mut c, &["XINFO", "GROUPS", "none"]).await,
        "ERR no such key"
    );
    assert_eq!(
        error_line(&mut c, &["XINFO", "CONSUMERS", "s", "nog"]).await,
        "NOGROUP No such consumer group 'nog' for key name 's'"
    );
    assert_usable(&mut c).await;
}

#[tokio::test]
async fn xclaim_and_xautoclaim_move_idle_entries_between_consumers() {
    let node = start_node(false).await;
    let mut c = redis_conn(&node).await;
    fill(&mut c, "s", 3).await;
    ok(&mut c, &["XGROUP", "CREATE", "s", "g", "0"]).await;
    ok(
        &mut c,
        &["XREADGROUP", "GROUP", "g", "a", "STREAMS", "s", ">"],
    )
    .await;

    // Not idle for an hour yet: nothing moves.
    assert_eq!(
        ok(&mut c, &["XCLAIM", "s", "g", "b", "3600000", "1-0"]).await,
        Value::Array(vec![])
    );
    assert_eq!(
        ok(&mut c, &["XCLAIM", "s", "g", "b", "0", "1-0", "2-0"]).await,
        Value::Array(vec![entry("1-0", &["n", "1"]), entry("2-0", &["n", "2"])])
    );
    assert_eq!(
        ok(
            &mut c,
            &[
                "XCLAIM",
                "s",
                "g",
                "c",
                "0",
                "1-0",
                "JUSTID",
                "RETRYCOUNT",
                "5"
            ]
        )
        .await,
        Value::Array(vec![bulk("1-0")])
    );
    let Value::Array(rows) = ok(&mut c, &["XPENDING", "s", "g", "-", "+", "10"]).await else {
        panic!()
    };
    let owners: Vec<(Value, Value)> = rows
        .iter()
        .map(|r| match r {
            Value::Array(f) => (f[1].clone(), f[3].clone()),
            _ => panic!(),
        })
        .collect();
    assert_eq!(
        owners,
        vec![
            (bulk("c"), Value::Int(5)),
            (bulk("b"), Value::Int(2)),
            (bulk("a"), Value::Int(1))
        ]
    );
    assert_eq!(
        error_line(&mut c, &["XCLAIM", "s", "nog", "b", "0", "1-0"]).await,
        "NOGROUP No such key 's' or consumer group 'nog'"
    );
    assert_eq!(
        error_line(&mut c, &["XCLAIM", "s", "g", "b", "x", "1-0"]).await,
        "ERR Invalid min-idle-time argument for XCLAIM"
    );

    assert_eq!(
        ok(
            &mut c,
            &["XAUTOCLAIM", "s", "g", "d", "0", "0", "COUNT", "2"]
        )
        .await,
        Value::Array(vec![
            bulk("3-0"),
            Value::Array(vec![entry("1-0", &["n", "1"]), entry("2-0", &["n", "2"])]),
            Value::Array(vec![])
        ])
    );
    ok(&mut c, &["XDEL", "s", "3-0"]).await;
    assert_eq!(
        ok(&mut c, &["XAUTOCLAIM", "s", "g", "d", "0", "3-0", "JUSTID"]).await,
        Value::Array(vec![
            bulk("0-0"),
            Value::Array(vec![]),
            Value::Array(vec![bulk("3-0")])
        ])
    );
    assert_eq!(
        error_line(
            &mut c,
            &["XAUTOCLAIM", "s", "g", "d", "0", "0", "COUNT", "0"]
        )
        .await,
        "ERR COUNT must be > 0 and at most 10000"
    );
    assert_usable(&mut c).await;
}

#[tokio::test]
async fn resp3_shows_xreadgroup_as_a_map_of_streams() {
    let node = start_node(false).await;
    let mut c = redis_conn_resp3(&node).await;
    fill(&mut c, "s", 1).await;
    ok(&mut c, &["XGROUP", "CREATE", "s", "g", "0"]).await;
    assert_eq!(
        ok(
            &mut c,
            &["XREADGROUP", "GROUP", "g", "a", "STREAMS", "s", ">"]
        )
        .await,
        Value::Map(vec![(
            bulk("s"),
            Value::Array(vec![entry("1-0", &["n", "1"])])
        )])
    );
    let Value::Array(groups) = ok(&mut c, &["XINFO", "GROUPS", "s"]).await else {
        panic!()
    };
    assert!(matches!(groups[0], Value::Map(_)));
}

/// Group and stream requests record their time and their errors as every other request
/// does (`firn_request_seconds`, `firn_request_errors_total`): a group request, an
/// XREADGROUP and an append each add one timed request, a failed one an error too.
#[tokio::test]
async fn group_and_stream_requests_record_their_time_and_errors() {
    let node = start_node(false).await;
    let mut c = redis_conn(&node).await;
    let metrics_url = format!("http://{}/metrics", node.http_addr);
    let page = move || {
        ureq::get(&metrics_url)
            .call()
            .expect("the metrics page")
            .into_string()
            .unwrap()
    };
    let value = |text: &str, line: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(line))
            .map_or(0.0, |v| v.trim().parse().unwrap())
    };
    let page_task = page.clone();
    let before = tokio::task::spawn_blocking(page_task).await.unwrap();
    ok(&mut c, &["XADD", "m", "1-0", "n", "1"]).await;
    ok(&mut c, &["XGROUP", "CREATE", "m", "g", "0"]).await;
    ok(
        &mut c,
        &["XREADGROUP", "GROUP", "g", "a", "STREAMS", "m", ">"],
    )
    .await;
    // A group that exists already: a request that fails.
    error_line(&mut c, &["XGROUP", "CREATE", "m", "g", "0"]).await;
    let after = tokio::task::spawn_blocking(page).await.unwrap();
    let seconds = |op: &str| format!("firn_request_seconds_count{{op=\"{op}\"}} ");
    let errors = |op: &str| format!("firn_request_errors_total{{op=\"{op}\"}} ");
    for (line, grew) in [
        (seconds("group_create"), 2.0),
        (errors("group_create"), 1.0),
        (seconds("group_read"), 1.0),
        (seconds("stream_add"), 1.0),
    ] {
        assert!(
            value(&after, &line) >= value(&before, &line) + grew,
            "{line}: {} before, {} after",
            value(&before, &line),
            value(&after, &line)
        );
    }
}
