//! Keys that expire and leases on a node of three shards, as a RESP client sees them: a key
//! past its expiry reads deleted everywhere at once and its history ends at the expiry; the
//! keys of a lease on several shards are deleted together, at one stamp, when it is revoked
//! or runs out; a transaction is not committed past the expiry of a key it read; sent again
//! under its idempotency key, a grant names the same lease and a revoke answers as the first
//! did; bad input is refused with nothing changed.

mod common;

use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{RedisResult, Value};

async fn connect(node: &firn_node::RunningNode) -> MultiplexedConnection {
    let client = redis::Client::open(format!("redis://{}/", node.resp_addr)).unwrap();
    client.get_multiplexed_async_connection().await.unwrap()
}

async fn run<T: redis::FromRedisValue>(
    c: &mut MultiplexedConnection,
    words: &[&str],
) -> RedisResult<T> {
    let mut cmd = redis::cmd(words[0]);
    for w in &words[1..] {
        cmd.arg(*w);
    }
    cmd.query_async(c).await
}

/// The commit stamps of a key's versions, oldest first, and whether each is a deletion.
async fn history(c: &mut MultiplexedConnection, key: &str) -> Vec<(String, bool)> {
    let versions: Vec<Vec<Value>> = run(c, &["FIRN.HISTORY", key]).await.unwrap();
    versions
        .into_iter()
        .map(|fields| {
            let field = |name: &str| {
                let at = fields
                    .iter()
                    .position(|f| matches!(f, Value::BulkString(b) if b == name.as_bytes()))
                    .unwrap();
                fields[at + 1].clone()
            };
            (
                common::bulk_text(&field("commit_ts")),
                field("deleted") == Value::Int(1),
            )
        })
        .collect()
}

/// Waits (at most `within`) until `key` reads absent.
async fn gone_within(c: &mut MultiplexedConnection, key: &str, within: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let v: Option<String> = run(c, &["GET", key]).await.unwrap();
        if v.is_none() {
            return start.elapsed();
        }
        assert!(start.elapsed() < within, "{key} still reads {v:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_key_reads_deleted_at_once_and_its_history_ends_at_its_expiry() {
    let node = common::start_three_shard_node().await;
    let mut c = connect(&node).await;
    let (a, b) = common::two_keys_in_different_shards();
    let _: () = run(&mut c, &["SET", &a, "1", "PX", "300"]).await.unwrap();
    let _: () = run(&mut c, &["SET", &b, "1"]).await.unwrap();
    let ttl: i64 = run(&mut c, &["PTTL", &a]).await.unwrap();
    assert!((1..=300).contains(&ttl), "{ttl}");
    gone_within(&mut c, &a, Duration::from_secs(2)).await;
    let exists: i64 = run(&mut c, &["EXISTS", &a, &b]).await.unwrap();
    assert_eq!(exists, 1);
    assert_eq!(run::<i64>(&mut c, &["TTL", &a]).await.unwrap(), -2);
    // The history ends at the expiry: the write's stamp and 300 ms, before and after the
    // leader's sweep has written it down (within 100 ms).
    let h = history(&mut c, &a).await;
    assert_eq!(h.len(), 2, "{h:?}");
    let wall = |s: &str| s.split('-').next().unwrap().parse::<u64>().unwrap();
    assert_eq!(wall(&h[1].0) - wall(&h[0].0), 300_000, "{h:?}");
    assert!(h[1].1);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        history(&mut c, &a).await,
        h,
        "the written-down tombstone is the one read before"
    );
    // A read at a time before the expiry still sees the value.
    let before = format!("{}", wall(&h[1].0) - 1);
    let v: Option<String> = run(&mut c, &["FIRN.GET", &a, "ASOF", &before])
        .await
        .map(|m: Option<Vec<Value>>| m.map(|_| "seen".to_string()))
        .unwrap();
    assert_eq!(v.as_deref(), Some("seen"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leases_keys_on_several_shards_end_together_when_it_is_revoked_or_runs_out() {
    let node = common::start_three_shard_node().await;
    let mut c = connect(&node).await;
    let (a, b) = common::two_keys_in_different_shards();
    let keys = [a.clone(), b.clone(), "lease-third".to_string()];

    // Revoked: every key deleted at one stamp.
    let id: i64 = run(&mut c, &["FIRN.LEASE", "GRANT", "60"]).await.unwrap();
    let id = id.to_string();
    for k in &keys {
        let _: () = run(&mut c, &["SET", k, "v", "LEASE", &id]).await.unwrap();
    }
    let ttl: i64 = run(&mut c, &["FIRN.LEASE", "TTL", &id]).await.unwrap();
    assert!((55_000..=60_000).contains(&ttl), "{ttl}");
    assert_eq!(run::<i64>(&mut c, &["TTL", &a]).await.unwrap(), -1);
    let _: () = run(&mut c, &["FIRN.LEASE", "REVOKE", &id]).await.unwrap();
    let n: i64 = run(&mut c, &["EXISTS", &a, &b, "lease-third"])
        .await
        .unwrap();
    assert_eq!(n, 0);
    let ends: Vec<String> = {
        let mut ends = Vec::new();
        for k in &keys {
            let h = history(&mut c, k).await;
            assert!(h.last().unwrap().1, "{k}: {h:?}");
            ends.push(h.last().unwrap().0.clone());
        }
        ends
    };
    assert!(ends.iter().all(|e| *e == ends[0]), "one stamp: {ends:?}");
    let e = run::<()>(&mut c, &["FIRN.LEASE", "REVOKE", &id])
        .await
        .unwrap_err();
    assert!(e.to_string().contains("lease not found"), "{e}");
    let e = run::<()>(&mut c, &["SET", &a, "late", "LEASE", &id])
        .await
        .unwrap_err();
    assert!(e.to_string().contains("lease not found"), "{e}");
    assert_eq!(
        run::<Option<String>>(&mut c, &["GET", &a]).await.unwrap(),
        None
    );

    // Run out: kept alive past its TTL, then left; its keys go within the sweep.
    let id: i64 = run(&mut c, &["FIRN.LEASE", "GRANT", "1"]).await.unwrap();
    let id = id.to_string();
    for k in &keys {
        let _: () = run(&mut c, &["SET", k, "w", "LEASE", &id]).await.unwrap();
    }
    // A key written without the lease is detached: it stays.
    let _: () = run(&mut c, &["SET", "lease-third", "mine"]).await.unwrap();
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let ttl: i64 = run(&mut c, &["FIRN.LEASE", "KEEPALIVE", &id])
            .await
            .unwrap();
        assert_eq!(ttl, 1);
    }
    assert_eq!(run::<i64>(&mut c, &["EXISTS", &a, &b]).await.unwrap(), 2);
    let after = gone_within(&mut c, &a, Duration::from_secs(4)).await;
    assert!(
        after >= Duration::from_millis(500),
        "ended {after:?} after the last keep-alive"
    );
    gone_within(&mut c, &b, Duration::from_secs(1)).await;
    let (ha, hb) = (history(&mut c, &a).await, history(&mut c, &b).await);
    assert_eq!(ha.last().unwrap().0, hb.last().unwrap().0, "one stamp");
    assert_eq!(
        run::<Option<String>>(&mut c, &["GET", "lease-third"])
            .await
            .unwrap()
            .as_deref(),
        Some("mine")
    );
    let e = run::<i64>(&mut c, &["FIRN.LEASE", "KEEPALIVE", &id])
        .await
        .unwrap_err();
    assert!(e.to_string().contains("lease not found"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_and_revokes_sent_again_under_their_key_answer_as_the_first() {
    let node = common::start_three_shard_node().await;
    let mut c = connect(&node).await;
    let grant = ["IDMP", "worker", "g1", "FIRN.LEASE", "GRANT", "30"];
    let first: i64 = run(&mut c, &grant).await.unwrap();
    let again: i64 = run(&mut c, &grant).await.unwrap();
    assert_eq!(first, again, "one lease");
    let other: i64 = run(
        &mut c,
        &["IDMP", "worker", "g2", "FIRN.LEASE", "GRANT", "30"],
    )
    .await
    .unwrap();
    assert_ne!(first, other);
    let id = first.to_string();
    let _: () = run(&mut c, &["SET", "held", "v", "LEASE", &id])
        .await
        .unwrap();
    let revoke = ["IDMP", "worker", "r1", "FIRN.LEASE", "REVOKE", id.as_str()];
    let _: () = run(&mut c, &revoke).await.unwrap();
    let _: () = run(&mut c, &revoke).await.unwrap();
    assert_eq!(
        run::<Option<String>>(&mut c, &["GET", "held"])
            .await
            .unwrap(),
        None
    );
    let e = run::<()>(
        &mut c,
        &["IDMP", "worker", "r2", "FIRN.LEASE", "REVOKE", &id],
    )
    .await
    .unwrap_err();
    assert!(e.to_string().contains("lease not found"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_expiries_and_leases_are_refused_and_change_nothing() {
    let node = common::start_three_shard_node().await;
    let mut c = connect(&node).await;
    let _: () = run(&mut c, &["SET", "k", "v"]).await.unwrap();
    for (words, says) in [
        (
            &["SET", "k", "x", "EX", "0"][..],
            "invalid expire time in 'set' command",
        ),
        (
            &["SET", "k", "x", "EX", "-5"],
            "invalid expire time in 'set' command",
        ),
        (
            &["SET", "k", "x", "PX", "99999999999999999"],
            "invalid expire time in 'set' command",
        ),
        (
            &["SET", "k", "x", "EX", "ten"],
            "value is not an integer or out of range",
        ),
        (&["SET", "k", "x", "EX", "5", "PX", "5"], "syntax error"),
        (&["SET", "k", "x", "EX", "5", "KEEPTTL"], "syntax error"),
        (&["SET", "k", "x", "LEASE", "77"], "lease not found: 77"),
        (
            &["SET", "k", "x", "LEASE", "-1"],
            "LEASE must be a non-negative integer",
        ),
        (
            &["FIRN.PUT", "k", "x", "LEASE", "77"],
            "lease not found: 77",
        ),
        (
            &["GETEX", "k", "EX", "0"],
            "invalid expire time in 'getex' command",
        ),
        (&["GETEX", "k", "EX", "5", "PERSIST"], "syntax error"),
        (
            &["EXPIRE", "k", "10", "NX", "XX"],
            "NX and XX, GT or LT options at the same time are not compatible",
        ),
        (
            &["EXPIRE", "k", "10", "GT", "LT"],
            "GT and LT options at the same time are not compatible",
        ),
        (&["EXPIRE", "k", "10", "SOON"], "Unsupported option SOON"),
        (
            &["EXPIRE", "k", "x"],
            "value is not an integer or out of range",
        ),
        (&["FIRN.LEASE", "GRANT", "0"], "invalid lease TTL 0"),
        (&["FIRN.LEASE", "GRANT", "31536001"], "invalid lease TTL"),
        (&["FIRN.LEASE", "KEEPALIVE", "77"], "lease not found: 77"),
        (&["FIRN.LEASE", "REVOKE", "77"], "lease not found: 77"),
        (&["FIRN.LEASE", "TTL", "77"], "lease not found: 77"),
        (
            &["FIRN.LEASE", "RENEW", "77"],
            "unknown FIRN.LEASE subcommand",
        ),
    ] {
        let e = run::<Value>(&mut c, words).await.unwrap_err().to_string();
        assert!(e.contains(says), "{words:?}: {e}");
    }
    // Nothing changed, and the connection serves on.
    assert_eq!(run::<String>(&mut c, &["GET", "k"]).await.unwrap(), "v");
    assert_eq!(run::<i64>(&mut c, &["TTL", "k"]).await.unwrap(), -1);
    assert_eq!(history(&mut c, "k").await.len(), 1);
    // A lease cannot be given inside MULTI.
    let mut pipe = redis::pipe();
    pipe.atomic()
        .cmd("SET")
        .arg("k")
        .arg("y")
        .arg("LEASE")
        .arg(1);
    let e = pipe.query_async::<Value>(&mut c).await.unwrap_err();
    assert!(e.to_string().contains("LEASE"), "{e}");
    assert_eq!(run::<String>(&mut c, &["GET", "k"]).await.unwrap(), "v");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_across_shards_sees_a_key_expire_whole() {
    let node = common::start_three_shard_node().await;
    let mut c = connect(&node).await;
    let (a, b) = common::two_keys_in_different_shards();
    let _: () = run(&mut c, &["SET", &a, "10", "PX", "400"]).await.unwrap();
    // Until the expiry, the transaction reads the value; from it on, nothing: never a
    // transaction that read the value and committed after its end.
    let start = Instant::now();
    let mut saw_it = 0;
    while start.elapsed() < Duration::from_millis(900) {
        let mut pipe = redis::pipe();
        pipe.atomic().cmd("GET").arg(&a).cmd("INCR").arg(&b);
        let (got, _): (Option<String>, i64) = pipe.query_async(&mut c).await.unwrap();
        let h = history(&mut c, &b).await;
        let committed = h.last().unwrap().0.clone();
        let wall = |s: &str| s.split('-').next().unwrap().parse::<u64>().unwrap();
        let ha = history(&mut c, &a).await;
        let ends = wall(&ha[0].0) + 400_000;
        match got {
            Some(v) => {
                assert_eq!(v, "10");
                assert!(
                    wall(&committed) < ends,
                    "read a value that had ended: {committed} ≥ {ends}"
                );
                saw_it += 1;
            }
            None => assert!(wall(&committed) >= ends, "read nothing before the end"),
        }
    }
    assert!(saw_it > 0);
}

/// Over HTTP: `PUT /v1/kv/{key}?ttl_ms=` gives the value a TTL and `?lease=` attaches it;
/// an unknown lease is 404 and a bad TTL 400, nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_puts_take_a_ttl_or_a_lease() {
    let node = common::start_three_shard_node().await;
    let mut c = connect(&node).await;
    let base = format!("http://{}/v1/kv", node.http_addr);
    let put = |path: String| common::http::put_bytes(format!("{base}/{path}"), b"v".to_vec());
    let (code, _) = put("h1?ttl_ms=60000".into()).await;
    assert_eq!(code, 200);
    let ttl: i64 = run(&mut c, &["TTL", "h1"]).await.unwrap();
    assert_eq!(ttl, 60);
    let id: i64 = run(&mut c, &["FIRN.LEASE", "GRANT", "60"]).await.unwrap();
    let (code, _) = put(format!("h2?lease={id}")).await;
    assert_eq!(code, 200);
    for (path, want) in [
        ("h3?lease=77".to_string(), 404),
        ("h3?ttl_ms=0".to_string(), 400),
        (format!("h3?ttl_ms=5&lease={id}"), 400),
        ("h3?ttl=5".to_string(), 400),
    ] {
        let (code, body) = put(path.clone()).await;
        assert_eq!(code, want, "{path}: {body}");
    }
    assert_eq!(run::<i64>(&mut c, &["EXISTS", "h3"]).await.unwrap(), 0);
    let _: () = run(&mut c, &["FIRN.LEASE", "REVOKE", &id.to_string()])
        .await
        .unwrap();
    assert_eq!(
        run::<i64>(&mut c, &["EXISTS", "h1", "h2"]).await.unwrap(),
        1
    );
}
