//! Starting and stopping a node: storage, the shard replica, the router, both listeners and
//! the background retention task.

use std::net::SocketAddr;
use std::sync::Arc;

use firn_model::{FirnError, HybridClock};
use firn_raft::log_store::Fsync;
use firn_raft::{ShardConfig, ShardReplica};
use firn_store::{FjallBackend, MemoryBackend, StorageBackend};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::NodeConfig;
use crate::router::Router;

/// The node id of a single node (a cluster of one).
const SINGLE_NODE_ID: u64 = 1;

pub struct RunningNode {
    pub resp_addr: SocketAddr,
    pub http_addr: SocketAddr,
    router: Arc<Router>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    /// Holds an in-memory node's scratch directory until shutdown.
    _scratch: Option<tempfile::TempDir>,
}

fn startup(what: &str, e: impl std::fmt::Display) -> FirnError {
    FirnError::Internal(format!("{what}: {e}"))
}

impl RunningNode {
    pub async fn start(config: NodeConfig) -> Result<Self, FirnError> {
        // Install the metrics recorder before the first request counts anything.
        crate::metrics::handle();
        // Bind first: a busy port should fail before any data is touched.
        let resp_listener = TcpListener::bind(config.resp_addr).await.map_err(|e| {
            startup(
                &format!("cannot listen for RESP on {}", config.resp_addr),
                e,
            )
        })?;
        let http_listener = TcpListener::bind(config.http_addr).await.map_err(|e| {
            startup(
                &format!("cannot listen for HTTP on {}", config.http_addr),
                e,
            )
        })?;
        let resp_addr = resp_listener
            .local_addr()
            .map_err(|e| startup("resp address", e))?;
        let http_addr = http_listener
            .local_addr()
            .map_err(|e| startup("http address", e))?;

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
        let (backend, fsync): (Arc<dyn StorageBackend>, Fsync) = if config.in_memory {
            (Arc::new(MemoryBackend::default()), Fsync::Never)
        } else {
            (
                Arc::new(
                    FjallBackend::open(db.clone())
                        .map_err(|e| startup("opening the state machine", e))?,
                ),
                Fsync::Always,
            )
        };
        let shard = ShardReplica::open(
            ShardConfig {
                shard_id: 0,
                node_id: SINGLE_NODE_ID,
                node_addr: resp_addr.to_string(),
                db,
                backend,
                fsync,
                snapshot_dir: data_dir.join("snapshots"),
                snapshot_every_entries: config.snapshot_every_entries,
            },
            Arc::new(HybridClock::system()),
        )
        .await?;
        let router = Arc::new(Router::new(
            Arc::new(shard),
            config.limits.clone(),
            config.allow_flushall,
        ));

        let (stop, stop_rx) = watch::channel(false);
        let mut tasks = Vec::new();
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
        tracing::info!(%resp_addr, %http_addr, data_dir = %data_dir.display(), "firn node serving");
        Ok(RunningNode {
            resp_addr,
            http_addr,
            router,
            stop,
            tasks,
            _scratch: scratch,
        })
    }

    pub fn router(&self) -> &Arc<Router> {
        &self.router
    }

    /// Stops accepting requests, ends connections and stops the Raft group.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
        self.router.shutdown().await;
    }
}
