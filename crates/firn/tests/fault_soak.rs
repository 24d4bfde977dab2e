//! The fault soak, briefly, in every test run: a few seeded runs of `firn_soak` (a 3-node
//! cluster under kills, leader kills, pauses, partitions, one-way loss, clock steps and a
//! full disk, while durable, memory, large-value, log, consumer-group, bank, transaction and
//! trigger workloads run) must find no violation; and a run whose register reads are served from the past must
//! be caught. `scripts/fault-soak` runs many more.
//!
//! Needs root (iptables, tmpfs mounts), as the partition and disk tests do.

mod common;

use std::path::PathBuf;

use common::seed;
use firn_soak::faults::FaultKind;
use firn_soak::run::{Options, Report, run};

/// Runs each test run makes (FIRN_SOAK_RUNS), and their seconds of faults.
const RUNS_DEFAULT: u64 = 2;
const SECONDS: u64 = 10;
/// Fewest operations a run must check for it to mean something.
const CHECKED_MIN: usize = 300;

fn options(stale_reads: bool) -> Options {
    Options {
        bin: PathBuf::from(common::firn_bin()),
        nodes: 3,
        seconds: SECONDS,
        faults: FaultKind::ALL.to_vec(),
        keep: std::env::temp_dir().join("firn-soak-failures"),
        stale_reads,
    }
}

fn describe(report: &Report) -> String {
    format!(
        "seed {}: {:.0?}, faults {:?}, checked {:?}, violations {:?}, kept {:?}",
        report.seed, report.elapsed, report.faults, report.checked, report.violations, report.kept
    )
}

// One test: the runs share the loopback addresses and the firewall chain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_runs_find_no_violation_and_a_stale_read_path_is_caught() {
    let first = seed("fault soak");
    let runs = std::env::var("FIRN_SOAK_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(RUNS_DEFAULT);
    let mut faults = 0;
    for r in 0..runs {
        let report = run(first.wrapping_add(r), &options(false)).await;
        eprintln!("fault soak: {}", describe(&report));
        assert!(!report.failed(), "{}", describe(&report));
        assert!(
            report.operations() >= CHECKED_MIN,
            "too few operations checked to mean anything: {}",
            describe(&report)
        );
        faults += report.faults.values().sum::<u32>();
    }
    assert!(runs == 0 || faults > 0, "no fault was injected");

    let report = run(first.wrapping_add(runs), &options(true)).await;
    eprintln!("fault soak, stale reads: {}", describe(&report));
    assert!(
        report
            .violations
            .iter()
            .any(|v| v.contains("not linearizable")),
        "reads 3 s in the past went unnoticed: {}",
        describe(&report)
    );
    if let Some(dir) = report.kept {
        let _ = std::fs::remove_dir_all(dir);
    }
}
