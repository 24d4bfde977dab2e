//! How a node is started.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use firn_model::Limits;

pub use crate::local::LocalRegionSetting;

/// How often the memory groups' log is fsync'd unless `--memory-checkpoint-every` says.
pub const MEMORY_CHECKPOINT_EVERY_DEFAULT: Duration = Duration::from_millis(100);

#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// Redis protocol listener (default 127.0.0.1:7379).
    pub resp_addr: SocketAddr,
    /// HTTP/JSON listener (default 127.0.0.1:7380).
    pub http_addr: SocketAddr,
    /// Where the Raft log, state and snapshots live (default ./firn-data).
    pub data_dir: PathBuf,
    /// Keep nothing on disk that outlives the process and skip fsync: for tests only.
    pub in_memory: bool,
    pub limits: Limits,
    /// Whether FLUSHALL (drop every key) is allowed.
    pub allow_flushall: bool,
    /// How often the retention task proposes age-based expiry (only when a keyspace has a
    /// max age).
    pub retention_interval: Duration,
    /// Build a snapshot (and purge the log before it) every this many log entries.
    pub snapshot_every_entries: u64,
    /// Log entries kept behind each snapshot, so that a replica at most this far behind
    /// catches up from the log instead of by a snapshot transfer.
    pub snapshot_catchup_entries: u64,
    /// A shard leader whose shard has had no entry for this long proposes one that closes
    /// time, while closed time is wanted (see `firn_raft::closer`). Zero: never (a read at a
    /// recent time on an idle shard then waits for its next write).
    pub close_time_every: Duration,
    /// The same when nobody has wanted closed time for a while: an idle cluster then writes
    /// a close entry a shard this often. At most `close_time_every` means no difference.
    pub close_time_idle_every: Duration,
    /// The bound on the offset between this node's clock and its peers' (`--max-clock-offset`,
    /// default 500 ms): beyond it, from a majority of its peers, the node stamps no writes
    /// and leads no shard until it is back (see `crate::clock`). Zero: not enforced.
    pub max_clock_offset: Duration,
    /// A file holding the milliseconds to shift this process's clock by, read a few times a
    /// second: how tests give a node a clock that is off. Never set otherwise.
    pub clock_offset_file: Option<PathBuf>,
    /// This node's id in the cluster (1 for a single node).
    pub node_id: u64,
    /// Listener for other nodes (default 127.0.0.1:7381).
    pub peer_addr: SocketAddr,
    /// Every node of the cluster, this one included (node id → peer address). Empty: a
    /// single node.
    pub peers: BTreeMap<u64, String>,
    /// Number of shards in a cluster (a single node has one).
    pub shards: u32,
    /// Replicas per shard, capped by the node count.
    pub replication: usize,
    /// Join the cluster that the node at this peer address belongs to (instead of `peers`).
    pub join: Option<String>,
    /// The host other nodes and clients reach this node by, when it is not the address it
    /// listens on (`0.0.0.0` in a container): announced with each listener's port, to peers
    /// (a join) and to clients (`CLUSTER SLOTS`/`SHARDS`/`NODES`, `/v1/cluster`). `None`: the
    /// listening addresses.
    pub advertise_host: Option<String>,
    /// Most RESP connections open at once; one more is told `ERR max number of clients
    /// reached` and closed.
    pub resp_connections_max: usize,
    /// Longest a RESP client may take none of its replies while some wait to go out; it is
    /// closed then (see `resp::OUTPUT_FLUSH_BYTES` for what it holds meanwhile).
    pub resp_output_stall_max: Duration,
    /// The MQTT listener (`--mqtt-addr`); `None`: no MQTT (the default).
    pub mqtt_addr: Option<SocketAddr>,
    /// The key prefix MQTT topics live under (`--mqtt-prefix`, default `mqtt/`).
    pub mqtt_prefix: String,
    /// This node's cluster is a site that sends keys to a hub (`--site`, `--hub`,
    /// `--uplink`); `None`: it is not (the default).
    pub uplink: Option<crate::uplink::UplinkConfig>,
    /// Most bytes the local log index holds (see [`crate::log_index`]); 0 turns it off.
    pub log_index_bytes: usize,
    /// The shared-memory region for local reads (see [`crate::local`]).
    pub local_region: LocalRegionSetting,
    /// Least time between two moves of one shard's leader toward its clients (to different
    /// nodes), when this node's steward leads the meta group (see `cluster::follow`).
    pub follow_interval: Duration,
    /// How often the memory groups' log is fsync'd in the background (see
    /// `firn_raft::log_store::Checkpoints`).
    pub memory_checkpoint_every: Duration,
    /// Stripes a new data directory gets (see `crate::replicas::Stripe`); `None`: 4 on a
    /// machine of 4 or more cores, else 1. An existing directory keeps its own.
    pub stripes: Option<usize>,
    /// Appends of a replication stream sent before their answers (see
    /// `firn_raft::pipeline`); `None`: [`crate::node::appends_in_flight_default`].
    pub appends_in_flight: Option<usize>,
    /// How often blob files no version names are looked for (see `crate::blob::sweep`).
    pub blob_sweep_every: Duration,
    /// How old an unused blob file must be before the sweep deletes it.
    pub blob_grace: Duration,
    /// Writes that add data are refused while the data disk has fewer bytes free (0: never;
    /// see `crate::disk`).
    pub disk_reserve_bytes: u64,
    /// Users and their permissions (`--users`); none: nothing is checked.
    pub users: Option<std::sync::Arc<crate::auth::Users>>,
    /// TLS on the client listeners and between nodes (default off; see [`crate::tls`]).
    pub tls: crate::tls::TlsSettings,
}

/// Default shard count of a cluster: a few per node on small machines keeps the number of
/// Raft groups (and their fsyncs) low.
pub const CLUSTER_SHARDS_DEFAULT: u32 = 3;
/// Default replicas per shard.
pub const REPLICATION_DEFAULT: usize = 3;

/// Log entries kept behind a snapshot by default (etcd keeps 5,000 behind a snapshot every
/// 10,000; here a tenth of the default snapshot interval): about 2 MiB a group of 100-byte
/// puts.
pub const SNAPSHOT_CATCHUP_ENTRIES_DEFAULT: u64 = 10_000;

/// How often an idle shard closes time by default: the target lag of closed time behind
/// real time is this plus one commit (tens of milliseconds).
pub const CLOSE_TIME_EVERY_DEFAULT: Duration = Duration::from_millis(50);

/// How often a shard closes time when nobody wants it closed (no read at a time, snapshot or
/// local read asked for it in the last 10 s): an idle 3-node cluster then writes about a
/// twentieth of what closing every 50 ms writes (docs/deploy.md).
pub const CLOSE_TIME_IDLE_EVERY_DEFAULT: Duration = Duration::from_secs(1);

/// Default limit of open RESP connections: twice Redis's default `maxclients`, so that a
/// node holds 10,000 idle clients beside 1,000 busy ones. Each connection holds two 16 KiB
/// buffers and at most 64 KiB of replies plus one (`resp::OUTPUT_FLUSH_BYTES`), so the
/// limit bounds the node's memory for clients (and its file descriptors: `firn serve`
/// raises its open-file limit to fit) rather than its throughput.
pub const RESP_CONNECTIONS_MAX: usize = 20_000;

/// Default of [`NodeConfig::resp_output_stall_max`]: Redis closes a pub/sub client whose
/// output stayed over its soft limit for 60 s; a client that reads nothing for as long is
/// gone or stuck, and holds a connection slot.
pub const RESP_OUTPUT_STALL_MAX_DEFAULT: Duration = Duration::from_secs(60);

/// Default bound of the local log index: enough for a few hundred thousand small records,
/// small beside the node's storage caches.
pub const LOG_INDEX_BYTES_DEFAULT: usize = 64 << 20;

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            resp_addr: SocketAddr::from(([127, 0, 0, 1], 7379)),
            http_addr: SocketAddr::from(([127, 0, 0, 1], 7380)),
            data_dir: PathBuf::from("firn-data"),
            in_memory: false,
            limits: Limits::default(),
            allow_flushall: false,
            retention_interval: Duration::from_secs(10),
            snapshot_every_entries: 100_000,
            snapshot_catchup_entries: SNAPSHOT_CATCHUP_ENTRIES_DEFAULT,
            close_time_every: CLOSE_TIME_EVERY_DEFAULT,
            close_time_idle_every: CLOSE_TIME_IDLE_EVERY_DEFAULT,
            max_clock_offset: crate::clock::MAX_CLOCK_OFFSET_DEFAULT,
            clock_offset_file: None,
            node_id: 1,
            peer_addr: SocketAddr::from(([127, 0, 0, 1], 7381)),
            peers: BTreeMap::new(),
            shards: CLUSTER_SHARDS_DEFAULT,
            replication: REPLICATION_DEFAULT,
            join: None,
            resp_connections_max: RESP_CONNECTIONS_MAX,
            resp_output_stall_max: RESP_OUTPUT_STALL_MAX_DEFAULT,
            mqtt_addr: None,
            mqtt_prefix: crate::mqtt::PREFIX_DEFAULT.to_owned(),
            uplink: None,
            log_index_bytes: LOG_INDEX_BYTES_DEFAULT,
            local_region: LocalRegionSetting::default(),
            follow_interval: crate::cluster::follow::FOLLOW_INTERVAL_DEFAULT,
            memory_checkpoint_every: MEMORY_CHECKPOINT_EVERY_DEFAULT,
            stripes: None,
            appends_in_flight: None,
            advertise_host: None,
            blob_sweep_every: crate::blob::SWEEP_EVERY_DEFAULT,
            blob_grace: crate::blob::GRACE_DEFAULT,
            disk_reserve_bytes: crate::disk::DISK_RESERVE_BYTES_DEFAULT,
            users: None,
            tls: crate::tls::TlsSettings::default(),
        }
    }
}
