//! One soak run: a fresh cluster, the workloads started, faults injected for the run's
//! seconds, everything healed, the workloads finished, every history checked.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use firn_check::groups;
use firn_check::log;

use crate::cluster::{Cluster, SHARDS};
use crate::faults::{FaultCounts, FaultKind, Firewall, heal_all, inject};
use crate::workload::bank::Bank;
use crate::workload::effects::Effects;
use crate::workload::groups::{Groups, Redelivery};
use crate::workload::log::Logs;
use crate::workload::register::{self, ReadPath, Registers};
use crate::workload::txn::Txns;
use crate::{Rng, keys_in_shard};

/// The first of the loopback addresses the run's nodes take: one of 16 blocks of 8 from
/// `127.0.0.64`, chosen by the process id, so that soaks running at once (a test run and a
/// long soak) cut only their own nodes apart.
fn first_ip() -> u8 {
    64 + (std::process::id() % 16) as u8 * 8
}
/// How long the cluster may take to settle: at the start, and once every fault is healed.
const SETTLE_MAX: Duration = Duration::from_secs(60);
/// Workloads go on this long after the cluster settled again, so that every history covers
/// the recovery.
const AFTER_HEAL: Duration = Duration::from_secs(2);
/// Longest the workloads take to finish once asked to stop (their drains included).
const FINISH_MAX: Duration = Duration::from_secs(180);
/// Bytes of a large value: past the inline limit (1 MiB), so it is stored as a blob.
const LARGE_VALUE_BYTES: usize = 1536 * 1024;

/// How far in the past `stale_reads` reads: well past an operation's time on a loaded
/// machine, so that the broken path is caught however slowly the run goes.
const STALE_BY: Duration = Duration::from_secs(3);

#[derive(Clone, Debug)]
pub struct Options {
    pub bin: PathBuf,
    pub nodes: usize,
    /// How long faults are injected.
    pub seconds: u64,
    pub faults: Vec<FaultKind>,
    /// Where a failing run's directory is kept.
    pub keep: PathBuf,
    /// Serve register reads from 3 s in the past: a broken read path the checker must catch,
    /// to show that the soak can fail.
    pub stale_reads: bool,
}

/// What one run found.
#[derive(Debug, Default)]
pub struct Report {
    pub seed: u64,
    pub faults: FaultCounts,
    /// Operations checked, per workload.
    pub checked: BTreeMap<&'static str, usize>,
    /// Guarantees broken: a history its checker refused, an answer no correct store gives.
    pub violations: Vec<String>,
    /// Why the run could not finish its checks: a cluster that did not settle once every
    /// fault was healed, a log not read to its end or a group not drained in time.
    pub unfinished: Vec<String>,
    /// Register keys whose history was too large for the search.
    pub unchecked_keys: usize,
    pub elapsed: Duration,
    /// The directory kept for a failing run.
    pub kept: Option<PathBuf>,
}

impl Report {
    pub fn operations(&self) -> usize {
        self.checked.values().sum()
    }

    /// The run broke a guarantee or could not finish its checks.
    pub fn failed(&self) -> bool {
        !self.violations.is_empty() || !self.unfinished.is_empty()
    }
}

/// Runs once with `seed`.
pub async fn run(seed: u64, options: &Options) -> Report {
    let started = Instant::now();
    let mut report = Report {
        seed,
        ..Report::default()
    };
    let dir = match tempfile::Builder::new()
        .prefix(&format!("firn-soak-{seed}-"))
        .tempdir()
    {
        Ok(dir) => dir,
        Err(e) => {
            report.unfinished.push(format!("no run directory: {e}"));
            return report;
        }
    };
    let mut journal = String::new();
    if let Err(e) = run_in(seed, options, dir.path(), &mut report, &mut journal).await {
        report.unfinished.push(e);
    }
    report.elapsed = started.elapsed();
    let _ = std::fs::write(dir.path().join("faults.txt"), &journal);
    if report.failed() {
        let _ = std::fs::write(
            dir.path().join("violations.txt"),
            report.violations.join("\n\n"),
        );
        let _ = std::fs::write(
            dir.path().join("unfinished.txt"),
            report.unfinished.join("\n\n"),
        );
        let kept = options.keep.join(format!("seed-{seed}"));
        let _ = std::fs::create_dir_all(&options.keep);
        let _ = std::fs::remove_dir_all(&kept);
        let from = dir.keep();
        report.kept = Some(match std::fs::rename(&from, &kept) {
            Ok(()) => kept,
            Err(_) => from,
        });
    }
    report
}

async fn run_in(
    seed: u64,
    options: &Options,
    dir: &Path,
    report: &mut Report,
    journal: &mut String,
) -> Result<(), String> {
    let mut kinds = options.faults.clone();
    let firewall = match Firewall::new() {
        Ok(f) => Some(Arc::new(f)),
        Err(e) => {
            kinds.retain(|k| !matches!(k, FaultKind::Partition | FaultKind::OneWay));
            let _ = writeln!(journal, "no partitions: {e}");
            None
        }
    };
    let (bin, nodes, run_dir) = (options.bin.clone(), options.nodes, dir.to_path_buf());
    let cluster = tokio::task::spawn_blocking(move || {
        let c = Cluster::start(&bin, &run_dir, nodes, first_ip())?;
        if c.wait_settled(SETTLE_MAX) {
            Ok(c)
        } else {
            Err(format!("the new cluster did not settle in {SETTLE_MAX:?}"))
        }
    })
    .await
    .map_err(|e| e.to_string())??;
    if !cluster.tmpfs {
        kinds.retain(|k| *k != FaultKind::DiskFull);
        let _ = writeln!(
            journal,
            "no full disks: the nodes' tmpfs could not be mounted"
        );
    }
    let addrs: Vec<String> = (0..cluster.len()).map(|i| cluster.resp_addr(i)).collect();
    let cluster = Arc::new(Mutex::new(cluster));
    memory_keyspace(&addrs[0], "m").await?;
    let effects = Effects::default();
    effects.set_up(&addrs).await?;

    let t0 = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    // However the run ends, its workloads stop.
    let _stop_at_end = StopOnDrop(stop.clone());
    let reads = match options.stale_reads {
        true => ReadPath::StaleBy(STALE_BY),
        false => ReadPath::Linearizable,
    };
    let registers = |prefix: &str, keys, clients, think_ms, value_bytes| Registers {
        prefix: prefix.to_string(),
        keys,
        clients,
        think: Duration::from_millis(think_ms),
        ops_per_client: 100_000,
        value_bytes,
        reads,
    };
    let durable = registers("k", 8, 4, 10, 0);
    let memory = registers("m", 4, 2, 10, 0);
    let large = registers("b", 2, 2, 150, LARGE_VALUE_BYTES);
    let spawn_registers = |r: Registers, p: u64| {
        let (addrs, stop) = (addrs.clone(), stop.clone());
        tokio::spawn(async move {
            let history = r.record(seed.wrapping_add(p), &addrs, stop, t0).await;
            (r, history)
        })
    };
    let register_runs = vec![
        ("kv", spawn_registers(durable, 1)),
        ("memory", spawn_registers(memory, 2)),
        ("large", spawn_registers(large, 3)),
    ];
    let run_max = Duration::from_secs(options.seconds) + SETTLE_MAX + FINISH_MAX;
    let tags: Vec<String> = (0..SHARDS)
        .flat_map(|s| keys_in_shard(SHARDS, s, "tag", 2))
        .collect();
    let logs = Logs {
        run_max,
        drain_max: Duration::from_secs(30),
        ..Logs::new("events", tags)
    };
    let log_run = {
        let (addrs, stop) = (addrs.clone(), stop.clone());
        tokio::spawn(async move { logs.record(seed.wrapping_add(4), &addrs, stop, t0).await })
    };
    let redelivery = match seed % 2 {
        0 => Redelivery::Claims,
        _ => Redelivery::AckWait,
    };
    let groups = Groups {
        acknowledged_target: 0,
        run_max,
        drain_max: Duration::from_secs(30),
        ..Groups::new(&keys_in_shard(SHARDS, 0, "jobs", 1)[0], redelivery)
    };
    let options_of_groups = groups.options();
    let group_run = {
        let (addrs, stop) = (addrs.clone(), stop.clone());
        tokio::spawn(async move { groups.record(seed.wrapping_add(5), &addrs, stop, t0).await })
    };

    let bank_run = {
        let (addrs, stop) = (addrs.clone(), stop.clone());
        tokio::spawn(async move {
            Bank::new(SHARDS)
                .record(seed.wrapping_add(6), &addrs, stop)
                .await
        })
    };

    let txn_run = {
        let (addrs, stop) = (addrs.clone(), stop.clone());
        let txns = Txns {
            enough_committed: 0,
            run_max,
            ..Txns::new(SHARDS)
        };
        tokio::spawn(async move { txns.record(seed.wrapping_add(7), &addrs, stop, t0).await })
    };

    let effects_run = {
        let (addrs, stop) = (addrs.clone(), stop.clone());
        tokio::spawn(async move { effects.record(&addrs, stop).await })
    };

    // The faults, then everything healed and settled, then a little more running.
    let lines = Arc::new(Mutex::new(Vec::new()));
    let injected = match &firewall {
        Some(f) => {
            inject(
                cluster.clone(),
                f.clone(),
                kinds,
                Rng::for_process(seed, 99),
                t0,
                t0 + Duration::from_secs(options.seconds),
                lines.clone(),
            )
            .await
        }
        None => {
            tokio::time::sleep(Duration::from_secs(options.seconds)).await;
            Ok(FaultCounts::new())
        }
    };
    let healed = {
        let (c, f) = (cluster.clone(), firewall.clone());
        tokio::task::spawn_blocking(move || {
            let mut c = c.lock().unwrap();
            if let Some(f) = f {
                heal_all(&mut c, &f)?;
            }
            match c.wait_settled(SETTLE_MAX) {
                true => Ok(()),
                false => Err(format!(
                    "the cluster did not settle in {SETTLE_MAX:?} after every fault was healed"
                )),
            }
        })
        .await
        .map_err(|e| e.to_string())?
    };
    journal.push_str(&lines.lock().unwrap().join("\n"));
    journal.push('\n');
    report.faults = injected?;
    healed?;
    tokio::time::sleep(AFTER_HEAL).await;
    stop.store(true, Ordering::Relaxed);

    // Every workload finishes (bounded), then every history is checked.
    let finish = async {
        for (name, task) in register_runs {
            let (r, history) = task.await.map_err(|e| format!("{name}: {e}"))?;
            let checked = register::check_history(&r, &history);
            let _ = std::fs::write(dir.join(format!("{name}.history")), format!("{history:#?}"));
            report.checked.insert(name, checked.operations);
            report.unchecked_keys += checked.unchecked_keys.len();
            report.violations.extend(
                checked
                    .violations
                    .into_iter()
                    .map(|v| format!("{name}: {v}")),
            );
        }
        match log_run.await.map_err(|e| format!("log: {e}"))? {
            Ok(history) => {
                let _ = std::fs::write(dir.join("log.history"), format!("{history:#?}"));
                report.checked.insert("log", history.operations.len());
                if let Err(v) = log::check(&history) {
                    report
                        .violations
                        .push(format!("log: {}", history.explain(&v)));
                }
            }
            Err(e) => report.unfinished.push(format!("log: {e}")),
        }
        match group_run.await.map_err(|e| format!("group: {e}"))? {
            Ok(history) => {
                let _ = std::fs::write(dir.join("group.history"), format!("{history:#?}"));
                report.checked.insert("group", history.operations.len());
                if let Err(v) = groups::check_with(&history, options_of_groups) {
                    report
                        .violations
                        .push(format!("group: {}", history.explain(&v)));
                }
            }
            Err(e) => report.unfinished.push(format!("group: {e}")),
        }
        match bank_run.await.map_err(|e| format!("bank: {e}"))? {
            Ok(history) => {
                let _ = std::fs::write(dir.join("bank.history"), format!("{history:#?}"));
                report.checked.insert("bank", history.operations());
                report.violations.extend(
                    history
                        .violations()
                        .into_iter()
                        .map(|v| format!("bank: {v}")),
                );
            }
            Err(e) => report.unfinished.push(format!("bank: {e}")),
        }
        match txn_run.await.map_err(|e| format!("txn: {e}"))? {
            Ok(history) => {
                let _ = std::fs::write(dir.join("txn.history"), format!("{history:#?}"));
                report.checked.insert("txn", history.txns.len());
                if let Err(anomalies) = firn_check::txn::check(&history.txns, &history.versions) {
                    report
                        .violations
                        .extend(anomalies.iter().take(5).map(|a| format!("txn: {a}")));
                }
            }
            Err(e) => report.unfinished.push(format!("txn: {e}")),
        }
        match effects_run.await.map_err(|e| format!("effects: {e}"))? {
            Ok(outcome) => {
                report
                    .checked
                    .insert("effects", outcome.inputs + outcome.timers);
                report.violations.extend(
                    outcome
                        .violations
                        .into_iter()
                        .map(|v| format!("effects: {v}")),
                );
            }
            Err(e) => report.unfinished.push(format!("effects: {e}")),
        }
        Ok::<(), String>(())
    };
    tokio::time::timeout(FINISH_MAX, finish)
        .await
        .map_err(|_| format!("the workloads did not finish in {FINISH_MAX:?}"))??;
    // The processes stop, and their tmpfs go, before the run's directory is kept or removed.
    tokio::task::spawn_blocking(move || drop(cluster))
        .await
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// Makes `{prefix}…` a memory-durability keyspace.
async fn memory_keyspace(addr: &str, prefix: &str) -> Result<(), String> {
    let client = firn_client::Client::connect(addr)
        .await
        .map_err(|e| format!("connecting to {addr}: {e}"))?;
    let spec = firn_model::KeyspaceSpec {
        prefix: prefix.into(),
        durability: firn_model::Durability::Memory,
        ..firn_model::KeyspaceSpec::default_keyspace()
    };
    let def = firn_model::KeyspaceDef::new(spec);
    firn_client::retry_transient(|| client.keyspace_create(&def))
        .await
        .map_err(|e| format!("making the memory keyspace: {e}"))
}

/// Sets its flag when dropped.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}
