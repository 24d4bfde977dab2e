//! Exactly once, as a client sees it on a node of three shards: a write, an XADD, a
//! transaction within a shard and one across shards, each sent again with its idempotency
//! key (RESP `IDMP producer id …`, `XADD … IDMP producer id`, HTTP `Idempotency-Key`), apply
//! once and answer the same; bad keys are refused with nothing applied.

mod common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_sent_again_with_their_key_apply_once() {
    let node = common::start_three_shard_node().await;
    let client = redis::Client::open(format!("redis://{}/", node.resp_addr)).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let (a, b) = common::two_keys_in_different_shards();
    let conn = c.clone();
    let twice = |cmd: redis::Cmd| {
        let mut c = conn.clone();
        async move {
            let first: redis::Value = cmd.query_async(&mut c).await.unwrap();
            let again: redis::Value = cmd.query_async(&mut c).await.unwrap();
            assert_eq!(first, again, "sent again, the answer changed");
            first
        }
    };
    let mut incr = redis::cmd("IDMP");
    incr.arg("dev").arg("1").arg("INCRBY").arg(&a).arg(5);
    assert_eq!(twice(incr).await, redis::Value::Int(5));
    let mut xadd = redis::cmd("XADD");
    xadd.arg("events")
        .arg("IDMP")
        .arg("dev")
        .arg("2")
        .arg("*")
        .arg("f")
        .arg("v");
    twice(xadd).await;
    // A transaction across shards, its answer remembered with its decision.
    let exec = || {
        let mut pipe = redis::pipe();
        pipe.cmd("MULTI")
            .cmd("INCR")
            .arg(&a)
            .cmd("INCR")
            .arg(&b)
            .cmd("IDMP")
            .arg("dev")
            .arg("3")
            .arg("EXEC");
        pipe
    };
    let first: Vec<redis::Value> = exec().query_async(&mut c).await.unwrap();
    let again: Vec<redis::Value> = exec().query_async(&mut c).await.unwrap();
    assert_eq!(first.last(), again.last());
    // FIRN.TXN, within one shard.
    let mut txn = redis::cmd("IDMP");
    txn.arg("dev")
        .arg("4")
        .arg("FIRN.TXN")
        .arg("THEN")
        .arg(2)
        .arg("INCR")
        .arg(&b);
    twice(txn).await;
    let counts: (i64, i64, i64) = redis::pipe()
        .get(&a)
        .get(&b)
        .cmd("XLEN")
        .arg("events")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(counts, (6, 2, 1), "a write sent again applied again");

    // Refused, with nothing applied.
    for (cmd, said) in [
        (
            vec!["IDMP", "dev", "5", "GET", a.as_str()],
            "IDMP takes a write",
        ),
        (vec!["IDMP", "", "5", "INCR", a.as_str()], "1 to 256 bytes"),
        (
            vec!["IDMP", "dev", "5", "IDMP", "dev", "6", "INCR", a.as_str()],
            "one idempotency key",
        ),
    ] {
        let err = redis::cmd(cmd[0])
            .arg(&cmd[1..])
            .query_async::<redis::Value>(&mut c)
            .await
            .expect_err("a bad IDMP was taken");
        assert!(err.to_string().contains(said), "{cmd:?}: {err}");
    }
    let n: i64 = redis::cmd("GET").arg(&a).query_async(&mut c).await.unwrap();
    assert_eq!(n, 6);

    // HTTP: the same key twice is one version.
    let base = format!("http://{}", node.http_addr);
    let versions = tokio::task::spawn_blocking(move || {
        let put = |v: &str| {
            ureq::put(&format!("{base}/v1/kv/h"))
                .set("Idempotency-Key", "put-1")
                .set("Firn-Producer", "sensor-9")
                .send_string(v)
                .unwrap()
                .into_json::<serde_json::Value>()
                .unwrap()
        };
        let (first, again) = (put("one"), put("two"));
        assert_eq!(first, again);
        let lonely = ureq::put(&format!("{base}/v1/kv/h"))
            .set("Firn-Producer", "sensor-9")
            .send_string("x");
        assert!(matches!(lonely, Err(ureq::Error::Status(400, _))));
        // The same key on another request: refused, nothing applied.
        let reused = ureq::delete(&format!("{base}/v1/kv/h"))
            .set("Idempotency-Key", "put-1")
            .set("Firn-Producer", "sensor-9")
            .call();
        assert!(
            matches!(reused, Err(ureq::Error::Status(400, _))),
            "{reused:?}"
        );
        ureq::get(&format!("{base}/v1/history/h"))
            .call()
            .unwrap()
            .into_json::<serde_json::Value>()
            .unwrap()["versions"]
            .as_array()
            .unwrap()
            .len()
    })
    .await
    .unwrap();
    assert_eq!(versions, 1);
    node.shutdown().await;
}
