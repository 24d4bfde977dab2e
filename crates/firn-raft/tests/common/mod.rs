//! A single-replica shard on a temporary directory, for the replica tests.

use std::sync::Arc;

use firn_model::HybridClock;
use firn_raft::log_store::Fsync;
use firn_raft::{ShardConfig, ShardReplica};
use firn_store::StorageBackend;

/// Opens (forming, or recovering) shard 0 alone on node 1, its log in `db` (opened at
/// `dir/db`), its state in `backend`.
pub async fn open_single(
    dir: &std::path::Path,
    db: fjall::Database,
    backend: Arc<dyn StorageBackend>,
    fsync: Fsync,
) -> ShardReplica {
    let commit =
        firn_raft::log_store::GroupCommit::start(db.clone(), &dir.join("db"), fsync).unwrap();
    let cfg = ShardConfig {
        shard_id: 0,
        node_id: 1,
        node_addr: "127.0.0.1:0".into(),
        backend,
        members: Default::default(),
        initialize: true,
        pool: Arc::new(firn_raft::peer::PeerPool::new(1, Default::default())),
        groups: Default::default(),
        db,
        flush: firn_raft::log_store::Flush::Fsync(commit),
        snapshot_dir: dir.join("snapshots"),
        snapshot_every_entries: 1_000_000,
        // A snapshot purges the whole log before it (the tests look for that).
        snapshot_catchup_entries: 0,
        closing: None,
    };
    ShardReplica::open(cfg, Arc::new(HybridClock::system()))
        .await
        .unwrap()
}
