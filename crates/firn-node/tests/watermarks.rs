//! Event-time watermarks on a node of three shards: a keyspace's watermark read, moved up
//! (never back), waited for; writes at or below it kept as corrections or refused (`LATE`)
//! per the keyspace's policy, by an advance or by an allowed lateness; `FIRN.HISTORY …
//! CORRECTIONS`; a read with `COMPLETE` that waits for the watermark and then never
//! changes; the same over HTTP; and bad input refused with nothing changed.

mod common;

use std::time::Duration;

use common::*;
use redis::Value;

fn int(v: &Value, name: &str) -> Option<i64> {
    match field(v, name) {
        Some(Value::Int(n)) => Some(*n),
        Some(Value::Nil) | None => None,
        other => panic!("{name}: {other:?}"),
    }
}

fn text(v: &Value, name: &str) -> String {
    match field(v, name) {
        Some(Value::SimpleString(s)) => s.clone(),
        Some(v) => bulk_text(v),
        None => panic!("no {name} in {v:?}"),
    }
}

fn versions(history: &Value) -> Vec<i64> {
    let Value::Array(items) = history else {
        panic!("{history:?}")
    };
    items.iter().map(|v| int(v, "version").unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_writes_are_corrections_or_refused_and_complete_reads_never_change() {
    let node = start_three_shard_node().await;
    let mut c = redis_conn(&node).await;
    ok(&mut c, &["FIRN.KEYSPACE", "CREATE", "s/"]).await;

    let w = ok(&mut c, &["FIRN.WATERMARK", "s/"]).await;
    assert_eq!(
        (int(&w, "watermark"), text(&w, "late")),
        (None, "keep".into())
    );
    // Before any watermark nothing is late.
    ok(&mut c, &["FIRN.PUT", "s/a", "on time", "EVENTTIME", "1000"]).await;
    ok(&mut c, &["FIRN.WATERMARK", "s/", "ADVANCE", "2000"]).await;
    let w = ok(&mut c, &["FIRN.WATERMARK", "s/"]).await;
    assert_eq!(
        (int(&w, "watermark"), int(&w, "advanced")),
        (Some(2000), Some(2000))
    );

    // Moving it back is refused, and changes nothing.
    let e = error_line(&mut c, &["FIRN.WATERMARK", "s/", "ADVANCE", "1500"]).await;
    assert!(e.contains("never moves back"), "{e}");
    assert_eq!(
        int(&ok(&mut c, &["FIRN.WATERMARK", "s/"]).await, "watermark"),
        Some(2000)
    );
    // The same value again is fine.
    ok(&mut c, &["FIRN.WATERMARK", "s/", "ADVANCE", "2000"]).await;

    // A late write under the default policy is kept, as a correction.
    ok(
        &mut c,
        &["FIRN.PUT", "s/a", "corrected", "EVENTTIME", "1500"],
    )
    .await;
    ok(
        &mut c,
        &["FIRN.PUT", "s/a", "on time too", "EVENTTIME", "2500"],
    )
    .await;
    let all = ok(&mut c, &["FIRN.HISTORY", "s/a"]).await;
    assert_eq!(versions(&all), vec![1, 2, 3]);
    let corrections = ok(&mut c, &["FIRN.HISTORY", "s/a", "CORRECTIONS"]).await;
    assert_eq!(versions(&corrections), vec![2]);

    // A plain read by event time sees the correction; a complete one reads as of the
    // moment the watermark passed 1800, so it never will.
    let plain = ok(&mut c, &["FIRN.GET", "s/a", "EVENTTIME", "1800"]).await;
    assert_eq!(text(&plain, "value"), "corrected");
    let complete = ok(
        &mut c,
        &["FIRN.GET", "s/a", "EVENTTIME", "1800", "COMPLETE"],
    )
    .await;
    assert_eq!(text(&complete, "value"), "on time");

    // Late writes refused: nothing written.
    ok(
        &mut c,
        &["FIRN.WATERMARK", "s/", "POLICY", "LATE", "REFUSE"],
    )
    .await;
    let e = error_line(
        &mut c,
        &["FIRN.PUT", "s/a", "too late", "EVENTTIME", "1900"],
    )
    .await;
    assert!(e.starts_with("LATE") || e.contains("LATE"), "{e}");
    assert!(e.contains("2000"), "{e}");
    assert_eq!(
        versions(&ok(&mut c, &["FIRN.HISTORY", "s/a"]).await),
        vec![1, 2, 3]
    );
    // SET with no event time is never late.
    ok(&mut c, &["SET", "s/plain", "x"]).await;

    // A complete read waits for the watermark, then answers.
    ok(
        &mut c,
        &["FIRN.PUT", "s/b", "b at 3000", "EVENTTIME", "3000"],
    )
    .await;
    let mut waiter = redis_conn(&node).await;
    let waiting = tokio::spawn(async move {
        let started = std::time::Instant::now();
        let v = run(
            &mut waiter,
            &["FIRN.GET", "s/b", "EVENTTIME", "3500", "COMPLETE"],
        )
        .await;
        (v, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        !waiting.is_finished(),
        "a complete read answered before the watermark reached it"
    );
    ok(&mut c, &["FIRN.WATERMARK", "s/", "ADVANCE", "4000"]).await;
    let (v, waited) = waiting.await.unwrap();
    assert_eq!(text(&v.unwrap(), "value"), "b at 3000");
    assert!(waited >= Duration::from_millis(400), "{waited:?}");

    // WAIT answers once the watermark is there, or NOTCOMPLETE after its timeout.
    let w = ok(&mut c, &["FIRN.WATERMARK", "s/", "WAIT", "4000"]).await;
    assert_eq!(int(&w, "watermark"), Some(4000));
    let e = error_line(
        &mut c,
        &["FIRN.WATERMARK", "s/", "WAIT", "9000", "TIMEOUT", "100"],
    )
    .await;
    assert!(e.contains("NOTCOMPLETE"), "{e}");

    // Bad input: clear errors, nothing changed.
    for (args, says) in [
        (&["FIRN.WATERMARK", "nope/", "ADVANCE", "1"][..], "nope/"),
        (&["FIRN.WATERMARK", "s/", "ADVANCE", "soon"][..], "soon"),
        (
            &["FIRN.WATERMARK", "s/", "POLICY", "LATENESS", "0"][..],
            "greater than 0",
        ),
        (
            &["FIRN.WATERMARK", "s/", "POLICY", "LATE", "maybe"][..],
            "keep or refuse",
        ),
        (&["FIRN.WATERMARK", "s/", "SOMETIME"][..], "SOMETIME"),
        (
            &["FIRN.GET", "s/a", "COMPLETE"][..],
            "COMPLETE follows EVENTTIME",
        ),
        (
            &["FIRN.GET", "s/a", "EVENTTIME", "1", "COMPLETE", "ASOF", "1"][..],
            "at most one",
        ),
    ] {
        let e = error_line(&mut c, args).await;
        assert!(
            e.to_lowercase().contains(&says.to_lowercase()),
            "{args:?}: {e}"
        );
    }
    let w = ok(&mut c, &["FIRN.WATERMARK", "s/"]).await;
    assert_eq!(
        (int(&w, "watermark"), text(&w, "late")),
        (Some(4000), "refuse".into())
    );
    // The connection is still usable.
    assert_eq!(
        ok(&mut c, &["PING"]).await,
        Value::SimpleString("PONG".into())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_lateness_moves_the_watermark_with_the_clock() {
    // One shard: reads take the connection's batched path to its replica. A complete read
    // here waits for the clock to pass e + L, then for that time to close.
    let node = start_node(false).await;
    let mut c = redis_conn_patient(&node).await;
    ok(&mut c, &["FIRN.KEYSPACE", "CREATE", "l/"]).await;
    ok(
        &mut c,
        &[
            "FIRN.WATERMARK",
            "l/",
            "POLICY",
            "LATENESS",
            "500ms",
            "LATE",
            "REFUSE",
        ],
    )
    .await;
    let now = firn_model::hlc::system_wall_us();
    let w = ok(&mut c, &["FIRN.WATERMARK", "l/"]).await;
    let mark = int(&w, "watermark").unwrap() as u64;
    assert!(mark + 500_000 >= now && mark <= now, "{mark} against {now}");
    assert_eq!(int(&w, "lateness_us"), Some(500_000));

    let old = (now - 10_000_000).to_string();
    let fresh = now.to_string();
    let e = error_line(&mut c, &["FIRN.PUT", "l/k", "old", "EVENTTIME", &old]).await;
    assert!(e.contains("LATE"), "{e}");
    ok(&mut c, &["FIRN.PUT", "l/k", "fresh", "EVENTTIME", &fresh]).await;
    // Complete once the clock is past e + L: the value written in time.
    let v = ok(
        &mut c,
        &["FIRN.GET", "l/k", "EVENTTIME", &fresh, "COMPLETE"],
    )
    .await;
    assert_eq!(text(&v, "value"), "fresh");
    // Kept instead of refused: the late write is a correction.
    ok(
        &mut c,
        &["FIRN.WATERMARK", "l/", "POLICY", "LATENESS", "500ms"],
    )
    .await;
    ok(&mut c, &["FIRN.PUT", "l/k", "old, kept", "EVENTTIME", &old]).await;
    let corrections = ok(&mut c, &["FIRN.HISTORY", "l/k", "CORRECTIONS"]).await;
    assert_eq!(versions(&corrections), vec![2]);
    // Without a lateness the clock moves nothing.
    ok(
        &mut c,
        &["FIRN.WATERMARK", "l/", "POLICY", "LATENESS", "OFF"],
    )
    .await;
    assert_eq!(
        int(&ok(&mut c, &["FIRN.WATERMARK", "l/"]).await, "watermark"),
        None
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watermarks_over_http() {
    let node = start_three_shard_node().await;
    let mut c = redis_conn(&node).await;
    ok(&mut c, &["FIRN.KEYSPACE", "CREATE", "h/"]).await;
    ok(&mut c, &["FIRN.PUT", "h/x", "first", "EVENTTIME", "100"]).await;
    let base = format!("http://{}", node.http_addr);
    tokio::task::spawn_blocking(move || {
        let status = |r: Result<ureq::Response, ureq::Error>| match r {
            Ok(r) => (r.status(), r.into_string().unwrap()),
            Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap()),
            Err(e) => panic!("{e}"),
        };
        let (code, body) = status(
            ureq::post(&format!("{base}/v1/watermark/advance"))
                .send_json(serde_json::json!({"prefix": "h/", "to": 200})),
        );
        assert_eq!(code, 200, "{body}");
        let (code, body) = status(ureq::get(&format!("{base}/v1/watermark?prefix=h/")).call());
        assert_eq!(code, 200);
        let got: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(got["watermark_us"], 200);
        assert_eq!(got["late"], "keep");
        // Backwards: 400, nothing changed.
        let (code, body) = status(
            ureq::post(&format!("{base}/v1/watermark/advance"))
                .send_json(serde_json::json!({"prefix": "h/", "to": 150})),
        );
        assert_eq!(code, 400, "{body}");
        assert!(body.contains("never moves back"), "{body}");
        // A correction, listed; the complete read does not see it.
        let (code, _) =
            status(ureq::put(&format!("{base}/v1/kv/h/x?event_time=150")).send_string("late"));
        assert_eq!(code, 200);
        let (_, body) =
            status(ureq::get(&format!("{base}/v1/history/h/x?corrections=true")).call());
        let got: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(got["versions"].as_array().map(Vec::len), Some(1), "{body}");
        assert_eq!(got["versions"][0]["version"], 2);
        let (code, body) =
            status(ureq::get(&format!("{base}/v1/kv/h/x?event_time=180&complete=true")).call());
        assert_eq!((code, body.as_str()), (200, "first"));
        let (_, body) = status(ureq::get(&format!("{base}/v1/kv/h/x?event_time=180")).call());
        assert_eq!(body, "late");
        // Refusing policy: 409 for a late write.
        let (code, body) = status(
            ureq::put(&format!("{base}/v1/watermark/policy"))
                .send_json(serde_json::json!({"prefix": "h/", "late": "refuse"})),
        );
        assert_eq!(code, 200, "{body}");
        let (code, body) =
            status(ureq::put(&format!("{base}/v1/kv/h/x?event_time=120")).send_string("refused"));
        assert_eq!(code, 409, "{body}");
        // Bad input.
        for (req, want) in [
            (ureq::get(&format!("{base}/v1/watermark")), 400),
            (ureq::get(&format!("{base}/v1/watermark?prefix=none/")), 404),
            (
                ureq::get(&format!(
                    "{base}/v1/watermark?prefix=h/&wait_for=999&timeout_ms=50"
                )),
                504,
            ),
            (ureq::get(&format!("{base}/v1/kv/h/x?complete=true")), 400),
            (
                ureq::get(&format!(
                    "{base}/v1/mget?key=h/x&event_time=1&complete=true"
                )),
                400,
            ),
            (
                ureq::get(&format!("{base}/v1/history/h/x?corrections=maybe")),
                400,
            ),
        ] {
            let url = req.url().to_string();
            let (code, body) = status(req.call());
            assert_eq!(code, want, "{url}: {body}");
        }
    })
    .await
    .unwrap();
}
