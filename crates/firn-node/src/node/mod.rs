//! Starting and stopping a node: storage, the shard replicas it holds, the router, the
//! client and peer listeners, and the background retention task.

use std::net::SocketAddr;
use std::sync::Arc;

use firn_model::{FirnError, HybridClock};
use firn_raft::META_GROUP;
use firn_raft::peer::{LocalGroups, PeerPool, serve_peers_over};
use firn_raft::transport::{PeerTransport, PlainTcp};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::cluster::ShardHost;
use crate::cluster::follow::FollowSettings;
use crate::cluster::follower::{LayoutFollower, join, steward_loop};
use crate::cluster::layout::ClusterLayout;
use crate::cluster::meta::{Meta, MetaClient};
use crate::config::{LocalRegionSetting, NodeConfig};
use crate::exec::KernelParts;
use crate::http::linger::Lingering;
use crate::local::LocalRegion;
use crate::replicas::{ReplicaFactory, Replicas};
use crate::router::{Router, RouterParts};
use crate::rpc::PeerClient;
use crate::storage_stats::StorageStats;

mod formation;
mod storage;

use formation::Formation;
use storage::Storage;

pub struct RunningNode {
    pub resp_addr: SocketAddr,
    pub http_addr: SocketAddr,
    pub peer_addr: SocketAddr,
    /// The MQTT listener, when the node has one.
    pub mqtt_addr: Option<SocketAddr>,
    router: Arc<Router>,
    stop: watch::Sender<bool>,
    /// Why the node cannot go on (the cluster refused to let it join, a group's storage
    /// failed), once it is known.
    failed: watch::Receiver<Option<String>>,
    tasks: Vec<JoinHandle<()>>,
    /// Holds an in-memory node's scratch directory until shutdown.
    _scratch: Option<tempfile::TempDir>,
    /// The data directory's lock, held while the node runs.
    _lock: std::fs::File,
}

/// How long shutdown waits for the node's tasks (listeners, connections, loops) to end
/// once told to stop: HTTP answers in progress get [`crate::http::SHUTDOWN_WAIT`] of it.
pub const SHUTDOWN_TASKS_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

fn startup(what: &str, e: impl std::fmt::Display) -> FirnError {
    FirnError::Internal(format!("{what}: {e}"))
}

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
    if cores >= storage::STRIPES_CORES_MIN {
        16
    } else {
        1
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

/// The connections to the other nodes, over TLS where `--tls-ca` is given (a warning where
/// peer traffic is plain text off loopback).
fn peer_pool(
    config: &NodeConfig,
    formation: &Formation,
    tls: Option<Arc<dyn PeerTransport>>,
    peer_addr: SocketAddr,
) -> (Arc<PeerPool>, Arc<dyn PeerTransport>) {
    if tls.is_none() && !peer_addr.ip().is_loopback() {
        tracing::warn!(
            %peer_addr,
            "peer traffic is plain text on a non-loopback address; give --tls-ca (with \
             --tls-cert and --tls-key) for mutual TLS between nodes"
        );
    }
    let transport: Arc<dyn PeerTransport> = tls.unwrap_or(Arc::new(PlainTcp));
    let pool = Arc::new(
        PeerPool::new(
            config.node_id,
            formation.nodes.clone().into_iter().collect(),
        )
        .with_transport(transport.clone())
        .with_appends_in_flight(
            config
                .appends_in_flight
                .unwrap_or_else(appends_in_flight_default),
        ),
    );
    (pool, transport)
}

/// What opens this node's replicas, on its storage (durable from now on), as `config` says.
fn replica_factory(
    config: &NodeConfig,
    storage: &mut Storage,
    peer_addr: String,
    (pool, groups, peers): (Arc<PeerPool>, LocalGroups, PeerClient),
    (clock, failures): (Arc<HybridClock>, Arc<watch::Sender<Option<String>>>),
) -> Result<ReplicaFactory, FirnError> {
    let (stripes, checkpoints) = storage.start_syncing(config)?;
    Ok(ReplicaFactory {
        node_id: config.node_id,
        peer_addr,
        stripes,
        memory_db: storage.memory_db.clone(),
        checkpoints,
        peers,
        data_dir: storage.data_dir.clone(),
        snapshot_every_entries: config.snapshot_every_entries,
        snapshot_catchup_entries: config.snapshot_catchup_entries,
        close_time_every: config.close_time_every,
        close_time_idle_every: config.close_time_idle_every,
        close_always: Arc::default(),
        in_memory: config.in_memory,
        pool,
        groups,
        clock,
        failures,
        disk: storage.disk.clone(),
    })
}

/// The node's work beside requests: its storage's metrics, its disk's word to its peers,
/// and the repair and sweep of large values.
fn spawn_housekeeping(
    router: &Arc<Router>,
    stats: StorageStats,
    peers: &PeerClient,
    repair_queue: tokio::sync::mpsc::UnboundedReceiver<crate::blob::repair::Repair>,
    stop_rx: &watch::Receiver<bool>,
) -> Vec<JoinHandle<()>> {
    let disk = router.kernel().disk().clone();
    let tell = crate::disk::tell_peers(
        peers.clone(),
        router.kernel().node_id(),
        router.kernel().layout_watch(),
    );
    vec![
        tokio::spawn(stats.run(stop_rx.clone())),
        tokio::spawn(disk.run(tell, stop_rx.clone())),
        tokio::spawn(crate::blob::repair::run(
            router.large().blobs().clone(),
            repair_queue,
            stop_rx.clone(),
        )),
        tokio::spawn(crate::blob::sweep::run(
            router.large().blobs().clone(),
            stop_rx.clone(),
        )),
        tokio::spawn(crate::txn::resolver::run(
            router.kernel().clone(),
            stop_rx.clone(),
        )),
        tokio::spawn(crate::expiry::run(router.kernel().clone(), stop_rx.clone())),
        tokio::spawn(crate::lease::sweeper::run(
            router.kernel().clone(),
            stop_rx.clone(),
        )),
        tokio::spawn(crate::functions::trigger::runner::run(
            router.functions().clone(),
            stop_rx.clone(),
        )),
        tokio::spawn(crate::functions::timer::fire_due(
            router.functions().clone(),
            stop_rx.clone(),
        )),
    ]
}

/// Follows the cluster's layout, and (on the meta leader) tends it; joins through
/// `formation.join_through` if that names members. A node alone, and a node restarting,
/// serve before `start` returns: the layout is stored (alone) and applied (the one the meta
/// replica recovered) before this returns.
async fn follow_cluster(
    router: &Arc<Router>,
    meta: Arc<Meta>,
    peers: &PeerClient,
    formation: Formation,
    (announced_peer_addr, fail): (String, Arc<watch::Sender<Option<String>>>),
    (config, publish, stop_rx): (
        &NodeConfig,
        watch::Sender<Arc<ClusterLayout>>,
        &watch::Receiver<bool>,
    ),
) -> Result<Vec<JoinHandle<()>>, FirnError> {
    let host: Arc<dyn ShardHost> = router.kernel().clone();
    let mut follower = LayoutFollower::new(meta.clone(), host.clone(), publish);
    if let Some(layout) = formation.bootstrap.as_ref().filter(|l| l.nodes.len() == 1) {
        meta.create(layout).await?;
    }
    follower.catch_up().await?;
    // Every node of a new `--peers` cluster derives the same first layout: it serves by
    // it until the meta group delivers the stored one (the same, unless changed since).
    if !follower.has_applied()
        && let Some(layout) = formation.initial
    {
        follower.apply(layout).await?;
    }
    let mut tasks = vec![
        tokio::spawn(follower.run(formation.bootstrap, stop_rx.clone())),
        tokio::spawn(steward_loop(
            host,
            peers.clone(),
            meta,
            FollowSettings {
                interval: config.follow_interval,
            },
            stop_rx.clone(),
        )),
    ];
    if !formation.join_through.is_empty() {
        tasks.push(tokio::spawn(join(
            peers.clone(),
            config.node_id,
            formation.join_through,
            announced_peer_addr,
            fail,
            stop_rx.clone(),
        )));
    }
    Ok(tasks)
}

/// The node's shared-memory region for local reads, as `--local-region` says (none: off).
fn open_local_region(
    config: &NodeConfig,
    data_dir: &std::path::Path,
) -> Result<Option<Arc<LocalRegion>>, FirnError> {
    Ok(match &config.local_region {
        LocalRegionSetting::Off => None,
        LocalRegionSetting::Default(c, readers) => Some(LocalRegion::open(
            &data_dir.join(crate::local::REGION_FILE),
            c.clone(),
            *readers,
            config.node_id,
        )?),
        LocalRegionSetting::At(path, c, readers) => Some(LocalRegion::open(
            path,
            c.clone(),
            *readers,
            config.node_id,
        )?),
    })
}

/// Drops versions past their keyspace's max age, every `interval`, on the shards led here.
fn spawn_retention(
    replicas: Arc<Replicas>,
    interval: std::time::Duration,
    mut stop: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(interval) => {
                    if let Err(e) = replicas.expire_by_age().await {
                        tracing::warn!("retention: {e}");
                    }
                }
                _ = stop.changed() => return,
            }
        }
    })
}

/// Serves the clients: RESP and HTTP (over TLS where configured), and the task that
/// abandons calls to leaders that moved.
fn serve_clients(
    router: &Arc<Router>,
    (resp_listener, http_listener): (TcpListener, TcpListener),
    config: &NodeConfig,
    tls: crate::tls::ClientTls,
    stop_rx: &watch::Receiver<bool>,
) -> Result<Vec<JoinHandle<()>>, FirnError> {
    let mut tasks = vec![tokio::spawn(crate::resp::serve(
        resp_listener,
        router.clone(),
        stop_rx.clone(),
        crate::resp::Bounds {
            connections_max: config.resp_connections_max,
            output_stall_max: config.resp_output_stall_max,
        },
        tls.clone(),
    ))];
    tasks.push(tokio::spawn(
        router
            .kernel()
            .clone()
            .follow_remote_leaders(stop_rx.clone()),
    ));
    let app = crate::http::routes(router.clone(), stop_rx.clone());
    tasks.push(if tls.is_on() {
        let listener = crate::tls::TlsHttpListener::new(http_listener, tls)
            .map_err(|e| startup("HTTP listener", e))?;
        tokio::spawn(serve_http(Lingering(listener), app, stop_rx.clone()))
    } else {
        tokio::spawn(serve_http(Lingering(http_listener), app, stop_rx.clone()))
    });
    Ok(tasks)
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
        let mqtt = match config.mqtt_addr {
            Some(addr) => {
                let settings = crate::mqtt::MqttSettings::new(
                    &config.mqtt_prefix,
                    config.limits.value_bytes_max,
                    config.resp_connections_max,
                )
                .map_err(FirnError::BadArgument)?;
                Some((bind(addr, "MQTT").await?, Arc::new(settings)))
            }
            None => None,
        };
        let mqtt_addr = mqtt.as_ref().map(|((_, addr), _)| *addr);

        let announced = |bound: SocketAddr| advertised(config.advertise_host.as_deref(), bound);
        let peer_addr_text = announced(peer_addr);
        let formation = Formation::of(&config, &peer_addr_text)?;
        let mut storage = Storage::open(&config)?;
        let (data_dir, disk) = (storage.data_dir.clone(), storage.disk.clone());

        // Peers can reach this node's groups as soon as each is registered.
        let (stop, stop_rx) = watch::channel(false);
        let (pool, transport) = peer_pool(&config, &formation, tls.peers.clone(), peer_addr);
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

        let peers = PeerClient::new(pool.clone());
        // Why the node cannot go on: the cluster refused its join, or a group's storage failed.
        let (fail, failed) = watch::channel(None);
        let fail = Arc::new(fail);
        // One clock stamps every group's writes here, judged against its peers' clocks.
        let clock = Arc::new(HybridClock::system());
        let clock_bound = Arc::new(crate::clock::ClockBound::new(
            clock.clone(),
            pool.clone(),
            config.max_clock_offset,
            // A relative path is in the node's data directory.
            config
                .clock_offset_file
                .as_ref()
                .map(|f| config.data_dir.join(f)),
        ));
        let factory = replica_factory(
            &config,
            &mut storage,
            peer_addr_text,
            (pool, groups, peers.clone()),
            (clock, fail.clone()),
        )?;
        let meta_replica = factory
            .open(
                META_GROUP,
                &formation.meta_members,
                formation.bootstrap.is_some(),
                firn_model::Durability::Disk,
            )
            .await?;
        let meta_replica_here = meta_replica.clone();
        let meta = Arc::new(Meta::new(config.node_id, meta_replica));
        let meta_client = Arc::new(MetaClient::new(meta.clone(), peers.clone()));
        let local = open_local_region(&config, &data_dir)?;
        let (blob_repairs, repair_queue) = tokio::sync::mpsc::unbounded_channel();
        let blob_files = Arc::new(crate::blob::files::BlobFiles::new(
            data_dir.join(storage::BLOB_DIR),
        ));
        let intake = crate::blob::repair::RepairIntake {
            queue: blob_repairs,
            files: blob_files.clone(),
        };
        let replicas = Arc::new(Replicas::new(factory, local.clone(), intake));

        let (publish, layout) = watch::channel(Arc::new(ClusterLayout::empty()));
        let router = Router::new(RouterParts {
            kernel: KernelParts {
                replicas: replicas.clone(),
                peers: peers.clone(),
                meta: meta_client.clone(),
                layout,
                limits: config.limits.clone(),
                allow_flushall: config.allow_flushall,
                client_addrs: (announced(resp_addr), announced(http_addr)),
                users: config.users.clone(),
                disk: disk.clone(),
                clock: clock_bound,
            },
            log_index_bytes: config.log_index_bytes,
            blobs: crate::blob::BlobConfig {
                sweep_every: config.blob_sweep_every,
                grace: config.blob_grace,
            },
            blob_files,
        });
        tasks.push(tokio::spawn(crate::exec::clock::follow_clock(
            router.kernel().clone(),
            meta_replica_here,
            stop_rx.clone(),
        )));
        tasks.extend(spawn_housekeeping(
            &router,
            storage.stats,
            &peers,
            repair_queue,
            &stop_rx,
        ));
        // MQTT's connections and delayed wills, which peers' takeovers reach (MQTT or not).
        let mqtt_clients = Arc::new(crate::mqtt::ClientsHere::default());
        opening.open(router.clone(), meta_client, mqtt_clients.clone());
        tasks.extend(
            follow_cluster(
                &router,
                meta,
                &peers,
                formation,
                (announced(peer_addr), fail),
                (&config, publish, &stop_rx),
            )
            .await?,
        );

        // Any cluster can be a hub: the sites that send to it are shown from their cursors.
        tasks.push(tokio::spawn(crate::uplink::follow_sites(
            router.clone(),
            stop_rx.clone(),
        )));
        if let Some(uplink) = config.uplink.clone() {
            tasks.push(tokio::spawn(crate::uplink::run(
                router.clone(),
                std::sync::Arc::new(uplink),
                stop_rx.clone(),
            )));
        }
        if let Some(((listener, _), settings)) = mqtt {
            tasks.push(tokio::spawn(crate::mqtt::serve(
                listener,
                router.clone(),
                settings,
                tls.clients.clone(),
                mqtt_clients.clone(),
                stop_rx.clone(),
            )));
        }
        tasks.extend(serve_clients(
            &router,
            (resp_listener, http_listener),
            &config,
            tls.clients,
            &stop_rx,
        )?);
        if let Some(local) = local {
            tasks.push(tokio::spawn(local.run_leases(
                {
                    let replicas = replicas.clone();
                    move || replicas.all()
                },
                stop_rx.clone(),
            )));
        }
        tasks.push(spawn_retention(
            replicas,
            config.retention_interval,
            stop_rx.clone(),
        ));
        tracing::info!(node = config.node_id, %resp_addr, %http_addr, %peer_addr, data_dir = %data_dir.display(), "firn node serving");
        Ok(RunningNode {
            resp_addr,
            http_addr,
            peer_addr,
            mqtt_addr,
            router,
            stop,
            failed,
            tasks,
            _scratch: storage.scratch,
            _lock: storage.lock,
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
    fn a_node_announces_its_advertised_host_with_each_listeners_port() {
        let bound: SocketAddr = "0.0.0.0:7379".parse().unwrap();
        assert_eq!(advertised(None, bound), "0.0.0.0:7379");
        assert_eq!(advertised(Some("firn-0.firn"), bound), "firn-0.firn:7379");
        assert_eq!(advertised(Some("10.0.0.7"), bound), "10.0.0.7:7379");
        assert_eq!(advertised(Some("fd00::7"), bound), "[fd00::7]:7379");
        assert_eq!(advertised(Some("[fd00::7]"), bound), "[fd00::7]:7379");
    }
}
