//! The HTTP/JSON front end: the same operations, raw bytes in and out, metadata in headers,
//! errors as JSON with the right status.

mod common;

use common::*;
use std::io::Read;

fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(std::time::Duration::from_secs(10))
        .build()
}

/// Status and body of a request, whatever the status.
fn call(req: ureq::Request, body: Option<&[u8]>) -> (u16, ureq::Response) {
    let result = match body {
        Some(b) => req.send_bytes(b),
        None => req.call(),
    };
    match result {
        Ok(r) => (r.status(), r),
        Err(ureq::Error::Status(code, r)) => (code, r),
        Err(e) => panic!("transport error: {e}"),
    }
}

fn json(r: ureq::Response) -> serde_json::Value {
    r.into_json().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_history_scan_and_errors_over_http() {
    let node = start_node(false).await;
    let base = format!("http://{}", node.http_addr);
    tokio::task::spawn_blocking(move || {
        let a = agent();
        let (code, r) = call(
            a.put(&format!(
                "{base}/v1/kv/room/1?event_time=2026-01-01T00:00:00Z"
            )),
            Some(b"21.5"),
        );
        assert_eq!(code, 200);
        assert_eq!(r.header("firn-version"), Some("1"));
        // Every answer carries the session's causality token: here the write's stamp.
        let token = r.header("firn-token").unwrap().to_string();
        assert_eq!(r.header("firn-commit-ts"), Some(token.as_str()));
        let first = json(r);
        // Sent back, it comes back (an answer older than the token cannot lower it) ...
        let (code, r) = call(
            a.get(&format!("{base}/v1/kv/absent"))
                .set("Firn-After", &token),
            None,
        );
        assert_eq!((code, r.header("firn-token")), (404, Some(token.as_str())));
        // ... a malformed one is refused, and one far ahead of every clock too.
        let (code, r) = call(
            a.get(&format!("{base}/v1/kv/room/1"))
                .set("Firn-After", "yesterday"),
            None,
        );
        assert_eq!(code, 400);
        let message = json(r)["message"].as_str().unwrap().to_string();
        assert!(message.contains("Firn-After"), "{message}");
        let ahead = format!("{}-0", firn_model::hlc::system_wall_us() + 60_000_000);
        let (code, r) = call(
            a.get(&format!("{base}/v1/kv/room/1?consistency=local"))
                .set("Firn-After", &ahead),
            None,
        );
        assert_eq!(code, 400);
        assert!(
            json(r)["message"]
                .as_str()
                .unwrap()
                .contains("in the future"),
            "a token a minute ahead"
        );
        // Refused for a write too, which then never pushes the node's clock ahead.
        let (code, _) = call(
            a.put(&format!("{base}/v1/kv/clock"))
                .set("Firn-After", &ahead),
            Some(b"v"),
        );
        assert_eq!(code, 400);
        let (_, r) = call(a.put(&format!("{base}/v1/kv/clock")), Some(b"v"));
        let wall: u64 = json(r)["commit_ts"]
            .as_str()
            .unwrap()
            .split('-')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            wall < firn_model::hlc::system_wall_us() + 1_000_000,
            "stamped {wall}"
        );
        let (_, r) = call(
            a.put(&format!("{base}/v1/kv/room/1")),
            Some(&[0xff, 0x00, 0x01]),
        );
        assert_eq!(json(r)["version"], 2);

        // One cut at the first write's time, and the refusal of a snapshot of nothing.
        let at = first["commit_ts"].as_str().unwrap().to_string();
        let (code, r) = call(
            a.get(&format!(
                "{base}/v1/snapshot?key=room/1&key=room/none&at={at}"
            )),
            None,
        );
        assert_eq!(code, 200);
        let snap = json(r);
        assert_eq!(snap["at"], at.as_str());
        assert_eq!(snap["values"][0]["found"]["version"], 1);
        assert_eq!(snap["values"][1]["found"], serde_json::Value::Null);
        let (code, _) = call(a.get(&format!("{base}/v1/snapshot")), None);
        assert_eq!(code, 400);

        let (code, r) = call(a.get(&format!("{base}/v1/kv/room/1")), None);
        assert_eq!(code, 200);
        assert_eq!(r.header("firn-version"), Some("2"));
        let mut body = Vec::new();
        r.into_reader().read_to_end(&mut body).unwrap();
        assert_eq!(
            body,
            vec![0xff, 0x00, 0x01],
            "raw bytes come back unchanged"
        );

        let as_of = first["commit_ts"].as_str().unwrap();
        let (code, r) = call(a.get(&format!("{base}/v1/kv/room/1?as_of={as_of}")), None);
        assert_eq!(code, 200);
        assert_eq!(r.into_string().unwrap(), "21.5");
        let (_, r) = call(a.get(&format!("{base}/v1/kv/room/1?version=1")), None);
        assert_eq!(r.header("firn-event-time"), Some("1767225600000000"));

        let (code, r) = call(
            a.put(&format!("{base}/v1/kv/room/1?if_version=1")),
            Some(b"stale"),
        );
        assert_eq!(code, 409);
        assert_eq!(json(r)["current_version"], 2);
        let (code, r) = call(a.get(&format!("{base}/v1/kv/room/1?as_of=noon")), None);
        assert_eq!(code, 400);
        assert!(json(r)["message"].as_str().unwrap().contains("not a time"));
        // Above the inline limit a value is stored beside the log (large_values.rs).
        let (code, _) = call(
            a.put(&format!("{base}/v1/kv/big")),
            Some(&vec![0u8; 64 * 1024 + 1]),
        );
        assert_eq!(code, 200);
        let (code, _) = call(a.get(&format!("{base}/v1/kv/absent")), None);
        assert_eq!(code, 404);

        let (_, r) = call(a.get(&format!("{base}/v1/history/room/1")), None);
        let h = json(r);
        assert_eq!(h["versions"].as_array().unwrap().len(), 2);
        assert_eq!(h["versions"][0]["value"], "21.5");
        assert!(h["versions"][1]["value_base64"].is_string());
        // The history as a read at the first write's time sees it: one version.
        let (_, r) = call(
            a.get(&format!("{base}/v1/history/room/1?as_of={as_of}")),
            None,
        );
        assert_eq!(json(r)["versions"].as_array().unwrap().len(), 1);

        let (_, r) = call(
            a.get(&format!("{base}/v1/mget?key=room/1&key=absent")),
            None,
        );
        let m = json(r);
        assert_eq!(m["values"][0]["found"]["version"], 2);
        assert!(m["values"][1]["found"].is_null());

        let (_, r) = call(
            a.get(&format!("{base}/v1/scan?prefix=room/&limit=10")),
            None,
        );
        assert_eq!(json(r)["keys"][0]["key"], "room/1");

        let (code, r) = call(a.delete(&format!("{base}/v1/kv/room/1")), None);
        assert_eq!(code, 200);
        assert_eq!(json(r)["version"], 3);
        let (code, _) = call(a.get(&format!("{base}/v1/kv/room/1")), None);
        assert_eq!(code, 404);

        let (code, _) = call(
            a.post(&format!("{base}/v1/truncate"))
                .set("content-type", "application/json"),
            Some(br#"{"key":"room/1","before_version":3}"#),
        );
        assert_eq!(code, 200);
    })
    .await
    .unwrap();
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyspaces_health_and_metrics_over_http() {
    let node = start_node(false).await;
    let base = format!("http://{}", node.http_addr);
    tokio::task::spawn_blocking(move || {
        let a = agent();
        let (code, _) = call(
            a.post(&format!("{base}/v1/keyspaces"))
                .set("content-type", "application/json"),
            Some(br#"{"prefix":"tmp/","mode":"latest","max_age":"7d"}"#),
        );
        assert_eq!(code, 201);
        let (code, r) = call(
            a.post(&format!("{base}/v1/keyspaces"))
                .set("content-type", "application/json"),
            Some(br#"{"prefix":"x/","mode":"sometimes"}"#),
        );
        assert_eq!(code, 400);
        assert!(
            json(r)["message"]
                .as_str()
                .unwrap()
                .contains("unknown keyspace mode")
        );
        // A misspelt field is named, not ignored (nothing is created).
        let (code, r) = call(
            a.post(&format!("{base}/v1/keyspaces"))
                .set("content-type", "application/json"),
            Some(br#"{"prefix":"y/","max_version":3}"#),
        );
        assert_eq!(code, 400);
        let message = json(r)["message"].as_str().unwrap().to_string();
        assert!(message.contains("unknown field `max_version`"), "{message}");
        let (code, r) = call(
            a.post(&format!("{base}/v1/keyspaces"))
                .set("content-type", "application/json"),
            Some(b"{not json"),
        );
        assert_eq!(code, 400);
        assert!(
            json(r)["message"]
                .as_str()
                .unwrap()
                .starts_with("request body:")
        );
        let (_, r) = call(a.get(&format!("{base}/v1/keyspaces")), None);
        let list = json(r);
        assert_eq!(list["keyspaces"].as_array().unwrap().len(), 2);
        assert_eq!(
            list["keyspaces"][1]["max_age_us"],
            7u64 * 24 * 3600 * 1_000_000
        );
        let (code, _) = call(a.delete(&format!("{base}/v1/keyspaces/tmp/")), None);
        assert_eq!(code, 204);
        let (code, _) = call(a.delete(&format!("{base}/v1/keyspaces/tmp/")), None);
        assert_eq!(code, 404);

        let (code, r) = call(a.get(&format!("{base}/healthz")), None);
        assert_eq!(code, 200);
        assert_eq!(json(r)["status"], "ok");
        // Other tests in this process share the recorder: compare counts before and after.
        let page = || {
            let (code, r) = call(a.get(&format!("{base}/metrics")), None);
            assert_eq!(code, 200);
            r.into_string().unwrap()
        };
        let value = |text: &str, line: &str| -> f64 {
            text.lines()
                .find_map(|l| l.strip_prefix(line))
                .map_or(0.0, |v| v.trim().parse().unwrap())
        };
        let (requests, errors, timed) = (
            "firn_requests_total{op=\"put\"} ",
            "firn_request_errors_total{op=\"put\"} ",
            "firn_request_seconds_count{op=\"put\"} ",
        );
        let before = page();
        let (_, r) = call(a.put(&format!("{base}/v1/kv/m")), Some(b"1"));
        drop(r);
        // A conflict: a put that fails.
        let (code, _) = call(a.put(&format!("{base}/v1/kv/m?if_version=7")), Some(b"2"));
        assert_eq!(code, 409);
        let text = page();
        for (line, grew) in [(requests, 2.0), (errors, 1.0), (timed, 2.0)] {
            assert!(
                value(&text, line) >= value(&before, line) + grew,
                "{line}: {} before, {} after",
                value(&before, line),
                value(&text, line)
            );
        }
        // The put went through every stage a one-node write has (no follower to replicate
        // to), and each shows on the page with a count.
        for stage in [
            "propose",
            "log_append",
            "fsync_wait",
            "fsync",
            "apply",
            "commit",
        ] {
            let line = format!("firn_write_stage_seconds_count{{stage=\"{stage}\"}} ");
            let count: u64 = text
                .lines()
                .find_map(|l| l.strip_prefix(&line))
                .unwrap_or_else(|| panic!("no {line} in {text}"))
                .trim()
                .parse()
                .unwrap();
            assert!(count >= 1, "{line}{count}");
        }
        for batch in [
            "firn_log_fsync_appends_count ",
            "firn_apply_batch_entries_count ",
        ] {
            assert!(
                text.lines().any(|l| l.starts_with(batch)),
                "no {batch} in {text}"
            );
        }
    })
    .await
    .unwrap();
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_watch_streams_committed_versions() {
    let node = start_node(false).await;
    let base = format!("http://{}", node.http_addr);
    let client = firn_client::Client::connect(&node.resp_addr.to_string())
        .await
        .unwrap();
    client
        .put(b"w/a", b"one", Default::default())
        .await
        .unwrap();
    let reader = tokio::task::spawn_blocking(move || {
        let r = agent()
            .get(&format!("{base}/v1/watch?prefix=w/&from_version=1"))
            .call()
            .unwrap();
        assert_eq!(r.header("content-type"), Some("text/event-stream"));
        let mut lines = std::io::BufRead::lines(std::io::BufReader::new(r.into_reader()));
        let mut data = Vec::new();
        while data.len() < 2 {
            let line = lines.next().unwrap().unwrap();
            if let Some(d) = line.strip_prefix("data: ") {
                data.push(serde_json::from_str::<serde_json::Value>(d).unwrap());
            }
        }
        data
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    client
        .put(b"w/b", b"two", Default::default())
        .await
        .unwrap();
    let data = reader.await.unwrap();
    assert_eq!(data[0]["key"], "w/a");
    assert_eq!(data[0]["value"], "one");
    assert_eq!(data[1]["key"], "w/b");
    node.shutdown().await;
}

/// Keyspace and cluster endpoints are sessions like the rest: each answer carries
/// `Firn-Token`, the token sent (`Firn-After`) or one the answer raised it to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyspace_and_cluster_endpoints_carry_the_session_token() {
    let node = start_node(false).await;
    let base = format!("http://{}", node.http_addr);
    tokio::task::spawn_blocking(move || {
        let a = agent();
        let (_, r) = call(a.put(&format!("{base}/v1/kv/k")), Some(b"v"));
        let token = r.header("firn-token").expect("a write's token").to_string();
        assert_ne!(token, "0-0");
        let after = |req: ureq::Request| req.set("Firn-After", &token);
        let answers = [
            call(after(a.get(&format!("{base}/v1/keyspaces"))), None),
            call(
                after(a.post(&format!("{base}/v1/keyspaces")))
                    .set("content-type", "application/json"),
                Some(br#"{"prefix": "cam/", "mode": "latest"}"#),
            ),
            call(after(a.delete(&format!("{base}/v1/keyspaces/cam/"))), None),
            call(after(a.get(&format!("{base}/v1/cluster"))), None),
            call(after(a.get(&format!("{base}/healthz"))), None),
        ];
        for (code, r) in answers {
            assert!(code < 300, "{} answered {code}", r.get_url());
            assert_eq!(
                r.header("firn-token"),
                Some(token.as_str()),
                "{} carries the session's token",
                r.get_url()
            );
        }
        // Without a token sent, an answer that showed no stamp carries the zero token.
        let (_, r) = call(a.get(&format!("{base}/v1/cluster")), None);
        assert_eq!(r.header("firn-token"), Some("0-0"));
    })
    .await
    .unwrap();
}

/// JSON listings never alter a key: one that is not UTF-8 is `key_base64`, and a page's
/// cursor at such a key, passed back unchanged, continues exactly where the page ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_that_are_not_utf8_are_listed_in_base64_and_paged_exactly() {
    use base64::Engine;
    let node = start_node(false).await;
    let mut conn = redis_conn(&node).await;
    // In key (byte) order.
    let keys: [&[u8]; 4] = [b"b/1", b"b/z", b"b/\xff\x01", b"b/\xff\x02"];
    for k in keys {
        let _: () = redis::cmd("SET")
            .arg(k)
            .arg("v")
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let base = format!("http://{}", node.http_addr);
    tokio::task::spawn_blocking(move || {
        let b64 = |text: &str| {
            base64::engine::general_purpose::STANDARD
                .decode(text)
                .unwrap()
        };
        for path in ["/v1/scan", "/v1/snapshot"] {
            let mut seen: Vec<Vec<u8>> = Vec::new();
            let mut cursor: Option<String> = None;
            loop {
                let mut req = agent()
                    .get(&format!("{base}{path}"))
                    .query("prefix", "b/")
                    .query("limit", "1");
                if let Some(c) = &cursor {
                    req = req.query("cursor", c);
                }
                let (code, r) = call(req, None);
                assert_eq!(code, 200, "{path}");
                let page = json(r);
                for k in page["keys"].as_array().unwrap() {
                    seen.push(match k["key"].as_str() {
                        Some(text) => text.as_bytes().to_vec(),
                        None => b64(k["key_base64"].as_str().unwrap()),
                    });
                }
                cursor = page["next_cursor"].as_str().map(str::to_string);
                if cursor.is_none() {
                    break;
                }
            }
            assert_eq!(seen, keys.map(<[u8]>::to_vec).to_vec(), "{path}");
        }
        // What the HTTP layer refuses before an endpoint runs is a JSON error too.
        let (code, r) = call(agent().get(&format!("{base}/v1/kv/%FF")), None);
        assert_eq!(code, 400);
        assert_eq!(json(r)["error"], "ERR");
        // A cursor in the marked form that is not base64 is refused.
        let (code, r) = call(
            agent()
                .get(&format!("{base}/v1/scan"))
                .query("prefix", "b/")
                .query("cursor", "b64:%%%"),
            None,
        );
        assert_eq!(code, 400);
        assert!(json(r)["message"].as_str().unwrap().contains("cursor"));
    })
    .await
    .unwrap();
    node.shutdown().await;
}

/// A path no endpoint has, and a method a path does not take, answer in the one error shape
/// like everything else (they had empty bodies); the 405 still names the methods it takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_paths_and_methods_answer_json_errors() {
    let node = start_node(false).await;
    let base = format!("http://{}", node.http_addr);
    tokio::task::spawn_blocking(move || {
        let a = agent();
        let (code, r) = call(a.get(&format!("{base}/v1/nope")), None);
        assert_eq!(code, 404);
        let body = json(r);
        assert_eq!(body["error"], "ERR", "{body}");
        assert!(
            body["message"].as_str().unwrap().contains("openapi"),
            "{body}"
        );
        let (code, r) = call(a.request("PATCH", &format!("{base}/v1/kv/k")), None);
        assert_eq!(code, 405);
        assert_eq!(r.header("allow"), Some("GET,HEAD,PUT,DELETE"));
        let body = json(r);
        assert_eq!(body["error"], "ERR", "{body}");
        assert!(
            body["message"].as_str().unwrap().contains("Allow"),
            "{body}"
        );
    })
    .await
    .unwrap();
    node.shutdown().await;
}

/// A query parameter an endpoint does not take is refused and changes nothing: a misspelt
/// `?ver=1` does not answer the latest value, `?x=1` on a DELETE deletes nothing; what the
/// endpoint takes is named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_query_parameter_is_refused() {
    let node = start_node(false).await;
    let base = format!("http://{}", node.http_addr);
    tokio::task::spawn_blocking(move || {
        let a = agent();
        let (code, _) = call(a.put(&format!("{base}/v1/kv/k")), Some(b"one"));
        assert_eq!(code, 200);
        let (code, _) = call(a.put(&format!("{base}/v1/kv/k")), Some(b"two"));
        assert_eq!(code, 200);
        let (code, r) = call(a.get(&format!("{base}/v1/kv/k?ver=1")), None);
        assert_eq!(code, 400);
        let body = json(r);
        let message = body["message"].as_str().unwrap();
        assert!(
            message.contains("unknown parameter 'ver'") && message.contains("version"),
            "{body}"
        );
        let (code, r) = call(a.get(&format!("{base}/v1/kv/k?version=1")), None);
        assert_eq!((code, r.into_string().unwrap()), (200, "one".to_string()));
        let (code, r) = call(a.delete(&format!("{base}/v1/kv/k?x=1")), None);
        assert_eq!(code, 400);
        assert!(
            json(r)["message"]
                .as_str()
                .unwrap()
                .contains("takes no parameters")
        );
        let (code, r) = call(a.get(&format!("{base}/v1/kv/k")), None);
        assert_eq!((code, r.into_string().unwrap()), (200, "two".to_string()));
    })
    .await
    .unwrap();
    node.shutdown().await;
}

/// A body refused before it is read to its end — over the most a JSON body may be — gets its
/// answer, not a broken pipe or a reset while the client still sends: the node reads such a
/// connection to its end before closing it (`http/linger.rs`). The node answers on after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_refused_before_it_is_read_gets_its_answer_not_a_broken_pipe() {
    let node = start_node(false).await;
    let base = format!("http://{}", node.http_addr);
    tokio::task::spawn_blocking(move || {
        let big = vec![b' '; 40 << 20];
        for _ in 0..3 {
            let sent = agent()
                .post(&format!("{base}/v1/keyspaces"))
                .set("content-type", "application/json")
                .send_bytes(&big);
            match sent {
                Err(ureq::Error::Status(code, r)) => {
                    assert_eq!(code, 413);
                    let body = json(r);
                    assert_eq!(body["error"], "ERR", "{body}");
                    let message = body["message"].as_str().unwrap();
                    assert!(message.contains("16777217 bytes"), "{message}");
                }
                Ok(r) => panic!("a 40 MiB keyspace definition answered {}", r.status()),
                Err(e) => panic!("a transport error instead of the refusal: {e}"),
            }
        }
        let (code, _) = call(agent().get(&format!("{base}/healthz")), None);
        assert_eq!(code, 200);
    })
    .await
    .unwrap();
    node.shutdown().await;
}
