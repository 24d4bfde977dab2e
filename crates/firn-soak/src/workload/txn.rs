//! Transactions over registers: clients run random transactions (`MULTI`, 2–4 reads and
//! writes of registers on every shard, `EXEC`), each write of a value no other write makes;
//! at the end each register's versions are read in the order the store keeps them. The
//! history must be strictly serializable, as [`firn_check::txn`] checks it (Elle's
//! dependency cycles and real-time order).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use firn_check::txn::{Mop, Status, Txn, VersionOrder};
use firn_client::Client;
use redis::Value;
use redis::aio::MultiplexedConnection;

use super::bank::connect_any;
use crate::Rng;

/// Longest the registers' versions take to be read at the end.
const VERSIONS_MAX: Duration = Duration::from_secs(30);

#[derive(Clone, Debug)]
pub struct Txns {
    pub keys: Vec<String>,
    pub clients: usize,
    /// Once asked to stop, clients go on until this many transactions committed (a loaded
    /// machine is slower), within `run_max` from the start.
    pub enough_committed: usize,
    pub run_max: Duration,
}

/// What the clients saw, and each register's versions, oldest first.
#[derive(Debug, Default)]
pub struct TxnHistory {
    pub txns: Vec<Txn>,
    pub versions: VersionOrder,
}

impl TxnHistory {
    pub fn count(&self, status: Status) -> usize {
        self.txns.iter().filter(|t| t.status == status).count()
    }
}

impl Txns {
    /// Two registers on each of `shards` shards, 4 clients.
    pub fn new(shards: u32) -> Txns {
        Txns {
            keys: (0..shards)
                .flat_map(|s| crate::keys_in_shard(shards, s, "reg/", 2))
                .collect(),
            clients: 4,
            enough_committed: 40,
            run_max: Duration::from_secs(60),
        }
    }

    /// Runs the clients against `addrs` until `stop` is set (and enough committed), then
    /// reads every register's versions; times are microseconds since `t0`.
    pub async fn record(
        &self,
        seed: u64,
        addrs: &[String],
        stop: Arc<AtomicBool>,
        t0: Instant,
    ) -> Result<TxnHistory, String> {
        let committed = Arc::new(AtomicUsize::new(0));
        let clients: Vec<_> = (0..self.clients)
            .map(|p| {
                let (me, addrs) = (self.clone(), addrs.to_vec());
                let (stop, committed) = (stop.clone(), committed.clone());
                tokio::spawn(async move {
                    me.client(Rng::for_process(seed, p), p, &addrs, &stop, &committed, t0)
                        .await
                })
            })
            .collect();
        let mut history = TxnHistory::default();
        for c in clients {
            history
                .txns
                .extend(c.await.map_err(|e| format!("a client failed: {e}"))?);
        }
        history.versions = tokio::time::timeout(VERSIONS_MAX, self.versions(&addrs[0]))
            .await
            .unwrap_or_else(|_| Err(format!("the versions were not read in {VERSIONS_MAX:?}")))?;
        Ok(history)
    }

    async fn client(
        &self,
        mut rng: Rng,
        p: usize,
        addrs: &[String],
        stop: &AtomicBool,
        committed: &AtomicUsize,
        t0: Instant,
    ) -> Vec<Txn> {
        let go_on = || {
            let enough = committed.load(Ordering::Relaxed) >= self.enough_committed;
            t0.elapsed() < self.run_max && !(stop.load(Ordering::Relaxed) && enough)
        };
        let mut next = p;
        let mut conn: Option<MultiplexedConnection> = None;
        let mut history = Vec::new();
        let mut seq = 0u64;
        while go_on() {
            if conn.is_none() {
                conn = connect_any(addrs, &mut next, Instant::now() + Duration::from_secs(1)).await;
            }
            let Some(c) = conn.as_mut() else {
                continue;
            };
            let mops = (0..2 + rng.below(3))
                .map(|_| {
                    let key = self.keys[rng.below(self.keys.len() as u64) as usize].clone();
                    if rng.below(2) == 0 {
                        Mop::Read { key, value: None }
                    } else {
                        seq += 1;
                        Mop::Write {
                            key,
                            value: p as u64 * 1_000_000 + seq,
                        }
                    }
                })
                .collect();
            let mut txn = run_txn(c, mops, t0).await;
            txn.client = p;
            match txn.status {
                Status::Committed => {
                    committed.fetch_add(1, Ordering::Relaxed);
                }
                Status::Unknown => conn = None,
                Status::Aborted => tokio::time::sleep(Duration::from_millis(5)).await,
            }
            history.push(txn);
        }
        history
    }

    /// Each register's versions, oldest first, as the store keeps them.
    async fn versions(&self, addr: &str) -> Result<VersionOrder, String> {
        let client = Client::connect(addr).await.map_err(|e| e.to_string())?;
        let mut versions = VersionOrder::new();
        for k in &self.keys {
            let all = firn_client::retry_transient(|| {
                client.history(k.as_bytes(), 1, None, 10_000, None)
            })
            .await
            .map_err(|e| format!("the history of {k}: {e}"))?;
            versions.insert(
                k.clone(),
                all.into_iter()
                    .filter_map(|v| v.value)
                    .map(|b| String::from_utf8_lossy(&b).parse().unwrap_or(u64::MAX))
                    .collect(),
            );
        }
        Ok(versions)
    }
}

/// One transaction of reads and writes of the registers, run through `c`; what the client
/// saw of it.
async fn run_txn(c: &mut MultiplexedConnection, mops: Vec<Mop>, t0: Instant) -> Txn {
    let invoked_at = t0.elapsed().as_micros() as u64;
    let mut pipe = redis::pipe();
    pipe.atomic();
    for m in &mops {
        match m {
            Mop::Read { key, .. } => pipe.get(key),
            Mop::Write { key, value } => pipe.set(key, value),
        };
    }
    let answer: redis::RedisResult<Vec<Value>> = pipe.query_async(c).await;
    let completed_at = t0.elapsed().as_micros() as u64;
    let unknown = |mops: Vec<Mop>| {
        (
            Status::Unknown,
            mops.into_iter()
                .filter(|m| matches!(m, Mop::Write { .. }))
                .collect(),
        )
    };
    let (status, mops) = match answer {
        Ok(values) if values.len() == mops.len() => {
            let mut seen = Vec::with_capacity(mops.len());
            for (m, v) in mops.into_iter().zip(values) {
                seen.push(match (m, v) {
                    (Mop::Read { key, .. }, Value::Nil) => Mop::Read { key, value: None },
                    (Mop::Read { key, .. }, Value::BulkString(b)) => Mop::Read {
                        key,
                        // A value no write made is kept as one, for the checker to refuse.
                        value: Some(String::from_utf8_lossy(&b).parse().unwrap_or(u64::MAX)),
                    },
                    (m @ Mop::Write { .. }, Value::Okay) => m,
                    // An answer of the wrong shape: the checker sees a read of a value no
                    // write made.
                    (m, _) => Mop::Read {
                        key: match m {
                            Mop::Read { key, .. } | Mop::Write { key, .. } => key,
                        },
                        value: Some(u64::MAX),
                    },
                });
            }
            (Status::Committed, seen)
        }
        Ok(_) => unknown(mops),
        // Refused, nothing applied.
        Err(e)
            if matches!(
                e.code(),
                Some("TRYAGAIN" | "EXECABORT" | "NOSPACE" | "CLOCKSKEW")
            ) =>
        {
            (Status::Aborted, mops)
        }
        // A connection lost, UNCERTAIN: applied or not, reads unknown.
        Err(_) => unknown(mops),
    };
    Txn {
        client: 0,
        invoked_at,
        completed_at,
        status,
        mops,
    }
}
