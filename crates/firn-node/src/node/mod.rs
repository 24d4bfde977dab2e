//! Starting and stopping a node: storage, the shard replicas it holds, the router, the
//! client and peer listeners, and the background retention task.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use firn_model::{FirnError, HybridClock};
use firn_raft::log_store::{Checkpoints, Fsync, GroupCommit};
use firn_raft::peer::{LocalGroups, PeerPool, serve_peers_over};
use firn_raft::transport::{PeerTransport, PlainTcp};
use firn_raft::{META_GROUP, NodeId};
use firn_store::journal_sync::{self, Writeback};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::cluster::ShardHost;
use crate::cluster::follow::FollowSettings;
use crate::cluster::follower::{LayoutFollower, join, steward_loop};
use crate::cluster::layout::ClusterLayout;
use crate::cluster::meta::{Meta, MetaClient};
use crate::config::{LocalRegionSetting, NodeConfig};
use crate::disk::DiskSpace;
use crate::http::linger::Lingering;
use crate::local::LocalRegion;
use crate::replicas::{ReplicaFactory, Replicas, Stripe};
use crate::router::{Router, RouterParts};
use crate::rpc::PeerClient;
use crate::storage_stats::StorageStats;

pub struct RunningNode {
    pub resp_addr: SocketAddr,
    pub http_addr: SocketAddr,
    pub peer_addr: SocketAddr,
    router: Arc<Router>,
    stop: watch::Sender<bool>,
    /// Why the node cannot go on (the cluster refused to let it join, a group's storage
    /// failed), once it is known.
    failed: watch::Receiver<Option<String>>,
    tasks: Vec<JoinHandle<()>>,
    /// Holds an in-memory node's scratch directory until shutdown.
    _scratch: Option<tempfile::TempDir>,
}

/// How long shutdown waits for the node's tasks (listeners, connections, loops) to end
/// once told to stop: HTTP answers in progress get [`crate::http::SHUTDOWN_WAIT`] of it.
pub const SHUTDOWN_TASKS_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

fn startup(what: &str, e: impl std::fmt::Display) -> FirnError {
    FirnError::Internal(format!("{what}: {e}"))
}

/// The node's Raft logs, under the data directory.
const LOG_DB: &str = "log";
/// The node's state machines, under the data directory.
const STATE_DB: &str = "state";
/// The Raft logs of the node's memory-durability groups, under the data directory.
const MEMORY_LOG_DB: &str = "memlog";
/// Where large values are kept, beside the databases (see [`crate::blob`]).
const BLOB_DIR: &str = "blobs";
/// Names the layout of a data directory; a node refuses a directory in another layout
/// rather than reading it wrongly.
const DATA_FORMAT_FILE: &str = "FORMAT";
const DATA_FORMAT: &str = "firn-data 2\n";
/// How many stripes a new data directory gets on a machine of at least
/// [`STRIPES_CORES_MIN`] cores, unless `--stripes` says (see [`crate::replicas::Stripe`]): a
/// log database and a state database each, a group's id picking its stripe. fjall makes
/// every write into one database in turn (its journal and its memtable inserts under one
/// lock, which the log's fsync holds too), so with one of each, every group on a node waited
/// for every other. On a smaller machine one stripe: more fsyncs, each covering fewer
/// appends, cost more CPU than the turns do there. The count is part of the directory's
/// layout: written into `FORMAT` when the directory is made (a directory from before has
/// one stripe) and kept for its life.
const STRIPES_DEFAULT: usize = 4;
const STRIPES_CORES_MIN: usize = 4;
/// Most stripes a `FORMAT` file may name.
const STRIPES_MAX: usize = 64;

pub use firn_raft::peer::APPENDS_IN_FLIGHT_MAX;

/// Appends of one replication stream a node sends before their answers, unless
/// `--appends-in-flight` says (see `firn_raft::pipeline`): 16 on a machine of at least
/// [`STRIPES_CORES_MIN`] cores, where a put waits on round trips far more than on CPU, and
/// one (each append after the answer to the one before) on a smaller one, where the CPU is
/// what runs out and more, smaller appends cost more of it. Measured on 2 cores
/// (docs/benchmarks.md): 4 in flight gave 4–7% more puts at 8 clients (p50 −10%) and
/// 3–6% fewer at 64, where the CPU is saturated.
pub fn appends_in_flight_default() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    if cores >= STRIPES_CORES_MIN { 16 } else { 1 }
}

/// Marks a new data directory with this build's layout and `wanted` stripes (by default
/// [`STRIPES_DEFAULT`] or one, by the cores), or checks an existing one has it (and, if
/// `wanted`, that many stripes); returns its stripe count.
fn check_data_format(dir: &std::path::Path, wanted: Option<usize>) -> Result<usize, FirnError> {
    let path = dir.join(DATA_FORMAT_FILE);
    let refuse = |found: &str| {
        FirnError::Internal(format!(
            "{} holds data in another layout ({found}) than this build reads ({}); start with an empty --data-dir",
            dir.display(),
            DATA_FORMAT.trim()
        ))
    };
    let found = match std::fs::read_to_string(&path) {
        Ok(found) => {
            let Some(rest) = found.strip_prefix(DATA_FORMAT) else {
                return Err(refuse(found.lines().next().unwrap_or("").trim()));
            };
            match rest.trim() {
                "" => 1,
                stripes => stripes
                    .strip_prefix("stripes ")
                    .and_then(|n| n.parse::<usize>().ok())
                    .filter(|n| (1..=STRIPES_MAX).contains(n))
                    .ok_or_else(|| refuse(&format!("{}, {stripes}", DATA_FORMAT.trim())))?,
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if dir.join("db").exists() {
                return Err(refuse("firn-data 1"));
            }
            let cores = std::thread::available_parallelism().map_or(1, usize::from);
            let stripes = wanted.unwrap_or(if cores >= STRIPES_CORES_MIN {
                STRIPES_DEFAULT
            } else {
                1
            });
            std::fs::write(&path, format!("{DATA_FORMAT}stripes {stripes}\n"))
                .and_then(|()| std::fs::File::open(dir)?.sync_all())
                .map_err(|e| startup(&format!("writing {}", path.display()), e))?;
            return Ok(stripes);
        }
        Err(e) => return Err(startup(&format!("reading {}", path.display()), e)),
    };
    match wanted {
        Some(n) if n != found => Err(FirnError::Internal(format!(
            "{} was made with {found} stripe(s); --stripes {n} cannot change that (leave it out, or start with an empty --data-dir)",
            dir.display()
        ))),
        _ => Ok(found),
    }
}

/// The name of stripe `i`'s database `base` under the data directory (stripe 0 keeps the
/// name a directory of one stripe has).
fn stripe_db(base: &str, i: usize) -> String {
    if i == 0 {
        base.to_string()
    } else {
        format!("{base}-{i}")
    }
}

/// The address a listener bound at `bound` is announced by: `host` with its port when
/// given (an IPv6 literal in brackets), else the bound address itself.
fn advertised(host: Option<&str>, bound: SocketAddr) -> String {
    match host {
        Some(h) if h.contains(':') && !h.starts_with('[') => format!("[{h}]:{}", bound.port()),
        Some(h) => format!("{h}:{}", bound.port()),
        None => bound.to_string(),
    }
}

async fn bind(addr: SocketAddr, what: &str) -> Result<(TcpListener, SocketAddr), FirnError> {
    let l = TcpListener::bind(addr)
        .await
        .map_err(|e| startup(&format!("cannot listen for {what} on {addr}"), e))?;
    let bound = l.local_addr().map_err(|e| startup(what, e))?;
    Ok((l, bound))
}

/// Serves HTTP on `listener` until `stop` fires.
async fn serve_http<L>(listener: L, app: axum::Router, mut stop: watch::Receiver<bool>)
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    let shutdown = async move {
        let _ = stop.changed().await;
    };
    if let Err(e) = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
    {
        tracing::error!("http server: {e}");
    }
}

impl RunningNode {
    pub async fn start(config: NodeConfig) -> Result<Self, FirnError> {
        // Install the metrics recorder before the first request counts anything.
        crate::metrics::handle();
        // TLS files are read before binding too: a bad one starts nothing.
        let tls = config.tls.load().map_err(FirnError::BadArgument)?;
        // Bind first: a busy port should fail before any data is touched.
        let (resp_listener, resp_addr) = bind(config.resp_addr, "RESP").await?;
        let (http_listener, http_addr) = bind(config.http_addr, "HTTP").await?;
        let (peer_listener, peer_addr) = bind(config.peer_addr, "peers").await?;

        let announced = |bound: SocketAddr| advertised(config.advertise_host.as_deref(), bound);
        let peer_addr_text = announced(peer_addr);
        // How this node finds its cluster: it creates one (alone, or as the lowest id of
        // `--peers`), it is one of `--peers`, or it joins through a member: the one `--join`
        // names or, for a node `--peers` does not list (a StatefulSet scaled up past the
        // list it was created with), the nodes listed.
        let listed = config.peers.contains_key(&config.node_id);
        let join_through: Vec<String> = match &config.join {
            Some(contact) => vec![contact.clone()],
            None if !listed => config.peers.values().cloned().collect(),
            None => Vec::new(),
        };
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
            (None, false) if !listed => {
                tracing::info!(
                    node = config.node_id,
                    "--peers does not list this node: it joins the cluster through them"
                );
                (
                    BTreeMap::from([(config.node_id, peer_addr_text.clone())]),
                    None,
                    false,
                )
            }
            (None, true) => {
                let single = ClusterLayout::single(
                    config.node_id,
                    peer_addr_text.clone(),
                    config.replication,
                );
                (single.nodes.clone(), Some(single), true)
            }
            (None, false) => {
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
        let disk = Arc::new(DiskSpace::new(
            config.node_id,
            &data_dir,
            config.disk_reserve_bytes,
        ));
        if let Err(e) = disk.refresh() {
            tracing::warn!(dir = %data_dir.display(), "looking at the free space: {e}");
        }
        let stripes = check_data_format(&data_dir, config.stripes)?;
        // The Raft logs and the state machines live in separate databases (a pair a stripe,
        // see `STRIPES_DEFAULT`): the group commit's fsync holds the log database's journal,
        // and applying writes must not wait for it.
        // State needs no fsync of its own: the log is purged only after a snapshot has
        // persisted the state it covers, so a crash replays the log onto the state.
        // Neither database writes its journal out on each batch (`manual_journal_persist`):
        // the log's is written and fsync'd once per group commit, the state's when a
        // snapshot persists it; each keeps at most `JOURNAL_BYTES_MAX` of journal.
        let open_db = |name: &str| {
            journal_sync::open_database(&data_dir.join(name))
                .map_err(|e| startup(&format!("opening storage in {}", data_dir.display()), e))
        };
        let mut databases = Vec::with_capacity(stripes);
        for i in 0..stripes {
            databases.push((
                open_db(&stripe_db(LOG_DB, i))?,
                open_db(&stripe_db(STATE_DB, i))?,
            ));
        }
        let memory_db = open_db(MEMORY_LOG_DB)?;
        let storage_stats = StorageStats::new(
            databases
                .iter()
                .enumerate()
                .flat_map(|(i, (log, state))| {
                    [
                        (stripe_db(LOG_DB, i), log.clone()),
                        (stripe_db(STATE_DB, i), state.clone()),
                    ]
                })
                .chain([(MEMORY_LOG_DB.to_string(), memory_db.clone())])
                .collect(),
        );

        // Peers can reach this node's groups as soon as each is registered.
        let (stop, stop_rx) = watch::channel(false);
        if tls.peers.is_none() && !peer_addr.ip().is_loopback() {
            tracing::warn!(
                %peer_addr,
                "peer traffic is plain text on a non-loopback address; give --tls-ca (with \
                 --tls-cert and --tls-key) for mutual TLS between nodes"
            );
        }
        let transport: Arc<dyn PeerTransport> = tls.peers.clone().unwrap_or(Arc::new(PlainTcp));
        let pool = Arc::new(
            PeerPool::new(config.node_id, nodes.clone().into_iter().collect())
                .with_transport(transport.clone())
                .with_appends_in_flight(
                    config
                        .appends_in_flight
                        .unwrap_or_else(appends_in_flight_default),
                ),
        );
        let groups = LocalGroups::with_snapshot_room(disk.clone());
        // Calls from peers wait in the inbox until the router answering them exists.
        let (inbox, opening) = crate::inbound::inbox();
        let mut tasks = vec![tokio::spawn(serve_peers_over(
            peer_listener,
            transport,
            groups.clone(),
            inbox,
            stop_rx.clone(),
        ))];

        let clock = Arc::new(HybridClock::system());
        let fsync = if config.in_memory {
            Fsync::Never
        } else {
            Fsync::Always
        };
        let stripes = databases
            .into_iter()
            .enumerate()
            .map(|(i, (log, state))| {
                let commit =
                    GroupCommit::start(log.clone(), &data_dir.join(stripe_db(LOG_DB, i)), fsync)
                        .map_err(|e| startup("starting the fsync thread", e))?;
                let state_dir = data_dir.join(stripe_db(STATE_DB, i));
                let writeback = match fsync {
                    Fsync::Always => Some(
                        Writeback::start(state.clone(), &state_dir)
                            .map_err(|e| startup("starting the writeback thread", e))?,
                    ),
                    Fsync::Never => None,
                };
                Ok(Stripe {
                    log,
                    state,
                    state_dir,
                    commit,
                    writeback,
                })
            })
            .collect::<Result<Vec<_>, FirnError>>()?;
        let checkpoints = Checkpoints::start(
            memory_db.clone(),
            &data_dir.join(MEMORY_LOG_DB),
            config.memory_checkpoint_every,
            fsync,
        )
        .map_err(|e| startup("starting the checkpoint thread", e))?;
        let peers = PeerClient::new(pool.clone());
        // Why the node cannot go on: the cluster refused its join, or a group's storage failed.
        let (fail, failed) = watch::channel(None);
        let fail = Arc::new(fail);
        let factory = ReplicaFactory {
            node_id: config.node_id,
            peer_addr: peer_addr_text,
            stripes,
            memory_db,
            checkpoints,
            peers: peers.clone(),
            data_dir: data_dir.clone(),
            snapshot_every_entries: config.snapshot_every_entries,
            snapshot_catchup_entries: config.snapshot_catchup_entries,
            close_time_every: config.close_time_every,
            close_time_idle_every: config.close_time_idle_every,
            close_always: Arc::default(),
            in_memory: config.in_memory,
            pool,
            groups,
            clock,
            failures: fail.clone(),
            disk: disk.clone(),
        };
        let meta_replica = factory
            .open(
                META_GROUP,
                &meta_members,
                bootstrap.is_some(),
                firn_model::Durability::Disk,
            )
            .await?;
        let meta = Arc::new(Meta::new(config.node_id, meta_replica));
        let meta_client = Arc::new(MetaClient::new(meta.clone(), peers.clone()));
        let local = match &config.local_region {
            LocalRegionSetting::Off => None,
            LocalRegionSetting::Default(c) => Some(LocalRegion::open(
                &data_dir.join(crate::local::REGION_FILE),
                c.clone(),
                config.node_id,
            )?),
            LocalRegionSetting::At(path, c) => {
                Some(LocalRegion::open(path, c.clone(), config.node_id)?)
            }
        };
        let (blob_repairs, repair_queue) = tokio::sync::mpsc::unbounded_channel();
        let blob_files = Arc::new(crate::blob::files::BlobFiles::new(data_dir.join(BLOB_DIR)));
        let intake = crate::blob::repair::RepairIntake {
            queue: blob_repairs,
            files: blob_files.clone(),
        };
        let replicas = Arc::new(Replicas::new(factory, local.clone(), intake));
        let (publish, layout) = watch::channel(Arc::new(ClusterLayout::empty()));
        let router = Arc::new(Router::new(RouterParts {
            replicas: replicas.clone(),
            peers: peers.clone(),
            meta: meta_client.clone(),
            layout,
            limits: config.limits.clone(),
            allow_flushall: config.allow_flushall,
            log_index_bytes: config.log_index_bytes,
            client_addrs: (announced(resp_addr), announced(http_addr)),
            blobs: crate::blob::BlobConfig {
                sweep_every: config.blob_sweep_every,
                grace: config.blob_grace,
            },
            blob_files,
            users: config.users.clone(),
            disk: disk.clone(),
        }));
        tasks.push(tokio::spawn(storage_stats.run(stop_rx.clone())));
        tasks.push(tokio::spawn(disk.clone().run(
            crate::disk::tell_peers(peers.clone(), config.node_id, router.layout_watch()),
            stop_rx.clone(),
        )));
        tasks.push(tokio::spawn(crate::blob::repair::run(
            router.blobs().clone(),
            repair_queue,
            stop_rx.clone(),
        )));
        tasks.push(tokio::spawn(crate::blob::sweep::run(
            router.blobs().clone(),
            stop_rx.clone(),
        )));
        opening.open(router.clone(), meta_client);
        let host: Arc<dyn ShardHost> = router.clone();
        let mut follower = LayoutFollower::new(meta.clone(), host.clone(), publish);
        // A node alone, and a node restarting, serve before `start` returns: the layout is
        // stored (alone) and applied (the one the meta replica recovered) now.
        if let Some(layout) = bootstrap.as_ref().filter(|l| l.nodes.len() == 1) {
            meta.create(layout).await?;
        }
        follower.catch_up().await?;
        // Every node of a new `--peers` cluster derives the same first layout: it serves by
        // it until the meta group delivers the stored one (the same, unless changed since).
        if !follower.has_applied()
            && let Some(layout) = initial
        {
            follower.apply(layout).await?;
        }
        tasks.push(tokio::spawn(follower.run(bootstrap, stop_rx.clone())));
        tasks.push(tokio::spawn(steward_loop(
            host,
            peers.clone(),
            meta,
            FollowSettings {
                interval: config.follow_interval,
            },
            stop_rx.clone(),
        )));
        if !join_through.is_empty() {
            tasks.push(tokio::spawn(join(
                peers,
                config.node_id,
                join_through,
                announced(peer_addr),
                fail,
                stop_rx.clone(),
            )));
        }

        tasks.push(tokio::spawn(crate::resp::serve(
            resp_listener,
            router.clone(),
            stop_rx.clone(),
            config.resp_connections_max,
            tls.clients.clone(),
        )));
        tasks.push(tokio::spawn(
            router.clone().follow_remote_leaders(stop_rx.clone()),
        ));
        let app = crate::http::routes(router.clone(), stop_rx.clone());
        tasks.push(if tls.clients.is_on() {
            let listener = crate::tls::TlsHttpListener::new(http_listener, tls.clients)
                .map_err(|e| startup("HTTP listener", e))?;
            tokio::spawn(serve_http(Lingering(listener), app, stop_rx.clone()))
        } else {
            tokio::spawn(serve_http(Lingering(http_listener), app, stop_rx.clone()))
        });
        if let Some(local) = local {
            tasks.push(tokio::spawn(local.run_leases(
                {
                    let replicas = replicas.clone();
                    move || replicas.all()
                },
                stop_rx.clone(),
            )));
        }
        let retention = replicas;
        let mut retention_stop = stop_rx;
        let interval = config.retention_interval;
        tasks.push(tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(interval) => {
                        if let Err(e) = retention.expire_by_age().await {
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
            failed,
            tasks,
            _scratch: scratch,
        })
    }

    /// Stops accepting requests, ends connections (RESP ones within
    /// [`crate::resp::SHUTDOWN_CONNECTIONS_WAIT`], open watches included) and stops the Raft
    /// groups. Tasks still running after [`SHUTDOWN_TASKS_WAIT`] are cut off.
    /// The node's router: what both front ends call (tests drive it directly).
    pub fn router(&self) -> &Arc<Router> {
        &self.router
    }

    /// Resolves, with the reason, if the node cannot go on: the cluster it was told to join
    /// refused it (its node id or address is another member's), or a group's storage
    /// failed (a full or failing disk; see `crate::disk`). Never resolves otherwise.
    /// The node still serves until it is shut down.
    pub async fn failure(&self) -> String {
        let mut failed = self.failed.clone();
        match failed.wait_for(Option::is_some).await {
            Ok(why) => why.clone().unwrap_or_default(),
            // The sender is gone without a failure: never.
            Err(_) => std::future::pending().await,
        }
    }

    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let deadline = tokio::time::Instant::now() + SHUTDOWN_TASKS_WAIT;
        for mut t in self.tasks {
            if tokio::time::timeout_at(deadline, &mut t).await.is_err() {
                tracing::warn!("a task did not stop within {SHUTDOWN_TASKS_WAIT:?}; cut off");
                t.abort();
            }
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
        check_data_format(fresh.path(), None).unwrap();
        assert!(
            std::fs::read_to_string(fresh.path().join(DATA_FORMAT_FILE))
                .unwrap()
                .starts_with(DATA_FORMAT)
        );
        // Opening it again is fine.
        check_data_format(fresh.path(), None).unwrap();

        // A directory written by the first layout (one database under `db/`) is refused.
        let old = tempfile::tempdir().unwrap();
        std::fs::create_dir(old.path().join("db")).unwrap();
        let e = check_data_format(old.path(), None).unwrap_err().to_string();
        assert!(
            e.contains("firn-data 1") && e.contains("empty --data-dir"),
            "{e}"
        );
        assert!(!old.path().join(DATA_FORMAT_FILE).exists());

        // So is one marked with a layout this build does not know.
        std::fs::write(fresh.path().join(DATA_FORMAT_FILE), "firn-data 9\n").unwrap();
        let e = check_data_format(fresh.path(), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("firn-data 9"), "{e}");
    }

    #[test]
    fn a_node_announces_its_advertised_host_with_each_listeners_port() {
        let bound: SocketAddr = "0.0.0.0:7379".parse().unwrap();
        assert_eq!(advertised(None, bound), "0.0.0.0:7379");
        assert_eq!(advertised(Some("firn-0.firn"), bound), "firn-0.firn:7379");
        assert_eq!(advertised(Some("10.0.0.7"), bound), "10.0.0.7:7379");
        assert_eq!(advertised(Some("fd00::7"), bound), "[fd00::7]:7379");
        assert_eq!(advertised(Some("[fd00::7]"), bound), "[fd00::7]:7379");
    }

    #[test]
    fn a_data_directory_keeps_the_stripes_it_was_made_with() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(check_data_format(dir.path(), Some(3)).unwrap(), 3);
        assert_eq!(
            std::fs::read_to_string(dir.path().join(DATA_FORMAT_FILE)).unwrap(),
            "firn-data 2\nstripes 3\n"
        );
        // Later starts find the count, with or without the flag; a different one is refused.
        assert_eq!(check_data_format(dir.path(), None).unwrap(), 3);
        assert_eq!(check_data_format(dir.path(), Some(3)).unwrap(), 3);
        let refused = check_data_format(dir.path(), Some(4))
            .unwrap_err()
            .to_string();
        assert!(refused.contains("made with 3 stripe(s)"), "{refused}");
        assert_eq!(check_data_format(dir.path(), None).unwrap(), 3);
    }

    #[test]
    fn a_directory_from_before_stripes_has_one_and_a_bad_count_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let format = dir.path().join(DATA_FORMAT_FILE);
        std::fs::write(&format, DATA_FORMAT).unwrap();
        assert_eq!(check_data_format(dir.path(), None).unwrap(), 1);
        for bad in ["stripes 0", "stripes 65", "stripes x", "shelves 2"] {
            std::fs::write(&format, format!("{DATA_FORMAT}{bad}\n")).unwrap();
            let refused = check_data_format(dir.path(), None).unwrap_err().to_string();
            assert!(refused.contains("another layout"), "{bad}: {refused}");
        }
        std::fs::write(&format, "firn-data 3\n").unwrap();
        assert!(check_data_format(dir.path(), None).is_err());
    }

    #[test]
    fn a_new_directory_gets_the_default_for_its_machine() {
        let dir = tempfile::tempdir().unwrap();
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let want = if cores >= STRIPES_CORES_MIN {
            STRIPES_DEFAULT
        } else {
            1
        };
        assert_eq!(check_data_format(dir.path(), None).unwrap(), want);
    }
}
