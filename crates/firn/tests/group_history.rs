//! A consumer group under crashes and a leader kill, checked as a history. Producers `XADD`
//! to one stream (with a payload unique to each add) and consumers connected to different
//! nodes of a 3-node cluster read it with `XREADGROUP … >` and `XACK` each entry, over RESP
//! with standard Redis commands only. Some consumers crash: they drop their connection
//! holding entries they did not ack, and come back under a new name. Every consumer claims
//! what has been idle a while with `XAUTOCLAIM`. Midway, the stream's shard leader is killed
//! with SIGKILL and restarted. Once the producers and consumers stop, a drainer claims every
//! pending entry and reads `>` until the group holds nothing, acking all. The recorded
//! history must keep the group's guarantees as `firn_check::groups` checks them: nothing
//! acknowledged lost, acked means done, one holder at a time, redeliveries counted.
//!
//! The same run is made twice: with a group of policy `first` (Redis's semantics) and the
//! claims above, and with a group `POLICY roundrobin ACKWAIT` and no `XAUTOCLAIM` at all:
//! crashed consumers' entries come back only as the server gives them again by `>` once
//! ACKWAIT has passed, and the drainer only reads `>` (with BLOCK) until nothing is pending.
//! The checker then takes a `>` of an id delivered before as a redelivery, due no sooner
//! than ACKWAIT after the id's last delivery.
//!
//! A call that was refused (TRYAGAIN, CLUSTERDOWN, no connection) is recorded as such; one
//! whose answer never came (a dropped connection, a timeout, UNCERTAIN) as unknown, not as a
//! failure. A failure prints the seed; FIRN_TEST_SEED replays the same crashes.

mod common;

use std::str::FromStr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{Cluster, Rng, key_in_shard, kill_leaders, seed};
use firn_check::groups::{
    Delivered, DeliveryKind, GroupOp, GroupOperation, History, Options, Outcome, Summary,
    check_with,
};
use firn_model::LogSeq;
use redis::Value;
use redis::aio::MultiplexedConnection;

const GROUP: &str = "g";
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
/// How long one call may take before its outcome counts as unknown.
const OP_TIMEOUT: Duration = Duration::from_secs(3);
/// Pause after a refusal (a node down, a leader being elected) before the next call.
const REFUSED_BACKOFF: Duration = Duration::from_millis(50);
/// Running before the leader kill, how long the leader stays down, and running after the
/// restart, so that the history covers the recovery and crashed consumers' entries are
/// claimed by the survivors.
const BEFORE_KILL: Duration = Duration::from_millis(1_500);
const DOWN: Duration = Duration::from_millis(700);
const AFTER_RESTART: Duration = Duration::from_secs(3);
/// After the restart, the run goes on until this many adds were acknowledged (a slow
/// machine adds slowly), for at most `RUN_MAX` from its start.
const ACKNOWLEDGED_TARGET: usize = 200;
const RUN_MAX: Duration = Duration::from_secs(15);
/// Longest the drain may take. With the cluster's start, a test stays under 60 s (about
/// 25 s on an idle 2-core machine, 40 s on a loaded one).
const DRAIN_MAX: Duration = Duration::from_secs(20);
/// Fewest acknowledged adds for the history to mean something.
const ACKNOWLEDGED_MIN: usize = 100;
/// The roundrobin group's ACKWAIT, and its LIVENESS: short, so that entries dealt to a
/// crashed consumer's old name come back within the run, and no shorter than ACKWAIT, so that
/// an entry of a consumer no longer live is not given again sooner than ACKWAIT.
const ACK_WAIT_MS: u64 = 1_000;
const LIVENESS_MS: u64 = 2_000;

/// How the group gives a crashed consumer's entries to another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Redelivery {
    /// Policy `first`; consumers and the drainer claim idle entries with `XAUTOCLAIM`.
    Claims,
    /// `POLICY roundrobin ACKWAIT`; nobody claims: the server gives due entries by `>`.
    AckWait,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_history_under_crashes_and_a_leader_kill_loses_nothing_and_holds_once() {
    let summary = run_history(Redelivery::Claims).await;
    assert!(
        summary.redeliveries >= 1 && summary.deliveries_claim >= 1,
        "a crashed consumer's entries were never claimed again: {summary}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roundrobin_ackwait_group_history_under_crashes_and_a_leader_kill_redelivers_by_itself() {
    let summary = run_history(Redelivery::AckWait).await;
    assert_eq!(summary.deliveries_claim, 0, "nobody claims: {summary}");
    assert!(
        summary.redeliveries >= 1,
        "no entry was given again after ACKWAIT: {summary}"
    );
}

/// Starts a cluster, runs producers and consumers through the faults, drains the group and
/// checks the history; what it held.
async fn run_history(redelivery: Redelivery) -> Summary {
    let seed = seed(&format!("group history ({redelivery:?})"));
    let cluster = Cluster::ready(3, &[]).await;
    let run = Arc::new(Run {
        t0: Instant::now(),
        addrs: (0..3).map(|i| cluster.resp_addr(i)).collect(),
        key: key_in_shard(0, "jobs"),
        stop: AtomicBool::new(false),
        acknowledged: AtomicUsize::new(0),
        redelivery,
    });
    let cluster = Arc::new(Mutex::new(cluster));
    run.create_group().await;

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
    kill_leaders(cluster.clone(), vec![0], BEFORE_KILL, DOWN).await;
    tokio::time::sleep(AFTER_RESTART).await;
    while run.acknowledged.load(Ordering::Relaxed) < ACKNOWLEDGED_TARGET
        && run.t0.elapsed() < RUN_MAX
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    run.stop.store(true, Ordering::Relaxed);
    let mut history = History::default();
    for p in producers.into_iter().chain(consumers) {
        history.extend(p.await.unwrap());
    }
    let (drained, final_pending) = run.drain().await;
    history.extend(drained);
    history.final_pending = final_pending;
    drop(cluster);

    let options = Options {
        ack_wait_ms: (redelivery == Redelivery::AckWait).then_some(ACK_WAIT_MS),
    };
    let summary = check_with(&history, options)
        .unwrap_or_else(|v| panic!("seed {seed}: {}", history.explain(&v)));
    eprintln!(
        "group history ({redelivery:?}): {} operations in {:?}: {summary}",
        history.operations.len(),
        run.t0.elapsed()
    );
    assert!(
        summary.adds_acknowledged >= ACKNOWLEDGED_MIN,
        "too few adds acknowledged to mean anything: {summary}"
    );
    summary
}

/// What every process of a run shares.
struct Run {
    t0: Instant,
    addrs: Vec<String>,
    key: String,
    /// Set once the faults are over: producers and consumers stop.
    stop: AtomicBool,
    /// Adds acknowledged so far.
    acknowledged: AtomicUsize,
    redelivery: Redelivery,
}

impl Run {
    fn now_ns(&self) -> u64 {
        self.t0.elapsed().as_nanos() as u64
    }

    fn running(&self) -> bool {
        !self.stop.load(Ordering::Relaxed)
    }

    async fn create_group(&self) {
        let mut conn = Conn::new(&self.addrs, 0);
        let mut create = redis::cmd("XGROUP");
        create.arg("CREATE").arg(&self.key).arg(GROUP).arg("$");
        create.arg("MKSTREAM");
        if self.redelivery == Redelivery::AckWait {
            create.arg("POLICY").arg("roundrobin");
            create.arg("ACKWAIT").arg(ACK_WAIT_MS);
            create.arg("LIVENESS").arg(LIVENESS_MS);
        }
        let mut info = redis::cmd("XINFO");
        info.arg("GROUPS").arg(&self.key);
        let deadline = Instant::now() + CREATE_MAX;
        while !matches!(conn.call(&create).await, Outcome::Ok(_)) {
            // A create whose answer never came may have made the group (then a retry answers
            // BUSYGROUP): it is there if XINFO lists it.
            if let Outcome::Ok(Value::Array(groups)) = conn.call(&info).await
                && !groups.is_empty()
            {
                return;
            }
            assert!(Instant::now() < deadline, "no group made in {CREATE_MAX:?}");
        }
    }

    /// Runs `cmd` and records it as `op(answer)`, with the time it took.
    async fn record<T>(
        &self,
        conn: &mut Conn,
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
            Outcome::Ok(v) => Outcome::Ok(parse(v)),
            Outcome::Refused => Outcome::Refused,
            Outcome::Unknown => Outcome::Unknown,
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
        let mut conn = Conn::new(&self.addrs, p);
        let mut ops = Vec::new();
        for i in (0..).take_while(|_| self.running()) {
            tokio::time::sleep(ADD_THINK).await;
            let payload = format!("p{p}-{i}");
            let mut cmd = redis::cmd("XADD");
            cmd.arg(&self.key).arg("*").arg("p").arg(&payload);
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
        conn: &mut Conn,
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
                if process < PRODUCERS + CONSUMERS || self.redelivery == Redelivery::AckWait {
                    // The drainer does not wait where it claims: it stops at the first empty
                    // answer. Without claims it waits for due entries.
                    cmd.arg("BLOCK").arg(READ_BLOCK_MS);
                }
                cmd.arg("STREAMS").arg(&self.key).arg(">");
                (cmd, DeliveryKind::New)
            }
            Some(min_idle_ms) => {
                let mut cmd = redis::cmd("XAUTOCLAIM");
                cmd.arg(&self.key).arg(GROUP).arg(consumer).arg(min_idle_ms);
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
        conn: &mut Conn,
        process: usize,
        consumer: &str,
        id: LogSeq,
        ops: &mut Vec<GroupOperation>,
    ) -> bool {
        let mut cmd = redis::cmd("XACK");
        cmd.arg(&self.key).arg(GROUP).arg(id.to_string());
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
        let mut conn = Conn::new(&self.addrs, k);
        let mut ops = Vec::new();
        let mut life = 0;
        let mut held: Vec<LogSeq> = Vec::new();
        let mut last_claim = Instant::now();
        let mut batches = 0;
        while self.running() {
            let name = format!("c{k}-{life}");
            let claim =
                self.redelivery == Redelivery::Claims && last_claim.elapsed() >= CLAIM_EVERY;
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
                        || rng.next().is_multiple_of(CRASH_ODDS));
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
    async fn drain(&self) -> (Vec<GroupOperation>, Vec<LogSeq>) {
        let process = PRODUCERS + CONSUMERS;
        let mut conn = Conn::new(&self.addrs, 0);
        let mut ops = Vec::new();
        let deadline = Instant::now() + DRAIN_MAX;
        loop {
            assert!(
                Instant::now() < deadline,
                "the group was not drained in {DRAIN_MAX:?}"
            );
            let mut quiet = true;
            let claims = match self.redelivery {
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
                        assert!(Instant::now() < deadline, "no ack of {} answered", e.id);
                    }
                }
            }
            if !quiet {
                continue;
            }
            let mut list = redis::cmd("XPENDING");
            list.arg(&self.key).arg(GROUP).arg("-").arg("+").arg(10_000);
            if let Outcome::Ok(Value::Array(rows)) = conn.call(&list).await {
                let pending: Vec<LogSeq> = rows.into_iter().map(pending_id).collect();
                if pending.is_empty() {
                    return (ops, pending);
                }
            }
        }
    }
}

/// One process's connection: to its home node, moving on to the next node after a failure.
struct Conn {
    addrs: Vec<String>,
    target: usize,
    con: Option<MultiplexedConnection>,
    /// Server errors other than the expected ones are printed, the first few.
    errors_told: usize,
}

impl Conn {
    fn new(addrs: &[String], home: usize) -> Conn {
        Conn {
            addrs: addrs.to_vec(),
            target: home,
            con: None,
            errors_told: 0,
        }
    }

    /// A crash: the connection is gone, with whatever the server did for it.
    fn drop_connection(&mut self) {
        self.con = None;
    }

    async fn call(&mut self, cmd: &redis::Cmd) -> Outcome<Value> {
        let outcome = self.send(cmd).await;
        if !matches!(outcome, Outcome::Ok(_)) {
            self.con = None;
            self.target += 1;
        }
        if matches!(outcome, Outcome::Refused) {
            tokio::time::sleep(REFUSED_BACKOFF).await;
        }
        outcome
    }

    async fn send(&mut self, cmd: &redis::Cmd) -> Outcome<Value> {
        if self.con.is_none() {
            let addr = &self.addrs[self.target % self.addrs.len()];
            let client = redis::Client::open(format!("redis://{addr}/")).expect("an address");
            let connect = client.get_multiplexed_async_connection();
            match tokio::time::timeout(OP_TIMEOUT, connect).await {
                Ok(Ok(con)) => self.con = Some(con),
                _ => return Outcome::Refused,
            }
        }
        let con = self.con.as_mut().expect("connected above");
        match tokio::time::timeout(OP_TIMEOUT, cmd.query_async::<Value>(con)).await {
            Ok(Ok(reply)) => Outcome::Ok(reply),
            Ok(Err(e)) if matches!(e.code(), Some("TRYAGAIN" | "CLUSTERDOWN")) => Outcome::Refused,
            Ok(Err(e)) => {
                // Dropped connections are expected here; a server error other than
                // UNCERTAIN is not, and may be the harness's fault.
                if e.code().is_some_and(|c| c != "UNCERTAIN") && self.errors_told < 3 {
                    self.errors_told += 1;
                    eprintln!("group history: {e}");
                }
                Outcome::Unknown
            }
            Err(_) => Outcome::Unknown,
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
