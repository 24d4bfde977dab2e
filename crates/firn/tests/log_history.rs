//! The shared log under leader kills. Appenders (records of 1 to 3 tags from a small set,
//! two tags per shard, so records span shards and tags have several homes) and readers
//! (one per tag following it from the start, and `read_next` at random seqs) talk to a
//! 3-node, 3-shard cluster over RESP while the leader of each shard in turn is killed with
//! SIGKILL and restarted. Once every append is over, each follower reads its tag to the
//! end, so that together they must find every acknowledged record. The recorded history
//! must keep the log's guarantees, as `firn_check::log` checks them: total order, no
//! skips, stable records.
//!
//! The node's router is in-process only, so the processes speak `FIRN.LOG` over RESP:
//! `APPEND <log> TAGS <n> <tag>... <payload>` answers the seqs (`<ms>-<n>`), and
//! `NEXT <log> <tag> <min_seq>` answers nil or `[seq, [tag...], payload, commit_ts]`.
//! A failure prints the seed; FIRN_TEST_SEED replays the same choices of tags and seqs.

mod common;

use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{Cluster, Rng, keys_in_shard, kill_leaders, seed};
use firn_check::log::{AppendOutcome, History, LogOp, LogOperation, ReadOutcome, Record, check};
use firn_model::LogSeq;
use redis::aio::MultiplexedConnection;

const LOG: &str = "events";
const SHARDS: u32 = 3;
const TAGS_PER_SHARD: usize = 2;
const APPENDERS: usize = 3;
/// Random readers; besides them, one follower per tag.
const RANDOM_READERS: usize = 1;
/// Most operations one process runs; the run usually ends first, soon after the faults.
const OPS_PER_PROCESS_MAX: usize = 1_000;
/// Pause between one appender's appends. Every record must later be read once per tag (a
/// read of a tag with several homes waits for closed time, tens of ms), so appends come
/// slower than reads.
const APPEND_THINK: Duration = Duration::from_millis(20);
const READ_THINK: Duration = Duration::from_millis(4);
/// Pause after a refusal (a node down, a leader being elected) before the next call.
const REFUSED_BACKOFF: Duration = Duration::from_millis(50);
/// How long one operation may take before its outcome counts as unknown.
const OP_TIMEOUT: Duration = Duration::from_secs(3);
/// How long the processes go on after the last restart, so that the history covers the
/// recovery.
const AFTER_FAULTS: Duration = Duration::from_secs(3);
/// Longest the appends run, and then longest the followers take to reach every tag's end:
/// with the cluster's start, the test stays under 40 s.
const RUN_MAX: Duration = Duration::from_secs(15);
const DRAIN_MAX: Duration = Duration::from_secs(15);
/// Fewest acknowledged appends and records read for the history to mean something.
const ACKNOWLEDGED_MIN: usize = 100;
const READS_RECORD_MIN: usize = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_history_under_leader_kills_keeps_order_no_skips_and_stability() {
    let seed = seed("log history");
    let cluster = Cluster::ready(3, &["--shards", "3"]).await;
    let tags: Vec<String> = (0..SHARDS)
        .flat_map(|shard| keys_in_shard(shard, "tag", TAGS_PER_SHARD))
        .collect();
    let run = Arc::new(Run {
        t0: Instant::now(),
        addrs: (0..3).map(|i| cluster.resp_addr(i)).collect(),
        tags,
        stop: AtomicBool::new(false),
        appends_done: AtomicBool::new(false),
        acked: Mutex::new(Vec::new()),
    });
    let cluster = Arc::new(Mutex::new(cluster));

    // The log and every tag exist before the run, so that early reads answer records.
    let mut history: History = run.setup(0).await.into_iter().collect();
    let appenders: Vec<_> = (1..=APPENDERS)
        .map(|p| {
            let (run, rng) = (run.clone(), Rng::for_process(seed, p));
            tokio::spawn(async move { run.appender(p, rng).await })
        })
        .collect();
    let mut readers: Vec<_> = (0..RANDOM_READERS)
        .map(|k| {
            let p = APPENDERS + 1 + k;
            let (run, rng) = (run.clone(), Rng::for_process(seed, p));
            tokio::spawn(async move { run.random_reader(p, rng).await })
        })
        .collect();
    for (k, tag) in run.tags.iter().enumerate() {
        let p = APPENDERS + RANDOM_READERS + 1 + k;
        let (run, tag) = (run.clone(), tag.clone());
        readers.push(tokio::spawn(async move { run.follower(p, &tag).await }));
    }
    // Each shard's leader in turn (the others stay up), then a little more running.
    kill_leaders(
        cluster.clone(),
        (0..SHARDS as usize).collect(),
        Duration::from_millis(300),
        Duration::from_millis(700),
    )
    .await;
    tokio::time::sleep(AFTER_FAULTS).await;
    run.stop.store(true, Ordering::Relaxed);
    for p in appenders {
        history.extend(p.await.unwrap());
    }
    // Every append is over: each follower now reads its tag to the end, so together they
    // must find every acknowledged record.
    run.appends_done.store(true, Ordering::Relaxed);
    for p in readers {
        history.extend(p.await.unwrap());
    }
    drop(cluster);

    let summary =
        check(&history).unwrap_or_else(|v| panic!("seed {seed}: {}", history.explain(&v)));
    eprintln!(
        "log history: {} operations in {:?}: {summary:?}",
        history.operations.len(),
        run.t0.elapsed()
    );
    assert!(
        summary.appends_acknowledged >= ACKNOWLEDGED_MIN,
        "too few appends acknowledged to mean anything: {summary:?}"
    );
    assert!(
        summary.reads_record >= READS_RECORD_MIN,
        "too few reads answered a record to mean anything: {summary:?}"
    );
}

/// What every process of a run shares.
struct Run {
    t0: Instant,
    addrs: Vec<String>,
    tags: Vec<String>,
    /// Set once the faults are over: appenders and random readers stop.
    stop: AtomicBool,
    /// Set once every appender has stopped: followers read their tag to its end.
    appends_done: AtomicBool,
    /// Seqs acknowledged so far, for random reads to start at.
    acked: Mutex<Vec<LogSeq>>,
}

impl Run {
    fn now_ns(&self) -> u64 {
        self.t0.elapsed().as_nanos() as u64
    }

    fn running(&self, i: usize) -> bool {
        i < OPS_PER_PROCESS_MAX && !self.stop.load(Ordering::Relaxed) && self.t0.elapsed() < RUN_MAX
    }

    /// One record under each tag, retried until acknowledged (bounded).
    async fn setup(&self, p: usize) -> Vec<LogOperation> {
        let mut node = Node::new(&self.addrs, p);
        let mut ops = Vec::new();
        for tag in &self.tags {
            let acked = async {
                for attempt in 0.. {
                    let payload = format!("setup-{tag}-{attempt}");
                    let tags = std::slice::from_ref(tag);
                    if self.append(&mut node, p, tags, payload, &mut ops).await {
                        return;
                    }
                }
            };
            tokio::time::timeout(Duration::from_secs(10), acked)
                .await
                .unwrap_or_else(|_| panic!("no append of {tag} acknowledged in 10 s"));
        }
        ops
    }

    /// Appends records of 1 to 3 distinct tags, each with a payload of its own.
    async fn appender(&self, p: usize, mut rng: Rng) -> Vec<LogOperation> {
        let mut node = Node::new(&self.addrs, p);
        let mut ops = Vec::new();
        for i in (0..).take_while(|&i| self.running(i)) {
            tokio::time::sleep(APPEND_THINK).await;
            let want = 1 + (rng.next() % 3) as usize;
            let mut tags: Vec<String> = Vec::with_capacity(want);
            while tags.len() < want {
                let tag = &self.tags[rng.next() as usize % self.tags.len()];
                if !tags.contains(tag) {
                    tags.push(tag.clone());
                }
            }
            self.append(&mut node, p, &tags, format!("p{p}-{i}"), &mut ops)
                .await;
        }
        ops
    }

    /// Follows `tag` from the start while appends run, then reads it to its end (nil),
    /// retrying failed reads, within [`DRAIN_MAX`].
    async fn follower(&self, p: usize, tag: &str) -> Vec<LogOperation> {
        let mut node = Node::new(&self.addrs, p);
        let mut ops = Vec::new();
        let mut cursor = LogSeq::ZERO;
        let mut drain_deadline = None;
        for i in 0.. {
            let draining = self.appends_done.load(Ordering::Relaxed);
            if draining {
                let deadline = *drain_deadline.get_or_insert_with(|| Instant::now() + DRAIN_MAX);
                assert!(
                    Instant::now() < deadline,
                    "following {tag} did not reach its end in {DRAIN_MAX:?}"
                );
            } else if i >= OPS_PER_PROCESS_MAX {
                tokio::time::sleep(READ_THINK).await;
                continue;
            }
            tokio::time::sleep(READ_THINK).await;
            match self.read_next(&mut node, p, tag, cursor, &mut ops).await {
                Some(Some(record)) => {
                    cursor = record.seq.successor().expect("a seq below the last one");
                }
                // Invoked after every append was over: the whole tag was read.
                Some(None) if draining => return ops,
                Some(None) | None => {}
            }
        }
        unreachable!("the loop runs until the tag's end or the deadline")
    }

    /// `read_next` of a random tag from a random acknowledged seq, one just above or below
    /// it, or the start.
    async fn random_reader(&self, p: usize, mut rng: Rng) -> Vec<LogOperation> {
        let mut node = Node::new(&self.addrs, p);
        let mut ops = Vec::new();
        for _ in (0..).take_while(|&i| self.running(i)) {
            tokio::time::sleep(READ_THINK).await;
            let tag = &self.tags[rng.next() as usize % self.tags.len()];
            let near = {
                let acked = self.acked.lock().unwrap();
                acked
                    .get(rng.next() as usize % acked.len().max(1))
                    .copied()
                    .unwrap_or(LogSeq::ZERO)
            };
            let min = match rng.next() % 4 {
                0 => LogSeq::ZERO,
                1 => near,
                2 => near.successor().unwrap_or(near),
                _ => near.predecessor().unwrap_or(near),
            };
            self.read_next(&mut node, p, tag, min, &mut ops).await;
        }
        ops
    }

    /// Appends one record and records how it went; whether it was acknowledged.
    async fn append(
        &self,
        node: &mut Node,
        p: usize,
        tags: &[String],
        payload: String,
        ops: &mut Vec<LogOperation>,
    ) -> bool {
        let mut cmd = redis::cmd("FIRN.LOG");
        cmd.arg("APPEND").arg(LOG).arg("TAGS").arg(tags.len());
        for tag in tags {
            cmd.arg(tag);
        }
        cmd.arg(&payload);
        node.ready().await;
        let invoked_at = self.now_ns();
        let outcome = match node.call(&cmd).await {
            Ok(reply) => AppendOutcome::Ok(appended_seq(reply)),
            Err(Failure::Refused) => AppendOutcome::Fail,
            Err(Failure::Unknown) => AppendOutcome::Unknown,
        };
        ops.push(LogOperation {
            process: p,
            invoked_at,
            completed_at: self.now_ns(),
            op: LogOp::Append {
                tags: tags.iter().map(|t| Bytes::from(t.clone())).collect(),
                payload: Bytes::from(payload),
                outcome,
            },
        });
        if let AppendOutcome::Ok(seq) = outcome {
            self.acked.lock().unwrap().push(seq);
        }
        matches!(outcome, AppendOutcome::Ok(_))
    }

    /// `read_next(tag, min)`, recorded; its answer (`None`: it failed).
    async fn read_next(
        &self,
        node: &mut Node,
        p: usize,
        tag: &str,
        min: LogSeq,
        ops: &mut Vec<LogOperation>,
    ) -> Option<Option<Record>> {
        let mut cmd = redis::cmd("FIRN.LOG");
        cmd.arg("NEXT").arg(LOG).arg(tag).arg(min.to_string());
        node.ready().await;
        let invoked_at = self.now_ns();
        let outcome = match node.call(&cmd).await {
            Ok(reply) => ReadOutcome::Ok(next_record(reply)),
            Err(_) => ReadOutcome::Fail,
        };
        let answer = match &outcome {
            ReadOutcome::Ok(record) => Some(record.clone()),
            ReadOutcome::Fail => None,
        };
        ops.push(LogOperation {
            process: p,
            invoked_at,
            completed_at: self.now_ns(),
            op: LogOp::ReadNext {
                tag: Bytes::from(tag.to_string()),
                min,
                outcome,
            },
        });
        answer
    }
}

/// How a call failed.
enum Failure {
    /// Refused before it took effect (TRYAGAIN, CLUSTERDOWN, or no connection to send it
    /// on): it never happened.
    Refused,
    /// It may have taken effect (UNCERTAIN, another error, a timeout, a dropped connection).
    Unknown,
}

/// One process's connection: to one node, moving on to the next after a failure.
struct Node {
    addrs: Vec<String>,
    target: usize,
    con: Option<MultiplexedConnection>,
    /// The last call was refused.
    refused: bool,
    /// Server errors other than the expected ones are printed, the first few.
    errors_told: usize,
}

impl Node {
    fn new(addrs: &[String], p: usize) -> Node {
        Node {
            addrs: addrs.to_vec(),
            target: p,
            con: None,
            refused: false,
            errors_told: 0,
        }
    }

    fn move_on(&mut self) {
        self.con = None;
        self.target += 1;
    }

    /// Before a call: waits a little after a refusal, so that a node down or a leader being
    /// elected is not asked again at once.
    async fn ready(&mut self) {
        if std::mem::take(&mut self.refused) {
            tokio::time::sleep(REFUSED_BACKOFF).await;
        }
    }

    async fn call(&mut self, cmd: &redis::Cmd) -> Result<redis::Value, Failure> {
        let result = self.send(cmd).await;
        self.refused = matches!(result, Err(Failure::Refused));
        result
    }

    async fn send(&mut self, cmd: &redis::Cmd) -> Result<redis::Value, Failure> {
        if self.con.is_none() {
            let addr = &self.addrs[self.target % self.addrs.len()];
            let client = redis::Client::open(format!("redis://{addr}/")).expect("an address");
            match tokio::time::timeout(OP_TIMEOUT, client.get_multiplexed_async_connection()).await
            {
                Ok(Ok(con)) => self.con = Some(con),
                _ => {
                    self.move_on();
                    return Err(Failure::Refused);
                }
            }
        }
        let con = self.con.as_mut().expect("connected above");
        match tokio::time::timeout(OP_TIMEOUT, cmd.query_async::<redis::Value>(con)).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) if matches!(e.code(), Some("TRYAGAIN" | "CLUSTERDOWN")) => {
                self.move_on();
                Err(Failure::Refused)
            }
            Ok(Err(e)) => {
                // Dropped connections are expected here; a server error other than
                // UNCERTAIN is not, and may be the harness's fault.
                if e.code().is_some_and(|c| c != "UNCERTAIN") && self.errors_told < 3 {
                    self.errors_told += 1;
                    eprintln!("log history: {e}");
                }
                self.move_on();
                Err(Failure::Unknown)
            }
            Err(_) => {
                self.move_on();
                Err(Failure::Unknown)
            }
        }
    }
}

/// The seq of APPEND's one record.
fn appended_seq(reply: redis::Value) -> LogSeq {
    let seqs: Vec<String> = redis::from_redis_value(reply.clone())
        .unwrap_or_else(|e| panic!("APPEND answered {reply:?}, not seqs: {e}"));
    let [seq] = seqs.as_slice() else {
        panic!("APPEND of one record answered {} seqs", seqs.len());
    };
    LogSeq::from_str(seq).unwrap_or_else(|e| panic!("APPEND answered seq {seq:?}: {e}"))
}

/// NEXT's answer: nil, or `[seq, [tag...], payload, commit_ts]`.
fn next_record(reply: redis::Value) -> Option<Record> {
    let parts = match reply {
        redis::Value::Nil => return None,
        redis::Value::Array(parts) => parts,
        other => panic!("NEXT answered {other:?}, not nil or a record"),
    };
    let Ok([seq, tags, payload, _commit_ts]) = <[redis::Value; 4]>::try_from(parts) else {
        panic!("NEXT answered a record not of 4 parts");
    };
    let seq: String = redis::from_redis_value(seq).expect("a seq");
    let tags: Vec<Vec<u8>> = redis::from_redis_value(tags).expect("an array of tags");
    let payload: Vec<u8> = redis::from_redis_value(payload).expect("a payload");
    Some(Record {
        seq: LogSeq::from_str(&seq).unwrap_or_else(|e| panic!("NEXT answered seq {seq:?}: {e}")),
        tags: tags.into_iter().map(Bytes::from).collect(),
        payload: Bytes::from(payload),
    })
}
