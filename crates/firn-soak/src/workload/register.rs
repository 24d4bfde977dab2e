//! Registers: clients run put / get / conditional put on a few keys, each client at one node
//! and moving to the next after a failure; the history must be linearizable per key
//! ([`firn_check::register`]).
//!
//! The same workload serves every keyspace a run checks: durable keys, keys of a
//! memory-durability keyspace, and large values (stored beside the Raft log as blobs). A
//! large value's bytes are its name padded to the size, so a read of torn or foreign bytes is
//! seen as a value no write made.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use firn_check::register::{Register, RegisterOp, RegisterOut};
use firn_check::{Operation, Verdict, check};
use firn_client::{Client, ClientError, PutOptions};
use firn_model::{CommitTs, ReadAt, ReadConsistency};

use crate::Rng;

/// How long one operation may take before its outcome counts as unknown.
const OP_TIMEOUT: Duration = Duration::from_secs(5);

/// One operation on key number `.0`.
pub type History = Vec<(u64, Operation<RegisterOp, RegisterOut>)>;

/// How reads are served: the real linearizable path, or a deliberately stale one (as of a
/// time in the past) that the checker must catch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadPath {
    Linearizable,
    StaleBy(Duration),
}

#[derive(Clone, Debug)]
pub struct Registers {
    /// Keys are `{prefix}{n}`, n below `keys`.
    pub prefix: String,
    pub keys: u64,
    pub clients: usize,
    /// Pause between one client's operations.
    pub think: Duration,
    /// Most operations one client runs (the run usually ends first).
    pub ops_per_client: usize,
    /// Bytes of each value (0: just its name).
    pub value_bytes: usize,
    pub reads: ReadPath,
}

impl Registers {
    pub fn key(&self, n: u64) -> String {
        format!("{}{n}", self.prefix)
    }

    /// Runs the clients against `addrs` (client `c` starts at `addrs[c % n]`) until `stop`
    /// is set or each ran its operations, and returns what they saw. Times are nanoseconds
    /// since `t0`.
    pub async fn record(
        &self,
        seed: u64,
        addrs: &[String],
        stop: Arc<AtomicBool>,
        t0: Instant,
    ) -> History {
        let history: Arc<Mutex<History>> = Arc::default();
        let mut tasks = Vec::new();
        for c in 0..self.clients {
            let (me, addrs, history, stop) =
                (self.clone(), addrs.to_vec(), history.clone(), stop.clone());
            tasks.push(tokio::spawn(async move {
                me.client(c, Rng::for_process(seed, c), &addrs, &stop, t0, &history)
                    .await
            }));
        }
        for t in tasks {
            t.await.expect("a register client panicked");
        }
        std::mem::take(&mut *history.lock().unwrap())
    }

    async fn client(
        &self,
        c: usize,
        mut rng: Rng,
        addrs: &[String],
        stop: &AtomicBool,
        t0: Instant,
        history: &Mutex<History>,
    ) {
        let mut client: Option<Client> = None;
        let mut target = c;
        let mut last_version_seen = 0;
        for i in 0..self.ops_per_client {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            tokio::time::sleep(self.think).await;
            let key = rng.below(self.keys);
            let op = match rng.below(3) {
                0 => RegisterOp::Put(format!("c{c}-{i}")),
                1 => RegisterOp::Get,
                _ => RegisterOp::CPut {
                    if_version: last_version_seen,
                    value: format!("c{c}-{i}"),
                },
            };
            if client.is_none() {
                let addr = &addrs[target % addrs.len()];
                client = tokio::time::timeout(OP_TIMEOUT, Client::connect(addr))
                    .await
                    .ok()
                    .and_then(Result::ok);
                if client.is_none() {
                    target += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            }
            let cl = client.as_ref().expect("connected above");
            let invoked_at = t0.elapsed().as_nanos() as u64;
            let result =
                tokio::time::timeout(OP_TIMEOUT, self.run_op(cl, &self.key(key), &op)).await;
            let completed_at = t0.elapsed().as_nanos() as u64;
            let record = match result {
                Ok(Ok(out)) => {
                    let (RegisterOut::Written(v)
                    | RegisterOut::Read { version: v, .. }
                    | RegisterOut::Conflict(v)) = &out;
                    last_version_seen = *v;
                    Some(Operation {
                        client: c,
                        invoked_at,
                        completed_at: Some(completed_at),
                        op,
                        out: Some(out),
                    })
                }
                // Refused before it was applied (TRYAGAIN, CLUSTERDOWN, NOSPACE, CLOCKSKEW):
                // nothing happened.
                Ok(Err(ClientError::Server { code, .. }))
                    if matches!(
                        code.as_str(),
                        "TRYAGAIN" | "CLUSTERDOWN" | "NOSPACE" | "CLOCKSKEW"
                    ) =>
                {
                    target += 1;
                    client = None;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    None
                }
                // A failed read changed nothing; any other failed write (UNCERTAIN, a dropped
                // connection, a timeout) may or may not have happened.
                _ => {
                    client = None;
                    target += 1;
                    (op != RegisterOp::Get).then_some(Operation {
                        client: c,
                        invoked_at,
                        completed_at: None,
                        op,
                        out: None,
                    })
                }
            };
            if let Some(r) = record {
                history.lock().unwrap().push((key, r));
            }
        }
    }

    /// A value's bytes: its name, padded to [`value_bytes`](Self::value_bytes).
    fn bytes_of(&self, name: &str) -> Vec<u8> {
        let mut bytes = name.as_bytes().to_vec();
        if bytes.len() < self.value_bytes {
            bytes.push(b'|');
            let fill = name.bytes().cycle();
            let more = self.value_bytes - bytes.len();
            bytes.extend(fill.take(more));
        }
        bytes
    }

    /// The name a value's bytes carry, or a name no write made when they are not exactly
    /// what [`bytes_of`](Self::bytes_of) makes of it.
    fn name_of(&self, bytes: &[u8]) -> String {
        let name = match bytes.iter().position(|b| *b == b'|') {
            Some(end) => String::from_utf8_lossy(&bytes[..end]).into_owned(),
            None => String::from_utf8_lossy(bytes).into_owned(),
        };
        if self.bytes_of(&name) == bytes {
            name
        } else {
            format!("<{} bytes that no write made>", bytes.len())
        }
    }

    async fn run_op(
        &self,
        client: &Client,
        key: &str,
        op: &RegisterOp,
    ) -> Result<RegisterOut, ClientError> {
        match op {
            RegisterOp::Put(v) => Ok(RegisterOut::Written(
                client
                    .put(key.as_bytes(), &self.bytes_of(v), PutOptions::default())
                    .await?
                    .version,
            )),
            RegisterOp::Get => {
                let at = match self.reads {
                    ReadPath::Linearizable => ReadAt::Latest,
                    ReadPath::StaleBy(lag) => {
                        let now_us = std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .expect("a clock after 1970")
                            .as_micros() as u64;
                        ReadAt::AsOf(CommitTs::end_of_micros(
                            now_us.saturating_sub(lag.as_micros() as u64),
                        ))
                    }
                };
                let got = client
                    .get(key.as_bytes(), at, ReadConsistency::Linearizable)
                    .await?;
                Ok(match got {
                    Some(info) => RegisterOut::Read {
                        version: info.version,
                        value: info.value.map(|v| self.name_of(&v)),
                    },
                    None => RegisterOut::Read {
                        version: 0,
                        value: None,
                    },
                })
            }
            RegisterOp::CPut { if_version, value } => {
                let opts = PutOptions {
                    if_version: Some(*if_version),
                    event_time_us: None,
                };
                match client
                    .put(key.as_bytes(), &self.bytes_of(value), opts)
                    .await
                {
                    Ok(ack) => Ok(RegisterOut::Written(ack.version)),
                    Err(ClientError::Server { code, message }) if code == "CONFLICT" => {
                        let current = message
                            .rsplit(' ')
                            .next()
                            .and_then(|n| n.parse().ok())
                            .unwrap_or(u64::MAX);
                        Ok(RegisterOut::Conflict(current))
                    }
                    Err(e) => Err(e),
                }
            }
        }
    }
}

/// What checking a register history found.
#[derive(Debug, Default)]
pub struct Checked {
    pub operations: usize,
    pub completed: usize,
    /// Keys whose history is not linearizable, each with the checker's explanation.
    pub violations: Vec<String>,
    /// Keys whose history was too large to search.
    pub unchecked_keys: Vec<u64>,
}

/// Checks `history` key by key.
pub fn check_history(registers: &Registers, history: &History) -> Checked {
    let mut by_key: std::collections::BTreeMap<u64, Vec<_>> = Default::default();
    for (k, op) in history {
        by_key.entry(*k).or_default().push(op.clone());
    }
    let mut checked = Checked {
        operations: history.len(),
        completed: history
            .iter()
            .filter(|(_, o)| o.completed_at.is_some())
            .count(),
        ..Checked::default()
    };
    for (k, ops) in by_key {
        match check(&Register::default(), &ops) {
            Verdict::Linearizable => {}
            Verdict::TooLarge => checked.unchecked_keys.push(k),
            Verdict::NotLinearizable(v) => checked.violations.push(format!(
                "key {} is not linearizable: {}",
                registers.key(k),
                firn_check::explain(
                    &format!(
                        "explained {} operations, then none of these could come next",
                        v.explained
                    ),
                    v.stuck_on.iter().copied(),
                    &ops,
                )
            )),
        }
    }
    checked
}
