//! A replica whose state machine storage is slow: long applies must not stall the runtime,
//! and reads waiting behind them are bounded.

mod common;

use firn_model::KvWrite;
use std::io;
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use firn_model::{FirnError, Response};
use firn_raft::ShardReplica;
use firn_raft::log_store::Fsync;
use firn_raft::shard::READ_ROUND_WAITERS_MAX;
use firn_store::backend::{Batch, Pair, Table, TableCut, TablePair};
use firn_store::{MemoryBackend, Op, StorageBackend};

/// A memory backend whose writes take `write_delay_ms` each: a slow disk, or a long batch.
#[derive(Default)]
struct SlowBackend {
    inner: MemoryBackend,
    write_delay_ms: AtomicU64,
}

impl StorageBackend for SlowBackend {
    fn get(&self, table: Table, key: &[u8]) -> io::Result<Option<Vec<u8>>> {
        self.inner.get(table, key)
    }

    fn range(
        &self,
        table: Table,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        reverse: bool,
        limit: usize,
    ) -> io::Result<Vec<Pair>> {
        self.inner.range(table, lower, upper, reverse, limit)
    }

    fn write(&self, batch: Batch) -> io::Result<()> {
        let delay = self.write_delay_ms.load(Ordering::Relaxed);
        if delay > 0 {
            // A blocking sleep, as a long storage batch blocks its thread.
            std::thread::sleep(Duration::from_millis(delay));
        }
        self.inner.write(batch)
    }

    fn persist(&self) -> io::Result<()> {
        self.inner.persist()
    }

    fn is_durable(&self) -> bool {
        self.inner.is_durable()
    }

    fn cut(&self) -> io::Result<Arc<dyn TableCut>> {
        self.inner.cut()
    }

    fn load_each(&self, next: &mut dyn FnMut() -> io::Result<Option<TablePair>>) -> io::Result<()> {
        self.inner.load_each(next)
    }
}

async fn open(dir: &std::path::Path, backend: Arc<SlowBackend>) -> ShardReplica {
    let db = fjall::Database::builder(dir.join("db")).open().unwrap();
    common::open_single(dir, db, backend, Fsync::Never).await
}

/// One worker thread: a long apply (a FLUSHALL: a bulk delete) on the worker would stop
/// every other task until it ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_long_apply_leaves_the_async_worker_free_for_other_tasks() {
    const APPLY_MS: u64 = 1_000;
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(SlowBackend::default());
    let replica = Arc::new(open(dir.path(), backend.clone()).await);

    // A ticker on the runtime's only worker records when it runs.
    let ticks = Arc::new(std::sync::Mutex::new(Vec::<Instant>::new()));
    let ticker = tokio::spawn({
        let ticks = ticks.clone();
        async move {
            let mut every = tokio::time::interval(Duration::from_millis(5));
            loop {
                every.tick().await;
                ticks.lock().unwrap().push(Instant::now());
            }
        }
    });

    backend.write_delay_ms.store(APPLY_MS, Ordering::Relaxed);
    let started = Instant::now();
    let write = tokio::spawn({
        let replica = replica.clone();
        async move { replica.write(Op::Kv(KvWrite::FlushAll)).await }
    });
    let written = write.await.unwrap().unwrap();
    assert!(matches!(written, Response::Done), "{written:?}");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(APPLY_MS),
        "the write did not wait for its slow apply ({took:?})"
    );
    backend.write_delay_ms.store(0, Ordering::Relaxed);
    ticker.abort();

    let during: Vec<Instant> = ticks
        .lock()
        .unwrap()
        .iter()
        .copied()
        .filter(|t| *t >= started)
        .collect();
    let largest_gap = during.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(took);
    assert!(
        largest_gap < Duration::from_millis(APPLY_MS / 4),
        "the ticker stalled for {largest_gap:?} while a {APPLY_MS} ms apply ran ({} ticks)",
        during.len()
    );
    replica.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_past_the_waiting_bound_of_a_stuck_read_round_are_told_to_try_again() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(SlowBackend::default());
    let replica = Arc::new(open(dir.path(), backend.clone()).await);

    // A write commits and then applies slowly: a ReadIndex round waits for that apply.
    backend.write_delay_ms.store(1_500, Ordering::Relaxed);
    let write = tokio::spawn({
        let replica = replica.clone();
        async move { replica.write(Op::Kv(KvWrite::FlushAll)).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let first = tokio::spawn({
        let replica = replica.clone();
        async move { replica.linearizable_barrier(false).await }
    });
    // The first read's round is running (and stuck); a burst waits for the next one.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let extra = 10;
    let burst = futures::future::join_all(
        (0..READ_ROUND_WAITERS_MAX + extra).map(|_| replica.linearizable_barrier(false)),
    )
    .await;
    backend.write_delay_ms.store(0, Ordering::Relaxed);

    let refused = burst
        .iter()
        .filter(|r| matches!(r, Err(FirnError::Busy(_))))
        .count();
    let served = burst.iter().filter(|r| r.is_ok()).count();
    assert_eq!(refused, extra, "reads past the bound must be told to retry");
    assert_eq!(
        served, READ_ROUND_WAITERS_MAX,
        "every read within the bound is served"
    );
    first.await.unwrap().unwrap();
    write.await.unwrap().unwrap();
    replica.shutdown().await;
}
