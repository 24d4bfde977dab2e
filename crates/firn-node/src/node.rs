//! Starting and stopping a node: storage, the shard replicas it holds, the router, the
//! client and peer listeners, and the background retention task.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use firn_model::{FirnError, HybridClock};
use firn_raft::log_store::{Fsync, GroupCommit};
use firn_raft::peer::{LocalGroups, PeerPool, PeerRequest, PeerResponse, serve_peers};
use firn_raft::{META_GROUP, NodeId};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::cluster::{ClusterLayout, NodeRpc, NodeRpcReply};
use crate::config::NodeConfig;
use crate::meta::{Meta, STEWARD_INTERVAL, steward};
use crate::replicas::ReplicaFactory;
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

/// How often a node checks its meta replica for a new layout.
const LAYOUT_POLL: Duration = Duration::from_millis(200);
/// How often a joining node repeats its request until a member accepts it.
const JOIN_RETRY: Duration = Duration::from_secs(1);

/// Applies the newest layout the meta replica holds, if it is newer than `applied`.
async fn follow_layout(router: &Router, applied: &mut Option<u64>) -> Result<(), FirnError> {
    let Some((version, layout)) = router.meta().layout()? else {
        return Ok(());
    };
    if *applied == Some(version) {
        return Ok(());
    }
    router.apply_layout(layout).await?;
    *applied = Some(version);
    Ok(())
}

/// Keeps the node's replicas as the layout says; the creating node stores the first one.
async fn layout_follower(
    router: Arc<Router>,
    bootstrap: Option<ClusterLayout>,
    mut applied: Option<u64>,
    mut stop: watch::Receiver<bool>,
) {
    let mut created = false;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(LAYOUT_POLL) => {}
            _ = stop.changed() => return,
        }
        if let Some(layout) = bootstrap.as_ref().filter(|_| !created)
            && router.meta().is_leader()
        {
            match router.meta().create(layout).await {
                Ok(()) => created = true,
                Err(e) => tracing::debug!("storing the first layout: {e}"),
            }
        }
        if let Err(e) = follow_layout(&router, &mut applied).await {
            tracing::warn!("following the cluster layout: {e}");
        }
    }
}

/// On the meta leader: membership, replica moves and leader spread, a step at a time.
async fn steward_loop(router: Arc<Router>, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(STEWARD_INTERVAL) => {}
            _ = stop.changed() => return,
        }
        if router.meta().is_leader()
            && let Err(e) = steward(&router, router.meta()).await
        {
            tracing::info!("cluster steward: {e} (retrying)");
        }
    }
}

/// Asks the member at `contact` to add this node, until one accepts.
async fn join(router: Arc<Router>, contact: String, addr: String, mut stop: watch::Receiver<bool>) {
    let node = router.node_id();
    let request = postcard::to_stdvec(&NodeRpc::Join { node, addr }).unwrap_or_default();
    loop {
        let answer = router
            .pool()
            .call_addr(&contact, PeerRequest::App(request.clone()), JOIN_RETRY * 5)
            .await;
        let outcome = match answer {
            Ok(PeerResponse::App(bytes)) => match postcard::from_bytes::<NodeRpcReply>(&bytes) {
                Ok(NodeRpcReply::Done(r)) => r.map_err(|e| e.to_string()),
                other => Err(format!("unexpected answer {other:?}")),
            },
            Ok(other) => Err(format!("unexpected answer {other:?}")),
            Err(e) => Err(e.to_string()),
        };
        match outcome {
            Ok(()) => {
                tracing::info!(node, %contact, "joined the cluster; replicas will move here");
                return;
            }
            Err(e) => tracing::warn!(node, %contact, "joining: {e}; retrying"),
        }
        tokio::select! {
            _ = tokio::time::sleep(JOIN_RETRY) => {}
            _ = stop.changed() => return,
        }
    }
}

fn startup(what: &str, e: impl std::fmt::Display) -> FirnError {
    FirnError::Internal(format!("{what}: {e}"))
}

/// The node's Raft logs, under the data directory.
const LOG_DB: &str = "log";
/// The node's state machines, under the data directory.
const STATE_DB: &str = "state";
/// Names the layout of a data directory; a node refuses a directory in another layout
/// rather than reading it wrongly.
const DATA_FORMAT_FILE: &str = "FORMAT";
const DATA_FORMAT: &str = "firn-data 2\n";

/// Marks a new data directory with this build's layout, or checks an existing one has it.
fn check_data_format(dir: &std::path::Path) -> Result<(), FirnError> {
    let path = dir.join(DATA_FORMAT_FILE);
    let refuse = |found: &str| {
        FirnError::Internal(format!(
            "{} holds data in another layout ({found}) than this build reads ({}); start with an empty --data-dir",
            dir.display(),
            DATA_FORMAT.trim()
        ))
    };
    match std::fs::read_to_string(&path) {
        Ok(found) if found == DATA_FORMAT => Ok(()),
        Ok(found) => Err(refuse(found.trim())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if dir.join("db").exists() {
                return Err(refuse("firn-data 1"));
            }
            std::fs::write(&path, DATA_FORMAT)
                .and_then(|()| std::fs::File::open(dir)?.sync_all())
                .map_err(|e| startup(&format!("writing {}", path.display()), e))
        }
        Err(e) => Err(startup(&format!("reading {}", path.display()), e)),
    }
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

        let peer_addr_text = peer_addr.to_string();
        // How this node finds its cluster: it creates one (alone, or as the lowest id of
        // `--peers`), it is one of `--peers`, or it joins through a member.
        let (nodes, initial, creates) = match (&config.join, config.peers.is_empty()) {
            (Some(_), false) => {
                return Err(FirnError::BadArgument(
                    "give either --peers (to form a cluster) or --join (to join one), not both"
                        .into(),
                ));
            }
            (Some(_), true) => (
                BTreeMap::from([(config.node_id, peer_addr_text.clone())]),
                None,
                false,
            ),
            (None, true) => {
                let single = ClusterLayout::single(
                    config.node_id,
                    peer_addr_text.clone(),
                    config.replication,
                );
                (single.nodes.clone(), Some(single), true)
            }
            (None, false) => {
                if !config.peers.contains_key(&config.node_id) {
                    return Err(FirnError::BadArgument(format!(
                        "--peers does not list this node ({})",
                        config.node_id
                    )));
                }
                let layout =
                    ClusterLayout::new(config.peers.clone(), config.shards, config.replication)?;
                let first = config.peers.keys().next() == Some(&config.node_id);
                (config.peers.clone(), Some(layout), first)
            }
        };
        // The node that stores the first layout in the meta group.
        let bootstrap = initial.clone().filter(|_| creates);
        // The meta group's first voters: an odd number, at most five, lowest ids first.
        let meta_members: BTreeMap<NodeId, String> = {
            let want = bootstrap
                .as_ref()
                .map_or(1, |l| l.meta_voters(&Default::default()).len());
            nodes
                .iter()
                .take(want)
                .map(|(k, v)| (*k, v.clone()))
                .collect()
        };

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
        check_data_format(&data_dir)?;
        // The Raft logs and the state machines live in two databases: the group commit's
        // fsync holds the log database's journal, and applying writes must not wait for it.
        // State needs no fsync of its own: the log is purged only after a snapshot has
        // persisted the state it covers, so a crash replays the log onto the state.
        // Neither database writes its journal out on each batch (`manual_journal_persist`):
        // the log's is written and fsync'd once per group commit, the state's when a
        // snapshot persists it.
        let open_db = |name: &str| {
            fjall::Database::builder(data_dir.join(name))
                .manual_journal_persist(true)
                .open()
                .map_err(|e| startup(&format!("opening storage in {}", data_dir.display()), e))
        };
        let db = open_db(LOG_DB)?;
        let state_db = open_db(STATE_DB)?;

        // Peers can reach this node's groups as soon as each is registered.
        let (stop, stop_rx) = watch::channel(false);
        let pool = Arc::new(PeerPool::new(
            config.node_id,
            nodes.clone().into_iter().collect(),
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
        let factory = ReplicaFactory {
            node_id: config.node_id,
            peer_addr: peer_addr_text,
            db,
            state_db,
            commit,
            data_dir: data_dir.clone(),
            snapshot_every_entries: config.snapshot_every_entries,
            close_time_every: config.close_time_every,
            in_memory: config.in_memory,
            pool,
            groups,
            clock,
        };
        let meta_replica = factory
            .open(META_GROUP, &meta_members, bootstrap.is_some())
            .await?;
        let meta = Meta::new(config.node_id, meta_replica);
        let router = Arc::new(Router::new(
            factory,
            meta,
            config.limits.clone(),
            config.allow_flushall,
            (resp_addr.to_string(), http_addr.to_string()),
        ));
        router.set_self();
        let _ = rpc.0.set(router.clone());
        // A node alone, and a node restarting, serve before `start` returns: the layout is
        // stored (alone) and applied (the one the meta replica recovered) now.
        if let Some(layout) = bootstrap.as_ref().filter(|l| l.nodes.len() == 1) {
            router.meta().create(layout).await?;
        }
        let mut applied = None;
        follow_layout(&router, &mut applied).await?;
        // Every node of a new `--peers` cluster derives the same first layout: it serves by
        // it until the meta group delivers the stored one (the same, unless changed since).
        if applied.is_none()
            && let Some(layout) = initial
        {
            router.apply_layout(layout).await?;
        }
        tasks.push(tokio::spawn(layout_follower(
            router.clone(),
            bootstrap,
            applied,
            stop_rx.clone(),
        )));
        tasks.push(tokio::spawn(steward_loop(router.clone(), stop_rx.clone())));
        if let Some(contact) = config.join.clone() {
            tasks.push(tokio::spawn(join(
                router.clone(),
                contact,
                peer_addr.to_string(),
                stop_rx.clone(),
            )));
        }

        tasks.push(tokio::spawn(crate::resp::serve(
            resp_listener,
            router.clone(),
            stop_rx.clone(),
            config.resp_connections_max,
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
        tracing::info!(node = config.node_id, %resp_addr, %http_addr, %peer_addr, data_dir = %data_dir.display(), "firn node serving");
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

    /// Stops accepting requests, ends connections (RESP ones within
    /// [`crate::resp::SHUTDOWN_CONNECTIONS_WAIT`], watches included) and stops the Raft groups.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
        self.router.shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_data_directory_is_marked_and_another_layout_is_refused() {
        let fresh = tempfile::tempdir().unwrap();
        check_data_format(fresh.path()).unwrap();
        assert_eq!(
            std::fs::read_to_string(fresh.path().join(DATA_FORMAT_FILE)).unwrap(),
            DATA_FORMAT
        );
        // Opening it again is fine.
        check_data_format(fresh.path()).unwrap();

        // A directory written by the first layout (one database under `db/`) is refused.
        let old = tempfile::tempdir().unwrap();
        std::fs::create_dir(old.path().join("db")).unwrap();
        let e = check_data_format(old.path()).unwrap_err().to_string();
        assert!(
            e.contains("firn-data 1") && e.contains("empty --data-dir"),
            "{e}"
        );
        assert!(!old.path().join(DATA_FORMAT_FILE).exists());

        // So is one marked with a layout this build does not know.
        std::fs::write(fresh.path().join(DATA_FORMAT_FILE), "firn-data 9\n").unwrap();
        let e = check_data_format(fresh.path()).unwrap_err().to_string();
        assert!(e.contains("firn-data 9"), "{e}");
    }
}
