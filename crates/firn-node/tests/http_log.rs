//! The shared log over HTTP (`/v1/log/…`) and through the Rust client: appends with tags,
//! reads by tag, a tag's info, trim; bad input refused with the error JSON and nothing
//! changed; unknown logs 404, reads below the trim point 410 with the first kept seq; a
//! blocked read woken by an append.

mod common;

use std::time::{Duration, Instant};

use common::http::{agent, call};
use common::*;
use firn_client::{ClientError, LogClient, LogReadOptions};
use firn_model::LogSeq;
use serde_json::{Value as Json, json};

fn append(a: &ureq::Agent, base: &str, log: &str, records: Json) -> (u16, Json) {
    call(
        a.post(&format!("{base}/v1/log/{log}")),
        Some(json!({ "records": records })),
    )
}

/// The seq of the `i`th record an append answered.
fn seq(appended: &Json, i: usize) -> String {
    appended["appended"][i]["seq"].as_str().unwrap().to_string()
}

fn values(records: &Json) -> Vec<String> {
    records["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["value"].as_str().unwrap_or("<base64>").to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_read_back_by_tag_with_text_and_base64_payloads() {
    let node = start_node(false).await;
    let base = format!("http://{}", node.http_addr);
    tokio::task::spawn_blocking(move || {
        let a = agent();
        let (code, first) = append(
            &a,
            &base,
            "orders",
            json!([
                {"tags": ["eu", "paid"], "value": "o-1"},
                {"tags": ["eu"], "value_base64": "/wAB"},
            ]),
        );
        assert_eq!(code, 200, "{first}");
        let (s1, s2) = (seq(&first, 0), seq(&first, 1));
        assert!(s1.parse::<LogSeq>().unwrap() < s2.parse::<LogSeq>().unwrap());
        let (_, second) = append(
            &a,
            &base,
            "orders",
            json!([{"tags": ["eu"], "value": "o-3"}]),
        );
        let s3 = seq(&second, 0);

        let (code, all) = call(a.get(&format!("{base}/v1/log/orders/eu/range")), None);
        assert_eq!(code, 200, "{all}");
        assert_eq!(values(&all), ["o-1", "<base64>", "o-3"]);
        assert_eq!(all["records"][0]["tags"], json!(["eu", "paid"]));
        assert_eq!(
            all["records"][1]["value_base64"], "/wAB",
            "bytes come back as given"
        );
        assert_eq!(
            all["records"][0]["commit_ts"],
            first["appended"][0]["commit_ts"]
        );

        let read = |path: &str| call(a.get(&format!("{base}/v1/log/orders/{path}")), None).1;
        // Bounds are inclusive.
        assert_eq!(values(&read(&format!("eu/next?min={s2}"))), ["<base64>"]);
        assert_eq!(values(&read(&format!("eu/prev?max={s2}"))), ["<base64>"]);
        assert_eq!(values(&read("eu/tail")), ["o-3"]);
        assert_eq!(values(&read("paid/tail")), ["o-1"]);
        assert_eq!(
            values(&read(&format!("eu/range?from={s2}&limit=1"))),
            ["<base64>"]
        );
        assert_eq!(values(&read(&format!("eu/range?to={s1}"))), ["o-1"]);
        let after_tail = s3.parse::<LogSeq>().unwrap().successor().unwrap();
        assert_eq!(
            read(&format!("eu/next?min={after_tail}")),
            json!({"records": []})
        );
        // A read at a time sees the records committed by then: the first batch only.
        let at = first["appended"][1]["commit_ts"].as_str().unwrap();
        assert_eq!(
            values(&read(&format!("eu/range?at={at}"))),
            ["o-1", "<base64>"]
        );
        assert_eq!(
            values(&read(&format!("eu/tail?at={at}&consistency=local"))),
            ["<base64>"]
        );

        let info = read("eu");
        assert_eq!(
            info,
            json!({"len": 3, "first_seq": s1, "last_seq": s3, "first_kept": "0-0", "added": 3})
        );
        // A known log's tag that no record carries is empty, not missing.
        let none = read("nobody");
        assert_eq!(
            (none["len"].as_u64(), &none["first_seq"]),
            (Some(0), &Json::Null)
        );

        // A `/` in a log name or tag is one segment written `%2F`.
        let (code, _) = append(&a, &base, "a%2Fb", json!([{"tags": ["x/y"], "value": "v"}]));
        assert_eq!(code, 200);
        let (_, r) = call(a.get(&format!("{base}/v1/log/a%2Fb/x%2Fy/tail")), None);
        assert_eq!(r["records"][0]["tags"], json!(["x/y"]));
    })
    .await
    .unwrap();
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_log_input_is_refused_with_the_error_json_and_changes_nothing() {
    let node = start_node(false).await;
    let base = format!("http://{}", node.http_addr);
    tokio::task::spawn_blocking(move || {
        let a = agent();
        let bad_appends = [
            (json!([]), "1 to 1000"),
            (json!([{"tags": [], "value": "x"}]), "1 to 16"),
            (json!([{"tags": vec!["t"; 17], "value": "x"}]), "1 to 16"),
            (json!([{"tags": [""], "value": "x"}]), "empty"),
            (json!([{"tags": ["t"]}]), "exactly one of value"),
            (
                json!([{"tags": ["t"], "value": "x", "value_base64": "eA=="}]),
                "exactly one of value",
            ),
            (
                json!([{"tags": ["t"], "value_base64": "not base64!"}]),
                "not base64",
            ),
            (json!([{"tag": ["t"], "value": "x"}]), "unknown field `tag`"),
            // A good record beside a bad one: the batch is refused whole.
            (
                json!([{"tags": ["t"], "value": "x"}, {"tags": [], "value": "y"}]),
                "1 to 16",
            ),
        ];
        for (records, says) in bad_appends {
            let (code, r) = append(&a, &base, "l", records.clone());
            assert_eq!(code, 400, "{records}: {r}");
            assert_eq!(r["error"], "ERR");
            let message = r["message"].as_str().unwrap();
            assert!(message.contains(says), "{records}: {message}");
        }
        let (code, r) = call(
            a.post(&format!("{base}/v1/log/l"))
                .set("content-type", "application/json"),
            None,
        );
        assert_eq!((code, &r["error"]), (400, &json!("ERR")), "no body: {r}");

        // Nothing above created the log.
        let (code, r) = call(a.get(&format!("{base}/v1/log/l/t/tail")), None);
        assert_eq!((code, &r["error"]), (404, &json!("NOLOG")), "{r}");

        append(&a, &base, "l", json!([{"tags": ["t"], "value": "x"}]));
        let bad_reads = [
            ("t/next?min=abc", "min: invalid seq 'abc'"),
            ("t/next?min=1-2-3", "invalid seq"),
            ("t/prev?max=-1", "invalid seq"),
            ("t/next?block_ms=0", "1 to 3600000"),
            ("t/next?block_ms=3600001", "1 to 3600000"),
            ("t/next?block_ms=soon", "non-negative integer"),
            ("t/prev?block_ms=100", "not prev"),
            ("t/next?block_ms=100&at=5", "cannot block"),
            ("t/next?at=yesterday", "not a time"),
            ("t/range?limit=0", "out of range"),
            ("t/range?limit=10001", "out of range"),
            ("t/next?consistency=eventual", "unknown consistency"),
            ("t/head", "use next, prev, tail or range"),
        ];
        for (path, says) in bad_reads {
            let (code, r) = call(a.get(&format!("{base}/v1/log/l/{path}")), None);
            assert_eq!(code, 400, "{path}: {r}");
            let message = r["message"].as_str().unwrap();
            assert!(message.contains(says), "{path}: {message}");
        }

        let tail = |a: &ureq::Agent| call(a.get(&format!("{base}/v1/log/l/t/range")), None).1;
        let before = tail(&a);
        for path in ["l", "l?before=x", "l?before=99999999999999-0&tag=t"] {
            let (code, r) = call(a.delete(&format!("{base}/v1/log/{path}")), None);
            assert_eq!(code, 400, "{path}: {r}");
        }
        assert_eq!(tail(&a), before, "a refused trim removes nothing");
        // A trim of a log nothing was appended to: 404, and the log is still unknown.
        let (code, r) = call(a.delete(&format!("{base}/v1/log/never?before=5")), None);
        assert_eq!((code, &r["error"]), (404, &json!("NOLOG")), "{r}");
        let (code, _) = call(a.get(&format!("{base}/v1/log/never/t/next")), None);
        assert_eq!(code, 404);
    })
    .await
    .unwrap();
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_logs_are_404_and_reads_below_the_trim_point_410_with_the_first_kept_seq() {
    let node = start_node(false).await;
    let base = format!("http://{}", node.http_addr);
    tokio::task::spawn_blocking(move || {
        let a = agent();
        for path in ["never/t/next", "never/t/tail", "never/t/range", "never/t"] {
            let (code, r) = call(a.get(&format!("{base}/v1/log/{path}")), None);
            assert_eq!(code, 404, "{path}: {r}");
            assert_eq!(r["error"], "NOLOG");
            assert!(r["message"].as_str().unwrap().contains("'never'"), "{r}");
        }

        let seqs: Vec<String> = ["1", "2", "3"]
            .iter()
            .map(|v| {
                seq(
                    &append(&a, &base, "t", json!([{"tags": ["k"], "value": v}])).1,
                    0,
                )
            })
            .collect();
        let (code, r) = call(
            a.delete(&format!("{base}/v1/log/t?before={}&tag=k", seqs[2])),
            None,
        );
        assert_eq!((code, r), (200, json!({"removed": 2})));

        for path in [
            "k/next?min=0",
            &format!("k/range?from={}", seqs[0]),
            &format!("k/prev?max={}", seqs[1]),
        ] {
            let (code, r) = call(a.get(&format!("{base}/v1/log/t/{path}")), None);
            assert_eq!(code, 410, "{path}: {r}");
            assert_eq!(r["error"], "TRIMMED");
            assert_eq!(
                r["first_kept"],
                seqs[2].as_str(),
                "{path}: where to read from"
            );
        }
        let (_, r) = call(
            a.get(&format!("{base}/v1/log/t/k/next?min={}", seqs[2])),
            None,
        );
        assert_eq!(values(&r), ["3"]);
        // A range without a start reads from the first record kept.
        let (code, r) = call(a.get(&format!("{base}/v1/log/t/k/range")), None);
        assert_eq!((code, values(&r)), (200, vec!["3".to_string()]), "{r}");
        let (_, info) = call(a.get(&format!("{base}/v1/log/t/k")), None);
        assert_eq!(
            (info["len"].as_u64(), &info["first_kept"]),
            (Some(1), &json!(seqs[2]))
        );
        // A whole-log trim (every tag) reports what went too.
        let (_, r) = call(
            a.delete(&format!("{base}/v1/log/t?before={}", seqs[2])),
            None,
        );
        assert_eq!(r, json!({"removed": 0}));
    })
    .await
    .unwrap();
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_next_over_http_wakes_at_the_next_append() {
    let node = start_node(false).await;
    let base = format!("http://{}", node.http_addr);
    tokio::task::spawn_blocking(move || {
        let a = agent();
        let (_, r) = append(&a, &base, "b", json!([{"tags": ["k"], "value": "first"}]));
        let after = seq(&r, 0).parse::<LogSeq>().unwrap().successor().unwrap();
        let reader = {
            let (a, url) = (
                a.clone(),
                format!("{base}/v1/log/b/k/next?min={after}&block_ms=10000"),
            );
            std::thread::spawn(move || {
                let started = Instant::now();
                (call(a.get(&url), None), started.elapsed())
            })
        };
        std::thread::sleep(Duration::from_millis(300));
        append(&a, &base, "b", json!([{"tags": ["k"], "value": "second"}]));
        let ((code, r), waited) = reader.join().unwrap();
        assert_eq!(code, 200, "{r}");
        assert_eq!(values(&r), ["second"]);
        assert!(
            waited >= Duration::from_millis(250) && waited < Duration::from_secs(5),
            "woke at the append, not the timeout: {waited:?}"
        );
        // A block that runs out answers no record.
        let started = Instant::now();
        let (code, r) = call(
            a.get(&format!(
                "{base}/v1/log/b/k/next?min=99999999999999&block_ms=200"
            )),
            None,
        );
        assert_eq!((code, r), (200, json!({"records": []})));
        assert!(started.elapsed() >= Duration::from_millis(200));
    })
    .await
    .unwrap();
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_client_reads_its_appends_and_gets_trimmed_as_a_typed_error() {
    let node = start_node(false).await;
    let client = LogClient::new(&node.http_addr.to_string());
    let none = LogReadOptions::default();
    let err = client
        .next("c", "k", LogSeq::ZERO, &none)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ClientError::Server { code, .. } if code == "NOLOG"),
        "{err}"
    );

    let a1 = client
        .append_one("c", &["k", "other"], b"one")
        .await
        .unwrap();
    assert!(
        client.token() >= Some(a1.commit_ts),
        "the client keeps the token"
    );
    let a2 = client.append_one("c", &["k"], &[0xff, 0x00]).await.unwrap();
    let a3 = client.append_one("c", &["k"], b"three").await.unwrap();

    let all = client
        .range("c", "k", Some(LogSeq::ZERO), LogSeq::MAX, 10, &none)
        .await
        .unwrap();
    let payloads: Vec<&[u8]> = all.iter().map(|r| &r.payload[..]).collect();
    assert_eq!(payloads, [&b"one"[..], &[0xff, 0x00], b"three"]);
    assert_eq!(all[0].seq, a1.seq);
    assert_eq!(all[0].commit_ts, a1.commit_ts);
    assert_eq!(all[0].tags.len(), 2);
    let next = client.next("c", "k", a2.seq, &none).await.unwrap().unwrap();
    assert_eq!(next.seq, a2.seq);
    let prev = client
        .prev("c", "k", a2.seq.predecessor().unwrap(), &none)
        .await
        .unwrap();
    assert_eq!(prev.unwrap().seq, a1.seq);
    assert_eq!(
        client.tail("c", "other", &none).await.unwrap().unwrap().seq,
        a1.seq
    );
    let at = LogReadOptions {
        at: Some(a1.commit_ts),
        ..Default::default()
    };
    assert_eq!(
        client.tail("c", "k", &at).await.unwrap().unwrap().seq,
        a1.seq
    );

    let info = client.info("c", "k").await.unwrap();
    assert_eq!(
        (info.len, info.first_seq, info.last_seq, info.added),
        (3, Some(a1.seq), Some(a3.seq), 3)
    );

    assert_eq!(client.trim("c", Some("k"), a3.seq).await.unwrap(), 2);
    let err = client
        .next("c", "k", LogSeq::ZERO, &none)
        .await
        .unwrap_err();
    assert!(
        matches!(err, ClientError::Trimmed { first_kept } if first_kept == a3.seq),
        "{err}"
    );
    assert_eq!(client.info("c", "k").await.unwrap().first_kept, a3.seq);

    // A blocked next through the client wakes at an append by another client.
    let reader = {
        let client = client.clone();
        let after = a3.seq.successor().unwrap();
        tokio::spawn(async move {
            let opts = LogReadOptions {
                block_ms: Some(10_000),
                ..Default::default()
            };
            client.next("c", "k", after, &opts).await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let other = LogClient::new(&node.http_addr.to_string());
    let a4 = other.append_one("c", &["k"], b"four").await.unwrap();
    let woke = reader.await.unwrap().unwrap().unwrap();
    assert_eq!(woke.seq, a4.seq);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_log_is_listed_a_page_at_a_time_and_bad_listing_input_is_refused() {
    let node = start_node(false).await;
    let mut c = redis_conn(&node).await;
    // A tag that is not UTF-8 (written over RESP) and a stream.
    let mut append = redis::cmd("FIRN.LOG");
    append.arg("APPEND").arg("orders").arg("TAGS").arg(2);
    append.arg("eu").arg(b"\xffbin".as_slice()).arg("o-1");
    let _: redis::Value = append.query_async(&mut c).await.unwrap();
    ok(
        &mut c,
        &["FIRN.LOG", "APPEND", "orders", "TAGS", "1", "eu", "o-2"],
    )
    .await;
    ok(&mut c, &["XADD", "s", "*", "f", "v"]).await;
    // One row per (log, tag), the shorter log name first.
    let (first, rows) = match ok(&mut c, &["FIRN.LOGS", "COUNT", "1"]).await {
        redis::Value::Array(page) => (bulk_text(&page[0]), page[1].clone()),
        other => panic!("{other:?}"),
    };
    assert!(!first.is_empty(), "more pages follow");
    let redis::Value::Array(rows) = rows else {
        panic!("{rows:?}")
    };
    assert_eq!(rows.len(), 1);
    let base = format!("http://{}", node.http_addr);
    tokio::task::spawn_blocking(move || {
        let a = agent();
        let (mut listed, mut cursor) = (Vec::new(), None::<String>);
        loop {
            let mut request = a.get(&format!("{base}/v1/logs")).query("limit", "1");
            if let Some(c) = &cursor {
                request = request.query("cursor", c);
            }
            let (code, page) = call(request, None);
            assert_eq!(code, 200, "{page}");
            for row in page["tags"].as_array().unwrap() {
                let tag = row["tag"].as_str().map_or_else(
                    || format!("base64 {}", row["tag_base64"].as_str().unwrap()),
                    str::to_string,
                );
                listed.push((
                    row["log"].as_str().unwrap().to_string(),
                    tag,
                    row["len"].clone(),
                ));
            }
            cursor = page["next_cursor"].as_str().map(str::to_string);
            if cursor.is_none() {
                break;
            }
        }
        let row = |log: &str, tag: &str, len: u64| (log.to_string(), tag.to_string(), json!(len));
        assert_eq!(
            listed,
            vec![
                row("s", "s", 1),
                row("orders", "eu", 2),
                row("orders", "base64 /2Jpbg==", 1),
            ]
        );
        for (query, says) in [
            ("limit=0", "limit 0 is out of range"),
            ("limit=10001", "out of range"),
            ("cursor=b64:!!", "not a cursor a page gave"),
            ("at=yesterday", ""),
        ] {
            let (code, r) = call(a.get(&format!("{base}/v1/logs?{query}")), None);
            assert_eq!(code, 400, "{query}: {r}");
            assert!(
                r["message"].as_str().unwrap().contains(says),
                "{query}: {r}"
            );
        }
    })
    .await
    .unwrap();
}
