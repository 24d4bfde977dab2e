//! The shared log through the router of one node holding three shards: records spread over
//! shards by their first tag, reads by tag merged across homes, trim, reads at a time,
//! blocking reads, stream ids, and bad input.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use firn_model::{
    Answer, CallContext, FirnError, Key, LogQuery, LogRead, LogRecord, LogSeq, LogWrite, NewRecord,
    Request, Response, StreamId, StreamTrim,
};
use firn_node::RunningNode;

async fn three_shard_node() -> RunningNode {
    let node = common::start_three_shard_node().await;
    // Wait until every shard has a leader: a first write to each succeeds.
    let deadline = Instant::now() + Duration::from_secs(20);
    for tag in [
        "warmup-a", "warmup-b", "warmup-c", "warmup-d", "warmup-e", "warmup-f",
    ] {
        loop {
            match append(&node, "warmup", &[tag], "x").await {
                Ok(_) => break,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                Err(e) => panic!("no leader: {e}"),
            }
        }
    }
    node
}

fn key(s: &str) -> Key {
    Key::new(Bytes::copy_from_slice(s.as_bytes())).unwrap()
}

async fn run(node: &RunningNode, request: impl Into<Request>) -> Result<Answer, FirnError> {
    node.router()
        .execute(&CallContext::default(), request.into())
        .await
}

async fn append(
    node: &RunningNode,
    log: &str,
    tags: &[&str],
    payload: &str,
) -> Result<LogSeq, FirnError> {
    let answer = run(
        node,
        LogWrite::Append {
            log: key(log),
            records: vec![NewRecord {
                tags: tags.iter().map(|t| key(t)).collect(),
                payload: Bytes::copy_from_slice(payload.as_bytes()),
            }],
        },
    )
    .await?;
    match answer.response {
        Response::Appended(a) => Ok(a[0].seq),
        other => panic!("append answered {other:?}"),
    }
}

async fn query(node: &RunningNode, q: LogQuery) -> Result<Vec<LogRecord>, FirnError> {
    match run(node, LogRead::Query(q)).await?.response {
        Response::Records(r) => Ok(r),
        other => panic!("read answered {other:?}"),
    }
}

fn payloads(records: &[LogRecord]) -> Vec<String> {
    records
        .iter()
        .map(|r| String::from_utf8_lossy(&r.payload).into_owned())
        .collect()
}

/// Two tags whose slots are in different shards.
fn tags_on_two_shards(node: &RunningNode) -> (String, String) {
    let layout = node.router().kernel().layout();
    let a = "tag-a".to_string();
    let b = (0..)
        .map(|i| format!("tag-b{i}"))
        .find(|b| layout.shard_of_name(b.as_bytes()) != layout.shard_of_name(a.as_bytes()))
        .unwrap();
    (a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_reads_in_seq_order_across_the_shards_that_hold_it() {
    let node = three_shard_node().await;
    let (a, b) = tags_on_two_shards(&node);
    let s1 = append(&node, "events", &[&b], "b1").await.unwrap();
    // Stored with tag a's shard, also under tag b: b's directory names that shard.
    let s2 = append(&node, "events", &[&a, &b], "ab").await.unwrap();
    let s3 = append(&node, "events", &[&b], "b2").await.unwrap();
    let s4 = append(&node, "events", &[&a], "a1").await.unwrap();
    assert!(
        s1 < s2 && s2 < s3 && s3 < s4,
        "seqs follow acknowledgement order"
    );

    let all_b = query(
        &node,
        LogQuery::range(key("events"), key(&b), LogSeq::ZERO, LogSeq::MAX, 100),
    )
    .await
    .unwrap();
    assert_eq!(payloads(&all_b), ["b1", "ab", "b2"]);
    let all_a = query(
        &node,
        LogQuery::range(key("events"), key(&a), LogSeq::ZERO, LogSeq::MAX, 100),
    )
    .await
    .unwrap();
    assert_eq!(payloads(&all_a), ["ab", "a1"]);

    // read_next / read_prev / check_tail
    let next = query(
        &node,
        LogQuery::next(key("events"), key(&b), s1.successor().unwrap()),
    )
    .await
    .unwrap();
    assert_eq!(next[0].seq, s2);
    assert_eq!(next[0].tags, vec![key(&a), key(&b)]);
    let prev = query(
        &node,
        LogQuery::prev(key("events"), key(&b), s3.predecessor().unwrap()),
    )
    .await
    .unwrap();
    assert_eq!(prev[0].seq, s2);
    let tail = query(&node, LogQuery::tail(key("events"), key(&b)))
        .await
        .unwrap();
    assert_eq!(tail[0].seq, s3);
    let none = query(
        &node,
        LogQuery::next(key("events"), key(&b), s3.successor().unwrap()),
    )
    .await
    .unwrap();
    assert!(none.is_empty());

    // A read at a time: the cut before the third append.
    let at = all_b[1].commit_ts;
    let cut = query(
        &node,
        LogQuery::range(key("events"), key(&b), LogSeq::ZERO, LogSeq::MAX, 100).at(Some(at)),
    )
    .await
    .unwrap();
    assert_eq!(payloads(&cut), ["b1", "ab"]);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trim_drops_records_and_reads_below_it_are_refused_by_name() {
    let node = three_shard_node().await;
    let (a, b) = tags_on_two_shards(&node);
    let s1 = append(&node, "t", &[&b], "1").await.unwrap();
    let s2 = append(&node, "t", &[&a, &b], "2").await.unwrap();
    let s3 = append(&node, "t", &[&b], "3").await.unwrap();

    // Beyond the tail: refused, nothing changed.
    let beyond = s3.successor().unwrap().successor().unwrap();
    let err = run(
        &node,
        LogWrite::Trim {
            log: key("t"),
            tag: Some(key(&b)),
            before: beyond,
        },
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("beyond the tail"), "{err}");
    assert_eq!(
        query(
            &node,
            LogQuery::range(key("t"), key(&b), LogSeq::ZERO, LogSeq::MAX, 10)
        )
        .await
        .unwrap()
        .len(),
        3
    );

    let removed = run(
        &node,
        LogWrite::Trim {
            log: key("t"),
            tag: Some(key(&b)),
            before: s3,
        },
    )
    .await
    .unwrap();
    assert_eq!(removed.response, Response::Count(2));
    let err = query(&node, LogQuery::next(key("t"), key(&b), s1))
        .await
        .unwrap_err();
    assert_eq!(err, FirnError::Trimmed { first_kept: s3 });
    assert!(err.to_string().contains(&s3.to_string()));
    let kept = query(&node, LogQuery::next(key("t"), key(&b), s3))
        .await
        .unwrap();
    assert_eq!(payloads(&kept), ["3"]);
    // Tag a's copy of the record is its own: trimming b leaves it.
    let a_rec = query(&node, LogQuery::next(key("t"), key(&a), LogSeq::ZERO))
        .await
        .unwrap();
    assert_eq!(a_rec[0].seq, s2);

    // Seqs are never reused: a new record lands above the trim point.
    let s4 = append(&node, "t", &[&b], "4").await.unwrap();
    assert!(s4 > s3);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_logs_and_bad_appends_are_refused() {
    let node = three_shard_node().await;
    let err = query(&node, LogQuery::next(key("never"), key("x"), LogSeq::ZERO))
        .await
        .unwrap_err();
    assert_eq!(err, FirnError::LogNotFound("never".into()));

    let too_many: Vec<&str> = vec!["t"; 17];
    let err = append(&node, "l", &too_many, "x").await.unwrap_err();
    assert!(err.to_string().contains("1 to 16"), "{err}");
    let err = append(&node, "l", &[], "x").await.unwrap_err();
    assert!(err.to_string().contains("1 to 16"), "{err}");
    // Nothing was created by the refused appends.
    let err = query(&node, LogQuery::next(key("l"), key("t"), LogSeq::ZERO))
        .await
        .unwrap_err();
    assert_eq!(err, FirnError::LogNotFound("l".into()));
    // A known log with a tag never used reads empty.
    append(&node, "l", &["t"], "x").await.unwrap();
    assert!(
        query(&node, LogQuery::next(key("l"), key("other"), LogSeq::ZERO))
            .await
            .unwrap()
            .is_empty()
    );
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_read_next_wakes_for_the_next_record() {
    let node = std::sync::Arc::new(three_shard_node().await);
    let tail = append(&node, "b", &["k"], "first").await.unwrap();
    let reader = {
        let node = node.clone();
        tokio::spawn(async move {
            let q =
                LogQuery::next(key("b"), key("k"), tail.successor().unwrap()).block(Some(5_000));
            let started = Instant::now();
            (query(&node, q).await.unwrap(), started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    append(&node, "b", &["k"], "second").await.unwrap();
    let (records, waited) = reader.await.unwrap();
    assert_eq!(payloads(&records), ["second"]);
    assert!(
        waited < Duration::from_secs(5),
        "woke at the append, not the timeout"
    );

    // A block that times out answers empty.
    let q = LogQuery::next(key("b"), key("k"), LogSeq::MAX).block(Some(100));
    assert!(query(&node, q).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_ids_follow_redis_and_trim_and_delete_work() {
    let node = three_shard_node().await;
    let add = |id: StreamId, trim: Option<StreamTrim>| LogWrite::StreamAdd {
        key: key("s"),
        id,
        payload: Bytes::from_static(b"f=v"),
        trim,
        no_create: false,
    };
    let first = match run(&node, add(StreamId::Exact(LogSeq::new(5, 1)), None))
        .await
        .unwrap()
        .response
    {
        Response::Appended(a) => a[0].seq,
        other => panic!("{other:?}"),
    };
    assert_eq!(first, LogSeq::new(5, 1));
    let err = run(&node, add(StreamId::Exact(LogSeq::new(5, 1)), None))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("equal or smaller"), "{err}");
    let auto = match run(&node, add(StreamId::Auto, None))
        .await
        .unwrap()
        .response
    {
        Response::Appended(a) => a[0].seq,
        other => panic!("{other:?}"),
    };
    assert!(
        auto > first && auto.ms > 1_000_000_000_000,
        "an auto id is the commit time in ms"
    );
    run(&node, add(StreamId::Auto, Some(StreamTrim::max_len(1))))
        .await
        .unwrap();
    let info = match run(
        &node,
        LogRead::Info {
            log: key("s"),
            tag: key("s"),
            consistency: Default::default(),
        },
    )
    .await
    .unwrap()
    .response
    {
        Response::TagInfo(Some(i)) => i,
        other => panic!("{other:?}"),
    };
    assert_eq!(info.len, 1);
    assert_eq!(info.added, 3);
    let last = info.last.unwrap().seq;
    let gone = run(
        &node,
        LogWrite::StreamDel {
            key: key("s"),
            ids: vec![last, LogSeq::new(1, 1)],
        },
    )
    .await
    .unwrap();
    assert_eq!(gone.response, Response::Count(1));
    let q = LogQuery::stream(key("s"), LogSeq::ZERO, LogSeq::MAX, 10, false);
    assert!(query(&node, q).await.unwrap().is_empty());
    // A missing stream reads empty, as in Redis.
    let q = LogQuery::stream(key("nostream"), LogSeq::ZERO, LogSeq::MAX, 10, false);
    assert!(query(&node, q).await.unwrap().is_empty());
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_append_gives_each_record_its_own_seq_in_every_home() {
    let node = three_shard_node().await;
    let (a, b) = tags_on_two_shards(&node);
    let records: Vec<NewRecord> = (0..6)
        .map(|i| NewRecord {
            tags: vec![key(if i % 2 == 0 { &a } else { &b })],
            payload: Bytes::from(format!("r{i}")),
        })
        .collect();
    let appended = match run(
        &node,
        LogWrite::Append {
            log: key("batch"),
            records,
        },
    )
    .await
    .unwrap()
    .response
    {
        Response::Appended(a) => a,
        other => panic!("{other:?}"),
    };
    assert_eq!(appended.len(), 6, "one seq per record, in the order given");
    let mut seqs: Vec<LogSeq> = appended.iter().map(|a| a.seq).collect();
    seqs.sort();
    seqs.dedup();
    assert_eq!(seqs.len(), 6, "seqs are unique");
    let read_a = query(
        &node,
        LogQuery::range(key("batch"), key(&a), LogSeq::ZERO, LogSeq::MAX, 10),
    )
    .await
    .unwrap();
    assert_eq!(payloads(&read_a), ["r0", "r2", "r4"]);
    for (i, r) in read_a.iter().enumerate() {
        assert_eq!(
            r.seq,
            appended[2 * i].seq,
            "a record reads with the seq its append answered"
        );
    }
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_read_says_how_stale_it_may_be() {
    let node = three_shard_node().await;
    append(&node, "stale", &["t"], "x").await.unwrap();
    let q = LogQuery::next(key("stale"), key("t"), LogSeq::ZERO)
        .consistency(firn_model::ReadConsistency::Local);
    let answer = run(&node, LogRead::Query(q)).await.unwrap();
    let staleness = answer.staleness.expect("a local read says how stale it is");
    assert!(staleness.applied_through > firn_model::CommitTs::ZERO);
    assert!(staleness.at_most_us < 60_000_000);
    let q = LogQuery::next(key("stale"), key("t"), LogSeq::ZERO);
    assert!(
        run(&node, LogRead::Query(q))
            .await
            .unwrap()
            .staleness
            .is_none()
    );
    node.shutdown().await;
}
