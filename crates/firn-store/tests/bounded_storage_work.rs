//! Work the store hands to storage at once is bounded: bulk deletes commit in batches of at
//! most `BULK_BATCH_WRITES_MAX` writes, and replay a crash part-way through to the same state;
//! walks over a whole history read at most `HISTORY_PAGE_VERSIONS` versions at a time.

use firn_model::KvWrite;
use firn_store::SystemOp;
use std::io;
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use firn_model::{
    CommitTs, FirnError, Key, KeyRange, KeyspaceSpec, PutRequest, ReadAt, Response, TruncateBefore,
    WatchFrom,
};
use firn_store::backend::{Batch, Pair, Table, TableCut, TablePair};
use firn_store::store::{BULK_BATCH_WRITES_MAX, HISTORY_PAGE_VERSIONS};
use firn_store::{Command, MemoryBackend, Op, StorageBackend, VersionedStore};

/// A memory backend that records the work it is given, and can fail a write (a crash).
#[derive(Default)]
struct RecordingBackend {
    inner: MemoryBackend,
    writes: AtomicUsize,
    largest_batch: AtomicUsize,
    /// The most versions one range read returned.
    largest_versions_read: AtomicUsize,
    /// Fails the write with this number (1-based) and every one after it; 0: never.
    fail_from_write: AtomicUsize,
}

impl RecordingBackend {
    /// Forgets what was recorded so far.
    fn reset(&self) {
        self.writes.store(0, Ordering::SeqCst);
        self.largest_batch.store(0, Ordering::SeqCst);
        self.largest_versions_read.store(0, Ordering::SeqCst);
    }
}

impl StorageBackend for RecordingBackend {
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
        let pairs = self.inner.range(table, lower, upper, reverse, limit)?;
        if table == Table::Versions {
            self.largest_versions_read
                .fetch_max(pairs.len(), Ordering::SeqCst);
        }
        Ok(pairs)
    }

    fn write(&self, batch: Batch) -> io::Result<()> {
        let n = self.writes.fetch_add(1, Ordering::SeqCst) + 1;
        let fail_from = self.fail_from_write.load(Ordering::SeqCst);
        if fail_from > 0 && n >= fail_from {
            return Err(io::Error::other("the node crashed"));
        }
        self.largest_batch.fetch_max(batch.len(), Ordering::SeqCst);
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

fn key(s: &str) -> Key {
    Key::new(Bytes::copy_from_slice(s.as_bytes())).unwrap()
}

fn cmd(wall_us: u64, op: Op) -> Command {
    Command {
        ts: CommitTs::new(wall_us, 0),
        op,
    }
}

/// Applies `op` at `wall_us` with an applied position `applied` as the Raft glue would.
fn apply(store: &VersionedStore, wall_us: u64, op: Op) -> Result<Response, FirnError> {
    store.apply(
        &cmd(wall_us, op),
        vec![(b"applied".to_vec(), wall_us.to_be_bytes().to_vec())],
    )
}

fn recording_store() -> (Arc<RecordingBackend>, VersionedStore) {
    let backend = Arc::new(RecordingBackend::default());
    let store = VersionedStore::open(backend.clone()).unwrap();
    (backend, store)
}

/// `count` keys `{prefix}{i}`, each written `versions` times, from `wall_us` on.
fn fill(store: &VersionedStore, prefix: &str, count: usize, versions: usize, wall_us: u64) {
    for round in 0..versions {
        // MSet in chunks, as the router splits requests.
        for chunk in (0..count).collect::<Vec<_>>().chunks(1_000) {
            let items = chunk
                .iter()
                .map(|i| {
                    (
                        key(&format!("{prefix}{i:06}")),
                        Bytes::from(format!("{round}")),
                    )
                })
                .collect();
            apply(
                store,
                wall_us + round as u64,
                Op::Kv(KvWrite::MSet { items }),
            )
            .unwrap();
        }
    }
}

fn table_len(backend: &RecordingBackend, table: Table) -> usize {
    backend
        .range(table, Bound::Unbounded, Bound::Unbounded, false, usize::MAX)
        .unwrap()
        .len()
}

#[test]
fn flushall_writes_at_most_the_bulk_bound_per_batch_and_leaves_no_key() {
    let (backend, store) = recording_store();
    let keys = 3 * BULK_BATCH_WRITES_MAX;
    fill(&store, "k", keys, 1, 1_000);
    backend.reset();

    assert_eq!(
        apply(&store, 10_000, Op::Kv(KvWrite::FlushAll)).unwrap(),
        Response::Done
    );

    let largest = backend.largest_batch.load(Ordering::SeqCst);
    assert!(
        largest <= BULK_BATCH_WRITES_MAX,
        "a batch held {largest} writes; the bound is {BULK_BATCH_WRITES_MAX}"
    );
    // 2 × keys removals (metadata and one version each) and the bookkeeping.
    assert!(backend.writes.load(Ordering::SeqCst) >= 2 * keys / BULK_BATCH_WRITES_MAX);
    assert_eq!(table_len(&backend, Table::KeyMeta), 0);
    assert_eq!(table_len(&backend, Table::Versions), 0);
    assert_eq!(store.live_keys(), 0);
    let page = store.scan(b"", None, 100, None, ReadAt::Latest).unwrap();
    assert!(page.keys.is_empty());
    assert_eq!(
        store.system_get(b"applied").unwrap().unwrap(),
        10_000u64.to_be_bytes()
    );
}

#[test]
fn prefix_truncate_and_age_retention_write_bounded_batches_and_remove_the_same_versions() {
    let (backend, store) = recording_store();
    let keys = BULK_BATCH_WRITES_MAX;
    fill(&store, "p/", keys, 3, 1_000);
    fill(&store, "q/", 10, 3, 1_000);
    backend.reset();

    let removed = apply(
        &store,
        10_000,
        Op::Kv(KvWrite::Truncate {
            target: KeyRange::Prefix("p/".into()),
            before: TruncateBefore::Version(3),
        }),
    )
    .unwrap();
    assert_eq!(
        removed,
        Response::Truncated {
            versions_removed: 2 * keys as u64
        }
    );
    let largest = backend.largest_batch.load(Ordering::SeqCst);
    assert!(
        largest <= BULK_BATCH_WRITES_MAX,
        "a batch held {largest} writes"
    );
    assert!(backend.writes.load(Ordering::SeqCst) >= 3);
    for i in [0, keys / 2, keys - 1] {
        let history = store
            .history(format!("p/{i:06}").as_bytes(), 1, None, 10, None)
            .unwrap();
        assert_eq!(history.iter().map(|v| v.version).collect::<Vec<_>>(), [3]);
    }
    assert_eq!(
        store.history(b"q/000000", 1, None, 10, None).unwrap().len(),
        3
    );

    // Age retention over the other prefix: each key keeps only its newest version.
    let spec = KeyspaceSpec {
        prefix: "q/".into(),
        max_age_us: Some(1_000),
        ..KeyspaceSpec::default_keyspace()
    };
    apply(&store, 10_001, Op::System(SystemOp::KeyspaceCreate(spec))).unwrap();
    backend.reset();
    let removed = apply(&store, 20_000, Op::System(SystemOp::ExpireByAge)).unwrap();
    assert_eq!(
        removed,
        Response::Truncated {
            versions_removed: 20
        }
    );
    assert!(backend.largest_batch.load(Ordering::SeqCst) <= BULK_BATCH_WRITES_MAX);
    assert_eq!(
        store.history(b"q/000009", 1, None, 10, None).unwrap().len(),
        1
    );
}

#[test]
fn truncating_one_long_history_writes_bounded_batches() {
    let (backend, store) = recording_store();
    let versions = 2 * BULK_BATCH_WRITES_MAX + BULK_BATCH_WRITES_MAX / 2;
    for i in 0..versions {
        apply(
            &store,
            1_000 + i as u64,
            Op::Kv(KvWrite::MSet {
                items: vec![(key("long"), Bytes::from("v"))],
            }),
        )
        .unwrap();
    }
    backend.reset();
    let removed = apply(
        &store,
        1_000_000,
        Op::Kv(KvWrite::Truncate {
            target: KeyRange::Key(key("long")),
            before: TruncateBefore::Time(CommitTs::new(1_000 + versions as u64 - 1, 0)),
        }),
    )
    .unwrap();
    assert_eq!(
        removed,
        Response::Truncated {
            versions_removed: versions as u64 - 1
        }
    );
    assert!(backend.largest_batch.load(Ordering::SeqCst) <= BULK_BATCH_WRITES_MAX);
    assert_eq!(store.history(b"long", 1, None, 10, None).unwrap().len(), 1);
}

/// Applies `setup`, then `bulk` with storage failing at its `crash_at`th batch, reopens the
/// store and applies `bulk` again (Raft replays an entry whose applied position was not
/// stored): the state must equal a store that applied `bulk` once without a crash.
fn replay_after_crash_matches_one_clean_apply(
    setup: impl Fn(&VersionedStore),
    bulk: Command,
    crash_at: usize,
) {
    let (clean_backend, clean) = recording_store();
    setup(&clean);
    clean
        .apply(&bulk, vec![(b"applied".to_vec(), b"bulk".to_vec())])
        .unwrap();

    let (backend, store) = recording_store();
    setup(&store);
    backend.reset();
    backend.fail_from_write.store(crash_at, Ordering::SeqCst);
    let crashed = store.apply(&bulk, vec![(b"applied".to_vec(), b"bulk".to_vec())]);
    assert!(crashed.is_err(), "the crash did not happen: {crashed:?}");
    assert!(
        backend.writes.load(Ordering::SeqCst) >= crash_at,
        "the command committed in fewer than {crash_at} batches"
    );
    assert_ne!(
        store.system_get(b"applied").unwrap().as_deref(),
        Some(&b"bulk"[..]),
        "the applied position was stored before the command finished"
    );

    backend.fail_from_write.store(0, Ordering::SeqCst);
    let reopened = VersionedStore::open(backend.clone()).unwrap();
    reopened
        .apply(&bulk, vec![(b"applied".to_vec(), b"bulk".to_vec())])
        .unwrap();
    assert_eq!(
        backend.dump().unwrap().tables,
        clean_backend.dump().unwrap().tables
    );
    assert_eq!(reopened.live_keys(), clean.live_keys());
    assert_eq!(reopened.last_commit_ts(), clean.last_commit_ts());
}

#[test]
fn a_bulk_delete_cut_short_by_a_crash_applies_again_to_the_same_state() {
    let setup = |store: &VersionedStore| {
        fill(store, "p/", BULK_BATCH_WRITES_MAX, 3, 1_000);
        fill(store, "q/", 100, 2, 1_000);
    };
    replay_after_crash_matches_one_clean_apply(setup, cmd(10_000, Op::Kv(KvWrite::FlushAll)), 2);
    replay_after_crash_matches_one_clean_apply(
        setup,
        cmd(
            10_000,
            Op::Kv(KvWrite::Truncate {
                target: KeyRange::Prefix("p/".into()),
                before: TruncateBefore::Time(CommitTs::new(1_002, 0)),
            }),
        ),
        2,
    );
    // One key's history spread over several batches, cut between them.
    let long = |store: &VersionedStore| {
        for i in 0..2 * BULK_BATCH_WRITES_MAX as u64 {
            apply(
                store,
                1_000 + i,
                Op::Kv(KvWrite::MSet {
                    items: vec![(key("long"), Bytes::from("v"))],
                }),
            )
            .unwrap();
        }
    };
    replay_after_crash_matches_one_clean_apply(
        long,
        cmd(
            1_000_000,
            Op::Kv(KvWrite::Truncate {
                target: KeyRange::Key(key("long")),
                before: TruncateBefore::Time(CommitTs::new(
                    1_000 + 2 * BULK_BATCH_WRITES_MAX as u64 - 1,
                    0,
                )),
            }),
        ),
        2,
    );
}

/// Asserts that no range read since the last reset returned more than a page of versions.
fn assert_paged(backend: &RecordingBackend, what: &str) {
    let largest = backend.largest_versions_read.load(Ordering::SeqCst);
    assert!(
        largest <= HISTORY_PAGE_VERSIONS,
        "{what} read {largest} versions at once; a page is {HISTORY_PAGE_VERSIONS}"
    );
    backend.reset();
}

#[test]
fn walks_over_a_long_history_read_a_page_of_versions_at_a_time_and_answer_the_same() {
    let (backend, store) = recording_store();
    let versions = 5 * HISTORY_PAGE_VERSIONS as u64;
    // Event times out of order (a permutation of 0..versions, times 10), stamps in order.
    let event_time = |v: u64| (v * 37 % versions) * 10;
    for v in 1..=versions {
        let mut put = PutRequest::new(key("h/long"), Bytes::from(format!("{v}")));
        put.event_time_us = Some(event_time(v));
        apply(&store, 1_000 + v, Op::Kv(KvWrite::Put(put))).unwrap();
    }
    let stamp = |v: u64| {
        store
            .get(b"h/long", ReadAt::Version(v))
            .unwrap()
            .unwrap()
            .commit_ts
    };
    let stamps: Vec<CommitTs> = (1..=versions).map(stamp).collect();
    backend.reset();

    // Reads by event time: the greatest event time not after t, checked against a model.
    for t in (0..=versions * 10).step_by(7) {
        let expected = (1..=versions)
            .filter(|v| event_time(*v) <= t)
            .max_by_key(|v| event_time(*v));
        let got = store.get(b"h/long", ReadAt::EventTime(t)).unwrap();
        assert_eq!(got.map(|i| i.version), expected, "event time {t}");
    }
    assert_paged(&backend, "a read by event time");

    let page = store
        .scan(b"h/", None, 10, None, ReadAt::EventTime(versions * 10))
        .unwrap();
    assert_eq!(page.keys.len(), 1);
    assert_paged(&backend, "a scan by event time");

    // Replay from a time and from a version: every version from there, in order.
    let from = stamps[HISTORY_PAGE_VERSIONS + 3];
    let target = KeyRange::Key(key("h/long"));
    let events = store.replay(&target, WatchFrom::Time(from)).unwrap();
    let replayed: Vec<u64> = events.iter().map(|e| e.info.version).collect();
    let expected: Vec<u64> = (HISTORY_PAGE_VERSIONS as u64 + 4..=versions).collect();
    assert_eq!(replayed, expected);
    assert_paged(&backend, "a replay from a time");
    let events = store.replay(&target, WatchFrom::Version(2)).unwrap();
    assert_eq!(events.len() as u64, versions - 1);
    assert_paged(&backend, "a replay from a version");

    // Truncate by time: everything stamped before the cut goes.
    let cut = stamps[3 * HISTORY_PAGE_VERSIONS];
    let removed = apply(
        &store,
        1_000_000,
        Op::Kv(KvWrite::Truncate {
            target: KeyRange::Key(key("h/long")),
            before: TruncateBefore::Time(cut),
        }),
    )
    .unwrap();
    assert_eq!(
        removed,
        Response::Truncated {
            versions_removed: 3 * HISTORY_PAGE_VERSIONS as u64
        }
    );
    assert_paged(&backend, "a truncate by time");
    let oldest = store.history(b"h/long", 1, None, 1, None).unwrap();
    assert_eq!(oldest[0].version, 3 * HISTORY_PAGE_VERSIONS as u64 + 1);
}
