//! A read by event time on a key with a long history: through the event-time index (a
//! seek, as `FIRN.GET key EVENTTIME e` reads) against a walk over every stored version (what
//! such a read did before the index), on one store on fjall, in one thread.
//!
//! Writes `--versions` versions of one key (100-byte values) whose event times are a
//! permutation of 0..versions (late and early data mixed), then times `--reads` reads at
//! random event times each way and checks that both answer the same version.
//!
//! Usage: cargo run --release -p firn-store --example event_time_read -- [--versions N] [--reads R]

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use firn_model::{CommitTs, Key, KvWrite, PutRequest, ReadAt, VersionInfo};
use firn_store::{Command, FjallBackend, Op, VersionedStore};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| v.parse().expect("a number"))
}

/// The walk: every stored version, a page at a time, keeping the greatest (event time,
/// version) at or before `t`.
fn walked(store: &VersionedStore, key: &[u8], versions: u64, t: u64) -> Option<u64> {
    let mut best: Option<VersionInfo> = None;
    let mut from = 1;
    while from <= versions {
        let page = store
            .history(key, from, None, 1_000, None)
            .expect("history");
        let Some(last) = page.last().map(|i| i.version) else {
            break;
        };
        for info in page {
            let rank = |i: &VersionInfo| (i.event_time_us, i.version);
            if info.event_time_us.is_some_and(|e| e <= t)
                && best.as_ref().is_none_or(|b| rank(&info) > rank(b))
            {
                best = Some(info);
            }
        }
        from = last + 1;
    }
    best.map(|i| i.version)
}

fn main() {
    let versions = arg("--versions", 1_000_000);
    let reads = arg("--reads", 20);
    let dir = tempfile::tempdir().expect("a scratch directory");
    let backend = Arc::new(FjallBackend::open_path(dir.path()).expect("fjall"));
    let store = VersionedStore::open(backend).expect("store");
    let key = Key::new(Bytes::from_static(b"sensor/long")).expect("key");
    // A permutation of 0..versions: event times that follow no order.
    let prime = 1_000_003u64;
    let event_time = |v: u64| (v * prime) % versions;
    let value = Bytes::from(vec![b'x'; 100]);
    let started = Instant::now();
    let batch = 1_000;
    for first in (1..=versions).step_by(batch) {
        let cmds: Vec<Command> = (first..(first + batch as u64).min(versions + 1))
            .map(|v| {
                let mut put = PutRequest::new(key.clone(), value.clone());
                put.event_time_us = Some(event_time(v));
                Command {
                    ts: CommitTs::new(1_000_000 + v, 0),
                    op: Op::Kv(KvWrite::Put(put)),
                }
            })
            .collect();
        let refs: Vec<&Command> = cmds.iter().collect();
        store.apply_batch(&refs, Vec::new()).expect("apply");
    }
    println!(
        "wrote {versions} versions of one key in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let probes: Vec<u64> = (0..reads).map(|i| (i * 7_919_993) % versions).collect();
    let mut indexed = Duration::ZERO;
    let mut walking = Duration::ZERO;
    for &t in &probes {
        let started = Instant::now();
        let got = store
            .get(key.as_bytes(), ReadAt::EventTime(t))
            .expect("read")
            .map(|i| i.version);
        indexed += started.elapsed();
        let started = Instant::now();
        let want = walked(&store, key.as_bytes(), versions, t);
        walking += started.elapsed();
        assert_eq!(got, want, "event time {t}");
    }
    let per = |d: Duration| d.as_secs_f64() * 1e6 / reads as f64;
    println!(
        "a read by event time, {reads} reads: through the index {:.1} µs, walking every version {:.0} µs ({:.0}x)",
        per(indexed),
        per(walking),
        per(walking) / per(indexed).max(0.001)
    );
}
