//! The local log index through the router: repeated reads of the same records are served
//! by it (its hit counter moves, on `/metrics` too) with the answers the shards give, and a
//! trim or FLUSHALL through another node makes every node's index forget what went.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::start_cluster;
use firn_model::{
    CallContext, CommitTs, FirnError, Key, KvWrite, LogQuery, LogRead, LogRecord, LogSeq, LogWrite,
    NewRecord, Request, Response,
};
use firn_node::RunningNode;

/// `n` nodes of one cluster with `shards` shards, one replica each, once every shard takes
/// writes through every node.
async fn cluster(n: u64, shards: u32) -> Vec<RunningNode> {
    let nodes = start_cluster(n, shards).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    for node in &nodes {
        let layout = node.router().kernel().layout();
        // One tag per shard: a first append to each succeeds once it has a leader.
        let mut tags: BTreeMap<u32, String> = BTreeMap::new();
        for i in 0.. {
            let tag = format!("warmup-{i}");
            tags.entry(layout.shard_of_name(tag.as_bytes()))
                .or_insert(tag);
            if tags.len() == shards as usize {
                break;
            }
        }
        for tag in tags.values() {
            while let Err(e) = append(node, "warmup", &[tag], "x").await {
                assert!(Instant::now() < deadline, "no leader: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    nodes
}

fn key(s: &str) -> Key {
    Key::new(Bytes::copy_from_slice(s.as_bytes())).unwrap()
}

async fn append(
    node: &RunningNode,
    log: &str,
    tags: &[&str],
    payload: &str,
) -> Result<(LogSeq, CommitTs), FirnError> {
    let write = LogWrite::Append {
        log: key(log),
        records: vec![NewRecord {
            tags: tags.iter().map(|t| key(t)).collect(),
            payload: Bytes::copy_from_slice(payload.as_bytes()),
        }],
    };
    let answer = node
        .router()
        .execute(&CallContext::default(), Request::from(write))
        .await?;
    match answer.response {
        Response::Appended(a) => Ok((a[0].seq, a[0].commit_ts)),
        other => panic!("append answered {other:?}"),
    }
}

async fn read(node: &RunningNode, q: &LogQuery) -> Result<Vec<LogRecord>, FirnError> {
    let request = Request::from(LogRead::Query(q.clone()));
    match node
        .router()
        .execute(&CallContext::default(), request)
        .await?
        .response
    {
        Response::Records(r) => Ok(r),
        other => panic!("read answered {other:?}"),
    }
}

/// Two tags whose slots are in different shards.
fn tags_on_two_shards(node: &RunningNode) -> (String, String) {
    let layout = node.router().kernel().layout();
    let shard = |t: &str| layout.shard_of_name(t.as_bytes());
    let a = "tag-a".to_string();
    let b = (0..)
        .map(|i| format!("tag-b{i}"))
        .find(|b| shard(b) != shard(&a))
        .unwrap();
    (a, b)
}

/// A counter's value on the node's `/metrics` page (the recorder is shared by every node of
/// this test process).
fn metric(node: &RunningNode, name: &str) -> u64 {
    let page = ureq::get(&format!("http://{}/metrics", node.http_addr))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
        .unwrap_or(0.0) as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_reads_are_served_by_the_index_with_the_shards_answers() {
    let nodes = cluster(1, 3).await;
    let node = &nodes[0];
    let (a, b) = tags_on_two_shards(node);
    let mut seqs = Vec::new();
    let mut last_ts = CommitTs::ZERO;
    for i in 0..12 {
        // b gets records in a's shard too: its reads merge two homes at a closed time.
        let tags: &[&str] = match i % 3 {
            0 => &[&a],
            1 => &[&a, &b],
            _ => &[&b],
        };
        let (seq, ts) = append(node, "events", tags, &format!("p{i}"))
            .await
            .unwrap();
        seqs.push(seq);
        last_ts = ts;
    }
    let (log, first) = (key("events"), seqs[0]);
    let mut queries = Vec::new();
    for tag in [&a, &b] {
        let tag = key(tag);
        for s in &seqs {
            queries.push(LogQuery::next(log.clone(), tag.clone(), *s));
            queries.push(LogQuery::prev(log.clone(), tag.clone(), *s));
        }
        queries.push(LogQuery::range(log.clone(), tag.clone(), first, seqs[7], 3));
        queries.push(LogQuery::range(
            log.clone(),
            tag.clone(),
            first,
            seqs[11],
            100,
        ));
        queries.push(LogQuery::tail(log.clone(), tag));
    }

    let index = node.router().log().index();
    let before = index.stats();
    let metric_before = metric(node, "firn_log_index_hits_total");
    for q in &queries {
        // Without the index: a read at the time of the last append (reads at a time bypass
        // it) sees exactly what a read now sees, as nothing was appended since.
        let shards = read(node, &q.clone().at(Some(last_ts))).await.unwrap();
        let first = read(node, q).await.unwrap();
        let hits = index.stats().hits;
        let again = read(node, q).await.unwrap();
        assert_eq!(first, shards, "{q:?}");
        assert_eq!(again, shards, "{q:?} (the second time)");
        // The second read is a hit unless its answer spans seqs past the tag's newest
        // record (a's is the 11th append, b's the 12th): there a record may still come,
        // as far as the index knows.
        let newest = if q.tag == key(&a) { seqs[10] } else { seqs[11] };
        let past_newest = q.to > newest && (q.reverse || again.len() < q.limit);
        let hit = index.stats().hits == hits + 1;
        assert_eq!(hit, !past_newest, "{q:?}");
    }
    let after = index.stats();
    let hits = after.hits - before.hits;
    assert!(after.bytes > 0 && after.tags == 2, "{after:?}");
    assert!(metric(node, "firn_log_index_hits_total") >= metric_before + hits);
    assert!(metric(node, "firn_log_index_bytes") > 0);

    // A record appended later lands above every known range: reading on finds it.
    let (newest, _) = append(node, "events", &[&a], "late").await.unwrap();
    let after_last = LogQuery::next(log.clone(), key(&a), seqs[11].successor().unwrap());
    assert_eq!(read(node, &after_last).await.unwrap()[0].seq, newest);
    for node in nodes {
        node.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trim_or_flushall_through_another_node_is_forgotten_by_this_nodes_index() {
    let nodes = cluster(2, 2).await;
    let (one, two) = (&nodes[0], &nodes[1]);
    let log = key("trimmed");
    let mut seqs = Vec::new();
    for i in 0..6 {
        seqs.push(
            append(one, "trimmed", &["t"], &format!("p{i}"))
                .await
                .unwrap()
                .0,
        );
    }
    let from_start = LogQuery::range(log.clone(), key("t"), seqs[0], seqs[5], 100);
    let all = read(two, &from_start).await.unwrap();
    assert_eq!(all.len(), 6);
    let hits = two.router().log().index().stats().hits;
    assert_eq!(read(two, &from_start).await.unwrap(), all);
    assert_eq!(
        two.router().log().index().stats().hits,
        hits + 1,
        "cached on node 2"
    );

    let trim = LogWrite::Trim {
        log: log.clone(),
        tag: Some(key("t")),
        before: seqs[3],
    };
    one.router()
        .execute(&CallContext::default(), Request::from(trim))
        .await
        .unwrap();
    assert_eq!(
        read(two, &from_start).await,
        Err(FirnError::Trimmed {
            first_kept: seqs[3]
        }),
        "node 2 forgot the records node 1 trimmed"
    );
    let kept = LogQuery::range(log.clone(), key("t"), seqs[3], seqs[5], 100);
    assert_eq!(read(two, &kept).await.unwrap(), all[3..].to_vec());
    assert_eq!(read(two, &kept).await.unwrap(), all[3..].to_vec());

    let flush = Request::from(KvWrite::FlushAll);
    one.router()
        .execute(&CallContext::default(), flush)
        .await
        .unwrap();
    assert_eq!(two.router().log().index().stats().tags, 0);
    // No record is left (whether the log's name outlives FLUSHALL is the store's matter).
    match read(two, &kept).await {
        Ok(records) => assert_eq!(records, vec![]),
        Err(e) => assert!(matches!(e, FirnError::LogNotFound(_)), "{e}"),
    }
    for node in nodes {
        node.shutdown().await;
    }
}
