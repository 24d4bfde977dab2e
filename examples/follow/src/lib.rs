//! DAL's experiment (its Fig. 3) on Firn: a worker reads and writes its session keys through
//! one node, then moves to another node. With its keyspace `FOLLOW on`, the session shard's
//! leader follows it, and each access goes from remote (forwarded to the leader, or a read
//! index asked of it) to local. [`run`] records every access — when, through which node, how
//! long, and where the leader was — and [`Report`] summarises it; `plot.py` draws it.
//!
//! It drives a cluster someone else started (`scripts/cluster-up`, or the test's processes):
//! it creates the keyspace `sess/` and writes `sess/{worker}/k0` … only.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use firn_client::{Client, PutOptions};
use firn_model::slot::slot_of;
use firn_model::{Follow, KeyspaceDef, KeyspacePlacement, KeyspaceSpec, ReadAt, ReadConsistency};

/// How often the leader's location is asked for while the worker runs (`FIRN.CLUSTER` on a
/// node the worker does not use, so the polling is not counted as the worker's).
pub const LEADER_POLL: Duration = Duration::from_millis(100);
/// How long one access is retried while the cluster answers that it cannot take it now (a
/// leader changing hands): its latency includes the retries, as the worker waited for them.
const RETRY_FOR: Duration = Duration::from_secs(5);
/// Most session keys: the worker cycles over them.
pub const KEYS_MAX: usize = 10_000;

pub struct Config {
    /// Every node's RESP address (at least the two used).
    pub nodes: Vec<String>,
    /// Index in `nodes` of the node used first, and of the one used after the move.
    pub first: usize,
    pub second: usize,
    /// How long the worker uses each node.
    pub before: Duration,
    pub after: Duration,
    /// The worker's name: its keys are `sess/{name}/k<i>`, all in one shard (a hash tag).
    pub worker: String,
    pub keys: usize,
    /// Pause between two accesses.
    pub pause: Duration,
    /// The keyspace's FOLLOW setting.
    pub follow: Follow,
}

impl Config {
    pub fn new(nodes: Vec<String>, before: Duration, after: Duration) -> Self {
        Config {
            nodes,
            first: 0,
            second: 1,
            before,
            after,
            worker: "worker1".into(),
            keys: 16,
            pause: Duration::from_millis(5),
            follow: Follow::On,
        }
    }

    pub fn key(&self, i: usize) -> String {
        format!("sess/{{{}}}/k{i}", self.worker)
    }
}

/// One access.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    /// Since the worker started, in milliseconds.
    pub t_ms: f64,
    /// The node it went through.
    pub node: u64,
    pub write: bool,
    pub latency_us: f64,
    /// The session shard's leader as last seen (polled every [`LEADER_POLL`]).
    pub leader: Option<u64>,
    /// Whether it failed (after retrying for [`RETRY_FOR`]).
    pub failed: bool,
}

pub struct Report {
    pub samples: Vec<Sample>,
    /// The leader's location, polled: (ms since the start, leader).
    pub leaders: Vec<(f64, Option<u64>)>,
    /// When the worker moved to the second node (ms since the start).
    pub switch_ms: f64,
    pub first_node: u64,
    pub second_node: u64,
    pub shard: u64,
}

impl Report {
    /// When the leader was first seen on `node` at or after `from_ms`, in ms since the start.
    pub fn leader_on(&self, node: u64, from_ms: f64) -> Option<f64> {
        self.leaders
            .iter()
            .find(|(t, l)| *t >= from_ms && *l == Some(node))
            .map(|(t, _)| *t)
    }

    /// The leaders seen, in order, without repeats.
    pub fn leader_changes(&self) -> Vec<(f64, Option<u64>)> {
        let mut changes: Vec<(f64, Option<u64>)> = Vec::new();
        for &(t, l) in &self.leaders {
            if changes.last().is_none_or(|(_, last)| *last != l) {
                changes.push((t, l));
            }
        }
        changes
    }

    /// The median latency (µs) of the successful accesses in `from_ms..to_ms` (writes, reads,
    /// or both) that went through a node that `local` says led the shard or not, if any.
    pub fn median_us(
        &self,
        from_ms: f64,
        to_ms: f64,
        local: bool,
        write: Option<bool>,
    ) -> Option<f64> {
        let mut l: Vec<f64> = self
            .samples
            .iter()
            .filter(|s| s.t_ms >= from_ms && s.t_ms < to_ms && !s.failed)
            .filter(|s| (s.leader == Some(s.node)) == local && write.is_none_or(|w| s.write == w))
            .map(|s| s.latency_us)
            .collect();
        if l.is_empty() {
            return None;
        }
        l.sort_by(f64::total_cmp);
        Some(l[l.len() / 2])
    }

    /// What the run showed, in a few lines: where the leader went and when, and the median
    /// latencies through the second node while it was remote and once it was local.
    pub fn describe(&self) -> String {
        let end = self.samples.last().map_or(0.0, |s| s.t_ms + 1.0);
        let moved = self.samples.iter().any(|s| s.node == self.second_node);
        let mut out = format!(
            "{} accesses ({} failed) to shard {}; node {} until {:.1} s{}\n",
            self.samples.len(),
            self.failures(),
            self.shard,
            self.first_node,
            self.switch_ms / 1_000.0,
            if moved {
                format!(", then node {}", self.second_node)
            } else {
                String::new()
            }
        );
        let changes: Vec<String> = self
            .leader_changes()
            .iter()
            .map(|(t, l)| {
                format!(
                    "{:.1} s: {}",
                    t / 1_000.0,
                    l.map_or("none".into(), |l| format!("node {l}"))
                )
            })
            .collect();
        out.push_str(&format!("leader: {}\n", changes.join(", ")));
        let after = |node: u64, from: f64| {
            self.leader_on(node, from)
                .map_or("never".into(), |t| format!("{:.1} s", (t - from) / 1_000.0))
        };
        out.push_str(&format!(
            "leader on node {} {} after the start; on node {} {} after the move\n",
            self.first_node,
            after(self.first_node, 0.0),
            self.second_node,
            after(self.second_node, self.switch_ms)
        ));
        for (what, write) in [("set", Some(true)), ("get", Some(false)), ("all", None)] {
            let show = |local| {
                self.median_us(self.switch_ms, end, local, write)
                    .map_or("-".into(), |us| format!("{us:.0} us"))
            };
            out.push_str(&format!(
                "after the move, {what}: median {} remote, {} local\n",
                show(false),
                show(true)
            ));
        }
        out
    }

    pub fn failures(&self) -> usize {
        self.samples.iter().filter(|s| s.failed).count()
    }

    /// One line per access: `t_s,node,op,latency_us,leader,failed`.
    pub fn csv(&self) -> String {
        let mut out = String::from("t_s,node,op,latency_us,leader,failed\n");
        for s in &self.samples {
            out.push_str(&format!(
                "{:.4},{},{},{:.0},{},{}\n",
                s.t_ms / 1_000.0,
                s.node,
                if s.write { "set" } else { "get" },
                s.latency_us,
                s.leader.map_or(String::new(), |l| l.to_string()),
                u8::from(s.failed)
            ));
        }
        out
    }
}

/// The cluster as `FIRN.CLUSTER` shows it.
async fn cluster(client: &Client) -> Result<serde_json::Value, String> {
    let raw = client
        .raw(&redis::cmd("FIRN.CLUSTER"))
        .await
        .map_err(|e| e.to_string())?;
    let text: String = redis::from_redis_value(raw).map_err(|e| e.to_string())?;
    serde_json::from_str(&text).map_err(|e| e.to_string())
}

/// The id of the node whose RESP address is `addr`.
fn node_id(view: &serde_json::Value, addr: &str) -> Result<u64, String> {
    view["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|n| n["resp_addr"].as_str() == Some(addr))
        .and_then(|n| n["node_id"].as_u64())
        .ok_or_else(|| format!("no node of the cluster listens at {addr}"))
}

/// The shard holding `slot`, and its leader.
fn shard_of(view: &serde_json::Value, slot: u16) -> Option<(u64, Option<u64>)> {
    view["shards"].as_array()?.iter().find_map(|s| {
        let (a, b) = (s["slots"][0].as_u64()?, s["slots"][1].as_u64()?);
        (a..=b)
            .contains(&u64::from(slot))
            .then(|| (s["shard_id"].as_u64().unwrap_or(0), s["leader"].as_u64()))
    })
}

/// The leader's location as the poller saw it, shared with the worker.
type Polled = Arc<Mutex<Vec<(f64, Option<u64>)>>>;

/// The RESP addresses of `scripts/cluster-up`'s three nodes.
pub const CLUSTER_UP_NODES: &str = "127.0.0.1:7379,127.0.0.1:7389,127.0.0.1:7399";

/// Runs the experiment: creates the keyspace, works through the first node for `before`,
/// then through the second for `after`, polling the leader all along.
pub async fn run(config: &Config) -> Result<Report, String> {
    if config.keys == 0 || config.keys > KEYS_MAX {
        return Err(format!("keys must be 1..={KEYS_MAX}"));
    }
    let (first_addr, second_addr) = match (
        config.nodes.get(config.first),
        config.nodes.get(config.second),
    ) {
        (Some(a), Some(b)) if config.first != config.second => (a, b),
        _ => return Err("the first and second nodes must be two of --nodes".into()),
    };
    let connect = |addr: &String| {
        let addr = addr.clone();
        async move {
            Client::connect(&addr)
                .await
                .map_err(|e| format!("{addr}: {e}"))
        }
    };
    let first = connect(first_addr).await?;
    let second = connect(second_addr).await?;
    // Poll through a node the worker does not use, where there is one.
    let poll_addr = (0..config.nodes.len())
        .find(|i| *i != config.first && *i != config.second)
        .map_or(first_addr, |i| &config.nodes[i]);
    let poller = connect(poll_addr).await?;
    let view = cluster(&poller).await?;
    let (first_node, second_node) = (node_id(&view, first_addr)?, node_id(&view, second_addr)?);
    let slot = slot_of(config.key(0).as_bytes());
    let (shard, _) = shard_of(&view, slot).ok_or("the cluster has no shard for the keys")?;
    let sessions = KeyspaceDef {
        spec: KeyspaceSpec {
            prefix: "sess/".into(),
            ..KeyspaceSpec::default_keyspace()
        },
        placement: KeyspacePlacement {
            local: false,
            follow: config.follow,
        },
    };
    // A fresh cluster's meta group may still be electing (CLUSTERDOWN): retried.
    firn_client::retry_transient(|| first.keyspace_create(&sessions))
        .await
        .map_err(|e| format!("creating the keyspace sess/: {e}"))?;

    let start = Instant::now();
    let ms = move || start.elapsed().as_secs_f64() * 1_000.0;
    let leaders: Polled = Arc::default();
    let end = config.before + config.after;
    let polling = {
        let leaders = leaders.clone();
        tokio::spawn(async move {
            while start.elapsed() < end {
                if let Ok(view) = cluster(&poller).await {
                    let leader = shard_of(&view, slot).and_then(|(_, l)| l);
                    leaders.lock().unwrap().push((ms(), leader));
                }
                tokio::time::sleep(LEADER_POLL).await;
            }
        })
    };
    let mut samples = Vec::new();
    let mut i = 0usize;
    let mut switch_ms = None;
    while start.elapsed() < end {
        let (client, node) = if start.elapsed() < config.before {
            (&first, first_node)
        } else {
            (&second, second_node)
        };
        if node == second_node && switch_ms.is_none() {
            switch_ms = Some(ms());
        }
        let key = config.key(i % config.keys);
        let write = i.is_multiple_of(2);
        let leader = leaders.lock().unwrap().last().and_then(|(_, l)| *l);
        let t_ms = ms();
        let began = Instant::now();
        let failed = access(client, key.as_bytes(), write, i).await.is_err();
        samples.push(Sample {
            t_ms,
            node,
            write,
            latency_us: began.elapsed().as_secs_f64() * 1e6,
            leader,
            failed,
        });
        i += 1;
        tokio::time::sleep(config.pause).await;
    }
    let _ = polling.await;
    let leaders = std::mem::take(&mut *leaders.lock().unwrap());
    Ok(Report {
        samples,
        leaders,
        switch_ms: switch_ms.unwrap_or(ms()),
        first_node,
        second_node,
        shard,
    })
}

/// One read or write of `key`, retried while the cluster says to retry.
async fn access(client: &Client, key: &[u8], write: bool, i: usize) -> Result<(), String> {
    let since = Instant::now();
    loop {
        let result = if write {
            let value = i.to_string();
            client
                .put(key, value.as_bytes(), PutOptions::default())
                .await
                .map(|_| ())
        } else {
            client
                .get(key, ReadAt::Latest, ReadConsistency::Linearizable)
                .await
                .map(|_| ())
        };
        match result {
            Err(e) if e.is_transient() && since.elapsed() < RETRY_FOR => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            other => return other.map_err(|e| e.to_string()),
        }
    }
}
