//! A restart after `kill -9` loses no acknowledged log append, and every record reads back
//! with the seq, tags and payload its append was answered with.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::FirnProcess;
use redis::Value;

const WRITERS: usize = 6;
/// Bounds: the kill comes after this long, and no writer appends more than this many.
const KILL_AFTER: Duration = Duration::from_millis(1500);
const APPENDS_PER_WRITER_MAX: usize = 20_000;
const TAGS: [&str; 4] = ["a", "b", "c", "d"];

/// An acknowledged append: its seq, tags and payload.
type Acked = (String, Vec<String>, String);

fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        other => panic!("not a string: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_appends_loses_no_acknowledged_record() {
    let dir = tempfile::tempdir().unwrap();
    let node = FirnProcess::start(
        dir.path(),
        &["--snapshot-every", "500", "--snapshot-catchup-entries", "0"],
    );
    let client = redis::Client::open(format!("redis://{}/", node.resp_addr())).unwrap();
    let acked: Arc<Mutex<Vec<Acked>>> = Arc::default();
    let started = Instant::now();
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let acked = acked.clone();
        writers.push(tokio::spawn(async move {
            for i in 0..APPENDS_PER_WRITER_MAX {
                let tags: Vec<String> = (0..1 + i % 2)
                    .map(|k| TAGS[(w + i + k) % TAGS.len()].to_string())
                    .collect();
                let payload = format!("w{w}-{i}");
                let mut cmd = redis::cmd("FIRN.LOG");
                cmd.arg("APPEND").arg("crash").arg("TAGS").arg(tags.len());
                for t in &tags {
                    cmd.arg(t);
                }
                cmd.arg(&payload);
                match cmd.query_async::<Vec<String>>(&mut conn).await {
                    Ok(seqs) => acked.lock().unwrap().push((seqs[0].clone(), tags, payload)),
                    Err(_) => return, // the node died: every later append is unacknowledged
                }
            }
        }));
    }
    tokio::time::sleep(KILL_AFTER.saturating_sub(started.elapsed())).await;
    node.kill_9();
    for w in writers {
        w.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(
        acked.len() > 100,
        "too few appends were acknowledged before the kill ({})",
        acked.len()
    );

    let restarted = FirnProcess::start(dir.path(), &[]);
    let client = redis::Client::open(format!("redis://{}/", restarted.resp_addr())).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let mut lost = Vec::new();
    for (seq, tags, payload) in &acked {
        for tag in tags {
            let got: Value = redis::cmd("FIRN.LOG")
                .arg("NEXT")
                .arg("crash")
                .arg(tag)
                .arg(seq)
                .query_async(&mut conn)
                .await
                .unwrap();
            let same = match &got {
                Value::Array(fields) if fields.len() == 4 => {
                    text(&fields[0]) == *seq
                        && text(&fields[2]) == *payload
                        && matches!(&fields[1], Value::Array(t) if t.iter().map(text).collect::<Vec<_>>() == *tags)
                }
                _ => false,
            };
            if !same {
                lost.push((seq.clone(), tag.clone(), got));
            }
        }
    }
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged records lost or changed, e.g. {:?}",
        lost.len(),
        acked.len(),
        &lost[..lost.len().min(3)]
    );
}
