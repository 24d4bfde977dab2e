//! Starting and stopping a node: storage, the shard replicas it holds, the router, the
//! client and peer listeners, and the background retention task.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use firn_model::{FirnError, HybridClock};
use firn_raft::log_store::{Fsync, GroupCommit};
use firn_raft::peer::{LocalGroups, PeerPool, serve_peers};
use firn_raft::{ShardConfig, ShardReplica};
use firn_store::{FjallBackend, MemoryBackend, StorageBackend};
use openraft::BasicNode;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::cluster::ClusterLayout;
use crate::config::NodeConfig;
use crate::router::{Router, RouterRpc};

pub struct RunningNode {
    pub resp_addr: SocketAddr,
    pub http_addr: SocketAddr,
    pub peer_addr: SocketAddr,
    router: Arc<Router>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    /// Holds an in-memory node's scratch directory until shutdown.
    _scratch: Option<tempfile::TempDir>,
}

fn startup(what: &str, e: impl std::fmt::Display) -> FirnError {
    FirnError::Internal(format!("{what}: {e}"))
}

async fn bind(addr: SocketAddr, what: &str) -> Result<(TcpListener, SocketAddr), FirnError> {
    let l = TcpListener::bind(addr)
        .await
        .map_err(|e| startup(&format!("cannot listen for {what} on {addr}"), e))?;
    let bound = l.local_addr().map_err(|e| startup(what, e))?;
    Ok((l, bound))
}

impl RunningNode {
    pub async fn start(config: NodeConfig) -> Result<Self, FirnError> {
        // Install the metrics recorder before the first request counts anything.
        crate::metrics::handle();
        // Bind first: a busy port should fail before any data is touched.
        let (resp_listener, resp_addr) = bind(config.resp_addr, "RESP").await?;
        let (http_listener, http_addr) = bind(config.http_addr, "HTTP").await?;
        let (peer_listener, peer_addr) = bind(config.peer_addr, "peers").await?;

        let layout = if config.peers.is_empty() {
            ClusterLayout::single(config.node_id, peer_addr.to_string())
        } else {
            if !config.peers.contains_key(&config.node_id) {
                return Err(FirnError::BadArgument(format!(
                    "--peers does not list this node ({})",
                    config.node_id
                )));
            }
            ClusterLayout::new(config.peers.clone(), config.shards, config.replication)?
        };
        let layout = Arc::new(layout);

        let scratch = if config.in_memory {
            Some(tempfile::tempdir().map_err(|e| startup("creating a scratch directory", e))?)
        } else {
            None
        };
        let data_dir = scratch
            .as_ref()
            .map_or(config.data_dir.clone(), |s| s.path().to_path_buf());
        std::fs::create_dir_all(&data_dir).map_err(|e| {
            startup(
                &format!("creating data directory {}", data_dir.display()),
                e,
            )
        })?;
        let db = fjall::Database::builder(data_dir.join("db"))
            .open()
            .map_err(|e| startup(&format!("opening storage in {}", data_dir.display()), e))?;

        // Peers can reach this node's groups as soon as each is registered.
        let (stop, stop_rx) = watch::channel(false);
        let pool = Arc::new(PeerPool::new(
            config.node_id,
            layout.nodes.clone().into_iter().collect(),
        ));
        let groups = LocalGroups::default();
        let rpc = Arc::new(RouterRpc(OnceLock::new()));
        let mut tasks = vec![tokio::spawn(serve_peers(
            peer_listener,
            groups.clone(),
            rpc.clone(),
            stop_rx.clone(),
        ))];

        let clock = Arc::new(HybridClock::system());
        let fsync = if config.in_memory {
            Fsync::Never
        } else {
            Fsync::Always
        };
        let commit = GroupCommit::start(db.clone(), fsync)
            .map_err(|e| startup("starting the fsync thread", e))?;
        let mut local = HashMap::new();
        for shard in layout
            .shards
            .iter()
            .filter(|s| s.replicas.contains(&config.node_id))
        {
            let namespace = format!("shard{}", shard.id);
            let backend: Arc<dyn StorageBackend> = if config.in_memory {
                Arc::new(MemoryBackend::default())
            } else {
                Arc::new(
                    FjallBackend::open(db.clone(), &namespace)
                        .map_err(|e| startup("opening the state machine", e))?,
                )
            };
            let members: BTreeMap<u64, BasicNode> = shard
                .replicas
                .iter()
                .map(|id| {
                    (
                        *id,
                        BasicNode {
                            addr: layout.nodes[id].clone(),
                        },
                    )
                })
                .collect();
            let replica = ShardReplica::open(
                ShardConfig {
                    shard_id: shard.id,
                    node_id: config.node_id,
                    node_addr: peer_addr.to_string(),
                    db: db.clone(),
                    backend,
                    commit: commit.clone(),
                    snapshot_dir: data_dir.join("snapshots"),
                    snapshot_every_entries: config.snapshot_every_entries,
                    members,
                    initialize: shard.replicas[0] == config.node_id,
                    pool: pool.clone(),
                    groups: groups.clone(),
                },
                clock.clone(),
            )
            .await?;
            local.insert(shard.id, Arc::new(replica));
        }
        let router = Arc::new(Router::new(
            config.node_id,
            layout.clone(),
            local,
            pool,
            config.limits.clone(),
            config.allow_flushall,
            (resp_addr.to_string(), http_addr.to_string()),
        ));
        let _ = rpc.0.set(router.clone());

        tasks.push(tokio::spawn(crate::resp::serve(
            resp_listener,
            router.clone(),
            stop_rx.clone(),
        )));
        let app = crate::http::routes(router.clone());
        let mut http_stop = stop_rx.clone();
        tasks.push(tokio::spawn(async move {
            let shutdown = async move {
                let _ = http_stop.changed().await;
            };
            if let Err(e) = axum::serve(http_listener, app)
                .with_graceful_shutdown(shutdown)
                .await
            {
                tracing::error!("http server: {e}");
            }
        }));
        let retention_router = router.clone();
        let mut retention_stop = stop_rx;
        let interval = config.retention_interval;
        tasks.push(tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(interval) => {
                        if let Err(e) = retention_router.expire_by_age().await {
                            tracing::warn!("retention: {e}");
                        }
                    }
                    _ = retention_stop.changed() => return,
                }
            }
        }));
        tracing::info!(node = config.node_id, %resp_addr, %http_addr, %peer_addr, shards = layout.shards.len(), data_dir = %data_dir.display(), "firn node serving");
        Ok(RunningNode {
            resp_addr,
            http_addr,
            peer_addr,
            router,
            stop,
            tasks,
            _scratch: scratch,
        })
    }

    /// Stops accepting requests, ends connections and stops the Raft groups.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
        self.router.shutdown().await;
    }
}
