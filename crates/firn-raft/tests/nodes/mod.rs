//! Nodes of one shard's group, each with a peer server, for the tests that run several.

// Each test file uses what it needs of these.
#![allow(dead_code)]

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use firn_model::HybridClock;
use firn_raft::log_store::{Flush, Fsync, GroupCommit};
use firn_raft::peer::{AppHandler, LocalGroups, PeerPool, serve_peers};
use firn_raft::{ShardConfig, ShardReplica};
use firn_store::FjallBackend;
use tokio::net::TcpListener;
use tokio::sync::watch;

struct NoApp;

impl AppHandler for NoApp {
    fn handle(&self, payload: Vec<u8>) -> Pin<Box<dyn Future<Output = Vec<u8>> + Send>> {
        Box::pin(async move { payload })
    }
}

/// A node with a peer server, holding one replica of shard 0.
pub struct Node {
    pub replica: ShardReplica,
    pub snapshot_dir: PathBuf,
    pub pool: Arc<PeerPool>,
    _stop: watch::Sender<bool>,
}

/// Binds a peer listener for each of `ids`: (id, listener, address).
pub async fn listeners(ids: &[u64]) -> (Vec<TcpListener>, HashMap<u64, String>) {
    let mut bound = Vec::new();
    let mut addrs = HashMap::new();
    for id in ids {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        addrs.insert(*id, l.local_addr().unwrap().to_string());
        bound.push(l);
    }
    (bound, addrs)
}

/// Starts node `id` in `dir`; node 1 forms the group alone, any other waits to be added.
/// Its purges keep nothing behind a snapshot, so that a replica behind it needs one.
pub async fn start(
    id: u64,
    dir: &Path,
    listener: TcpListener,
    addrs: &HashMap<u64, String>,
) -> Node {
    start_keeping(id, dir, listener, addrs, 0).await
}

/// [`start`], keeping `catchup` log entries behind each snapshot.
pub async fn start_keeping(
    id: u64,
    dir: &Path,
    listener: TcpListener,
    addrs: &HashMap<u64, String>,
    catchup: u64,
) -> Node {
    let pool = PeerPool::new(id, addrs.clone());
    start_on(
        id,
        dir,
        listener,
        addrs,
        catchup,
        LocalGroups::default(),
        pool,
    )
    .await
}

/// [`start_keeping`], its replicas reached through `groups`, its peers through `pool`.
pub async fn start_on(
    id: u64,
    dir: &Path,
    listener: TcpListener,
    addrs: &HashMap<u64, String>,
    catchup: u64,
    groups: LocalGroups,
    pool: PeerPool,
) -> Node {
    let stop = serve(listener, groups.clone());
    let pool = Arc::new(pool);
    let replica = open_replica(id, dir, addrs, catchup, groups, pool.clone()).await;
    Node {
        replica,
        snapshot_dir: dir.join("snapshots"),
        pool,
        _stop: stop,
    }
}

/// Serves peers on `listener`, their Raft messages going to `groups`, until the sender
/// returned is dropped.
pub fn serve(listener: TcpListener, groups: LocalGroups) -> watch::Sender<bool> {
    let (stop, stopped) = watch::channel(false);
    tokio::spawn(serve_peers(listener, groups, Arc::new(NoApp), stopped));
    stop
}

/// Opens node `id`'s replica of shard 0 in `dir` (see [`start`]), added to `groups`.
pub async fn open_replica(
    id: u64,
    dir: &Path,
    addrs: &HashMap<u64, String>,
    catchup: u64,
    groups: LocalGroups,
    pool: Arc<PeerPool>,
) -> ShardReplica {
    let log_db = fjall::Database::builder(dir.join("log")).open().unwrap();
    let state_db = fjall::Database::builder(dir.join("state")).open().unwrap();
    let cfg = ShardConfig {
        shard_id: 0,
        node_id: id,
        node_addr: addrs[&id].clone(),
        backend: Arc::new(FjallBackend::open(state_db, &dir.join("state"), "shard0").unwrap()),
        members: Default::default(),
        initialize: id == 1,
        pool,
        groups,
        flush: Flush::Fsync(
            GroupCommit::start(log_db.clone(), &dir.join("log"), Fsync::Never).unwrap(),
        ),
        db: log_db,
        snapshot_dir: dir.join("snapshots"),
        snapshot_every_entries: 1_000_000,
        snapshot_catchup_entries: catchup,
        closing: None,
    };
    ShardReplica::open(cfg, Arc::new(HybridClock::system()))
        .await
        .unwrap()
}
