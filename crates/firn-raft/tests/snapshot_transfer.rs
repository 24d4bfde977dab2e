//! A new replica catches up through a snapshot sent in many chunks, a transfer cut off
//! part-way goes on where it stopped, a receiver refuses chunks that do not continue its
//! transfer, and a replica that fell less far behind than
//! the entries kept behind a snapshot catches up from the log. The chunk size is scaled down so that a small
//! snapshot travels in hundreds of chunks (it is process-wide: this file's tests all use it).

mod link;
mod nodes;

use firn_model::KvWrite;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use firn_model::{Key, PutRequest, Response};
use firn_raft::ShardReplica;
use firn_raft::peer::{LocalGroups, PeerError, PeerPool, PeerRequest, PeerResponse};
use firn_raft::snapshot::SnapshotFile;
use firn_raft::snapshot_transfer::{self, SnapshotChunk, SnapshotChunkAnswer, SnapshotRoom};
use firn_raft::types::{SnapshotMeta, Vote};
use firn_store::Op;
use link::Dropping;
use nodes::{Node, listeners, start, start_keeping, start_on};
use openraft::raft::VoteRequest;
use tokio::net::TcpListener;

const CHUNK_BYTES: usize = 4 * 1024;

/// Writes `keys` keys of `value_bytes` each, `concurrency` at a time.
async fn fill(replica: &ShardReplica, keys: usize, value_bytes: usize, concurrency: usize) {
    for start in (0..keys).step_by(concurrency) {
        let writes = (start..keys.min(start + concurrency)).map(|i| {
            let value = Bytes::from(vec![(i % 251) as u8; value_bytes]);
            let key = Key::new(Bytes::from(format!("key{i:08}"))).unwrap();
            replica.write(Op::Kv(KvWrite::Put(PutRequest::new(key, value))))
        });
        for answer in futures::future::join_all(writes).await {
            assert!(matches!(answer.unwrap(), Response::Written(_)));
        }
    }
}

/// Builds a snapshot on `replica` and waits until the log before it is purged (so that a
/// new replica can only catch up through the snapshot).
async fn snapshot_and_purge(replica: &ShardReplica) -> u64 {
    replica.snapshot_now().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(purged) = replica.status().purged_index {
            return purged;
        }
        assert!(
            Instant::now() < deadline,
            "no purge: {:?}",
            replica.status()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until `follower` has applied everything `leader` has.
async fn caught_up(leader: &ShardReplica, follower: &ShardReplica) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while follower.status().last_applied_index != leader.status().last_applied_index {
        assert!(
            Instant::now() < deadline,
            "not caught up: leader {:?}, follower {:?}",
            leader.status(),
            follower.status()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn unfinished_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".incoming.") || n.contains(".sending.") || n.ends_with(".building"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_replica_catches_up_through_a_snapshot_sent_in_many_chunks() {
    snapshot_transfer::set_chunk_bytes(CHUNK_BYTES);
    let dir = tempfile::tempdir().unwrap();
    let (mut bound, addrs) = listeners(&[1, 2, 3]).await;
    let n1 = start(1, &dir.path().join("n1"), bound.remove(0), &addrs).await;
    fill(&n1.replica, 2_000, 600, 100).await;
    let purged = snapshot_and_purge(&n1.replica).await;
    // The leader's state on disk is its snapshot: a file is written only to send it.
    assert!(!n1.snapshot_dir.join("shard0.snapshot").exists());

    let n2 = start(2, &dir.path().join("n2"), bound.remove(0), &addrs).await;
    n1.replica.add_learner(2, &addrs[&2], true).await.unwrap();
    caught_up(&n1.replica, &n2.replica).await;

    let status = n2.replica.status();
    assert!(
        status.snapshot_index >= Some(purged),
        "the learner did not install the snapshot: {status:?}"
    );
    let leader = n1.replica.store().backend().dump().unwrap();
    let learner = n2.replica.store().backend().dump().unwrap();
    assert!(
        leader == learner,
        "the learner's tables differ from the leader's"
    );
    // The received file became the learner's snapshot; nothing partial is left beside it,
    // nor beside the leader's.
    let (meta, file) = SnapshotFile::open(&n2.snapshot_dir.join("shard0.snapshot")).unwrap();
    assert!(meta.last_log_id.map(|l| l.index) >= Some(purged));
    let chunks = file.bytes().div_ceil(CHUNK_BYTES as u64);
    assert!(chunks >= 200, "a snapshot of {} bytes", file.bytes());
    assert_eq!(unfinished_files(&n2.snapshot_dir), Vec::<String>::new());
    assert_eq!(unfinished_files(&n1.snapshot_dir), Vec::<String>::new());

    // The state moves on, but no snapshot is built: the next replica is sent the file the
    // leader wrote for the first (it still reaches the purge point), not a new one.
    fill(&n1.replica, 50, 100, 50).await;
    let n3 = start(3, &dir.path().join("n3"), bound.remove(0), &addrs).await;
    n1.replica.add_learner(3, &addrs[&3], true).await.unwrap();
    caught_up(&n1.replica, &n3.replica).await;
    let (again, _) = SnapshotFile::open(&n3.snapshot_dir.join("shard0.snapshot")).unwrap();
    assert_eq!(again, meta, "the leader wrote its state out again");
    let learner = n3.replica.store().backend().dump().unwrap();
    let leader = n1.replica.store().backend().dump().unwrap();
    assert!(leader == learner, "the second learner's tables differ");

    n3.replica.shutdown().await;
    n2.replica.shutdown().await;
    n1.replica.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_behind_by_fewer_entries_than_kept_catches_up_from_the_log() {
    const KEPT: u64 = 150;
    let dir = tempfile::tempdir().unwrap();
    let (mut bound, addrs) = listeners(&[1, 2]).await;
    let n1 = start_keeping(1, &dir.path().join("n1"), bound.remove(0), &addrs, KEPT).await;
    let n2_dir = dir.path().join("n2");
    let n2 = start_keeping(2, &n2_dir, bound.remove(0), &addrs, KEPT).await;
    n1.replica.add_learner(2, &addrs[&2], true).await.unwrap();
    fill(&n1.replica, 300, 100, 50).await;
    caught_up(&n1.replica, &n2.replica).await;

    // The learner stops; the leader writes on and snapshots, its purge leaving `KEPT`
    // entries behind the snapshot, more than the learner missed.
    n2.replica.shutdown().await;
    drop(n2);
    fill(&n1.replica, 100, 100, 50).await;
    let purged = snapshot_and_purge(&n1.replica).await;
    let status = n1.replica.status();
    assert_eq!(
        Some(purged + KEPT),
        status.snapshot_index,
        "the purge did not keep {KEPT} entries behind the snapshot: {status:?}"
    );

    // Back again (the fsync thread first drops its database handle), it is sent the
    // entries it missed: it installs no snapshot.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let listener = TcpListener::bind(&addrs[&2]).await.unwrap();
    let n2 = start_keeping(2, &n2_dir, listener, &addrs, KEPT).await;
    caught_up(&n1.replica, &n2.replica).await;
    // Its own snapshot is its state as it restarted (a state on disk is its snapshot); one
    // sent by the leader would reach the leader's, and leave its file.
    let status = n2.replica.status();
    assert!(
        status.snapshot_index < Some(purged + KEPT),
        "the learner was sent a snapshot: {status:?}"
    );
    assert!(!n2.snapshot_dir.join("shard0.snapshot").exists());
    let leader = n1.replica.store().backend().dump().unwrap();
    let learner = n2.replica.store().backend().dump().unwrap();
    assert!(leader == learner, "the learner's tables differ");

    n2.replica.shutdown().await;
    n1.replica.shutdown().await;
}

/// A disk whose room for snapshots is switched by hand.
#[derive(Default)]
struct SwitchedRoom {
    room: AtomicBool,
    asked: AtomicU64,
}

impl SnapshotRoom for SwitchedRoom {
    fn room_for_snapshot(&self, bytes: u64) -> Result<(), String> {
        self.asked.fetch_add(1, Ordering::Relaxed);
        match self.room.load(Ordering::Relaxed) {
            true => Ok(()),
            false => Err(format!("no room for {bytes} bytes")),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_without_room_writes_nothing_and_takes_the_snapshot_once_it_has_room() {
    snapshot_transfer::set_chunk_bytes(CHUNK_BYTES);
    let dir = tempfile::tempdir().unwrap();
    let (mut bound, addrs) = listeners(&[1, 2]).await;
    let n1 = start(1, &dir.path().join("n1"), bound.remove(0), &addrs).await;
    fill(&n1.replica, 200, 200, 50).await;
    let purged = snapshot_and_purge(&n1.replica).await;

    let room = Arc::new(SwitchedRoom::default());
    let groups = LocalGroups::with_snapshot_room(room.clone());
    let pool = PeerPool::new(2, addrs.clone());
    let n2 = start_on(
        2,
        &dir.path().join("n2"),
        bound.remove(0),
        &addrs,
        0,
        groups,
        pool,
    )
    .await;
    n1.replica.add_learner(2, &addrs[&2], false).await.unwrap();
    // Asked, refused, and asked again only after the sender's wait, not at openraft's
    // backoff (200 ms): one offer, perhaps two, in 3 s.
    let deadline = Instant::now() + Duration::from_secs(20);
    while room.asked.load(Ordering::Relaxed) == 0 {
        assert!(Instant::now() < deadline, "the snapshot was never offered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let offers = room.asked.load(Ordering::Relaxed);
    assert!(offers <= 2, "offered {offers} times in 3 s");
    // Nothing was written: no partial file, nothing applied.
    assert_eq!(unfinished_files(&n2.snapshot_dir), Vec::<String>::new());
    assert!(!n2.snapshot_dir.join("shard0.snapshot").exists());
    assert_eq!(n2.replica.status().last_applied_index, None);

    // Room again: the next offer is taken.
    room.room.store(true, Ordering::Relaxed);
    caught_up(&n1.replica, &n2.replica).await;
    assert!(n2.replica.status().snapshot_index >= Some(purged));
    let leader = n1.replica.store().backend().dump().unwrap();
    let learner = n2.replica.store().backend().dump().unwrap();
    assert!(leader == learner, "the learner's tables differ");

    n2.replica.shutdown().await;
    n1.replica.shutdown().await;
}

/// Starts node 1 (see [`start`]), its connections to peers dropping each time one has sent
/// `after` bytes, `times` in all; with the count of drops so far.
async fn start_dropping(
    dir: &Path,
    listener: TcpListener,
    addrs: &HashMap<u64, String>,
    after: u64,
    times: u64,
) -> (Node, Arc<AtomicU64>) {
    let drops = Arc::new(AtomicU64::new(0));
    let link = Dropping {
        after,
        times,
        drops: drops.clone(),
    };
    let pool = link.pool(1, addrs);
    let node = start_on(1, dir, listener, addrs, 0, LocalGroups::default(), pool).await;
    (node, drops)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_cut_off_part_way_goes_on_where_it_stopped() {
    snapshot_transfer::set_chunk_bytes(CHUNK_BYTES);
    let dir = tempfile::tempdir().unwrap();
    let (mut bound, addrs) = listeners(&[1, 2]).await;
    // The leader's connection drops once, 256 KiB into the transfer.
    let n1_dir = dir.path().join("n1");
    let (n1, drops) = start_dropping(&n1_dir, bound.remove(0), &addrs, 256 * 1024, 1).await;
    fill(&n1.replica, 2_000, 600, 100).await;
    let purged = snapshot_and_purge(&n1.replica).await;

    let groups = LocalGroups::default();
    let pool = PeerPool::new(2, addrs.clone());
    let n2 = start_on(
        2,
        &dir.path().join("n2"),
        bound.remove(0),
        &addrs,
        0,
        groups.clone(),
        pool,
    )
    .await;
    n1.replica.add_learner(2, &addrs[&2], false).await.unwrap();
    caught_up(&n1.replica, &n2.replica).await;

    assert_eq!(drops.load(Ordering::SeqCst), 1, "the link never dropped");
    // One transfer, gone on with after the drop: a second would have started from 0.
    assert_eq!(
        groups.snapshot_transfers_begun(),
        1,
        "the transfer started again from 0"
    );
    assert!(n2.replica.status().snapshot_index >= Some(purged));
    let leader = n1.replica.store().backend().dump().unwrap();
    let learner = n2.replica.store().backend().dump().unwrap();
    assert!(leader == learner, "the learner's tables differ");
    assert_eq!(unfinished_files(&n2.snapshot_dir), Vec::<String>::new());

    n2.replica.shutdown().await;
    n1.replica.shutdown().await;
}

fn chunk(meta: &SnapshotMeta, whole: &[u8], offset: usize) -> PeerRequest {
    let end = (offset + CHUNK_BYTES).min(whole.len());
    PeerRequest::SnapshotChunk(SnapshotChunk {
        shard: 0,
        vote: Vote::new(1, 1),
        meta: meta.clone(),
        total_bytes: whole.len() as u64,
        offset: offset as u64,
        bytes: whole[offset..end].to_vec(),
    })
}

async fn refusal(pool: &PeerPool, request: PeerRequest) -> String {
    match pool.call(2, request, Duration::from_secs(5)).await {
        Err(PeerError::Remote(_, why)) => why,
        other => panic!("not refused: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_that_does_not_continue_the_transfer_is_refused_and_the_partial_file_discarded() {
    snapshot_transfer::set_chunk_bytes(CHUNK_BYTES);
    let dir = tempfile::tempdir().unwrap();
    // A snapshot file to send by hand: node 1's, of a few chunks.
    let (mut bound, addrs) = listeners(&[1, 2]).await;
    let n1 = start(1, &dir.path().join("n1"), bound.remove(0), &addrs).await;
    fill(&n1.replica, 100, 200, 50).await;
    snapshot_and_purge(&n1.replica).await;
    let path = dir.path().join("by-hand.snapshot");
    let (meta, _) =
        firn_raft::snapshot::build(n1.replica.store().backend().as_ref(), &path).unwrap();
    let whole = std::fs::read(&path).unwrap();
    assert!(whole.len() > 3 * CHUNK_BYTES);
    let n2 = start(2, &dir.path().join("n2"), bound.remove(0), &addrs).await;
    let pool = &n1.pool;

    // No transfer in progress: only offset 0 may start one.
    let why = refusal(pool, chunk(&meta, &whole, CHUNK_BYTES)).await;
    assert!(why.contains("no transfer is in progress"), "{why}");

    // A gap: the partial file is discarded.
    pool.call(2, chunk(&meta, &whole, 0), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(unfinished_files(&n2.snapshot_dir).len(), 1);
    let why = refusal(pool, chunk(&meta, &whole, 2 * CHUNK_BYTES)).await;
    assert!(why.contains("start again at offset 0"), "{why}");
    assert_eq!(unfinished_files(&n2.snapshot_dir), Vec::<String>::new());

    // A new start supersedes a transfer in progress: one partial file, the newest.
    pool.call(2, chunk(&meta, &whole, 0), Duration::from_secs(5))
        .await
        .unwrap();
    let first = unfinished_files(&n2.snapshot_dir);
    pool.call(2, chunk(&meta, &whole, 0), Duration::from_secs(5))
        .await
        .unwrap();
    let second = unfinished_files(&n2.snapshot_dir);
    assert_eq!(second.len(), 1);
    assert_ne!(first, second);
    // A chunk it already has (its answer lost) is answered with where to go on.
    pool.call(2, chunk(&meta, &whole, CHUNK_BYTES), Duration::from_secs(5))
        .await
        .unwrap();
    match pool
        .call(2, chunk(&meta, &whole, CHUNK_BYTES), Duration::from_secs(5))
        .await
        .unwrap()
    {
        PeerResponse::SnapshotChunk(SnapshotChunkAnswer::Continue { next_offset }) => {
            assert_eq!(next_offset, 2 * CHUNK_BYTES as u64)
        }
        other => panic!("a chunk sent again was answered {other:?}"),
    }
    assert_eq!(unfinished_files(&n2.snapshot_dir), second);

    // Once the receiver has voted in a later term, the old leader's chunks are answered with
    // that vote (the sender steps down) and its transfer is dropped.
    pool.call(2, chunk(&meta, &whole, 0), Duration::from_secs(5))
        .await
        .unwrap();
    let newer = Vote::new(5, 1);
    let vote = PeerRequest::Vote {
        shard: 0,
        rpc: VoteRequest::new(newer, None),
    };
    pool.call(2, vote, Duration::from_secs(5)).await.unwrap();
    // Raft answers the vote before it publishes its metrics, which the receiver reads.
    let deadline = Instant::now() + Duration::from_secs(10);
    while n2.replica.status().term != 5 {
        assert!(Instant::now() < deadline, "{:?}", n2.replica.status());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    match pool
        .call(2, chunk(&meta, &whole, CHUNK_BYTES), Duration::from_secs(5))
        .await
        .unwrap()
    {
        PeerResponse::SnapshotChunk(SnapshotChunkAnswer::Done(answer)) => {
            assert_eq!(answer.vote, newer)
        }
        other => panic!("a stale leader's chunk was answered {other:?}"),
    }
    assert_eq!(unfinished_files(&n2.snapshot_dir), Vec::<String>::new());

    n2.replica.shutdown().await;
    n1.replica.shutdown().await;
}

/// This process's resident memory, in MiB.
fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib / 1024.0
}

/// The figure in docs/benchmarks.md, "Snapshot transfer": a learner catches up with a shard
/// of 300 MiB (or BENCH_MIB) through a snapshot in default-sized chunks, over loopback; with
/// BENCH_DROP_EVERY_MIB, over connections that drop each time they have sent that much. Run
/// alone (it sets the process-wide chunk size back to the default):
/// `cargo test --release -p firn-raft --test snapshot_transfer -- --ignored --nocapture`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a bench: writes ~1.5 GB to disk and takes tens of seconds"]
async fn bench_a_new_replica_catches_up_through_a_large_snapshot() {
    const VALUE_BYTES: usize = 256 * 1024;
    // BENCH_MIB sizes the shard (to see that memory does not grow with it).
    let mib: usize = std::env::var("BENCH_MIB").map_or(300, |m| m.parse().unwrap());
    let keys = mib * 4;
    // The transfers' own log lines: bytes, seconds and rate of each end.
    let _ = tracing_subscriber::fmt()
        .with_env_filter("firn_raft::snapshot_transfer=info")
        .try_init();
    snapshot_transfer::set_chunk_bytes(snapshot_transfer::SNAPSHOT_CHUNK_BYTES);
    let dir = tempfile::tempdir_in(std::env::var("BENCH_DIR").unwrap_or(".".into())).unwrap();
    let (mut bound, addrs) = listeners(&[1, 2]).await;
    // BENCH_DROP_EVERY_MIB: the leader's connections drop each time one has sent that much.
    let drop_after =
        std::env::var("BENCH_DROP_EVERY_MIB").map_or(u64::MAX, |m| m.parse::<u64>().unwrap() << 20);
    let n1_dir = dir.path().join("n1");
    let (n1, drops) = start_dropping(&n1_dir, bound.remove(0), &addrs, drop_after, u64::MAX).await;
    fill(&n1.replica, keys, VALUE_BYTES, 16).await;
    let built = Instant::now();
    snapshot_and_purge(&n1.replica).await;
    let build_s = built.elapsed().as_secs_f64();

    let n2 = start(2, &dir.path().join("n2"), bound.remove(0), &addrs).await;
    let rss_before = rss_mib();
    let peak = Arc::new(std::sync::Mutex::new(rss_before));
    let sampling = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = std::thread::spawn({
        let (peak, sampling) = (peak.clone(), sampling.clone());
        move || {
            while sampling.load(std::sync::atomic::Ordering::Relaxed) {
                let mut p = peak.lock().unwrap();
                *p = p.max(rss_mib());
                drop(p);
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    });
    let sent = Instant::now();
    n1.replica.add_learner(2, &addrs[&2], true).await.unwrap();
    caught_up(&n1.replica, &n2.replica).await;
    let transfer_s = sent.elapsed().as_secs_f64();
    sampling.store(false, std::sync::atomic::Ordering::Relaxed);
    sampler.join().unwrap();
    let peak = *peak.lock().unwrap();
    let (_, file) = SnapshotFile::open(&n2.snapshot_dir.join("shard0.snapshot")).unwrap();
    let mib = file.bytes() as f64 / (1024.0 * 1024.0);
    println!(
        "snapshot of {mib:.0} MiB: built (held) in {build_s:.2} s; written out, sent, checked \
         and installed in {transfer_s:.1} s ({:.0} MiB/s); resident memory {rss_before:.0} MiB \
         before, at most {peak:.0} MiB during the transfer (+{:.0} MiB); the leader's \
         connections dropped {} times",
        mib / transfer_s,
        peak - rss_before,
        drops.load(Ordering::SeqCst)
    );
    assert!(n2.replica.status().snapshot_index.is_some());
    n2.replica.shutdown().await;
    n1.replica.shutdown().await;
}
