//! The log store's tests: group commit, the tail, votes and purges.

use std::sync::mpsc as std_mpsc;
use std::time::Duration;

use super::*;

/// A flush callback and the receiver that learns its outcome.
fn signal() -> (
    IOFlushed<FirnRaft>,
    impl Future<Output = Option<io::Result<()>>>,
) {
    let (tx, rx) = <OneshotOf<FirnRaft> as Oneshot>::channel();
    (IOFlushed::signal(tx), async move { rx.await.ok() })
}

fn log_id(index: u64) -> LogId {
    log_id_in(1, index)
}

fn log_id_in(term: u64, index: u64) -> LogId {
    use openraft::vote::RaftLeaderId;
    LogId::new(
        openraft::alias::CommittedLeaderIdOf::<FirnRaft>::new(term, 1),
        index,
    )
}

/// Appends `entries` and waits until they are flushed.
async fn append_flushed(store: &mut FjallLogStore, entries: impl Iterator<Item = Entry> + Send) {
    let (cb, flushed) = signal();
    store.append(entries, cb).await.unwrap();
    assert!(matches!(flushed.await, Some(Ok(()))));
}

/// A log database at `dir` (journal fsyncs left to the group commit, as a node opens
/// it) and its group commit.
fn log_database(dir: &Path) -> (Database, Arc<GroupCommit>) {
    let db = Database::builder(dir)
        .manual_journal_persist(true)
        .open()
        .unwrap();
    let commit = GroupCommit::start(db.clone(), dir, Fsync::Always).unwrap();
    (db, commit)
}

/// A reader answered from the tail in memory sees what one reading the database sees,
/// across a truncation (a new leader's entries replacing the old ones) and a purge.
#[tokio::test]
async fn the_tail_in_memory_answers_as_the_database_does() {
    use openraft::entry::RaftEntry;

    let dir = tempfile::tempdir().unwrap();
    let (db, commit) = log_database(dir.path());
    let mut store = FjallLogStore::open(db.clone(), "g", Flush::Fsync(commit.clone())).unwrap();
    let mut reader = store.get_log_reader().await;
    // Opened afterwards, with a tail of its own that no append fills: it reads the database.
    let mut database = FjallLogStore::open(db, "g", Flush::Fsync(commit)).unwrap();
    let term = |t: u64, i: u64| Entry::new_blank(log_id_in(t, i));
    async fn same(reader: &mut FjallLogStore, database: &mut FjallLogStore, upto: u64) {
        for (from, to) in [
            (1, upto),
            (3, 8),
            (upto - 2, upto + 5),
            (upto + 1, upto + 3),
        ] {
            let cached = reader.try_get_log_entries(from..=to).await.unwrap();
            let stored = database.try_get_log_entries(from..=to).await.unwrap();
            assert_eq!(cached, stored, "entries {from}..={to}");
        }
    }

    append_flushed(&mut store, (1..=20).map(|i| term(1, i))).await;
    assert_eq!(reader.tail().get(&(1..)).map(|e| e.len()), Some(20));
    same(&mut reader, &mut database, 20).await;

    store.truncate_after(Some(log_id(12))).await.unwrap();
    same(&mut reader, &mut database, 12).await;
    append_flushed(&mut store, (13..=15).map(|i| term(2, i))).await;
    let read = reader.try_get_log_entries(12..).await.unwrap();
    assert_eq!(
        read.iter()
            .map(|e| e.log_id.leader_id.term)
            .collect::<Vec<_>>(),
        [1, 2, 2, 2]
    );
    same(&mut reader, &mut database, 15).await;

    store.purge(log_id(11)).await.unwrap();
    assert_eq!(reader.tail().get(&(11..)), None);
    let read = reader.try_get_log_entries(12..=15).await.unwrap();
    assert_eq!(read.len(), 4);
}

/// A sync that only counts its calls, and the count.
fn counting_sync() -> (
    Arc<std::sync::atomic::AtomicUsize>,
    impl FnMut() -> io::Result<()> + Send + 'static,
) {
    let syncs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = syncs.clone();
    (syncs, move || {
        counted.fetch_add(1, Ordering::SeqCst);
        Ok(())
    })
}

/// Saves a vote in a store over `flush` (its database at `dir`), reads it back, and returns
/// how many syncs `syncs` had counted when `save_vote` returned.
async fn save_a_vote(
    dir: &Path,
    flush: Flush,
    syncs: &std::sync::atomic::AtomicUsize,
) -> (FjallLogStore, usize) {
    let db = Database::builder(dir)
        .manual_journal_persist(true)
        .open()
        .unwrap();
    let mut store = FjallLogStore::open(db, "g", flush).unwrap();
    let vote = Vote::new(3, 2);
    store.save_vote(&vote).await.unwrap();
    let synced = syncs.load(Ordering::SeqCst);
    assert_eq!(store.read_vote().await.unwrap(), Some(vote));
    (store, synced)
}

/// A vote is saved by a group commit's fsync, and `save_vote` returns only after it.
#[tokio::test]
async fn a_vote_waits_for_a_group_commit_fsync() {
    let dir = tempfile::tempdir().unwrap();
    let (syncs, sync) = counting_sync();
    let commit = GroupCommit::start_with(sync).unwrap();
    let (_, synced) = save_a_vote(dir.path(), Flush::Fsync(commit), &syncs).await;
    assert_eq!(synced, 1);
}

/// A memory group's vote is made durable by the checkpoints' journal sync (which does not
/// hold the journal's lock through its fsync), once, before `save_vote` returns, and not
/// again by the next checkpoint (a vote is not an append).
#[tokio::test]
async fn a_memory_groups_vote_waits_for_the_checkpoints_sync() {
    let dir = tempfile::tempdir().unwrap();
    let (syncs, sync) = counting_sync();
    let checkpoints = Checkpoints::start_with(Duration::from_millis(10), sync).unwrap();
    let (_store, synced) = save_a_vote(dir.path(), Flush::Memory(checkpoints), &syncs).await;
    assert_eq!(synced, 1);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        syncs.load(Ordering::SeqCst),
        1,
        "nothing appended, nothing to checkpoint"
    );
}

/// A clean stop's last checkpoint syncs at once, without waiting for the thread's next
/// round, whatever was appended.
#[test]
fn the_last_checkpoint_syncs_now() {
    let (syncs, sync) = counting_sync();
    let checkpoints = Checkpoints::start_with(Duration::from_secs(3_600), sync).unwrap();
    // Nothing appended: the thread never syncs, only the calls below do.
    checkpoints.checkpoint().unwrap();
    assert_eq!(syncs.load(Ordering::SeqCst), 1);
    checkpoints.checkpoint().unwrap();
    assert_eq!(syncs.load(Ordering::SeqCst), 2);
}

/// Checkpoints run a thread only where there is something to make durable: on an in-memory
/// node (`Fsync::Never`) none runs, so none times a checkpoint that synced nothing.
#[test]
fn checkpoints_run_a_thread_only_where_they_sync() {
    let dir = tempfile::tempdir().unwrap();
    let (db, _commit) = log_database(dir.path());
    let every = Duration::from_millis(10);
    let memory = Checkpoints::start(db.clone(), dir.path(), every, Fsync::Never).unwrap();
    assert_eq!(
        Arc::weak_count(&memory),
        0,
        "a thread runs with nothing to sync"
    );
    let disk = Checkpoints::start(db, dir.path(), every, Fsync::Always).unwrap();
    assert_eq!(
        Arc::weak_count(&disk),
        1,
        "no checkpoint thread on a disk node"
    );
}

/// The entries a purge covers go in the background, in batches, and until they are gone
/// they do not count: the log state a restart reads starts after the purge point.
#[tokio::test]
async fn a_purge_removes_its_entries_in_the_background_and_leftovers_do_not_count() {
    use openraft::entry::RaftEntry;

    let dir = tempfile::tempdir().unwrap();
    let (db, commit) = log_database(dir.path());
    let mut store = FjallLogStore::open(db, "g", Flush::Fsync(commit)).unwrap();
    let last = 3 * PURGE_BATCH_ENTRIES as u64 + 10;
    append_flushed(&mut store, (1..=last).map(|i| Entry::new_blank(log_id(i)))).await;

    let purged = last - 5;
    store.purge(log_id(purged)).await.unwrap();
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(purged)));
    assert_eq!(state.last_log_id, Some(log_id(last)));

    // Gone within a bounded time, every batch of them; the entries after stay.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let first = store.log.first_key_value().map(|g| {
            let (k, _) = g.into_inner().unwrap();
            u64::from_be_bytes(k.as_ref().try_into().unwrap())
        });
        if first == Some(purged + 1) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "entries before {purged} remain: first {first:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let rest = store.try_get_log_entries(purged + 1..=last).await.unwrap();
    assert_eq!(rest.len(), 5);

    // A purge point recorded over entries not yet removed (a crash right after it was
    // recorded): they are not the log's last.
    store.put_meta(META_LAST_PURGED, &log_id(last)).unwrap();
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state.last_log_id, Some(log_id(last)));
    store.put_meta(META_LAST_PURGED, &log_id(last + 7)).unwrap();
    let state = store.get_log_state().await.unwrap();
    assert_eq!(
        state.last_log_id,
        Some(log_id(last + 7)),
        "a stored entry before the purge point counted as the last"
    );
}

#[tokio::test]
async fn a_burst_of_appends_waits_for_room_in_the_group_commit_queue_and_every_one_is_flushed() {
    // The "disk" syncs once per token on `gate`, and says when it has begun to.
    let (gate, gate_rx) = std_mpsc::channel::<()>();
    let (began, began_rx) = std_mpsc::channel::<()>();
    let commit = GroupCommit::start_with(move || {
        let _ = began.send(());
        gate_rx.recv().map_err(io::Error::other)
    })
    .unwrap();

    // The first append is taken by the fsync thread, which then waits on the disk.
    let mut flushed = Vec::new();
    let (cb, done) = signal();
    commit.enqueue(cb).await.unwrap();
    flushed.push(done);
    tokio::task::spawn_blocking(move || began_rx.recv().unwrap())
        .await
        .unwrap();

    // A full queue's worth is taken at once ...
    for _ in 0..GROUP_COMMIT_QUEUE_MAX {
        let (cb, done) = signal();
        tokio::time::timeout(Duration::from_secs(5), commit.enqueue(cb))
            .await
            .expect("an append waited while the queue had room")
            .unwrap();
        flushed.push(done);
    }
    // ... and one more waits while the disk is stuck.
    let (cb, done) = signal();
    let mut blocked = Box::pin(commit.enqueue(cb));
    flushed.push(done);
    assert!(
        tokio::time::timeout(Duration::from_millis(200), &mut blocked)
            .await
            .is_err(),
        "an append past {GROUP_COMMIT_QUEUE_MAX} queued ones did not wait"
    );

    // The disk moves: the waiting append gets in, and every append is reported flushed.
    for _ in 0..4 {
        gate.send(()).unwrap();
    }
    tokio::time::timeout(Duration::from_secs(5), blocked)
        .await
        .expect("the waiting append never got in")
        .unwrap();
    for done in flushed {
        let outcome = tokio::time::timeout(Duration::from_secs(5), done)
            .await
            .expect("an append was never reported flushed");
        assert!(matches!(outcome, Some(Ok(()))), "{outcome:?}");
    }
}
