//! `follow`: DAL's experiment on a running Firn cluster. A worker reads and writes its
//! session keys through one node, then through another; with `FOLLOW on` the session shard's
//! leader follows it. Writes every access to a CSV file for `plot.py`.
//!
//!     scripts/cluster-up
//!     cargo run --release -p firn-follow -- --csv follow.csv
//!     python3 examples/follow/plot.py follow.csv docs/follow-latency.png

use std::time::Duration;

use clap::Parser;
use firn_follow::{CLUSTER_UP_NODES, Config, run};
use firn_model::Follow;

#[derive(Parser)]
#[command(name = "follow", version)]
struct Args {
    /// Index in --nodes of the node the worker uses first.
    #[arg(long, default_value_t = 0)]
    first: usize,
    /// Index in --nodes of the node it moves to.
    #[arg(long, default_value_t = 1)]
    second: usize,
    /// The cluster's RESP addresses, comma-separated (default: scripts/cluster-up's).
    #[arg(long, value_delimiter = ',', default_value = CLUSTER_UP_NODES)]
    nodes: Vec<String>,
    /// How long it works through the first node (longer than the nodes' --follow-interval,
    /// default 30 s, so that the leader may follow it again after the move).
    #[arg(long, default_value = "40s", value_parser = humantime::parse_duration)]
    before: Duration,
    /// How long it works through the second node.
    #[arg(long, default_value = "40s", value_parser = humantime::parse_duration)]
    after: Duration,
    /// The worker's name: its keys are sess/{NAME}/k0 … (one shard).
    #[arg(long, default_value = "worker1")]
    worker: String,
    /// Session keys it cycles over.
    #[arg(long, default_value_t = 16)]
    keys: usize,
    /// Pause between two accesses.
    #[arg(long, default_value = "5ms", value_parser = humantime::parse_duration)]
    pause: Duration,
    /// The keyspace sess/'s FOLLOW setting: on, off, or a node id to pin its leader to.
    #[arg(long, default_value = "on")]
    follow: Follow,
    /// Where to write every access (t_s,node,op,latency_us,leader,failed).
    #[arg(long, default_value = "follow.csv")]
    csv: std::path::PathBuf,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let mut config = Config::new(args.nodes, args.before, args.after);
    config.first = args.first;
    config.second = args.second;
    config.worker = args.worker;
    config.keys = args.keys;
    config.pause = args.pause;
    config.follow = args.follow;
    let report = match run(&config).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("follow: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    if let Err(e) = std::fs::write(&args.csv, report.csv()) {
        eprintln!("follow: writing {}: {e}", args.csv.display());
        return std::process::ExitCode::FAILURE;
    }
    print!("{}", report.describe());
    println!("every access: {}", args.csv.display());
    std::process::ExitCode::SUCCESS
}
