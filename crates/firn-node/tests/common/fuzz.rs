//! What the fuzz tests share: a seed printed and replayable, a case count, proptest's runner.

use std::time::Duration;

use proptest::test_runner::{Config, RngSeed, TestRunner};

/// A seed of its own for each run (std's hasher keys are random per process).
pub fn rand_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The run's seed and command count: `FIRN_TEST_SEED` and `FIRN_FUZZ_COMMANDS`, or a seed
/// of its own and `default_cases`.
pub fn settings(what: &str, default_cases: u32) -> (u64, u32) {
    let env_number = |name: &str| std::env::var(name).ok().and_then(|s| s.parse::<u64>().ok());
    let seed = env_number("FIRN_TEST_SEED").unwrap_or_else(rand_seed);
    let cases = env_number("FIRN_FUZZ_COMMANDS").map_or(default_cases, |n| n as u32);
    eprintln!("{what} seed: FIRN_TEST_SEED={seed}");
    (seed, cases)
}

/// proptest's runner for `cases` cases from `seed`, remembering no failures on disk.
pub fn runner(seed: u64, cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(seed),
        ..Config::default()
    })
}

/// A fuzz run: the runtime, the node to send to, the seed and how many cases.
pub type Run = fn(&tokio::runtime::Runtime, &firn_node::RunningNode, u64, u32);

/// `run` against one in-process node.
pub fn on_one_node(what: &str, default_cases: u32, run: Run) {
    let (seed, cases) = settings(what, default_cases);
    let rt = runtime();
    let node = rt.block_on(super::start_node(true));
    run(&rt, &node, seed, cases);
}

/// `run` against the first of [`two_nodes`].
pub fn on_two_nodes(what: &str, default_cases: u32, run: Run) {
    let (seed, cases) = settings(what, default_cases);
    let rt = runtime();
    let nodes = rt.block_on(two_nodes());
    run(&rt, &nodes[0], seed, cases);
}

/// Two in-process nodes with four shards, once every shard has a leader (writes to many
/// keys went through node 1).
pub async fn two_nodes() -> Vec<firn_node::RunningNode> {
    let nodes = super::start_cluster(2, 4).await;
    let mut c = super::redis_conn_patient(&nodes[0]).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    for i in 0..32 {
        let key = format!("warm-{i}");
        while let Err(e) = super::run(&mut c, &["SET", &key, "x"]).await {
            assert!(std::time::Instant::now() < deadline, "no leader: {e}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    nodes
}
