//! A consumer group: producers `XADD` to one stream (with a payload unique to each add) and
//! consumers connected to different nodes read it with `XREADGROUP … >` and `XACK` each
//! entry, over RESP with standard Redis commands only. Some consumers crash: they drop their
//! connection holding entries they did not ack, and come back under a new name. With
//! [`Redelivery::Claims`] every consumer claims what has been idle a while with
//! `XAUTOCLAIM`; with [`Redelivery::AckWait`] (a group `POLICY roundrobin ACKWAIT`) nobody
//! claims, and crashed consumers' entries come back only as the server gives them again by
//! `>`. Once the producers and consumers stop, a drainer claims every pending entry and reads
//! `>` until the group holds nothing, acking all. The recorded history must keep the group's
//! guarantees as [`firn_check::groups`] checks them: nothing acknowledged lost, acked means
//! done, one holder at a time, redeliveries counted.
//!
//! A call that was refused (TRYAGAIN, CLUSTERDOWN, no connection) is recorded as such; one
//! whose answer never came (a dropped connection, a timeout, UNCERTAIN) as unknown, not as a
//! failure.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use firn_check::groups::{
    Delivered, DeliveryKind, GroupOp, GroupOperation, History, Options, Outcome,
};
use firn_model::LogSeq;
use redis::Value;

use super::conn::{Called, Node};
use crate::Rng;

pub const GROUP: &str = "g";
const PRODUCERS: usize = 4;
/// Consumers `0..CRASHING` crash now and then; the others never do.
const CONSUMERS: usize = 4;
const CRASHING: usize = 2;
/// Pause between one producer's adds: a few hundred records in a run.
const ADD_THINK: Duration = Duration::from_millis(10);
const READ_COUNT: usize = 5;
const READ_BLOCK_MS: u64 = 200;
/// Consumers claim entries idle this long, this often.
const CLAIM_MIN_IDLE_MS: u64 = 1_000;
const CLAIM_EVERY: Duration = Duration::from_millis(300);
const CLAIM_COUNT: usize = 10;
/// A crashing consumer crashes before an ack with probability 1 in this; its first crash
/// comes on its third batch for sure, so every run has one.
const CRASH_ODDS: u64 = 25;
const CRASH_FIRST_BATCH: usize = 3;
/// Longest the group's creation may take (the shard's leader may still be settling).
const CREATE_MAX: Duration = Duration::from_secs(20);
/// The roundrobin group's ACKWAIT, and its LIVENESS: short, so that entries dealt to a
/// crashed consumer's old name come back within the run, and no shorter than ACKWAIT, so that
/// an entry of a consumer no longer live is not given again sooner than ACKWAIT.
const ACK_WAIT_MS: u64 = 1_000;
const LIVENESS_MS: u64 = 2_000;

/// How the group gives a crashed consumer's entries to another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Redelivery {
    /// Policy `first`; consumers and the drainer claim idle entries with `XAUTOCLAIM`.
    Claims,
    /// `POLICY roundrobin ACKWAIT`; nobody claims: the server gives due entries by `>`.
    AckWait,
}

/// What a consumer-group workload runs.
#[derive(Clone, Debug)]
pub struct Groups {
    /// The stream's key.
    pub key: String,
    pub redelivery: Redelivery,
    /// Once asked to stop, producers go on until this many adds were acknowledged (a slow
    /// machine adds slowly), for at most `run_max` from the start.
    pub acknowledged_target: usize,
    pub run_max: Duration,
    /// Longest the drain may take.
    pub drain_max: Duration,
}

impl Groups {
    pub fn new(key: &str, redelivery: Redelivery) -> Groups {
        Groups {
            key: key.to_string(),
            redelivery,
            acknowledged_target: 200,
            run_max: Duration::from_secs(15),
            drain_max: Duration::from_secs(20),
        }
    }

    /// What the checker is told about the group.
    pub fn options(&self) -> Options {
        Options {
            ack_wait_ms: (self.redelivery == Redelivery::AckWait).then_some(ACK_WAIT_MS),
        }
    }

    /// Makes the group, runs producers and consumers against `addrs` until `stop` is set
    /// (and enough adds were acknowledged), then drains the group, and returns the history;
    /// an error when the group could not be made or drained in time.
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
            acknowledged: AtomicUsize::new(0),
        });
        run.create_group().await?;
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let run = run.clone();
                tokio::spawn(async move { run.producer(p).await })
            })
            .collect();
        let consumers: Vec<_> = (0..CONSUMERS)
            .map(|k| {
                let (run, rng) = (run.clone(), Rng::for_process(seed, k));
                tokio::spawn(async move { run.consumer(k, rng).await })
            })
            .collect();
        let mut history = History::default();
        for p in producers.into_iter().chain(consumers) {
            history.extend(
                p.await
                    .map_err(|e| format!("a group process failed: {e}"))?,
            );
        }
        let (drained, final_pending) = run.drain().await?;
        history.extend(drained);
        history.final_pending = final_pending;
        Ok(history)
    }
}

/// What every process of a run shares.
struct Run {
    spec: Groups,
    t0: Instant,
    addrs: Vec<String>,
    /// Set once the faults are over: producers and consumers stop.
    stop: Arc<AtomicBool>,
    /// Adds acknowledged so far.
    acknowledged: AtomicUsize,
}

impl Run {
    fn now_ns(&self) -> u64 {
        self.t0.elapsed().as_nanos() as u64
    }

    fn running(&self) -> bool {
        let enough = self.acknowledged.load(Ordering::Relaxed) >= self.spec.acknowledged_target;
        !(self.stop.load(Ordering::Relaxed) && enough || self.t0.elapsed() >= self.spec.run_max)
    }

    async fn create_group(&self) -> Result<(), String> {
        let mut conn = Node::new("group", &self.addrs, 0);
        let mut create = redis::cmd("XGROUP");
        create.arg("CREATE").arg(&self.spec.key).arg(GROUP).arg("$");
        create.arg("MKSTREAM");
        if self.spec.redelivery == Redelivery::AckWait {
            create.arg("POLICY").arg("roundrobin");
            create.arg("ACKWAIT").arg(ACK_WAIT_MS);
            create.arg("LIVENESS").arg(LIVENESS_MS);
        }
        let mut info = redis::cmd("XINFO");
        info.arg("GROUPS").arg(&self.spec.key);
        let deadline = Instant::now() + CREATE_MAX;
        while !matches!(conn.call(&create).await, Called::Ok(_)) {
            // A create whose answer never came may have made the group (then a retry answers
            // BUSYGROUP): it is there if XINFO lists it.
            if let Called::Ok(Value::Array(groups)) = conn.call(&info).await
                && !groups.is_empty()
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!("no group made in {CREATE_MAX:?}"));
            }
        }
        Ok(())
    }

    /// Runs `cmd` and records it as `op(answer)`, with the time it took.
    async fn record<T>(
        &self,
        conn: &mut Node,
        process: usize,
        cmd: &redis::Cmd,
        parse: impl FnOnce(Value) -> T,
        op: impl FnOnce(Outcome<T>) -> GroupOp,
        ops: &mut Vec<GroupOperation>,
    ) -> Outcome<T>
    where
        T: Clone,
    {
        let invoked_at = self.now_ns();
        let outcome = match conn.call(cmd).await {
            Called::Ok(v) => Outcome::Ok(parse(v)),
            Called::Refused => Outcome::Refused,
            Called::Unknown => Outcome::Unknown,
        };
        ops.push(GroupOperation {
            process,
            invoked_at,
            completed_at: self.now_ns(),
            op: op(outcome.clone()),
        });
        outcome
    }

    async fn producer(&self, p: usize) -> Vec<GroupOperation> {
        let mut conn = Node::new("group", &self.addrs, p);
        let mut ops = Vec::new();
        for i in (0..).take_while(|_| self.running()) {
            tokio::time::sleep(ADD_THINK).await;
            let payload = format!("p{p}-{i}");
            let mut cmd = redis::cmd("XADD");
            cmd.arg(&self.spec.key).arg("*").arg("p").arg(&payload);
            let op = |outcome| GroupOp::Add { payload, outcome };
            if let Outcome::Ok(_) = self.record(&mut conn, p, &cmd, seq, op, &mut ops).await {
                self.acknowledged.fetch_add(1, Ordering::Relaxed);
            }
        }
        ops
    }

    /// `XREADGROUP … >` (`claim_min_idle_ms` None) or `XAUTOCLAIM` by `consumer`; the ids
    /// it returned.
    async fn deliver(
        &self,
        conn: &mut Node,
        process: usize,
        consumer: &str,
        claim_min_idle_ms: Option<u64>,
        count: usize,
        ops: &mut Vec<GroupOperation>,
    ) -> Outcome<Vec<Delivered>> {
        let (cmd, kind) = match claim_min_idle_ms {
            None => {
                let mut cmd = redis::cmd("XREADGROUP");
                cmd.arg("GROUP")
                    .arg(GROUP)
                    .arg(consumer)
                    .arg("COUNT")
                    .arg(count);
                if process < PRODUCERS + CONSUMERS || self.spec.redelivery == Redelivery::AckWait {
                    // The drainer does not wait where it claims: it stops at the first empty
                    // answer. Without claims it waits for due entries.
                    cmd.arg("BLOCK").arg(READ_BLOCK_MS);
                }
                cmd.arg("STREAMS").arg(&self.spec.key).arg(">");
                (cmd, DeliveryKind::New)
            }
            Some(min_idle_ms) => {
                let mut cmd = redis::cmd("XAUTOCLAIM");
                cmd.arg(&self.spec.key)
                    .arg(GROUP)
                    .arg(consumer)
                    .arg(min_idle_ms);
                cmd.arg("0-0").arg("COUNT").arg(count);
                (cmd, DeliveryKind::Claim { min_idle_ms })
            }
        };
        let parse = |v| match kind {
            DeliveryKind::New => read_entries(v),
            DeliveryKind::Claim { .. } => claimed_entries(v),
        };
        let consumer = consumer.to_string();
        let op = |outcome| GroupOp::Deliver {
            consumer,
            kind,
            outcome,
        };
        self.record(conn, process, &cmd, parse, op, ops).await
    }

    /// `XACK` of one id; whether it answered (1 or 0).
    async fn ack(
        &self,
        conn: &mut Node,
        process: usize,
        consumer: &str,
        id: LogSeq,
        ops: &mut Vec<GroupOperation>,
    ) -> bool {
        let mut cmd = redis::cmd("XACK");
        cmd.arg(&self.spec.key).arg(GROUP).arg(id.to_string());
        let parse = |v| matches!(v, Value::Int(1));
        let consumer = consumer.to_string();
        let op = |outcome| GroupOp::Ack {
            consumer,
            id,
            outcome,
        };
        let outcome = self.record(conn, process, &cmd, parse, op, ops).await;
        matches!(outcome, Outcome::Ok(_))
    }

    /// Reads `>`, claims now and then, acks what it holds; a crashing consumer sometimes
    /// drops its connection first and comes back under a new name.
    async fn consumer(&self, k: usize, mut rng: Rng) -> Vec<GroupOperation> {
        let process = PRODUCERS + k;
        let mut conn = Node::new("group", &self.addrs, k);
        let mut ops = Vec::new();
        let mut life = 0;
        let mut held: Vec<LogSeq> = Vec::new();
        let mut last_claim = Instant::now();
        let mut batches = 0;
        while self.running() {
            let name = format!("c{k}-{life}");
            let claim =
                self.spec.redelivery == Redelivery::Claims && last_claim.elapsed() >= CLAIM_EVERY;
            let (min_idle, count) = match claim {
                true => (Some(CLAIM_MIN_IDLE_MS), CLAIM_COUNT),
                false => (None, READ_COUNT),
            };
            if claim {
                last_claim = Instant::now();
            }
            let got = self.deliver(&mut conn, process, &name, min_idle, count, &mut ops);
            if let Outcome::Ok(entries) = got.await {
                batches += !entries.is_empty() as usize;
                held.extend(entries.iter().map(|e| e.id));
            }
            while let Some(&id) = held.first() {
                let crash = k < CRASHING
                    && (batches == CRASH_FIRST_BATCH && life == 0
                        || rng.next_u64().is_multiple_of(CRASH_ODDS));
                if crash {
                    // Gone without acking: what it holds stays pending under its name.
                    conn.drop_connection();
                    held.clear();
                    life += 1;
                    break;
                }
                if !self.ack(&mut conn, process, &name, id, &mut ops).await {
                    break; // not answered: tried again after the next delivery
                }
                held.remove(0);
            }
        }
        ops
    }

    /// Claims every pending entry (without claims: waits for them to fall due) and reads `>`
    /// until the group holds nothing, acking all; the operations and the pending ids listed
    /// at the end.
    async fn drain(&self) -> Result<(Vec<GroupOperation>, Vec<LogSeq>), String> {
        let process = PRODUCERS + CONSUMERS;
        let mut conn = Node::new("group", &self.addrs, 0);
        let mut ops = Vec::new();
        let drain_max = self.spec.drain_max;
        let deadline = Instant::now() + drain_max;
        loop {
            if Instant::now() >= deadline {
                return Err(format!("the group was not drained in {drain_max:?}"));
            }
            let mut quiet = true;
            let claims = match self.spec.redelivery {
                Redelivery::Claims => &[Some(0), None][..],
                Redelivery::AckWait => &[None],
            };
            for &min_idle in claims {
                let got = self.deliver(&mut conn, process, "drainer", min_idle, 100, &mut ops);
                let Outcome::Ok(entries) = got.await else {
                    quiet = false;
                    continue;
                };
                quiet &= entries.is_empty();
                for e in entries {
                    while !self
                        .ack(&mut conn, process, "drainer", e.id, &mut ops)
                        .await
                    {
                        if Instant::now() >= deadline {
                            return Err(format!("no ack of {} answered in {drain_max:?}", e.id));
                        }
                    }
                }
            }
            if !quiet {
                continue;
            }
            let mut list = redis::cmd("XPENDING");
            list.arg(&self.spec.key)
                .arg(GROUP)
                .arg("-")
                .arg("+")
                .arg(10_000);
            if let Called::Ok(Value::Array(rows)) = conn.call(&list).await {
                let pending: Vec<LogSeq> = rows.into_iter().map(pending_id).collect();
                if pending.is_empty() {
                    return Ok((ops, pending));
                }
            }
        }
    }
}

fn text(v: Value) -> String {
    redis::from_redis_value(v.clone()).unwrap_or_else(|e| panic!("{v:?} is not text: {e}"))
}

fn seq(v: Value) -> LogSeq {
    let s = text(v);
    LogSeq::from_str(&s).unwrap_or_else(|e| panic!("{s:?} is not a stream id: {e}"))
}

fn array(v: Value) -> Vec<Value> {
    match v {
        Value::Array(items) => items,
        other => panic!("not an array: {other:?}"),
    }
}

/// One entry `[id, [field, value, …]]` with its `p` field.
fn entry(v: Value) -> Delivered {
    let mut parts = array(v).into_iter();
    let id = seq(parts.next().expect("an id"));
    let fields: Vec<String> = array(parts.next().expect("fields"))
        .into_iter()
        .map(text)
        .collect();
    let payload = fields
        .chunks(2)
        .find(|f| f[0] == "p")
        .map(|f| f[1].clone())
        .unwrap_or_else(|| panic!("entry {id} without its payload: {fields:?}"));
    Delivered {
        id,
        payload,
        deliveries: None,
    }
}

/// XREADGROUP's answer for one stream: nil, or `[[key, [entry…]]]`.
fn read_entries(v: Value) -> Vec<Delivered> {
    if v == Value::Nil {
        return Vec::new();
    }
    let stream = array(v).into_iter().next().expect("one stream");
    let entries = array(stream).into_iter().nth(1).expect("its entries");
    array(entries).into_iter().map(entry).collect()
}

/// XAUTOCLAIM's answer: `[next, [entry…], [deleted id…]]`.
fn claimed_entries(v: Value) -> Vec<Delivered> {
    let entries = array(v).into_iter().nth(1).expect("claimed entries");
    array(entries).into_iter().map(entry).collect()
}

/// One row of XPENDING's extended answer: `[id, consumer, idle, deliveries]`.
fn pending_id(v: Value) -> LogSeq {
    seq(array(v).into_iter().next().expect("an id"))
}
