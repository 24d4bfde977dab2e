//! The faults a run injects, drawn from its seed: one at a time, each held for a while and
//! then healed, with a pause between them.
//!
//! Kills never take more than one node down at once, and wait until every replica has
//! recovered from the last one: a memory-durability keyspace promises an acknowledged write
//! only while a majority of its replicas keeps it in memory. A clock step is within half
//! the cluster's bound (`--max-clock-offset`, 500 ms by default), which Firn slews in, or
//! beyond the bound, which it takes at once and then refuses to stamp with: every guarantee
//! about time must hold through both. Everything else — pauses, partitions of any minority, one-way
//! loss, a full disk — may hit any node, leaders included.

use std::collections::BTreeMap;
use std::fmt;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::Rng;
use crate::cluster::Cluster;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultKind {
    /// kill -9 of a random node, restarted later on the same data.
    Kill,
    /// kill -9 of the node leading a random shard, restarted later.
    KillLeader,
    /// SIGSTOP, then SIGCONT.
    Pause,
    /// A minority of the nodes cut off from the rest (every packet dropped both ways).
    Partition,
    /// Packets from one node to another dropped, the other way not.
    OneWay,
    /// A node's clock stepped: within half the bound, or beyond it ([`clock_step_ms`]).
    Clock,
    /// A node's disk filled below its reserve (writes refused with NOSPACE), then freed.
    DiskFull,
}

impl FaultKind {
    pub const ALL: [FaultKind; 7] = [
        FaultKind::Kill,
        FaultKind::KillLeader,
        FaultKind::Pause,
        FaultKind::Partition,
        FaultKind::OneWay,
        FaultKind::Clock,
        FaultKind::DiskFull,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Kill => "kill",
            FaultKind::KillLeader => "kill-leader",
            FaultKind::Pause => "pause",
            FaultKind::Partition => "partition",
            FaultKind::OneWay => "one-way",
            FaultKind::Clock => "clock",
            FaultKind::DiskFull => "disk-full",
        }
    }

    pub fn parse(name: &str) -> Option<FaultKind> {
        FaultKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How many faults of each kind a run injected.
pub type FaultCounts = BTreeMap<FaultKind, u32>;

/// The run's firewall rules: a chain of its own, hooked into INPUT, emptied to heal.
pub struct Firewall {
    chain: String,
}

impl Firewall {
    pub fn new() -> Result<Firewall, String> {
        let chain = format!("FIRN_SOAK_{}", std::process::id());
        let firewall = Firewall { chain };
        firewall.remove();
        iptables(&["-N", &firewall.chain])?;
        iptables(&["-I", "INPUT", "-j", &firewall.chain])?;
        Ok(firewall)
    }

    /// Drops every TCP packet from `from` to `to`.
    fn drop_packets(&self, from: &str, to: &str) -> Result<(), String> {
        iptables(&[
            "-A",
            &self.chain,
            "-s",
            from,
            "-d",
            to,
            "-p",
            "tcp",
            "-j",
            "DROP",
        ])
    }

    fn heal(&self) {
        let _ = iptables(&["-F", &self.chain]);
    }

    fn remove(&self) {
        let _ = iptables(&["-D", "INPUT", "-j", &self.chain]);
        let _ = iptables(&["-F", &self.chain]);
        let _ = iptables(&["-X", &self.chain]);
    }
}

impl Drop for Firewall {
    fn drop(&mut self) {
        self.remove();
    }
}

fn iptables(args: &[&str]) -> Result<(), String> {
    let status = Command::new("iptables")
        .args(args)
        .stderr(Stdio::null())
        .status()
        .map_err(|e| format!("iptables: {e} (the soak needs iptables and root)"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("iptables {} failed", args.join(" ")))
    }
}

/// Injects faults of `kinds` into `cluster` until `until`, then heals everything (restarts
/// killed nodes, wakes paused ones, drops the rules, resets clocks and frees disks). Every
/// fault is written to `journal` with its time since `t0`.
pub async fn inject(
    cluster: Arc<Mutex<Cluster>>,
    firewall: Arc<Firewall>,
    kinds: Vec<FaultKind>,
    mut rng: Rng,
    t0: Instant,
    until: Instant,
    journal: Arc<Mutex<Vec<String>>>,
) -> Result<FaultCounts, String> {
    let mut counts = FaultCounts::new();
    let note = |line: String| {
        journal
            .lock()
            .unwrap()
            .push(format!("{:>8.3}s {line}", t0.elapsed().as_secs_f64()))
    };
    while !kinds.is_empty() && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(200 + rng.below(1_300))).await;
        let kind = kinds[rng.below(kinds.len() as u64) as usize];
        let hold = Duration::from_millis(300 + rng.below(2_700));
        let (c, f) = (cluster.clone(), firewall.clone());
        let pick = rng.next_u64();
        let offset = clock_step_ms(rng.next_u64());
        let started = tokio::task::spawn_blocking(move || {
            let mut c = c.lock().unwrap();
            start_fault(&mut c, &f, kind, pick, offset)
        })
        .await
        .map_err(|e| e.to_string())?;
        let Some(undo) = started else {
            continue;
        };
        note(format!("{kind} {undo} for {hold:?}"));
        *counts.entry(kind).or_default() += 1;
        tokio::time::sleep(hold).await;
        let (c, f) = (cluster.clone(), firewall.clone());
        tokio::task::spawn_blocking(move || {
            let mut c = c.lock().unwrap();
            undo.apply(&mut c, &f)
        })
        .await
        .map_err(|e| e.to_string())??;
        note(format!("healed {kind}"));
    }
    Ok(counts)
}

/// The step a `clock` fault gives a node's clock (ms): two times in three within half the
/// bound (Firn slews it in), otherwise 0.6 to 1.5 s beyond it (Firn takes it at once and
/// the node stamps nothing until it is judged, then nothing while it is beyond).
pub fn clock_step_ms(pick: u64) -> i64 {
    let sign = if pick & 1 == 0 { 1 } else { -1 };
    let size = (pick >> 8) as i64;
    if pick % 3 == 2 {
        sign * (600 + size % 901)
    } else {
        sign * (size % 251)
    }
}

/// What heals a fault.
enum Undo {
    Restart(usize),
    Resume(usize),
    Heal(String),
    Clock(usize),
    FreeDisk(usize),
}

impl fmt::Display for Undo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Undo::Restart(i) | Undo::Resume(i) | Undo::Clock(i) | Undo::FreeDisk(i) => {
                write!(f, "node {}", i + 1)
            }
            Undo::Heal(what) => f.write_str(what),
        }
    }
}

impl Undo {
    fn apply(self, c: &mut Cluster, firewall: &Firewall) -> Result<(), String> {
        match self {
            Undo::Restart(i) => c.restart(i),
            Undo::Resume(i) => {
                c.pause(i, false);
                Ok(())
            }
            Undo::Heal(_) => {
                firewall.heal();
                Ok(())
            }
            Undo::Clock(i) => {
                c.set_clock_offset(i, 0);
                Ok(())
            }
            Undo::FreeDisk(i) => {
                c.free_disk(i);
                Ok(())
            }
        }
    }
}

/// Starts one fault; `None` when it cannot be injected now (a kill while replicas still
/// recover, a leaderless shard, a disk that cannot be filled).
fn start_fault(
    c: &mut Cluster,
    firewall: &Firewall,
    kind: FaultKind,
    pick: u64,
    offset_ms: i64,
) -> Option<Undo> {
    let n = c.len();
    let node = (pick % n as u64) as usize;
    match kind {
        FaultKind::Kill | FaultKind::KillLeader => {
            if !c.settled() {
                return None;
            }
            let victim = if kind == FaultKind::Kill {
                node
            } else {
                let leaders = c.leaders(node);
                let leader = leaders.get((pick / 7) as usize % leaders.len().max(1))?;
                leader.map(|id| id as usize - 1)?
            };
            c.kill_9(victim);
            Some(Undo::Restart(victim))
        }
        FaultKind::Pause => {
            c.pause(node, true);
            Some(Undo::Resume(node))
        }
        FaultKind::Partition => {
            // A minority: 1 of 3, 1 or 2 of 5.
            let size = 1 + (pick / 11) as usize % (n.saturating_sub(1) / 2).max(1);
            let cut: Vec<usize> = (0..size).map(|k| (node + k) % n).collect();
            for a in &cut {
                for b in (0..n).filter(|b| !cut.contains(b)) {
                    firewall.drop_packets(c.ip(*a), c.ip(b)).ok()?;
                    firewall.drop_packets(c.ip(b), c.ip(*a)).ok()?;
                }
            }
            let names: Vec<String> = cut.iter().map(|i| (i + 1).to_string()).collect();
            Some(Undo::Heal(format!(
                "nodes {{{}}} from the rest",
                names.join(",")
            )))
        }
        FaultKind::OneWay => {
            let to = (node + 1 + (pick / 13) as usize % (n - 1)) % n;
            firewall.drop_packets(c.ip(node), c.ip(to)).ok()?;
            Some(Undo::Heal(format!("node {} -> node {}", node + 1, to + 1)))
        }
        FaultKind::Clock => {
            c.set_clock_offset(node, offset_ms);
            Some(Undo::Clock(node))
        }
        FaultKind::DiskFull => c.fill_disk(node).then_some(Undo::FreeDisk(node)),
    }
}

/// Heals every fault: wakes paused nodes, drops the rules, resets clocks, frees disks and
/// restarts the nodes that are down.
pub fn heal_all(c: &mut Cluster, firewall: &Firewall) -> Result<(), String> {
    firewall.heal();
    for i in 0..c.len() {
        c.pause(i, false);
        c.set_clock_offset(i, 0);
        c.free_disk(i);
        c.restart(i)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_steps_are_within_half_the_bound_or_beyond_it() {
        let mut rng = Rng::for_process(7, 0);
        let (mut small, mut large) = (0, 0);
        for _ in 0..3_000 {
            let ms = clock_step_ms(rng.next_u64());
            match ms.unsigned_abs() {
                0..=250 => small += 1,
                600..=1_500 => large += 1,
                other => panic!("a step of {other} ms"),
            }
        }
        assert!(
            (1_800..2_200).contains(&small) && large == 3_000 - small,
            "{small} {large}"
        );
    }
}
