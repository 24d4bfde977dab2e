//! Read latency, one thread: a local read from a node's shared-memory region against a
//! RESP GET to the same node and a GET to Redis, on keys already written (by `bench/local`,
//! with redis-benchmark's `key:__rand_int__` names). Prints one JSON object; `bench/local`
//! runs it and makes the table.
//!
//! `local_read_bench FIRN_ADDR REDIS_ADDR PREFIX KEYS READS`

use std::time::{Duration, Instant};

use firn_client::{Client, LocalClient};
use firn_local::LocalRead;

/// Keys as redis-benchmark writes them for `__rand_int__` (12 digits, zero-padded).
fn key(prefix: &str, i: u64) -> Vec<u8> {
    format!("{prefix}{i:012}").into_bytes()
}

/// A small, fixed-seed generator: the same key order in every run, no dependency.
struct Keys(u64);

impl Keys {
    fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }
}

fn percentiles(mut ns: Vec<u64>) -> serde_json::Value {
    ns.sort_unstable();
    let at = |p: f64| ns[((ns.len() as f64 * p) as usize).min(ns.len() - 1)];
    serde_json::json!({
        "p50_ns": at(0.50), "p99_ns": at(0.99), "p999_ns": at(0.999),
        "max_ns": ns[ns.len() - 1], "n": ns.len(),
    })
}

async fn resp_latencies(addr: &str, prefix: &str, keys: u64, reads: usize) -> Vec<u64> {
    let client = redis::Client::open(format!("redis://{addr}/")).expect("address");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connects");
    let mut order = Keys(0x9e37_79b9_7f4a_7c15);
    let mut ns = Vec::with_capacity(reads);
    for _ in 0..reads {
        let k = key(prefix, order.next(keys));
        let started = Instant::now();
        let _: Option<Vec<u8>> = redis::cmd("GET")
            .arg(&k)
            .query_async(&mut conn)
            .await
            .expect("GET");
        ns.push(started.elapsed().as_nanos() as u64);
    }
    ns
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, firn, redis_addr, prefix, keys, reads] = &args[..] else {
        eprintln!("usage: local_read_bench FIRN_ADDR REDIS_ADDR PREFIX KEYS READS");
        std::process::exit(2);
    };
    let keys: u64 = keys.parse().expect("KEYS is a number");
    let reads: usize = reads.parse().expect("READS is a number");
    let local = LocalClient::open(Client::connect(firn).await.expect("connects"))
        .await
        .expect("opens the node's region");

    // Keys made before the clock starts: the figures are the reads alone (plus the two clock
    // reads around each, ~20 ns).
    let mut order = Keys(0x9e37_79b9_7f4a_7c15);
    let sample: Vec<Vec<u8>> = (0..reads).map(|_| key(prefix, order.next(keys))).collect();
    let mut ns = Vec::with_capacity(reads);
    let (mut hits, mut linearizable) = (0u64, 0u64);
    let mut buf = Vec::with_capacity(1024);
    for k in &sample {
        let started = Instant::now();
        let read = local.region().get_into(k, None, &mut buf);
        ns.push(started.elapsed().as_nanos() as u64);
        if let LocalRead::Hit(v) = read {
            hits += 1;
            linearizable += matches!(v.bound, firn_local::Bound::Linearizable { .. }) as u64;
        }
    }
    // One thread reading flat out for a second: reads/s with no clock reads per read.
    let started = Instant::now();
    let mut done = 0u64;
    while started.elapsed() < Duration::from_secs(1) {
        for k in sample.iter().take(1_000) {
            std::hint::black_box(local.region().get_into(k, None, &mut buf));
        }
        done += sample.len().min(1_000) as u64;
    }
    let per_s = done as f64 / started.elapsed().as_secs_f64();

    let remote_reads = reads.min(50_000);
    let firn_get = resp_latencies(firn, prefix, keys, remote_reads).await;
    let redis_get = resp_latencies(redis_addr, prefix, keys, remote_reads).await;
    println!(
        "{}",
        serde_json::json!({
            "local": percentiles(ns),
            "local_hits": hits,
            "local_linearizable": linearizable,
            "local_reads_per_s": per_s,
            "firn_get": percentiles(firn_get),
            "redis_get": percentiles(redis_get),
        })
    );
}
