//! FIRN.LOG through the `redis` crate: batch appends with tags, reads by tag (NEXT, PREV,
//! TAIL, RANGE; at a time; blocking), TRIM and INFO, and bad input refused by name with
//! nothing changed and the connection going on.

mod common;

use std::time::{Duration, Instant};

use common::*;
use redis::Value;

fn items(v: Value) -> Vec<Value> {
    match v {
        Value::Array(items) => items,
        other => panic!("not an array: {other:?}"),
    }
}

/// A record as FIRN.LOG shows it: `[seq, [tag…], payload, commit_ts]`.
#[derive(Debug, PartialEq)]
struct Record {
    seq: String,
    tags: Vec<String>,
    payload: String,
    commit_ts: String,
}

fn record(v: Value) -> Record {
    let parts = items(v);
    assert_eq!(parts.len(), 4, "{parts:?}");
    Record {
        seq: bulk_text(&parts[0]),
        tags: items(parts[1].clone()).iter().map(bulk_text).collect(),
        payload: bulk_text(&parts[2]),
        commit_ts: bulk_text(&parts[3]),
    }
}

fn payloads(v: Value) -> Vec<String> {
    items(v).into_iter().map(|r| record(r).payload).collect()
}

/// Seqs print as `<ms>-<n>` and order as (ms, n).
fn seq_key(seq: &str) -> (u64, u64) {
    let (ms, n) = seq.split_once('-').unwrap();
    (ms.parse().unwrap(), n.parse().unwrap())
}

#[tokio::test]
async fn append_then_read_by_each_tag_in_seq_order() {
    let node = start_node(false).await;
    let mut c = redis_conn(&node).await;
    let seqs: Vec<String> = items(
        ok(
            &mut c,
            &[
                "FIRN.LOG", "APPEND", "events", "TAGS", "2", "a", "b", "ab", "TAGS", "1", "a", "a1",
            ],
        )
        .await,
    )
    .iter()
    .map(bulk_text)
    .collect();
    assert_eq!(seqs.len(), 2, "one seq per record");
    assert!(seq_key(&seqs[0]) < seq_key(&seqs[1]), "{seqs:?}");
    let b1 = bulk_text(
        &items(
            ok(
                &mut c,
                &["FIRN.LOG", "APPEND", "events", "TAGS", "1", "b", "b1"],
            )
            .await,
        )[0],
    );

    let all_a = items(ok(&mut c, &["FIRN.LOG", "RANGE", "events", "a", "-", "+"]).await);
    let first = record(all_a[0].clone());
    assert_eq!(first.seq, seqs[0]);
    assert_eq!(first.tags, ["a", "b"]);
    assert_eq!(first.payload, "ab");
    assert!(first.commit_ts.contains('-'), "{first:?}");
    assert_eq!(record(all_a[1].clone()).payload, "a1");
    assert_eq!(all_a.len(), 2);
    assert_eq!(
        payloads(ok(&mut c, &["FIRN.LOG", "RANGE", "events", "b", "-", "+"]).await),
        ["ab", "b1"]
    );
    assert_eq!(
        payloads(
            ok(
                &mut c,
                &["FIRN.LOG", "RANGE", "events", "a", "-", "+", "LIMIT", "1"]
            )
            .await
        ),
        ["ab"]
    );

    // NEXT: the first at or after; PREV: the last at or before; TAIL: the newest.
    let next = record(ok(&mut c, &["FIRN.LOG", "NEXT", "events", "b", &seqs[1]]).await);
    assert_eq!(next.seq, b1);
    let prev = record(ok(&mut c, &["FIRN.LOG", "PREV", "events", "a", &seqs[1]]).await);
    assert_eq!(prev.payload, "a1");
    let tail = record(ok(&mut c, &["FIRN.LOG", "TAIL", "events", "b"]).await);
    assert_eq!(tail.payload, "b1");
    let after_tail = format!("{}-{}", seq_key(&b1).0 + 1, 0);
    assert_eq!(
        ok(&mut c, &["FIRN.LOG", "NEXT", "events", "b", &after_tail]).await,
        Value::Nil
    );
    assert_eq!(
        ok(&mut c, &["FIRN.LOG", "NEXT", "events", "never-used", "-"]).await,
        Value::Nil,
        "a known log with an unused tag reads empty"
    );

    // At a time: the cut at the first record's commit stamp holds it alone (of tag b).
    let cut = ok(
        &mut c,
        &[
            "FIRN.LOG",
            "RANGE",
            "events",
            "b",
            "-",
            "+",
            "ASOF",
            &first.commit_ts,
            "CONSISTENCY",
            "local",
        ],
    )
    .await;
    assert_eq!(payloads(cut), ["ab"]);
    assert_eq!(
        record(
            ok(
                &mut c,
                &["FIRN.LOG", "TAIL", "events", "b", "ASOF", &first.commit_ts]
            )
            .await
        )
        .payload,
        "ab"
    );
    // `AT t`, as FIRN.SNAPSHOT spells it, is the same read.
    let at = ok(
        &mut c,
        &[
            "FIRN.LOG",
            "RANGE",
            "events",
            "b",
            "-",
            "+",
            "AT",
            &first.commit_ts,
        ],
    )
    .await;
    assert_eq!(payloads(at), ["ab"]);

    let info = items(ok(&mut c, &["FIRN.LOG", "INFO", "events", "b"]).await);
    assert_eq!(
        info,
        vec![
            Value::BulkString(b"length".to_vec()),
            Value::Int(2),
            Value::BulkString(b"first-seq".to_vec()),
            Value::BulkString(seqs[0].clone().into_bytes()),
            Value::BulkString(b"last-seq".to_vec()),
            Value::BulkString(b1.clone().into_bytes()),
            Value::BulkString(b"first-kept-seq".to_vec()),
            Value::BulkString(b"0-0".to_vec()),
            Value::BulkString(b"entries-added".to_vec()),
            Value::Int(2),
        ]
    );
    node.shutdown().await;
}

#[tokio::test]
async fn trim_drops_older_records_and_reads_below_it_are_trimmed() {
    let node = start_node(false).await;
    let mut c = redis_conn(&node).await;
    let mut seqs = Vec::new();
    for p in ["1", "2", "3"] {
        let v = ok(&mut c, &["FIRN.LOG", "APPEND", "t", "TAGS", "1", "k", p]).await;
        seqs.push(bulk_text(&items(v)[0]));
    }
    // Beyond the tail: refused, nothing removed.
    let beyond = format!("{}-0", seq_key(&seqs[2]).0 + 10);
    let err = error_line(
        &mut c,
        &["FIRN.LOG", "TRIM", "t", "TAG", "k", "BEFORE", &beyond],
    )
    .await;
    assert!(
        err.starts_with("ERR ") && err.contains("beyond the tail"),
        "{err}"
    );
    assert_eq!(
        payloads(ok(&mut c, &["FIRN.LOG", "RANGE", "t", "k", "-", "+"]).await),
        ["1", "2", "3"]
    );

    assert_eq!(
        ok(
            &mut c,
            &["FIRN.LOG", "TRIM", "t", "TAG", "k", "BEFORE", &seqs[2]]
        )
        .await,
        Value::Int(2)
    );
    let err = error_line(&mut c, &["FIRN.LOG", "NEXT", "t", "k", &seqs[0]]).await;
    assert!(
        err.starts_with("TRIMMED ") && err.contains(&seqs[2]),
        "names the first kept seq: {err}"
    );
    assert_eq!(
        record(ok(&mut c, &["FIRN.LOG", "NEXT", "t", "k", &seqs[2]]).await).payload,
        "3"
    );
    let info = items(ok(&mut c, &["FIRN.LOG", "INFO", "t", "k"]).await);
    assert_eq!(info[1], Value::Int(1));
    assert_eq!(bulk_text(&info[7]), seqs[2], "first-kept-seq");
    // A whole log's trim (no TAG).
    let v = ok(
        &mut c,
        &["FIRN.LOG", "APPEND", "t", "TAGS", "1", "other", "o"],
    )
    .await;
    let o = bulk_text(&items(v)[0]);
    let (ms, n) = seq_key(&o);
    let removed = ok(
        &mut c,
        &[
            "FIRN.LOG",
            "TRIM",
            "t",
            "BEFORE",
            &format!("{ms}-{}", n + 1),
        ],
    )
    .await;
    assert_eq!(removed, Value::Int(2), "k's 3 and other's o");
    assert_usable(&mut c).await;
    node.shutdown().await;
}

#[tokio::test]
async fn a_blocked_next_wakes_for_the_next_record() {
    let node = start_node(false).await;
    let mut c = redis_conn(&node).await;
    let v = ok(
        &mut c,
        &["FIRN.LOG", "APPEND", "b", "TAGS", "1", "k", "first"],
    )
    .await;
    let first = bulk_text(&items(v)[0]);
    let (ms, n) = seq_key(&first);
    let after = format!("{ms}-{}", n + 1);

    let reader = {
        let mut r = redis_conn_patient(&node).await;
        let after = after.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let v = ok(
                &mut r,
                &["FIRN.LOG", "NEXT", "b", "k", &after, "BLOCK", "10000"],
            )
            .await;
            (v, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    ok(
        &mut c,
        &["FIRN.LOG", "APPEND", "b", "TAGS", "1", "k", "second"],
    )
    .await;
    let (woke, waited) = reader.await.unwrap();
    assert_eq!(record(woke).payload, "second");
    assert!(
        waited < Duration::from_secs(5),
        "woke at the append: {waited:?}"
    );

    // A block that times out answers nil.
    let started = Instant::now();
    assert_eq!(
        ok(&mut c, &["FIRN.LOG", "NEXT", "b", "k", "+", "BLOCK", "100"]).await,
        Value::Nil
    );
    assert!(started.elapsed() >= Duration::from_millis(90));
    node.shutdown().await;
}

#[tokio::test]
async fn bad_input_is_refused_by_name_and_changes_nothing() {
    let node = start_node(false).await;
    let mut c = redis_conn(&node).await;

    let unknown = error_line(&mut c, &["FIRN.LOG", "NEXT", "never", "x", "-"]).await;
    assert_eq!(unknown, "NOLOG no log named 'never'");
    assert_usable(&mut c).await;

    // 17 tags, 0 tags, a payload over the limit (64 KiB here): refused, nothing made.
    let mut seventeen = vec!["FIRN.LOG", "APPEND", "l", "TAGS", "17"];
    seventeen.extend(["t"; 17]);
    seventeen.push("payload");
    let err = error_line(&mut c, &seventeen).await;
    assert!(err.contains("17 tags") && err.contains("1 to 16"), "{err}");
    let err = error_line(&mut c, &["FIRN.LOG", "APPEND", "l", "TAGS", "0", "payload"]).await;
    assert!(err.contains("1 to 16"), "{err}");
    let big = "p".repeat(70 * 1024);
    let err = error_line(&mut c, &["FIRN.LOG", "APPEND", "l", "TAGS", "1", "t", &big]).await;
    assert!(err.contains("the limit is 65536"), "{err}");
    // One bad record refuses the whole batch.
    let err = error_line(
        &mut c,
        &[
            "FIRN.LOG", "APPEND", "l", "TAGS", "1", "t", "ok", "TAGS", "1", "t", &big,
        ],
    )
    .await;
    assert!(err.contains("the limit is 65536"), "{err}");
    assert_eq!(
        error_line(&mut c, &["FIRN.LOG", "TAIL", "l", "t"]).await,
        "NOLOG no log named 'l'",
        "the refused appends made nothing"
    );

    // Malformed appends.
    for (args, says) in [
        (
            &["FIRN.LOG", "APPEND", "l", "TAGS", "2", "t"][..],
            "wrong number of arguments",
        ),
        (
            &["FIRN.LOG", "APPEND", "l", "TAGS", "x", "t", "p"],
            "TAGS must be",
        ),
        (
            &["FIRN.LOG", "APPEND", "l", "TAG", "1", "t", "p"],
            "expected TAGS",
        ),
        (&["FIRN.LOG", "APPEND", "l"], "wrong number of arguments"),
    ] {
        let err = error_line(&mut c, args).await;
        assert!(err.contains(says), "{args:?}: {err}");
    }
    ok(&mut c, &["FIRN.LOG", "APPEND", "l", "TAGS", "1", "t", "p"]).await;

    // Malformed seqs, options, times and subcommands.
    for (args, says) in [
        (
            &["FIRN.LOG", "NEXT", "l", "t", "12-x"][..],
            "invalid seq '12-x'",
        ),
        (&["FIRN.LOG", "NEXT", "l", "t", "abc"], "invalid seq 'abc'"),
        (
            &["FIRN.LOG", "RANGE", "l", "t", "-", "9-9-9"],
            "invalid seq",
        ),
        (&["FIRN.LOG", "TRIM", "l", "BEFORE", "x-1"], "invalid seq"),
        (&["FIRN.LOG", "TRIM", "l", "TAG", "t"], "needs BEFORE"),
        (
            &["FIRN.LOG", "PREV", "l", "t", "+", "BLOCK", "5"],
            "unknown FIRN.LOG PREV option 'BLOCK'",
        ),
        (
            &["FIRN.LOG", "RANGE", "l", "t", "-", "+", "LIMIT", "0"],
            "limit 0 is out of range",
        ),
        (
            &["FIRN.LOG", "NEXT", "l", "t", "-", "ASOF", "yesterday"],
            "is not a time",
        ),
        (
            &["FIRN.LOG", "NEXT", "l", "t", "-", "CONSISTENCY", "eventual"],
            "unknown consistency",
        ),
        (
            &[
                "FIRN.LOG", "NEXT", "l", "t", "-", "BLOCK", "10", "ASOF", "1",
            ],
            "cannot block",
        ),
        (
            &["FIRN.LOG", "NEXT", "l", "t", "-", "BLOCK", "99999999"],
            "BLOCK is at most",
        ),
        (
            &["FIRN.LOG", "INFO", "l", "t", "EXTRA"],
            "wrong number of arguments",
        ),
        (
            &["FIRN.LOG", "FETCH", "l", "t"],
            "unknown subcommand 'FETCH'",
        ),
        (&["FIRN.LOG", "NEXT"], "wrong number of arguments"),
    ] {
        let err = error_line(&mut c, args).await;
        assert!(
            err.starts_with("ERR ") && err.contains(says),
            "{args:?}: {err}"
        );
    }
    // Nothing above changed the log.
    assert_eq!(
        payloads(ok(&mut c, &["FIRN.LOG", "RANGE", "l", "t", "-", "+"]).await),
        ["p"]
    );
    assert_usable(&mut c).await;
    node.shutdown().await;
}

#[tokio::test]
async fn pipelined_appends_are_seen_by_the_reads_after_them() {
    let node = start_node(false).await;
    let mut c = redis_conn(&node).await;
    let mut pipe = redis::pipe();
    for i in 0..20 {
        pipe.cmd("FIRN.LOG")
            .arg(&["APPEND", "p", "TAGS", "1", "k"])
            .arg(i.to_string())
            .ignore();
        pipe.cmd("FIRN.LOG").arg(&["TAIL", "p", "k"]);
    }
    let tails: Vec<Value> = pipe.query_async(&mut c).await.unwrap();
    let seen: Vec<String> = tails.into_iter().map(|v| record(v).payload).collect();
    let expected: Vec<String> = (0..20).map(|i| i.to_string()).collect();
    assert_eq!(seen, expected, "each TAIL sees the append sent before it");
    node.shutdown().await;
}
