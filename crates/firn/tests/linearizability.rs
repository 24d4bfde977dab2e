//! Concurrent clients run put / get / conditional put on a few keys while the node is killed
//! with SIGKILL and restarted; the recorded history must be linearizable. (The cluster adds
//! leader kills and partitions to the same harness.)

mod common;

use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use common::FirnProcess;
use firn_check::register::{Register, RegisterOp, RegisterOut};
use firn_check::{Operation, check_per_key};
use firn_client::{Client, ClientError, PutOptions};
use firn_model::{ReadAt, ReadConsistency};

const CLIENTS: usize = 6;
const OPS_PER_CLIENT: usize = 150;
/// Pause between one client's operations, so the run spans the kill and the restart.
const THINK: Duration = Duration::from_millis(3);
const KEYS: u64 = 3;
/// How long one operation may take before it counts as "outcome unknown".
const OP_TIMEOUT: Duration = Duration::from_secs(5);

type History = Vec<(u64, Operation<RegisterOp, RegisterOut>)>;

/// A small deterministic generator: the seed is printed, so a failure can be replayed with
/// FIRN_TEST_SEED.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// How reads are served: the real linearizable path, or a deliberately stale one (as of a
/// time in the past) that the checker must catch.
#[derive(Clone, Copy, PartialEq)]
enum ReadPath {
    Linearizable,
    StaleBy(Duration),
}

async fn run_op(
    client: &Client,
    key: &str,
    op: &RegisterOp,
    reads: ReadPath,
) -> Result<RegisterOut, ClientError> {
    match op {
        RegisterOp::Put(v) => Ok(RegisterOut::Written(
            client
                .put(key.as_bytes(), v.as_bytes(), PutOptions::default())
                .await?
                .version,
        )),
        RegisterOp::Get => {
            let at = match reads {
                ReadPath::Linearizable => ReadAt::Latest,
                ReadPath::StaleBy(lag) => {
                    let now_us = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .unwrap()
                        .as_micros() as u64;
                    ReadAt::AsOf(firn_model::CommitTs::end_of_micros(
                        now_us - lag.as_micros() as u64,
                    ))
                }
            };
            let got = client
                .get(key.as_bytes(), at, ReadConsistency::Linearizable)
                .await?;
            Ok(match got {
                Some(info) => RegisterOut::Read {
                    version: info.version,
                    value: info.value.map(|v| String::from_utf8_lossy(&v).into_owned()),
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
            match client.put(key.as_bytes(), value.as_bytes(), opts).await {
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

fn seed() -> u64 {
    let seed = std::env::var("FIRN_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("linearizability seed: FIRN_TEST_SEED={seed}");
    seed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_under_kill_and_restart_is_linearizable() {
    let seed = seed();
    let history = record_history(seed, ReadPath::Linearizable, true).await;
    let completed = history
        .iter()
        .filter(|(_, o)| o.completed_at.is_some())
        .count();
    assert!(
        completed > CLIENTS * OPS_PER_CLIENT / 4,
        "too few operations completed ({completed})"
    );
    eprintln!(
        "checked {} operations ({} completed) on {KEYS} keys",
        history.len(),
        completed
    );
    if let Err((key, verdict)) = check_per_key(&Register::default(), &history) {
        panic!("key k{key} is not linearizable (seed {seed}): {verdict:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checker_rejects_the_history_of_a_stale_read_path() {
    let seed = seed();
    let history = record_history(seed, ReadPath::StaleBy(Duration::from_millis(150)), false).await;
    assert!(
        check_per_key(&Register::default(), &history).is_err(),
        "reads 150 ms in the past went unnoticed (seed {seed})"
    );
}

/// Runs the clients (and, with `kill`, a SIGKILL and restart of the node mid-run) and
/// returns what they saw, per key.
async fn record_history(seed: u64, reads: ReadPath, kill: bool) -> History {
    let dir = tempfile::tempdir().unwrap();
    let node = FirnProcess::start(dir.path(), &[]);
    let addr = Arc::new(RwLock::new(node.resp_addr()));
    let node = Arc::new(Mutex::new(Some(node)));
    let history: Arc<Mutex<History>> = Arc::default();
    let t0 = Instant::now();

    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let (addr, history) = (addr.clone(), history.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng =
                Rng(seed.wrapping_add((c as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1);
            let mut client: Option<Client> = None;
            let mut last_version_seen = 0;
            for i in 0..OPS_PER_CLIENT {
                tokio::time::sleep(THINK).await;
                let key = rng.next() % KEYS;
                let op = match rng.next() % 3 {
                    0 => RegisterOp::Put(format!("c{c}-{i}")),
                    1 => RegisterOp::Get,
                    _ => RegisterOp::CPut {
                        if_version: last_version_seen,
                        value: format!("c{c}-{i}"),
                    },
                };
                if client.is_none() {
                    let current = addr.read().unwrap().clone();
                    client = Client::connect(&current).await.ok();
                }
                let Some(cl) = client.as_ref() else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let invoked_at = t0.elapsed().as_nanos() as u64;
                let result =
                    tokio::time::timeout(OP_TIMEOUT, run_op(cl, &format!("k{key}"), &op, reads))
                        .await;
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
                    // A failed read changed nothing; a failed write may or may not have
                    // happened.
                    _ => {
                        client = None;
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
        }));
    }
    // Fault: SIGKILL the node mid-run, then restart it on the same data.
    let mut restarted = None;
    if kill {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let killed = node.lock().unwrap().take().unwrap();
        killed.kill_9();
        let again = FirnProcess::start(dir.path(), &[]);
        *addr.write().unwrap() = again.resp_addr();
        restarted = Some(again);
    }
    for t in tasks {
        t.await.unwrap();
    }
    drop(restarted);
    drop(node);
    history.lock().unwrap().clone()
}
