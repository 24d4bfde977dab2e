//! Redis transactions on a node of three shards, with the `redis` crate's own atomic
//! pipeline (MULTI … EXEC) unchanged: keys of one shard or of several run as one
//! transaction, reading their own writes; a watched key changed aborts it.

mod common;

use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_atomic_pipeline_runs_within_a_shard_and_across_shards() {
    let node = common::start_three_shard_node().await;
    let client = redis::Client::open(format!("redis://{}/", node.resp_addr)).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    // Every shard has a leader once a write to a key of each lands.
    let deadline = Instant::now() + Duration::from_secs(20);
    for key in ["a", "b", "c", "d", "e", "f"] {
        while redis::cmd("SET")
            .arg(key)
            .arg("0")
            .query_async::<()>(&mut c)
            .await
            .is_err()
        {
            assert!(Instant::now() < deadline, "no leader for {key}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    // One shard (a shared tag): one transaction, each command seeing those before it.
    let (set, count, read): (String, i64, String) = redis::pipe()
        .atomic()
        .set("{acct}x", "10")
        .incr("{acct}x", 5)
        .get("{acct}x")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!((set.as_str(), count, read.as_str()), ("OK", 15, "15"));

    // Keys of different shards: one transaction across shards, each command seeing the
    // ones before it on its key's shard, a command of several keys split between shards.
    let (spread, other) = common::two_keys_in_different_shards();
    let (set, count, read, both): (String, i64, String, Vec<String>) = redis::pipe()
        .atomic()
        .set(&spread, "5")
        .incr(&other, 2)
        .get(&spread)
        .mget(&[&spread, &other])
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(
        (set.as_str(), count, read.as_str(), both),
        ("OK", 2, "5", vec!["5".to_string(), "2".to_string()])
    );
    let (deleted, left): (i64, i64) = redis::pipe()
        .atomic()
        .del(&[&spread, &other])
        .exists(&[&spread, &other])
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!((deleted, left), (2, 0));

    // WATCH across shards: a watched key changed by another client, and EXEC answers nil
    // with nothing applied.
    let mut watcher = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("WATCH")
        .arg(&spread)
        .query_async(&mut watcher)
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(&spread)
        .arg("changed")
        .query_async(&mut c)
        .await
        .unwrap();
    let _: () = redis::cmd("MULTI").query_async(&mut watcher).await.unwrap();
    for key in [&spread, &other] {
        let queued: String = redis::cmd("SET")
            .arg(key)
            .arg("1")
            .query_async(&mut watcher)
            .await
            .unwrap();
        assert_eq!(queued, "QUEUED");
    }
    let exec: redis::Value = redis::cmd("EXEC").query_async(&mut watcher).await.unwrap();
    assert_eq!(
        exec,
        redis::Value::Nil,
        "EXEC ran though a watched key changed"
    );
    let now: (String, Option<String>) = redis::pipe()
        .get(&spread)
        .get(&other)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(
        now,
        ("changed".to_string(), None),
        "the aborted transaction wrote"
    );
    node.shutdown().await;
}

/// A transaction's limits, stated and enforced: at most 10,000 queued commands (the next is
/// refused and EXEC aborts) and 16 MiB of values (EXEC aborts, saying so); nothing applied,
/// and the connection goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_over_its_limits_is_refused_with_nothing_applied() {
    let node = common::start_three_shard_node().await;
    let client = redis::Client::open(format!("redis://{}/", node.resp_addr)).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let limit = firn_model::limits::TXN_STEPS_MAX;

    let _: () = redis::cmd("MULTI").query_async(&mut c).await.unwrap();
    let mut pipe = redis::pipe();
    for _ in 0..limit {
        pipe.cmd("PING");
    }
    let queued: Vec<String> = pipe.query_async(&mut c).await.unwrap();
    assert!(queued.iter().all(|q| q == "QUEUED"));
    let over = redis::cmd("SET")
        .arg("{l}k")
        .arg("v")
        .query_async::<String>(&mut c)
        .await
        .expect_err("a command past the limit was queued");
    assert!(
        over.to_string().contains("at most 10000 commands"),
        "{over}"
    );
    let aborted = redis::cmd("EXEC")
        .query_async::<redis::Value>(&mut c)
        .await
        .expect_err("EXEC ran after a refused command");
    assert!(aborted.to_string().contains("previous errors"), "{aborted}");

    let _: () = redis::cmd("MULTI").query_async(&mut c).await.unwrap();
    let mib = vec![b'x'; 1 << 20];
    for i in 0..17 {
        let _: String = redis::cmd("SET")
            .arg(format!("{{l}}big{i}"))
            .arg(&mib)
            .query_async(&mut c)
            .await
            .unwrap();
    }
    let aborted = redis::cmd("EXEC")
        .query_async::<redis::Value>(&mut c)
        .await
        .expect_err("a transaction of 17 MiB ran");
    assert!(aborted.to_string().contains("bytes of values"), "{aborted}");
    let exists: i64 = redis::cmd("EXISTS")
        .arg("{l}k")
        .arg("{l}big0")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(exists, 0, "a refused transaction wrote something");
    node.shutdown().await;
}

/// FIRN.TXN and `POST /v1/txn` across shards: the compares on keys of one shard decide
/// what runs on another; a failed compare runs the else branch; both answer each step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_then_write_runs_one_branch_across_shards() {
    let node = common::start_three_shard_node().await;
    let client = redis::Client::open(format!("redis://{}/", node.resp_addr)).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let (lock, counter) = common::two_keys_in_different_shards();
    let txn = |lock: &str, counter: &str| {
        let mut cmd = redis::cmd("FIRN.TXN");
        cmd.arg("IF").arg(lock).arg("EXISTS").arg("=").arg("0");
        cmd.arg("THEN").arg(3).arg("SET").arg(lock).arg("held");
        cmd.arg("THEN").arg(3).arg("INCRBY").arg(counter).arg(10);
        cmd.arg("ELSE").arg(2).arg("GET").arg(lock);
        cmd
    };
    // Free: the then branch, both writes.
    let ran: (i64, (String, i64)) = txn(&lock, &counter).query_async(&mut c).await.unwrap();
    assert_eq!(ran, (1, ("OK".to_string(), 10)));
    // Held now: the else branch, nothing written.
    let ran: (i64, (String,)) = txn(&lock, &counter).query_async(&mut c).await.unwrap();
    assert_eq!(ran, (0, ("held".to_string(),)));
    let count: i64 = redis::cmd("GET")
        .arg(&counter)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(count, 10, "the else branch wrote");
    // A version compare, and a refused word.
    let ran: (i64, Vec<i64>) = redis::cmd("FIRN.TXN")
        .arg("IF")
        .arg(&counter)
        .arg("VERSION")
        .arg("=")
        .arg(1)
        .arg("THEN")
        .arg(2)
        .arg("INCR")
        .arg(&counter)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(ran, (1, vec![11]));
    let bad = redis::cmd("FIRN.TXN")
        .arg("IF")
        .arg(&lock)
        .arg("EXISTS")
        .arg(">")
        .arg("0")
        .query_async::<redis::Value>(&mut c)
        .await
        .expect_err("an ordered EXISTS compare was taken");
    assert!(bad.to_string().contains("= or !="), "{bad}");
    let bad = redis::cmd("FIRN.TXN")
        .arg("THEN")
        .arg(2)
        .arg("XLEN")
        .arg(&lock)
        .query_async::<redis::Value>(&mut c)
        .await
        .expect_err("XLEN ran inside a transaction");
    assert!(bad.to_string().contains("XLEN cannot run"), "{bad}");

    // The same over HTTP: the lock held, so the else branch reads it.
    let base = format!("http://{}", node.http_addr);
    let (lock2, counter2) = (lock.clone(), counter.clone());
    let (first, second) = tokio::task::spawn_blocking(move || {
        let body = serde_json::json!({
            "compare": [{"key": lock2, "exists": false}],
            "then": [{"op": "put", "key": lock2, "value": "mine"}],
            "else": [{"op": "get", "key": lock2}, {"op": "incr", "key": counter2, "by": -1}],
        });
        let send = || {
            ureq::post(&format!("{base}/v1/txn"))
                .send_json(body.clone())
                .unwrap()
                .into_json::<serde_json::Value>()
                .unwrap()
        };
        let first = send();
        let bad = ureq::post(&format!("{base}/v1/txn")).send_json(
            serde_json::json!({"compare": [{"key": "x", "version": 1, "exists": true}]}),
        );
        match bad {
            Err(ureq::Error::Status(400, _)) => {}
            other => panic!("a compare of two targets answered {other:?}"),
        }
        (first, send())
    })
    .await
    .unwrap();
    assert_eq!(first["succeeded"], false, "{first}");
    assert_eq!(first["results"][0]["found"]["value"], "held", "{first}");
    assert_eq!(first["results"][1]["value"], "10", "{first}");
    assert_eq!(second["results"][1]["value"], "9", "{second}");
    node.shutdown().await;
}

/// MSET and MSETNX of keys in several shards are atomic, as Redis's are: MSETNX writes all or
/// nothing; `SET … IFEQ` (Redis 8.4) writes only over the value it names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mset_msetnx_and_set_ifeq_across_shards() {
    let node = common::start_three_shard_node().await;
    let client = redis::Client::open(format!("redis://{}/", node.resp_addr)).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let (a, b) = common::two_keys_in_different_shards();
    let ok: String = redis::cmd("MSET")
        .arg(&a)
        .arg("1")
        .arg(&b)
        .arg("1")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(ok, "OK");
    // One key exists: nothing is written.
    let other = format!("{b}-new");
    let took: i64 = redis::cmd("MSETNX")
        .arg(&other)
        .arg("x")
        .arg(&a)
        .arg("x")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(took, 0);
    let exists: i64 = redis::cmd("EXISTS")
        .arg(&other)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(exists, 0, "MSETNX wrote part of its keys");
    let took: i64 = redis::cmd("MSETNX")
        .arg(&other)
        .arg("x")
        .arg(format!("{a}-new"))
        .arg("y")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(took, 1);

    // SET IFEQ: written over the named value only; with GET, the value it had either way.
    let set = |value: &str, expected: &str, get: bool| {
        let mut cmd = redis::cmd("SET");
        cmd.arg(&a).arg(value).arg("IFEQ").arg(expected);
        if get {
            cmd.arg("GET");
        }
        cmd
    };
    let r: redis::Value = set("2", "1", false).query_async(&mut c).await.unwrap();
    assert_eq!(r, redis::Value::Okay);
    let r: redis::Value = set("3", "1", false).query_async(&mut c).await.unwrap();
    assert_eq!(r, redis::Value::Nil);
    let r: Option<String> = set("3", "1", true).query_async(&mut c).await.unwrap();
    assert_eq!(r.as_deref(), Some("2"), "IFEQ GET shows the value it found");
    let r: Option<String> = set("3", "2", true).query_async(&mut c).await.unwrap();
    assert_eq!(r.as_deref(), Some("2"));
    let now: String = redis::cmd("GET").arg(&a).query_async(&mut c).await.unwrap();
    assert_eq!(now, "3");
    let r: redis::Value = redis::cmd("SET")
        .arg("absent")
        .arg("v")
        .arg("IFEQ")
        .arg("x")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(r, redis::Value::Nil, "IFEQ wrote a key that had no value");
    let bad = redis::cmd("SET")
        .arg(&a)
        .arg("v")
        .arg("NX")
        .arg("IFEQ")
        .arg("x")
        .query_async::<redis::Value>(&mut c)
        .await
        .expect_err("NX and IFEQ together were taken");
    assert!(bad.to_string().contains("syntax error"), "{bad}");
    node.shutdown().await;
}

/// XADD inside a transaction, with a write of a key in another shard (the outbox pattern):
/// the id the transaction answered is the entry's id in the stream (a `*` id is chosen at
/// the prepare and kept by the commit); inside FIRN.TXN's branches too; an id the stream
/// refuses fails that command alone, as in Redis's EXEC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xadd_inside_a_transaction_across_shards_appends_at_the_one_stamp() {
    let node = common::start_three_shard_node().await;
    let client = redis::Client::open(format!("redis://{}/", node.resp_addr)).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let (order, outbox) = common::two_keys_in_different_shards();
    let mut pipe = redis::pipe();
    pipe.atomic()
        .cmd("SET")
        .arg(&order)
        .arg("paid")
        .cmd("XADD")
        .arg(&outbox)
        .arg("*")
        .arg("order")
        .arg(&order);
    let (set, id): (String, String) = pipe.query_async(&mut c).await.unwrap();
    assert_eq!(set, "OK");
    let entries: Vec<(String, Vec<String>)> = redis::cmd("XRANGE")
        .arg(&outbox)
        .arg("-")
        .arg("+")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(
        entries,
        vec![(id.clone(), vec!["order".into(), order.clone()])]
    );
    let ran: (i64, Vec<redis::Value>) = redis::cmd("FIRN.TXN")
        .arg("IF")
        .arg(&order)
        .arg("VALUE")
        .arg("=")
        .arg("paid")
        .arg("THEN")
        .arg(5)
        .arg("XADD")
        .arg(&outbox)
        .arg("9999999999999-1")
        .arg("shipped")
        .arg(&order)
        .arg("THEN")
        .arg(3)
        .arg("SET")
        .arg(&order)
        .arg("shipped")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(ran.0, 1);
    assert_eq!(
        ran.1[0],
        redis::Value::BulkString(b"9999999999999-1".to_vec())
    );
    let n: i64 = redis::cmd("XLEN")
        .arg(&outbox)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(n, 2);
    // An id not above the stream's last fails that step alone, as in Redis's EXEC.
    let mut pipe = redis::pipe();
    pipe.atomic()
        .cmd("XADD")
        .arg(&outbox)
        .arg("1-1")
        .arg("late")
        .arg("x")
        .cmd("SET")
        .arg(&order)
        .arg("after");
    let e = pipe
        .query_async::<redis::Value>(&mut c)
        .await
        .expect_err("an id below the stream's last was taken");
    assert!(e.to_string().contains("equal or smaller"), "{e}");
    let now: String = redis::cmd("GET")
        .arg(&order)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(now, "after");
}

/// A record as `FIRN.LOG RANGE` shows it: (seq, tags, payload, commit stamp).
fn log_record(v: &redis::Value) -> (String, Vec<String>, String, String) {
    let redis::Value::Array(parts) = v else {
        panic!("not a record: {v:?}");
    };
    let redis::Value::Array(tags) = &parts[1] else {
        panic!("no tags: {v:?}");
    };
    (
        common::bulk_text(&parts[0]),
        tags.iter().map(common::bulk_text).collect(),
        common::bulk_text(&parts[2]),
        common::bulk_text(&parts[3]),
    )
}

#[tokio::test]
async fn log_appends_inside_a_transaction_commit_with_it_across_shards() {
    let node = common::start_three_shard_node().await;
    let client = redis::Client::open(format!("redis://{}/", node.resp_addr)).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    // Tags named like keys of two shards: the records have two homes, the key a third or
    // one of them.
    let (a, b) = common::two_keys_in_different_shards();
    let order = "order-1";
    let mut pipe = redis::pipe();
    pipe.atomic()
        .cmd("SET")
        .arg(order)
        .arg("paid")
        .cmd("FIRN.LOG")
        .arg("APPEND")
        .arg("events")
        .arg("TAGS")
        .arg(1)
        .arg(&a)
        .arg("first")
        .arg("TAGS")
        .arg(2)
        .arg(&b)
        .arg(&a)
        .arg("second")
        .arg("TAGS")
        .arg(1)
        .arg(&b)
        .arg("third");
    let (set, seqs): (String, Vec<String>) = pipe.query_async(&mut c).await.unwrap();
    assert_eq!(set, "OK");
    assert_eq!(seqs.len(), 3, "{seqs:?}");

    let reader = c.clone();
    let range = |tag: &str| {
        let mut c = reader.clone();
        let tag = tag.to_string();
        async move {
            let v: redis::Value = redis::cmd("FIRN.LOG")
                .arg("RANGE")
                .arg("events")
                .arg(&tag)
                .arg("-")
                .arg("+")
                .query_async(&mut c)
                .await
                .unwrap();
            let redis::Value::Array(records) = v else {
                panic!("not an array: {v:?}");
            };
            records.iter().map(log_record).collect::<Vec<_>>()
        }
    };
    let of_a = range(&a).await;
    let of_b = range(&b).await;
    let payloads = |rs: &[(String, Vec<String>, String, String)]| {
        rs.iter().map(|r| r.2.clone()).collect::<Vec<_>>()
    };
    assert_eq!(payloads(&of_a), ["first", "second"]);
    assert_eq!(payloads(&of_b), ["second", "third"]);
    // The seqs answered are the records' own.
    assert_eq!(of_a[0].0, seqs[0]);
    assert_eq!(of_b[0].0, seqs[1]);
    assert_eq!(of_b[1].0, seqs[2]);
    assert_eq!(of_b[0].1, [b.clone(), a.clone()]);

    // One commit stamp: each home's first record is stamped with the key's version, the
    // next record a logical tick after it; a read just before it sees none of them.
    let version: redis::Value = redis::cmd("FIRN.GET")
        .arg(order)
        .query_async(&mut c)
        .await
        .unwrap();
    let version = format!("{version:?}");
    let stamp = |s: &str| -> (u64, u32) {
        let (w, l) = s.split_once('-').unwrap();
        (w.parse().unwrap(), l.parse().unwrap())
    };
    let first = stamp(&of_a[0].3);
    assert!(
        version.contains(&of_a[0].3),
        "the key's version is not stamped {}: {version}",
        of_a[0].3
    );
    assert_eq!(
        stamp(&of_b[0].3),
        first,
        "each home's first record at the stamp"
    );
    assert_eq!(stamp(&of_b[1].3), (first.0, first.1 + 1));
    let before = format!("{}-0", first.0 - 1);
    let earlier: redis::Value = redis::cmd("FIRN.LOG")
        .arg("RANGE")
        .arg("events")
        .arg(&a)
        .arg("-")
        .arg("+")
        .arg("ASOF")
        .arg(&before)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(
        earlier,
        redis::Value::Array(vec![]),
        "records seen before their stamp"
    );

    // Later appends come after the transaction's records, in the same tags.
    let later: Vec<String> = redis::cmd("FIRN.LOG")
        .arg("APPEND")
        .arg("events")
        .arg("TAGS")
        .arg(1)
        .arg(&b)
        .arg("fourth")
        .query_async(&mut c)
        .await
        .unwrap();
    let of_b = range(&b).await;
    assert_eq!(payloads(&of_b), ["second", "third", "fourth"]);
    assert_eq!(of_b[2].0, later[0]);

    // A compare that fails runs the other branch: no record of the first.
    let ran: (i64, Vec<redis::Value>) = redis::cmd("FIRN.TXN")
        .arg("IF")
        .arg(order)
        .arg("VALUE")
        .arg("=")
        .arg("unpaid")
        .arg("THEN")
        .arg(7)
        .arg("FIRN.LOG")
        .arg("APPEND")
        .arg("events")
        .arg("TAGS")
        .arg(1)
        .arg(&a)
        .arg("never")
        .arg("ELSE")
        .arg(3)
        .arg("SET")
        .arg(order)
        .arg("checked")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(ran.0, 0);
    assert_eq!(payloads(&range(&a).await), ["first", "second"]);

    // Within one shard (the key's, and the tag's home) it is one entry, at one stamp too.
    let mut pipe = redis::pipe();
    pipe.atomic()
        .cmd("SET")
        .arg(&a)
        .arg("noted")
        .cmd("FIRN.LOG")
        .arg("APPEND")
        .arg("events")
        .arg("TAGS")
        .arg(1)
        .arg(&a)
        .arg("fifth");
    let (_, seqs): (String, Vec<String>) = pipe.query_async(&mut c).await.unwrap();
    let of_a = range(&a).await;
    assert_eq!(payloads(&of_a), ["first", "second", "fifth"]);
    assert_eq!(of_a[2].0, seqs[0]);
    let version: redis::Value = redis::cmd("FIRN.GET")
        .arg(&a)
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(format!("{version:?}").contains(&of_a[2].3), "{version:?}");

    // Over HTTP, `append` is a step of `POST /v1/txn` too.
    let base = format!("http://{}", node.http_addr);
    let tag = a.clone();
    let answer = tokio::task::spawn_blocking(move || {
        let body = serde_json::json!({
            "then": [
                {"op": "put", "key": "order-2", "value": "paid"},
                {"op": "append", "log": "events", "records": [{"tags": [tag], "value": "sixth"}]},
            ],
        });
        ureq::post(&format!("{base}/v1/txn"))
            .send_json(body)
            .unwrap()
            .into_json::<serde_json::Value>()
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(answer["succeeded"], true, "{answer}");
    let of_a = range(&a).await;
    assert_eq!(of_a.last().unwrap().2, "sixth");
    assert_eq!(
        answer["results"][1]["appended"][0]["seq"],
        of_a.last().unwrap().0.as_str(),
        "{answer}"
    );

    // Bad records are refused before anything runs.
    let mut pipe = redis::pipe();
    pipe.atomic()
        .cmd("SET")
        .arg(order)
        .arg("bad")
        .cmd("FIRN.LOG")
        .arg("APPEND")
        .arg("events")
        .arg("TAGS")
        .arg(0)
        .arg("payload");
    assert!(pipe.query_async::<redis::Value>(&mut c).await.is_err());
    let now: String = redis::cmd("GET")
        .arg(order)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(now, "checked");
}
