//! CPU time of applying puts to a state machine on fjall, alone in one thread: what a put
//! costs each replica's apply, without the network, Raft or other processes in the way.
//!
//! Applies `--puts` puts (100-byte values) over `--keys` random keys in batches of `--batch`
//! commands (about what a replica applies at a time under load), after a warm-up of the same
//! size, and prints µs of thread CPU per put.
//!
//! Usage: cargo run --release -p firn-store --example apply_cost -- [--puts N] [--keys K] [--batch B]

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use firn_model::{CommitTs, Key, KvWrite, PutRequest};
use firn_store::{Command, FjallBackend, Op, VersionedStore};

/// The allocator `firn` runs with.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| v.parse().expect("a number"))
}

/// This thread's CPU time so far.
fn thread_cpu() -> std::time::Duration {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("/proc");
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    std::time::Duration::from_millis(ticks * 10)
}

fn main() {
    let puts = arg("--puts", 400_000);
    let keys = arg("--keys", 100_000);
    let batch = arg("--batch", 8) as usize;
    let dir = tempfile::tempdir().expect("a temp dir");
    // As a node opens its state databases: the journal is written out when a snapshot
    // persists the state, not on each batch.
    let db = fjall::Database::builder(dir.path())
        .manual_journal_persist(true)
        .open()
        .expect("fjall");
    let backend = FjallBackend::open(db, dir.path(), "shard0").expect("fjall");
    let store = VersionedStore::open(Arc::new(backend)).expect("store");
    let value = Bytes::from(vec![b'x'; 100]);
    // A small xorshift: the same keys every run.
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut wall = 1_000_000u64;
    let mut run = |n: u64| {
        let mut done = 0;
        while done < n {
            let cmds: Vec<Command> = (0..batch)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    wall += 1;
                    let key = Key::new(format!("key:{:012}", seed % keys)).unwrap();
                    Command {
                        ts: CommitTs::new(wall, 0),
                        op: Op::Kv(KvWrite::Put(PutRequest::new(key, value.clone()))),
                    }
                })
                .collect();
            let refs: Vec<&Command> = cmds.iter().collect();
            // The applied log position, as the Raft state machine writes with each batch.
            let applied = vec![(b"applied".to_vec(), wall.to_be_bytes().repeat(3))];
            store.apply_batch(&refs, applied).expect("apply");
            done += batch as u64;
        }
    };
    run(puts);
    let (cpu, started) = (thread_cpu(), Instant::now());
    run(puts);
    let (cpu, wall) = (thread_cpu() - cpu, started.elapsed());
    println!(
        "{puts} puts over {keys} keys in batches of {batch}: {:.2} µs CPU a put ({:.2} µs wall)",
        cpu.as_secs_f64() * 1e6 / puts as f64,
        wall.as_secs_f64() * 1e6 / puts as f64
    );
}
