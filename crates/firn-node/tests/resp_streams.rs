//! Redis Streams through the `redis` crate: XADD, XRANGE, XREVRANGE, XREAD (blocking too),
//! XLEN, XTRIM, XDEL and XINFO STREAM answer as Redis does, errors carry Redis's words, and a
//! connection goes on after any of them.

mod common;

use std::time::{Duration, Instant};

use common::*;
use redis::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

fn entry(id: &str, fields: &[&str]) -> Value {
    Value::Array(vec![
        bulk(id),
        Value::Array(fields.iter().map(|f| bulk(f)).collect()),
    ])
}

#[tokio::test]
async fn xadd_gives_ids_as_redis_does_and_refuses_what_redis_refuses() {
    let node = start_node(false).await;
    let mut c = redis_conn(&node).await;

    let before_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let auto = bulk_text(&ok(&mut c, &["XADD", "auto", "*", "temp", "21"]).await);
    let (ms, n) = auto.split_once('-').unwrap();
    let ms: u64 = ms.parse().unwrap();
    assert!(
        ms + 5_000 >= before_ms && ms <= before_ms + 5_000,
        "an auto id is the commit time in ms: {auto}"
    );
    assert_eq!(n, "0");
    let next = bulk_text(&ok(&mut c, &["XADD", "auto", "*", "temp", "22"]).await);
    assert!(
        next.split_once('-').map(|(m, _)| m.parse::<u64>().unwrap()) >= Some(ms),
        "{next} after {auto}"
    );
    assert_ne!(next, auto);

    assert_eq!(
        ok(&mut c, &["XADD", "s", "5-1", "a", "1"]).await,
        bulk("5-1")
    );
    assert_eq!(
        ok(&mut c, &["XADD", "s", "5-*", "a", "2"]).await,
        bulk("5-2")
    );
    assert_eq!(ok(&mut c, &["XADD", "s", "7", "a", "3"]).await, bulk("7-0"));
    // `0-*` on a new stream is 0-1 (0-0 is no id), then 0-2.
    assert_eq!(
        ok(&mut c, &["XADD", "z", "0-*", "a", "1"]).await,
        bulk("0-1")
    );
    assert_eq!(
        ok(&mut c, &["XADD", "z", "0-*", "a", "2"]).await,
        bulk("0-2")
    );
    assert_eq!(ok(&mut c, &["XLEN", "z"]).await, Value::Int(2));
    for stale in ["7-0", "5-9", "6-*"] {
        assert_eq!(
            error_line(&mut c, &["XADD", "s", stale, "a", "x"]).await,
            "ERR The ID specified in XADD is equal or smaller than the target stream top item",
            "{stale}"
        );
    }
    assert_eq!(
        error_line(&mut c, &["XADD", "t", "0-0", "a", "x"]).await,
        "ERR The ID specified in XADD must be greater than 0-0"
    );
    for bad in ["x", "1-x", "-", "+", "1-2-3"] {
        assert_eq!(
            error_line(&mut c, &["XADD", "t", bad, "a", "x"]).await,
            "ERR Invalid stream ID specified as stream command argument",
            "{bad}"
        );
    }
    // Whole field/value pairs, at least one.
    for args in [
        &["XADD", "t", "*", "a"][..],
        &["XADD", "t", "*", "a", "1", "b"],
        &["XADD", "t", "NOMKSTREAM", "*"],
        &["XADD", "t"],
    ] {
        assert_eq!(
            error_line(&mut c, args).await,
            "ERR wrong number of arguments for 'xadd' command",
            "{args:?}"
        );
    }
    // The node's value limit (64 KiB in these tests) bounds an entry.
    let big = "v".repeat(70 * 1024);
    let too_big = error_line(&mut c, &["XADD", "t", "*", "f", &big]).await;
    assert!(too_big.contains("the limit is 65536"), "{too_big}");
    // None of the refused adds made a stream.
    assert_eq!(ok(&mut c, &["XLEN", "t"]).await, Value::Int(0));
    assert_eq!(ok(&mut c, &["XLEN", "s"]).await, Value::Int(3));

    // NOMKSTREAM: nil and nothing made for a missing stream; an id for an existing one.
    assert_eq!(
        ok(&mut c, &["XADD", "t", "NOMKSTREAM", "*", "a", "1"]).await,
        Value::Nil
    );
    assert_eq!(ok(&mut c, &["XLEN", "t"]).await, Value::Int(0));
    assert_eq!(
        ok(&mut c, &["XADD", "s", "NOMKSTREAM", "8-0", "a", "4"]).await,
        bulk("8-0")
    );
    // Fields and values are bytes: empty ones and CRLF survive.
    ok(&mut c, &["XADD", "s", "9-0", "", "line\r\nbreak"]).await;
    assert_eq!(
        ok(&mut c, &["XRANGE", "s", "9", "9"]).await,
        Value::Array(vec![entry("9-0", &["", "line\r\nbreak"])])
    );
    assert_usable(&mut c).await;
    node.shutdown().await;
}

#[tokio::test]
async fn xrange_and_xrevrange_show_entries_as_redis_does() {
    let node = start_node(false).await;
    let mut c = redis_conn(&node).await;
    for i in 1..=5 {
        let id = format!("1-{i}");
        ok(&mut c, &["XADD", "s", &id, "n", &i.to_string(), "k", "v"]).await;
    }
    ok(&mut c, &["XADD", "s", "2-0", "n", "6"]).await;
    let e = |i: u32| entry(&format!("1-{i}"), &["n", &i.to_string(), "k", "v"]);

    let all = ok(&mut c, &["XRANGE", "s", "-", "+"]).await;
    assert_eq!(
        all,
        Value::Array(vec![
            e(1),
            e(2),
            e(3),
            e(4),
            e(5),
            entry("2-0", &["n", "6"])
        ])
    );
    assert_eq!(
        ok(&mut c, &["XRANGE", "s", "-", "+", "COUNT", "2"]).await,
        Value::Array(vec![e(1), e(2)])
    );
    // `(id` leaves the id out; `ms` alone is the whole millisecond.
    assert_eq!(
        ok(&mut c, &["XRANGE", "s", "(1-2", "(1-5"]).await,
        Value::Array(vec![e(3), e(4)])
    );
    assert_eq!(
        ok(&mut c, &["XRANGE", "s", "1", "1"]).await,
        Value::Array(vec![e(1), e(2), e(3), e(4), e(5)])
    );
    // As in Redis, a start's missing part is 0 and an end's the greatest: `(1` is after 1-0.
    assert_eq!(
        ok(&mut c, &["xrange", "s", "(1", "(2-0"]).await,
        Value::Array(vec![e(1), e(2), e(3), e(4), e(5)])
    );
    assert_eq!(
        ok(&mut c, &["XRANGE", "s", "(1-1", "(2"]).await,
        Value::Array(vec![e(2), e(3), e(4), e(5), entry("2-0", &["n", "6"])])
    );
    assert_eq!(
        ok(&mut c, &["XRANGE", "s", "-", "(1-1"]).await,
        Value::Array(vec![])
    );
    assert_eq!(
        ok(&mut c, &["XRANGE", "s", "(1-5", "+"]).await,
        Value::Array(vec![entry("2-0", &["n", "6"])])
    );
    assert_eq!(
        ok(&mut c, &["XREVRANGE", "s", "+", "-", "COUNT", "2"]).await,
        Value::Array(vec![entry("2-0", &["n", "6"]), e(5)])
    );
    assert_eq!(
        ok(&mut c, &["XREVRANGE", "s", "(1-4", "1-2"]).await,
        Value::Array(vec![e(3), e(2)])
    );
    // Empty answers: a range the wrong way round, COUNT 0, a missing stream.
    for args in [
        &["XRANGE", "s", "+", "-"][..],
        &["XRANGE", "s", "-", "+", "COUNT", "0"],
        &["XRANGE", "nostream", "-", "+"],
        &["XREVRANGE", "s", "-", "+"],
    ] {
        assert_eq!(ok(&mut c, args).await, Value::Array(vec![]), "{args:?}");
    }

    for bad in [
        &["XRANGE", "s", "(-", "+"][..],
        &["XRANGE", "s", "x", "+"],
        &["XRANGE", "s", "-", "1-y"],
    ] {
        assert_eq!(
            error_line(&mut c, bad).await,
            "ERR Invalid stream ID specified as stream command argument",
            "{bad:?}"
        );
    }
    let max = format!("({}-{}", u64::MAX, u64::MAX);
    for (args, says) in [
        (
            &["XRANGE", "s", &max, "+"][..],
            "ERR invalid start ID for the interval",
        ),
        (
            &["XRANGE", "s", "-", "(0-0"],
            "ERR invalid end ID for the interval",
        ),
        (&["XRANGE", "s", "-", "+", "LIMIT", "2"], "ERR syntax error"),
        (
            &["XRANGE", "s", "-", "+", "COUNT", "two"],
            "ERR value is not an integer or out of range",
        ),
        (
            &["XRANGE", "s", "-"],
            "ERR wrong number of arguments for 'xrange' command",
        ),
    ] {
        assert_eq!(error_line(&mut c, args).await, says, "{args:?}");
    }
    assert_usable(&mut c).await;
    node.shutdown().await;
}

#[tokio::test]
async fn xread_returns_entries_after_each_id_and_a_blocked_read_wakes_for_a_new_one() {
    let node = start_node(false).await;
    let mut c = redis_conn_patient(&node).await;
    ok(&mut c, &["XADD", "a", "1-1", "f", "a1"]).await;
    ok(&mut c, &["XADD", "a", "1-2", "f", "a2"]).await;
    ok(&mut c, &["XADD", "b", "1-1", "f", "b1"]).await;

    // Only the streams with entries after their id, in the order named.
    let read = ok(
        &mut c,
        &["XREAD", "STREAMS", "b", "a", "nostream", "1-1", "0", "0"],
    )
    .await;
    assert_eq!(
        read,
        Value::Array(vec![Value::Array(vec![
            bulk("a"),
            Value::Array(vec![entry("1-1", &["f", "a1"]), entry("1-2", &["f", "a2"])]),
        ])])
    );
    let counted = ok(
        &mut c,
        &["XREAD", "COUNT", "1", "STREAMS", "a", "b", "0", "0"],
    )
    .await;
    assert_eq!(
        counted,
        Value::Array(vec![
            Value::Array(vec![
                bulk("a"),
                Value::Array(vec![entry("1-1", &["f", "a1"])])
            ]),
            Value::Array(vec![
                bulk("b"),
                Value::Array(vec![entry("1-1", &["f", "b1"])])
            ]),
        ])
    );
    // Nothing after the ids: nil at once without BLOCK, nil after the timeout with it.
    assert_eq!(
        ok(&mut c, &["XREAD", "STREAMS", "a", "$"]).await,
        Value::Nil
    );
    let started = Instant::now();
    assert_eq!(
        ok(&mut c, &["XREAD", "BLOCK", "150", "STREAMS", "a", "1-2"]).await,
        Value::Nil
    );
    assert!(started.elapsed() >= Duration::from_millis(140));

    // `$` is the last id when the read begins; the read wakes for the next entry.
    let reader = {
        let mut r = redis_conn_patient(&node).await;
        tokio::spawn(async move {
            let started = Instant::now();
            let v = ok(&mut r, &["XREAD", "BLOCK", "10000", "STREAMS", "a", "$"]).await;
            (v, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    ok(&mut c, &["XADD", "a", "3-0", "f", "new"]).await;
    let (woke, waited) = reader.await.unwrap();
    assert_eq!(
        woke,
        Value::Array(vec![Value::Array(vec![
            bulk("a"),
            Value::Array(vec![entry("3-0", &["f", "new"])]),
        ])])
    );
    assert!(
        waited < Duration::from_secs(5),
        "woke at the add: {waited:?}"
    );

    for (args, says) in [
        (
            &["XREAD", "STREAMS", "a", "b", "0"][..],
            "ERR Unbalanced 'xread' list of streams: for each stream key an ID or '$' must be specified.",
        ),
        (
            &["XREAD", "BLOCK", "-1", "STREAMS", "a", "0"],
            "ERR timeout is negative",
        ),
        (
            &["XREAD", "BLOCK", "soon", "STREAMS", "a", "0"],
            "ERR timeout is not an integer or out of range",
        ),
        (&["XREAD", "COUNT", "1", "a", "0"], "ERR syntax error"),
        (
            &["XREAD", "STREAMS", "a", "zz"],
            "ERR Invalid stream ID specified as stream command argument",
        ),
    ] {
        assert_eq!(error_line(&mut c, args).await, says, "{args:?}");
    }
    assert_usable(&mut c).await;

    // RESP3: a map of stream → entries, as Redis 7 answers.
    let mut c3 = redis_conn_resp3(&node).await;
    let read = ok(&mut c3, &["XREAD", "STREAMS", "b", "0"]).await;
    assert_eq!(
        read,
        Value::Map(vec![(
            bulk("b"),
            Value::Array(vec![entry("1-1", &["f", "b1"])])
        )])
    );
    node.shutdown().await;
}

#[tokio::test]
async fn a_blocked_xread_sends_earlier_replies_first_and_ends_when_its_client_goes() {
    let node = start_node(false).await;
    let mut c = redis_conn(&node).await;
    ok(&mut c, &["XADD", "s", "1-1", "f", "v"]).await;
    let clients = |info: Value| -> u64 {
        bulk_text(&info)
            .lines()
            .find_map(|l| l.strip_prefix("connected_clients:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let before = clients(ok(&mut c, &["INFO", "clients"]).await);

    // Pipelined: PING's answer comes while the read behind it still waits, as in Redis.
    let mut raw = tokio::net::TcpStream::connect(node.resp_addr)
        .await
        .unwrap();
    raw.write_all(
        b"*1\r\n$4\r\nPING\r\n*6\r\n$5\r\nXREAD\r\n$5\r\nBLOCK\r\n$1\r\n0\r\n$7\r\nSTREAMS\r\n$1\r\ns\r\n$1\r\n$\r\n",
    )
    .await
    .unwrap();
    let mut got = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(5), raw.read(&mut got))
        .await
        .expect("PING is answered while XREAD blocks")
        .unwrap();
    assert_eq!(&got[..n], b"+PONG\r\n");
    assert_eq!(clients(ok(&mut c, &["INFO", "clients"]).await), before + 1);

    // The client goes away during BLOCK 0: its connection ends, freeing its slot.
    drop(raw);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = clients(ok(&mut c, &["INFO", "clients"]).await);
        if now == before {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a blocked read outlived its client: {now} clients, {before} before"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    node.shutdown().await;
}

#[tokio::test]
async fn xtrim_xdel_xlen_and_xinfo_match_redis() {
    let node = start_node(false).await;
    let mut c = redis_conn(&node).await;
    for i in 1..=6 {
        ok(
            &mut c,
            &["XADD", "s", &format!("{i}-0"), "n", &i.to_string()],
        )
        .await;
    }
    assert_eq!(ok(&mut c, &["XLEN", "s"]).await, Value::Int(6));
    assert_eq!(ok(&mut c, &["XLEN", "nostream"]).await, Value::Int(0));

    // `~` trims exactly in Firn; LIMIT is allowed with it.
    assert_eq!(
        ok(&mut c, &["XTRIM", "s", "MAXLEN", "~", "5", "LIMIT", "10"]).await,
        Value::Int(1)
    );
    assert_eq!(
        ok(&mut c, &["XTRIM", "s", "MINID", "=", "3"]).await,
        Value::Int(1)
    );
    assert_eq!(
        ok(&mut c, &["XTRIM", "s", "MAXLEN", "10"]).await,
        Value::Int(0)
    );
    assert_eq!(
        ok(&mut c, &["XRANGE", "s", "-", "+"]).await,
        Value::Array(
            (3..=6)
                .map(|i| entry(&format!("{i}-0"), &["n", &i.to_string()]))
                .collect()
        )
    );
    // XADD trims after adding.
    assert_eq!(
        ok(&mut c, &["XADD", "s", "MAXLEN", "3", "7-0", "n", "7"]).await,
        bulk("7-0")
    );
    assert_eq!(ok(&mut c, &["XLEN", "s"]).await, Value::Int(3));

    for (args, says) in [
        (
            &["XTRIM", "s", "MAXLEN", "1", "LIMIT", "5"][..],
            "ERR syntax error, LIMIT cannot be used without the special ~ option",
        ),
        (
            &["XTRIM", "s", "MAXLEN", "1", "MINID", "2"],
            "ERR syntax error, MAXLEN and MINID options at the same time are not compatible",
        ),
        (&["XTRIM", "s", "LIMIT", "5", "x"], "ERR syntax error"),
        (
            &["XTRIM", "s", "LIMIT", "5"],
            "ERR syntax error, LIMIT cannot be used without specifying a trimming strategy",
        ),
        (
            &["XTRIM", "s", "MAXLEN", "-1"],
            "ERR The MAXLEN argument must be >= 0.",
        ),
        (
            &["XTRIM", "s", "MINID", "x"],
            "ERR Invalid stream ID specified as stream command argument",
        ),
        (
            &["XADD", "s", "MAXLEN", "1", "MINID", "1", "*", "f", "v"],
            "ERR syntax error, MAXLEN and MINID options at the same time are not compatible",
        ),
    ] {
        assert_eq!(error_line(&mut c, args).await, says, "{args:?}");
    }
    assert_eq!(
        ok(&mut c, &["XLEN", "s"]).await,
        Value::Int(3),
        "nothing trimmed"
    );

    // XDEL: how many of the ids existed; a malformed id refuses the whole command.
    assert_eq!(
        error_line(&mut c, &["XDEL", "s", "6-0", "nope"]).await,
        "ERR Invalid stream ID specified as stream command argument"
    );
    assert_eq!(ok(&mut c, &["XLEN", "s"]).await, Value::Int(3));
    assert_eq!(
        ok(&mut c, &["XDEL", "s", "6-0", "99-0", "6-0"]).await,
        Value::Int(1)
    );
    assert_eq!(
        ok(&mut c, &["XDEL", "nostream", "1-0"]).await,
        Value::Int(0)
    );

    let info = ok(&mut c, &["XINFO", "STREAM", "s"]).await;
    assert_eq!(
        info,
        Value::Array(vec![
            bulk("length"),
            Value::Int(2),
            bulk("radix-tree-keys"),
            Value::Int(0),
            bulk("radix-tree-nodes"),
            Value::Int(0),
            bulk("last-generated-id"),
            bulk("7-0"),
            bulk("max-deleted-entry-id"),
            bulk("6-0"),
            bulk("entries-added"),
            Value::Int(7),
            bulk("recorded-first-entry-id"),
            bulk("5-0"),
            bulk("groups"),
            Value::Int(0),
            bulk("first-entry"),
            entry("5-0", &["n", "5"]),
            bulk("last-entry"),
            entry("7-0", &["n", "7"]),
        ])
    );
    assert_eq!(
        error_line(&mut c, &["XINFO", "STREAM", "nostream"]).await,
        "ERR no such key"
    );
    // A stream without groups (groups themselves: resp_groups.rs).
    assert_eq!(
        ok(&mut c, &["XINFO", "GROUPS", "s"]).await,
        Value::Array(vec![])
    );
    let unknown = error_line(&mut c, &["XINFO", "NOPE", "s"]).await;
    assert!(unknown.contains("unknown subcommand"), "{unknown}");
    // RESP3: XINFO STREAM is a map.
    let mut c3 = redis_conn_resp3(&node).await;
    assert!(matches!(
        ok(&mut c3, &["XINFO", "STREAM", "s"]).await,
        Value::Map(fields) if fields.len() == 10
    ));
    assert_usable(&mut c).await;
    node.shutdown().await;
}

#[tokio::test]
async fn a_log_record_under_a_stream_key_is_reported_not_misread() {
    let node = start_node(false).await;
    let mut c = redis_conn(&node).await;
    ok(&mut c, &["XADD", "s", "1-0", "f", "v"]).await;
    // A raw FIRN.LOG record with the stream's tag: not XADD's fields.
    ok(
        &mut c,
        &["FIRN.LOG", "APPEND", "s", "TAGS", "1", "s", "raw"],
    )
    .await;
    let err = error_line(&mut c, &["XRANGE", "s", "-", "+"]).await;
    assert!(err.contains("not a stream entry"), "{err}");
    assert_eq!(
        ok(&mut c, &["XRANGE", "s", "-", "+", "COUNT", "1"]).await,
        Value::Array(vec![entry("1-0", &["f", "v"])])
    );
    assert_usable(&mut c).await;
    node.shutdown().await;
}
