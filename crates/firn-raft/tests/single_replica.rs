//! A replica of one: writes go through the log, survive a restart, and a snapshot lets the
//! log be purged without losing state.

mod common;

use firn_model::KvWrite;
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use firn_model::{Key, PutRequest, ReadAt, Response};
use firn_raft::ShardReplica;
use firn_raft::log_store::Fsync;
use firn_store::backend::{Batch, Table};
use firn_store::{FjallBackend, Op, StorageBackend};

fn open_db(dir: &std::path::Path) -> fjall::Database {
    fjall::Database::builder(dir.join("db")).open().unwrap()
}

async fn open(dir: &std::path::Path, db: fjall::Database) -> ShardReplica {
    let backend = Arc::new(FjallBackend::open(db.clone(), &dir.join("db"), "shard0").unwrap());
    common::open_single(dir, db, backend, Fsync::Always).await
}

async fn put(replica: &ShardReplica, k: &str, v: &str) -> u64 {
    let req = PutRequest::new(
        Key::new(Bytes::copy_from_slice(k.as_bytes())).unwrap(),
        Bytes::copy_from_slice(v.as_bytes()),
    );
    match replica.write(Op::Kv(KvWrite::Put(req))).await.unwrap() {
        Response::Written(w) => w[0].version,
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_survive_restart_and_snapshot_purges_the_log() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = open_db(dir.path());
        let replica = open(dir.path(), db).await;
        for i in 1..=50 {
            assert_eq!(put(&replica, "k", &i.to_string()).await, i);
        }
        replica.snapshot_now().await.unwrap();
        // Snapshot building is asynchronous; wait for the purge it allows.
        let mut purged = None;
        for _ in 0..100 {
            purged = replica.status().purged_index;
            if purged.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            purged.is_some(),
            "log was not purged after a snapshot: {:?}",
            replica.status()
        );
        assert_eq!(put(&replica, "k", "after-snapshot").await, 51);
        replica.linearizable_barrier(false).await.unwrap();
        replica.shutdown().await;
    }
    // Give the fsync thread a moment to drop its database handle.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let db = open_db(dir.path());
    let replica = open(dir.path(), db).await;
    replica.linearizable_barrier(true).await.unwrap();
    let latest = replica
        .store()
        .get_live(b"k", ReadAt::Latest)
        .unwrap()
        .unwrap();
    assert_eq!(latest.version, 51);
    assert_eq!(latest.value.unwrap(), "after-snapshot");
    assert_eq!(
        replica
            .store()
            .history(b"k", 1, None, 100, None)
            .unwrap()
            .len(),
        51
    );
    assert_eq!(put(&replica, "k", "52").await, 52);
    replica.shutdown().await;
}

/// Puts `k`, builds a snapshot and waits until the log before it is purged.
async fn put_and_purge(replica: &ShardReplica, puts: u64) -> u64 {
    for i in 1..=puts {
        put(replica, "k", &i.to_string()).await;
    }
    replica.snapshot_now().await.unwrap();
    for _ in 0..200 {
        if let Some(purged) = replica.status().purged_index {
            return purged;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no purge: {:?}", replica.status());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_of_a_state_on_disk_writes_no_file_and_an_old_file_is_dropped_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("snapshots").join("shard0.snapshot");
    {
        let replica = open(dir.path(), open_db(dir.path())).await;
        put_and_purge(&replica, 3).await;
        assert!(replica.status().snapshot_index.is_some());
        // The state is the snapshot: nothing was copied.
        assert!(!path.exists(), "a snapshot of a state on disk wrote a file");
        replica.shutdown().await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    // What the one-blob format held: postcard of (meta, dump), no trailer.
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, b"\x00\x01an older snapshot, one postcard blob").unwrap();
    let replica = open(dir.path(), open_db(dir.path())).await;
    replica.linearizable_barrier(true).await.unwrap();
    assert!(!path.exists(), "the old file was kept");
    // The state stands in for it, as the snapshot the restarted replica reports.
    assert!(replica.status().snapshot_index.is_some());
    assert_eq!(put(&replica, "k", "after").await, 4);
    replica.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_file_newer_than_the_state_is_installed_at_start() {
    // What a crash in the middle of installing a received snapshot leaves: the file in
    // place, the tables part-loaded and claiming no applied position, the log purged.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("snapshots").join("shard0.snapshot");
    {
        let replica = open(dir.path(), open_db(dir.path())).await;
        put_and_purge(&replica, 30).await;
        replica.shutdown().await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    {
        let db = open_db(dir.path());
        let state = FjallBackend::open(db, &dir.path().join("db"), "shard0").unwrap();
        firn_raft::snapshot::build(&state, &path).unwrap();
        let mut partial = Batch::default();
        for (key, _) in state
            .range(
                Table::Versions,
                Bound::Unbounded,
                Bound::Unbounded,
                false,
                10,
            )
            .unwrap()
        {
            partial.remove(Table::Versions, key);
        }
        partial.remove(Table::System, b"raft_applied".to_vec());
        state.write(partial).unwrap();
        state.persist().unwrap();
    }
    let replica = open(dir.path(), open_db(dir.path())).await;
    replica.linearizable_barrier(true).await.unwrap();
    let history = replica.store().history(b"k", 1, None, 100, None).unwrap();
    assert_eq!(
        history.len(),
        30,
        "the state was not restored from the file"
    );
    assert_eq!(put(&replica, "k", "after").await, 31);
    replica.shutdown().await;
}
