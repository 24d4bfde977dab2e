//! The shared log: appenders (records of 1 to 3 tags from a small set, so records span
//! shards and tags have several homes) and readers (one per tag following it from the start,
//! and `read_next` at random seqs) talk to the cluster over RESP. Once every append is over,
//! each follower reads its tag to the end, so that together they must find every
//! acknowledged record. The recorded history must keep the log's guarantees, as
//! [`firn_check::log`] checks them: total order, no skips, stable records.
//!
//! The node's router is in-process only, so the processes speak `FIRN.LOG` over RESP:
//! `APPEND <log> TAGS <n> <tag>... <payload>` answers the seqs (`<ms>-<n>`), and
//! `NEXT <log> <tag> <min_seq>` answers nil or `[seq, [tag...], payload, commit_ts]`.

use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use firn_check::log::{AppendOutcome, History, LogOp, LogOperation, ReadOutcome, Record};
use firn_model::LogSeq;

use super::conn::{Called, Node};
use crate::Rng;

/// What a log workload runs.
#[derive(Clone, Debug)]
pub struct Logs {
    pub log: String,
    /// The tags records carry (pick a few per shard).
    pub tags: Vec<String>,
    pub appenders: usize,
    /// Random readers; besides them, one follower per tag.
    pub random_readers: usize,
    /// Pause between one appender's appends. Every record must later be read once per tag
    /// (a read of a tag with several homes waits for closed time, tens of ms), so appends
    /// come slower than reads.
    pub append_think: Duration,
    pub read_think: Duration,
    /// Most operations one process runs; the run usually ends first.
    pub ops_per_process_max: usize,
    /// Longest the appends run.
    pub run_max: Duration,
    /// Longest the followers take to reach every tag's end once appends are over.
    pub drain_max: Duration,
}

impl Logs {
    /// Appenders and readers as the log's history test runs them, over `tags`.
    pub fn new(log: &str, tags: Vec<String>) -> Logs {
        Logs {
            log: log.to_string(),
            tags,
            appenders: 3,
            random_readers: 1,
            append_think: Duration::from_millis(20),
            read_think: Duration::from_millis(4),
            ops_per_process_max: 1_000,
            run_max: Duration::from_secs(15),
            drain_max: Duration::from_secs(15),
        }
    }

    /// Runs the processes against `addrs` until `stop` is set (or `run_max`), then lets the
    /// followers read every tag to its end, and returns the history; an error when the log
    /// could not be set up or a tag's end was not reached in time.
    pub async fn record(
        &self,
        seed: u64,
        addrs: &[String],
        stop: Arc<AtomicBool>,
        t0: Instant,
    ) -> Result<History, String> {
        let run = Arc::new(Run {
            spec: self.clone(),
            t0,
            addrs: addrs.to_vec(),
            stop,
            appends_done: AtomicBool::new(false),
            acked: Mutex::new(Vec::new()),
        });
        // The log and every tag exist before the run, so that early reads answer records.
        let mut history: History = run.setup(0).await?.into_iter().collect();
        let appenders: Vec<_> = (1..=self.appenders)
            .map(|p| {
                let (run, rng) = (run.clone(), Rng::for_process(seed, p));
                tokio::spawn(async move { run.appender(p, rng).await })
            })
            .collect();
        let mut readers: Vec<_> = (0..self.random_readers)
            .map(|k| {
                let p = self.appenders + 1 + k;
                let (run, rng) = (run.clone(), Rng::for_process(seed, p));
                tokio::spawn(async move { Ok(run.random_reader(p, rng).await) })
            })
            .collect();
        for (k, tag) in self.tags.iter().enumerate() {
            let p = self.appenders + self.random_readers + 1 + k;
            let (run, tag) = (run.clone(), tag.clone());
            readers.push(tokio::spawn(async move { run.follower(p, &tag).await }));
        }
        for p in appenders {
            history.extend(p.await.map_err(|e| format!("an appender failed: {e}"))?);
        }
        // Every append is over: each follower now reads its tag to the end, so together they
        // must find every acknowledged record.
        run.appends_done.store(true, Ordering::Relaxed);
        let mut failed = None;
        for p in readers {
            match p.await.map_err(|e| format!("a reader failed: {e}"))? {
                Ok(ops) => history.extend(ops),
                Err(e) => failed = Some(e),
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(history),
        }
    }
}

/// What every process of a run shares.
struct Run {
    spec: Logs,
    t0: Instant,
    addrs: Vec<String>,
    /// Set once the faults are over: appenders and random readers stop.
    stop: Arc<AtomicBool>,
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
        i < self.spec.ops_per_process_max
            && !self.stop.load(Ordering::Relaxed)
            && self.t0.elapsed() < self.spec.run_max
    }

    /// One record under each tag, retried until acknowledged (bounded).
    async fn setup(&self, p: usize) -> Result<Vec<LogOperation>, String> {
        let mut node = Node::new("log", &self.addrs, p);
        let mut ops = Vec::new();
        for tag in &self.spec.tags {
            let acked = async {
                for attempt in 0.. {
                    let payload = format!("setup-{tag}-{attempt}");
                    let tags = std::slice::from_ref(tag);
                    if self.append(&mut node, p, tags, payload, &mut ops).await {
                        return;
                    }
                }
            };
            tokio::time::timeout(SETUP_MAX, acked)
                .await
                .map_err(|_| format!("no append of {tag} acknowledged in {SETUP_MAX:?}"))?;
        }
        Ok(ops)
    }

    /// Appends records of 1 to 3 distinct tags, each with a payload of its own.
    async fn appender(&self, p: usize, mut rng: Rng) -> Vec<LogOperation> {
        let mut node = Node::new("log", &self.addrs, p);
        let mut ops = Vec::new();
        for i in (0..).take_while(|&i| self.running(i)) {
            tokio::time::sleep(self.spec.append_think).await;
            let want = 1 + (rng.next_u64() % 3) as usize;
            let mut tags: Vec<String> = Vec::with_capacity(want);
            while tags.len() < want {
                let tag = &self.spec.tags[rng.next_u64() as usize % self.spec.tags.len()];
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
    /// retrying failed reads, within `drain_max`.
    async fn follower(&self, p: usize, tag: &str) -> Result<Vec<LogOperation>, String> {
        let mut node = Node::new("log", &self.addrs, p);
        let mut ops = Vec::new();
        let mut cursor = LogSeq::ZERO;
        let mut drain_deadline = None;
        for i in 0.. {
            let draining = self.appends_done.load(Ordering::Relaxed);
            if draining {
                let drain_max = self.spec.drain_max;
                let deadline = *drain_deadline.get_or_insert_with(|| Instant::now() + drain_max);
                if Instant::now() >= deadline {
                    return Err(format!(
                        "following {tag} did not reach its end in {drain_max:?}"
                    ));
                }
            } else if i >= self.spec.ops_per_process_max {
                tokio::time::sleep(self.spec.read_think).await;
                continue;
            }
            tokio::time::sleep(self.spec.read_think).await;
            match self.read_next(&mut node, p, tag, cursor, &mut ops).await {
                Some(Some(record)) => {
                    cursor = record.seq.successor().expect("a seq below the last one");
                }
                // Invoked after every append was over: the whole tag was read.
                Some(None) if draining => return Ok(ops),
                Some(None) | None => {}
            }
        }
        unreachable!("the loop runs until the tag's end or the deadline")
    }

    /// `read_next` of a random tag from a random acknowledged seq, one just above or below
    /// it, or the start.
    async fn random_reader(&self, p: usize, mut rng: Rng) -> Vec<LogOperation> {
        let mut node = Node::new("log", &self.addrs, p);
        let mut ops = Vec::new();
        for _ in (0..).take_while(|&i| self.running(i)) {
            tokio::time::sleep(self.spec.read_think).await;
            let tag = &self.spec.tags[rng.next_u64() as usize % self.spec.tags.len()];
            let near = {
                let acked = self.acked.lock().unwrap();
                acked
                    .get(rng.next_u64() as usize % acked.len().max(1))
                    .copied()
                    .unwrap_or(LogSeq::ZERO)
            };
            let min = match rng.next_u64() % 4 {
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
        cmd.arg("APPEND")
            .arg(&self.spec.log)
            .arg("TAGS")
            .arg(tags.len());
        for tag in tags {
            cmd.arg(tag);
        }
        cmd.arg(&payload);
        let invoked_at = self.now_ns();
        let outcome = match node.call(&cmd).await {
            Called::Ok(reply) => AppendOutcome::Ok(appended_seq(reply)),
            Called::Refused => AppendOutcome::Fail,
            Called::Unknown => AppendOutcome::Unknown,
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
        cmd.arg("NEXT")
            .arg(&self.spec.log)
            .arg(tag)
            .arg(min.to_string());
        let invoked_at = self.now_ns();
        let outcome = match node.call(&cmd).await {
            Called::Ok(reply) => ReadOutcome::Ok(next_record(reply)),
            Called::Refused | Called::Unknown => ReadOutcome::Fail,
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

/// The longest the log and its tags take to be set up.
const SETUP_MAX: Duration = Duration::from_secs(10);

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
