//! `firn-soak`: runs a cluster of real `firn` processes under a seeded mix of faults while
//! checked workloads run, and prints a table of what each run injected, checked and found.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use firn_soak::faults::{FaultCounts, FaultKind};
use firn_soak::run::{Options, Report, run};

#[derive(Parser)]
#[command(
    about = "Firn's fault soak: a cluster under a seeded mix of faults, every history checked"
)]
struct Args {
    /// Runs to make, each with a fresh cluster; run r has seed SEED + r.
    #[arg(long, default_value_t = 1)]
    runs: u64,
    /// Seconds of faults in each run (the run takes longer: start, heal, drain, check).
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// The first run's seed (default: from the clock). `--seed S --runs 1` replays run S.
    #[arg(long)]
    seed: Option<u64>,
    /// Nodes in each run's cluster (3 or 5).
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// The faults to draw from, comma-separated: kill, kill-leader, pause, partition,
    /// one-way, clock, disk-full (default: all).
    #[arg(long, value_delimiter = ',')]
    faults: Vec<String>,
    /// The `firn` binary (default: the one beside this program).
    #[arg(long)]
    firn: Option<PathBuf>,
    /// Where failing runs keep their histories, fault journal and node logs.
    #[arg(long, default_value = "soak-failures")]
    keep: PathBuf,
    /// Serve register reads from 3 s in the past, a broken read path: every run must then
    /// report violations (shows the soak can fail).
    #[arg(long, hide = true)]
    stale_reads: bool,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = Args::parse();
    let faults = if args.faults.is_empty() {
        FaultKind::ALL.to_vec()
    } else {
        let parsed: Option<Vec<FaultKind>> =
            args.faults.iter().map(|f| FaultKind::parse(f)).collect();
        parsed.unwrap_or_else(|| {
            eprintln!("firn-soak: unknown fault in {:?}", args.faults);
            std::process::exit(2)
        })
    };
    if !(3..=7).contains(&args.nodes) {
        eprintln!("firn-soak: --nodes must be 3 to 7");
        std::process::exit(2);
    }
    let bin = args.firn.unwrap_or_else(|| {
        let me = std::env::current_exe().expect("this program's path");
        me.with_file_name("firn")
    });
    let options = Options {
        bin,
        nodes: args.nodes,
        seconds: args.seconds,
        faults,
        keep: args.keep,
        stale_reads: args.stale_reads,
    };
    let first = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("a clock after 1970")
            .as_micros() as u64
    });
    println!(
        "firn-soak: {} run(s) of {} s of faults on {} nodes, seeds {first}..",
        args.runs, args.seconds, args.nodes
    );
    println!(
        "{:>4}  {:>20}  {:>6}  {:<58}  {:>7}  {:>5}  {:>5}",
        "run", "seed", "secs", "faults injected", "checked", "viol.", "unfin."
    );
    let started = Instant::now();
    let mut totals = Totals::default();
    for r in 0..args.runs {
        let seed = first.wrapping_add(r);
        // Stopped by a signal, the run is dropped: its processes killed, its tmpfs unmounted
        // and its firewall rules removed.
        let report = tokio::select! {
            report = run(seed, &options) => report,
            signal = stop_signal() => {
                println!("firn-soak: {signal}; run {} (seed {seed}) abandoned", r + 1);
                break;
            }
        };
        println!(
            "{:>4}  {:>20}  {:>6.1}  {:<58}  {:>7}  {:>5}  {:>5}",
            r + 1,
            seed,
            report.elapsed.as_secs_f64(),
            faults_text(&report.faults),
            report.operations(),
            report.violations.len(),
            report.unfinished.len()
        );
        for v in &report.violations {
            println!("      violation: {}", first_lines(v, 12));
        }
        for u in &report.unfinished {
            println!("      unfinished: {}", first_lines(u, 12));
        }
        if let Some(dir) = &report.kept {
            println!("      kept: {}", dir.display());
        }
        totals.add(&report);
    }
    totals.print(started.elapsed());
    if totals.failed_runs > 0 {
        std::process::exit(1);
    }
}

/// SIGINT or SIGTERM, named.
async fn stop_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "interrupted",
        _ = term.recv() => "terminated",
    }
}

#[derive(Default)]
struct Totals {
    runs: u64,
    failed_runs: u64,
    faults: FaultCounts,
    checked: std::collections::BTreeMap<&'static str, usize>,
    violations: usize,
    unfinished: usize,
    unchecked_keys: usize,
}

impl Totals {
    fn add(&mut self, report: &Report) {
        self.runs += 1;
        self.failed_runs += report.failed() as u64;
        for (k, n) in &report.faults {
            *self.faults.entry(*k).or_default() += n;
        }
        for (w, n) in &report.checked {
            *self.checked.entry(w).or_default() += n;
        }
        self.violations += report.violations.len();
        self.unfinished += report.unfinished.len();
        self.unchecked_keys += report.unchecked_keys;
    }

    fn print(&self, took: Duration) {
        println!();
        println!(
            "| runs | took | faults injected | operations checked | violations | unfinished | runs failed |"
        );
        println!("|---:|---:|---|---|---:|---:|---:|");
        let checked: Vec<String> = self
            .checked
            .iter()
            .map(|(w, n)| format!("{w} {n}"))
            .collect();
        println!(
            "| {} | {:.0} min | {} | {} ({} in all) | {} | {} | {} |",
            self.runs,
            took.as_secs_f64() / 60.0,
            faults_text(&self.faults),
            checked.join(", "),
            self.checked.values().sum::<usize>(),
            self.violations,
            self.unfinished,
            self.failed_runs
        );
        if self.unchecked_keys > 0 {
            println!(
                "({} register keys had histories too large to search; not counted as checked)",
                self.unchecked_keys
            );
        }
    }
}

fn faults_text(faults: &FaultCounts) -> String {
    if faults.is_empty() {
        return "none".into();
    }
    faults
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn first_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = lines[..lines.len().min(n)].join("\n      ");
    if lines.len() > n {
        out.push_str(&format!("\n      … ({} more lines)", lines.len() - n));
    }
    out
}
