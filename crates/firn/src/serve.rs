//! `firn serve`: its flags, and running one node until Ctrl-C or SIGTERM.
//!
//! The flags below are the one list of a node's settings and their defaults: each is also
//! read from `FIRN_<FLAG>` in the environment and from a config file (see `crate::config`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use clap::Args;
use firn_model::Limits;
use firn_node::config::LocalRegionSetting;
use firn_node::{NodeConfig, RunningNode};

use crate::config::{Setting, render};

mod open_files;
mod unix_group;

#[derive(Args)]
pub struct ServeArgs {
    /// Read settings from this TOML file: `key = value` lines, each key a flag's long name
    /// (`data-dir = "/var/lib/firn"`). A flag, then its `FIRN_<FLAG>` environment variable,
    /// take precedence over the file; the file over the default.
    #[arg(long, env = "FIRN_CONFIG", value_name = "PATH")]
    config: Option<PathBuf>,
    /// Print the settings this node would run with, each with where it came from, as a
    /// config file, and exit without starting.
    #[arg(long)]
    print_config: bool,
    /// Where the node takes Redis (RESP) clients.
    #[arg(long, env = "FIRN_RESP_ADDR", default_value = "127.0.0.1:7379")]
    resp_addr: SocketAddr,
    /// Where the node serves HTTP/JSON, the web page and /metrics.
    #[arg(long, env = "FIRN_HTTP_ADDR", default_value = "127.0.0.1:7380")]
    http_addr: SocketAddr,
    /// The node's Raft logs, state, snapshots and large values (one node a directory).
    #[arg(long, env = "FIRN_DATA_DIR", default_value = "firn-data")]
    data_dir: PathBuf,
    /// Keep nothing after exit and skip fsync (tests only: acknowledged writes can be lost).
    #[arg(long, env = "FIRN_IN_MEMORY")]
    in_memory: bool,
    /// Largest value carried inline through the Raft log, in bytes (at most 16 MiB); a
    /// larger one is stored beside the log as a blob (up to 16 GiB over HTTP, 64 MiB over
    /// RESP).
    #[arg(long, env = "FIRN_MAX_VALUE_BYTES", default_value_t = firn_model::limits::VALUE_BYTES_MAX_DEFAULT)]
    max_value_bytes: usize,
    /// Allow FLUSHALL to drop every key.
    #[arg(long, env = "FIRN_ALLOW_FLUSHALL")]
    allow_flushall: bool,
    /// How often age-based retention runs.
    #[arg(long, env = "FIRN_RETENTION_INTERVAL", default_value = "10s", value_parser = humantime::parse_duration)]
    retention_interval: Duration,
    /// Snapshot (and purge the log) every this many entries.
    #[arg(long, env = "FIRN_SNAPSHOT_EVERY", default_value_t = 100_000)]
    snapshot_every: u64,
    /// Log entries kept behind each snapshot: a replica that fell at most this far behind
    /// (a restart, a short partition) catches up from the log instead of being sent a
    /// snapshot of the whole shard. 0 purges the log up to the snapshot.
    #[arg(long, env = "FIRN_SNAPSHOT_CATCHUP_ENTRIES", default_value_t = firn_node::config::SNAPSHOT_CATCHUP_ENTRIES_DEFAULT)]
    snapshot_catchup_entries: u64,
    /// A shard's leader closes time when the shard has been quiet this long (it looks this
    /// often), while closed time is wanted: a read at a time (ASOF), a snapshot or a local
    /// read asked for it in the last 10 s, or a LOCAL keyspace is published; each close is
    /// an entry fsync'd on every replica. 0 turns closing off (an idle cluster then writes
    /// nothing for it, and a read at a recent time on an idle shard waits for its next
    /// write).
    #[arg(long, env = "FIRN_CLOSE_TIME_EVERY", default_value = "50ms", value_parser = humantime::parse_duration)]
    close_time_every: Duration,
    /// How often a shard's leader closes time when nobody wants it: a read that then finds
    /// its time not closed asks the leader to close it at once (a commit's wait), and closes
    /// go on every --close-time-every for 10 s. At most --close-time-every: no difference.
    #[arg(long, env = "FIRN_CLOSE_TIME_IDLE_EVERY", default_value = "1s", value_parser = humantime::parse_duration)]
    close_time_idle_every: Duration,
    /// The bound on the offset between this node's clock and its peers' clocks, measured on
    /// the traffic between them: a node whose clock is beyond it from a majority of its
    /// peers stamps no writes (CLOCKSKEW), leads no shard and answers no read from a leader
    /// lease until it is back within it. Every guarantee about time holds within this bound.
    /// 0 turns the check off.
    #[arg(long, env = "FIRN_MAX_CLOCK_OFFSET", default_value = "500ms", value_parser = humantime::parse_duration)]
    max_clock_offset: Duration,
    /// For tests: a file holding milliseconds to shift this node's clock by (read four
    /// times a second), to make a node whose clock is off on purpose.
    #[arg(long, env = "FIRN_CLOCK_OFFSET_FILE", hide = true)]
    clock_offset_file: Option<PathBuf>,
    /// This node's id in the cluster: a number from 1, or `host-ordinal`: one more than
    /// the number that ends this host's name, as a Kubernetes StatefulSet names its pods
    /// (`firn-0` is node 1, `firn-2` node 3).
    #[arg(long, env = "FIRN_NODE_ID", default_value_t = NodeIdSetting::Id(1))]
    node_id: NodeIdSetting,
    /// Listener for the other nodes of the cluster.
    #[arg(long, env = "FIRN_PEER_ADDR", default_value = "127.0.0.1:7381")]
    peer_addr: SocketAddr,
    /// Form a cluster of these nodes, this one included: ID=PEER_ADDR,… (none: a single
    /// node, which others may join). Only read when the cluster is first created.
    #[arg(long, env = "FIRN_PEERS", default_value = "")]
    peers: String,
    /// Join the cluster of the node at this peer address (any member); its replicas move
    /// here so that shards and leaders spread evenly.
    #[arg(long, env = "FIRN_JOIN", conflicts_with = "peers")]
    join: Option<String>,
    /// The host name or IP other nodes and clients reach this node by, when it differs from
    /// the address it listens on (`0.0.0.0` in a container; a pod's DNS name). It is
    /// announced with each listener's port: to the cluster when joining, and to clients in
    /// CLUSTER SLOTS, SHARDS and NODES and /v1/cluster. Default: the listening addresses.
    #[arg(long, env = "FIRN_ADVERTISE_HOST", value_parser = advertise_host)]
    advertise_host: Option<String>,
    /// Shards in a cluster (a single node has one).
    #[arg(long, env = "FIRN_SHARDS", default_value_t = firn_node::config::CLUSTER_SHARDS_DEFAULT)]
    shards: u32,
    /// Replicas per shard, capped by the node count.
    #[arg(long, env = "FIRN_REPLICATION", default_value_t = firn_node::config::REPLICATION_DEFAULT)]
    replication: usize,
    /// Most RESP connections open at once; one more is told `ERR max number of clients
    /// reached` and closed. The open-file limit is raised to fit (up to the hard limit;
    /// past it fewer are taken, and the node says so).
    #[arg(long, env = "FIRN_MAX_CONNECTIONS", default_value_t = firn_node::config::RESP_CONNECTIONS_MAX)]
    max_connections: usize,
    /// Longest a RESP client may take none of its replies while some wait to go out (it
    /// pipelines and never reads, or a subscriber stopped reading): it is disconnected then.
    #[arg(long, env = "FIRN_MAX_OUTPUT_STALL", default_value = "60s", value_parser = humantime::parse_duration)]
    max_output_stall: Duration,
    /// Listen for MQTT 3.1.1 and 5.0 clients here (off by default; TLS and --users apply
    /// as on the other ports). Its connections are bounded by --max-connections too.
    #[arg(long, env = "FIRN_MQTT_ADDR")]
    mqtt_addr: Option<SocketAddr>,
    /// The key prefix MQTT topics live under: topic `T` is the key `PREFIX T`; messages
    /// published without retain go to the log named by the prefix without its `/`.
    #[arg(long, env = "FIRN_MQTT_PREFIX", default_value = firn_node::mqtt::PREFIX_DEFAULT)]
    mqtt_prefix: String,
    /// This cluster is a site named NAME that sends keys, logs and streams to a hub (with
    /// --hub and --uplink): on the hub, its key K is `sites/NAME/K`.
    #[arg(long, env = "FIRN_SITE", requires = "hub")]
    site: Option<String>,
    /// The hub a site sends to: any node of the hub's cluster, as
    /// `redis://[user:password@]host:port` (its RESP address).
    #[arg(long, env = "FIRN_HUB", requires = "site")]
    hub: Option<String>,
    /// What a site sends to its hub, comma-separated: key prefixes (`sensor/`), logs
    /// (`log:NAME`) and streams (`stream:KEY`), as `sites/NAME/…` at the hub. Each version,
    /// record and entry goes up once, in order, committed at the hub with the site's cursor.
    #[arg(long, env = "FIRN_UPLINK", requires = "site")]
    uplink: Option<String>,
    /// What a site takes from its hub: key prefixes, comma-separated (`config/`). The
    /// hub's `sites/NAME/P…` are the desired state of the site's `P…`: once a second the
    /// site's keys are made the same (written where they differ, deleted where the hub has
    /// none).
    #[arg(long, env = "FIRN_DOWNLINK", requires = "site")]
    downlink: Option<String>,
    /// The hub's cluster id (32 hex digits, `firn_cluster_id` in its CLUSTER INFO): a site
    /// sends only to the hub it first reached, or to the one named here (to move it to a
    /// new hub).
    #[arg(long, env = "FIRN_HUB_CLUSTER_ID", requires = "site")]
    hub_cluster_id: Option<String>,
    /// Most bytes of log records this node keeps in its local log index, so that repeated
    /// reads of a tag's records skip the shards that index it (default 64 MiB); 0 turns it
    /// off.
    #[arg(long, env = "FIRN_LOG_INDEX_BYTES", default_value_t = firn_node::config::LOG_INDEX_BYTES_DEFAULT)]
    log_index_bytes: usize,
    /// The shared-memory region that `LOCAL on` keyspaces are published in, for clients on
    /// this host: a file path (a path in /dev/shm keeps the kernel from writing it back to
    /// disk), or `off`. Default: `local.region` in the data directory.
    #[arg(long, env = "FIRN_LOCAL_REGION")]
    local_region: Option<String>,
    /// Entries in the region (a power of two): at most this many keys are published.
    #[arg(long, env = "FIRN_LOCAL_ENTRIES", default_value_t = firn_local::RegionConfig::default().entries)]
    local_entries: u32,
    /// Largest value published in the region; a larger one is read from the node.
    #[arg(long, env = "FIRN_LOCAL_VALUE_BYTES", default_value_t = firn_local::RegionConfig::default().value_bytes_max)]
    local_value_bytes: u32,
    /// A group (a name, or a number) whose members may read the region: the file is then
    /// given to it with mode 0640; the node's user must be root or a member. Default: the
    /// node's user alone (mode 0600). Whoever reads the region reads every `LOCAL`
    /// keyspace, whatever --users grants them.
    #[arg(long, env = "FIRN_LOCAL_REGION_GROUP", value_name = "GROUP")]
    local_region_group: Option<String>,
    /// Least time between two moves of one shard's leader toward its clients, to different
    /// nodes (keyspaces with FOLLOW on): a workload that alternates faster is followed at most
    /// once per interval. Read by the node that leads the meta group.
    #[arg(long, env = "FIRN_FOLLOW_INTERVAL", default_value = "30s", value_parser = humantime::parse_duration)]
    follow_interval: Duration,
    /// How often the logs of `DURABILITY memory` keyspaces are fsync'd in the background: a
    /// crash of a majority of a shard's replicas at once can lose what they acknowledged
    /// since the last checkpoint.
    #[arg(long, env = "FIRN_MEMORY_CHECKPOINT_EVERY", default_value = "100ms", value_parser = humantime::parse_duration)]
    memory_checkpoint_every: Duration,
    /// How many stripes (a log and a state database each, with its own fsync) a new data
    /// directory gets: a node's groups are spread over them, so they do not take turns in one
    /// database. Default: 4 on a machine of 4 or more cores, else 1 (more fsyncs cost more
    /// than they give on a small machine). Kept in the directory for its life; given for an
    /// existing directory, it must match.
    #[arg(long, env = "FIRN_STRIPES", value_parser = clap::value_parser!(u16).range(1..=64))]
    stripes: Option<u16>,
    /// Appends of a shard's replication to one follower sent before their answers
    /// (pipelining): more cut a put's wait for its followers under load, at some CPU.
    /// Default: 16 on a machine of 4 or more cores, else 1 (each append after the answer
    /// to the one before).
    #[arg(long, env = "FIRN_APPENDS_IN_FLIGHT", value_parser = clap::value_parser!(u16).range(1..=firn_node::node::APPENDS_IN_FLIGHT_MAX as i64))]
    appends_in_flight: Option<u16>,
    /// How often blob files (large values) that no stored version names are looked for.
    #[arg(long, env = "FIRN_BLOB_SWEEP_EVERY", default_value = "60s", value_parser = humantime::parse_duration)]
    blob_sweep_every: Duration,
    /// How old an unused blob file must be before it is deleted: longer than any upload
    /// takes between its seal and its manifest's commit.
    #[arg(long, env = "FIRN_BLOB_GRACE", default_value = "1h", value_parser = humantime::parse_duration)]
    blob_grace: Duration,
    /// Writes that add data (values, records, keyspaces) are refused with NOSPACE while the
    /// data directory's filesystem has fewer bytes free than this, so that the disk never
    /// fills: reads, deletes and truncations go on, and writes resume once space is freed.
    /// 0 turns the check off.
    #[arg(long, env = "FIRN_DISK_RESERVE_BYTES", default_value_t = firn_node::disk::DISK_RESERVE_BYTES_DEFAULT)]
    disk_reserve_bytes: u64,
    /// A users file: users with passwords (RESP AUTH), bearer tokens (HTTP) and the key
    /// prefixes each may read, write and administer. Without it nothing is checked.
    #[arg(long, env = "FIRN_USERS")]
    users: Option<std::path::PathBuf>,
    /// The node's certificate chain (PEM): TLS on the RESP and HTTP listeners, which then
    /// take TLS and plain text on the same port (unless --tls-required), and, with
    /// --tls-ca, the certificate this node presents to its peers.
    #[arg(long, env = "FIRN_TLS_CERT", value_name = "PATH")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, env = "FIRN_TLS_KEY", value_name = "PATH")]
    tls_key: Option<PathBuf>,
    /// CA bundle (PEM): connections between nodes are then mutual TLS, each node's
    /// certificate checked against it; a plain or unverified peer is refused. Without it,
    /// peer traffic is plain text.
    #[arg(long, env = "FIRN_TLS_CA", value_name = "PATH")]
    tls_ca: Option<PathBuf>,
    /// Refuse plain-text clients on the RESP and HTTP listeners (needs --tls-cert).
    #[arg(long, env = "FIRN_TLS_REQUIRED")]
    tls_required: bool,
    /// Every setting with where it came from (set by `crate::config::parse`).
    #[arg(skip)]
    pub settings: Vec<Setting>,
}

/// `--node-id`: given, or taken from the host name (see [`node_id_from_host_name`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeIdSetting {
    Id(u64),
    HostOrdinal,
}

const HOST_ORDINAL: &str = "host-ordinal";

impl FromStr for NodeIdSetting {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if text == HOST_ORDINAL {
            return Ok(NodeIdSetting::HostOrdinal);
        }
        match text.parse::<u64>() {
            Ok(0) => Err("node ids start at 1".into()),
            Ok(id) => Ok(NodeIdSetting::Id(id)),
            Err(_) => Err(format!(
                "'{text}' is neither a node id (1, 2, …) nor {HOST_ORDINAL}"
            )),
        }
    }
}

impl std::fmt::Display for NodeIdSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeIdSetting::Id(id) => write!(f, "{id}"),
            NodeIdSetting::HostOrdinal => f.write_str(HOST_ORDINAL),
        }
    }
}

impl NodeIdSetting {
    /// The node id, and the host name it was taken from if it was.
    fn resolve(self) -> Result<(u64, Option<String>), String> {
        match self {
            NodeIdSetting::Id(id) => Ok((id, None)),
            NodeIdSetting::HostOrdinal => {
                let host = host_name()?;
                Ok((node_id_from_host_name(&host)?, Some(host)))
            }
        }
    }
}

/// One more than the number that ends the host name's first label: a StatefulSet's pod
/// `firn-0` (ordinal 0) is node 1, because node ids start at 1.
pub fn node_id_from_host_name(host: &str) -> Result<u64, String> {
    let label = host.split('.').next().unwrap_or_default();
    let digits = label.len() - label.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let ordinal = &label[label.len() - digits..];
    ordinal
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_add(1))
        .ok_or_else(|| {
            format!(
                "--node-id {HOST_ORDINAL}: the host name '{host}' does not end in a number \
                 (a StatefulSet's pods are named like firn-0, firn-1, …)"
            )
        })
}

/// This machine's host name (in a container or pod, its own).
fn host_name() -> Result<String, String> {
    // 255 bytes is the longest host name POSIX allows (HOST_NAME_MAX on Linux is 64).
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that many
    // bytes, and the name is read only up to the first NUL within the buffer.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return Err(format!(
            "--node-id {HOST_ORDINAL}: cannot read the host name: {}",
            std::io::Error::last_os_error()
        ));
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// The region setting the four `--local-*` flags describe, checked.
fn local_region(args: &ServeArgs) -> Result<LocalRegionSetting, String> {
    let config = firn_local::RegionConfig {
        entries: args.local_entries,
        value_bytes_max: args.local_value_bytes,
        ..firn_local::RegionConfig::default()
    };
    config
        .validate()
        .map_err(|e| format!("--local-entries / --local-value-bytes: {e}"))?;
    let readers = match args.local_region_group.as_deref() {
        None => firn_local::RegionReaders::Owner,
        Some(_) if args.local_region.as_deref() == Some("off") => {
            return Err(
                "--local-region-group names the region's readers, but --local-region \
                        is off: there is no region"
                    .into(),
            );
        }
        Some(group) => firn_local::RegionReaders::Group(
            unix_group::group_id(group).map_err(|e| format!("--local-region-group: {e}"))?,
        ),
    };
    Ok(match args.local_region.as_deref() {
        Some("off") => LocalRegionSetting::Off,
        Some(path) => LocalRegionSetting::At(path.into(), config, readers),
        None => LocalRegionSetting::Default(config, readers),
    })
}

/// The node's configuration the settings describe, checked, and the host name its id was
/// taken from (with `--node-id host-ordinal`).
fn node_config(args: &ServeArgs) -> Result<(NodeConfig, Option<String>), String> {
    if args.max_value_bytes == 0
        || args.max_value_bytes > firn_model::limits::VALUE_BYTES_MAX_CEILING
    {
        return Err(format!(
            "--max-value-bytes must be 1..={}",
            firn_model::limits::VALUE_BYTES_MAX_CEILING
        ));
    }
    if args.max_connections == 0 {
        return Err("--max-connections must be at least 1".into());
    }
    if args.max_output_stall.is_zero() {
        return Err("--max-output-stall must be more than 0".into());
    }
    let (node_id, host) = args.node_id.resolve()?;
    let config = NodeConfig {
        resp_addr: args.resp_addr,
        http_addr: args.http_addr,
        data_dir: args.data_dir.clone(),
        in_memory: args.in_memory,
        limits: Limits {
            value_bytes_max: args.max_value_bytes,
        },
        allow_flushall: args.allow_flushall,
        retention_interval: args.retention_interval,
        snapshot_every_entries: args.snapshot_every,
        snapshot_catchup_entries: args.snapshot_catchup_entries,
        close_time_every: args.close_time_every,
        close_time_idle_every: args.close_time_idle_every,
        max_clock_offset: args.max_clock_offset,
        clock_offset_file: args.clock_offset_file.clone(),
        node_id,
        peer_addr: args.peer_addr,
        peers: firn_node::cluster::layout::parse_peers(&args.peers)
            .map_err(|e| format!("--peers: {e}"))?,
        shards: args.shards,
        replication: args.replication,
        join: args.join.clone(),
        advertise_host: args.advertise_host.clone(),
        resp_connections_max: args.max_connections,
        resp_output_stall_max: args.max_output_stall,
        mqtt_addr: args.mqtt_addr,
        mqtt_prefix: args.mqtt_prefix.clone(),
        uplink: match (&args.site, &args.hub) {
            (Some(site), Some(hub)) => Some(
                firn_node::uplink::UplinkConfig::parse(
                    site,
                    hub,
                    args.uplink.as_deref(),
                    args.downlink.as_deref(),
                )?
                .naming_hub(args.hub_cluster_id.as_deref())?,
            ),
            _ => None,
        },
        log_index_bytes: args.log_index_bytes,
        local_region: local_region(args)?,
        follow_interval: args.follow_interval,
        memory_checkpoint_every: args.memory_checkpoint_every,
        stripes: args.stripes.map(usize::from),
        appends_in_flight: args.appends_in_flight.map(usize::from),
        blob_sweep_every: args.blob_sweep_every,
        blob_grace: args.blob_grace,
        disk_reserve_bytes: args.disk_reserve_bytes,
        users: args
            .users
            .as_deref()
            .map(|path| firn_node::auth::Users::load(path).map(std::sync::Arc::new))
            .transpose()?,
        tls: firn_node::tls::TlsSettings {
            cert: args.tls_cert.clone(),
            key: args.tls_key.clone(),
            ca: args.tls_ca.clone(),
            required: args.tls_required,
        },
    };
    // Read and checked here, so that --print-config refuses what a start would.
    config.tls.load()?;
    Ok((config, host))
}

/// `--print-config`: the settings as a config file, the node id resolved.
fn print_config(mut settings: Vec<Setting>, node_id: u64, host: Option<String>) {
    if let (Some(host), Some(s)) = (host, settings.iter_mut().find(|s| s.key == "node-id")) {
        s.value = Some(node_id.to_string());
        s.source = format!("{HOST_ORDINAL} of host name {host} ({})", s.source);
    }
    print!("{}", render(&settings));
}

/// What a node logs unless `RUST_LOG` says otherwise (and then openraft's warnings are
/// thinned: see [`crate::logs::ConsensusWarnings`]).
const DEFAULT_LOG_FILTER: &str = "info,openraft=warn,fjall=warn,lsm_tree=warn";

pub async fn serve(args: ServeArgs) -> Result<(), String> {
    // Checked before anything else happens: a bad setting starts nothing.
    let (config, host) = node_config(&args)?;
    if args.print_config {
        print_config(args.settings, config.node_id, host);
        return Ok(());
    }
    // Colours only on a terminal: a log written to a file or a journal stays plain text.
    use std::io::IsTerminal;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::{Layer as _, filter};
    let explicit = std::env::var_os("RUST_LOG").is_some();
    let env = filter::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| filter::EnvFilter::new(DEFAULT_LOG_FILTER));
    let quiet = crate::logs::ConsensusWarnings::new(!explicit);
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_ansi(std::io::stdout().is_terminal())
                .with_filter(crate::logs::filter(env, quiet)),
        )
        .init();
    firn_node::faults::from_env()?;
    if let Some(host) = host {
        tracing::info!(node = config.node_id, %host, "node id taken from the host name");
    }
    match (&config.users, &args.users) {
        (Some(users), Some(file)) => tracing::info!(
            users = users.len(),
            file = %file.display(),
            "users and permissions on: clients sign in (AUTH, Authorization: Bearer)"
        ),
        _ => tracing::info!("no users file: nothing is checked (see --users)"),
    }
    let mut config = config;
    let listeners = 1 + u64::from(config.mqtt_addr.is_some());
    config.resp_connections_max =
        open_files::fit_connections(config.resp_connections_max, listeners);
    let node = RunningNode::start(config)
        .await
        .map_err(|e| e.to_string())?;
    println!(
        "{}",
        banner(
            node.resp_addr.port(),
            &node.http_addr.to_string(),
            &node.peer_addr.to_string(),
            args.tls_cert.is_some(),
            args.users.is_some()
        )
    );
    if let Some(mqtt) = node.mqtt_addr {
        println!(
            "firn MQTT: mosquitto_sub -h {} -p {} -t '#' -v   (topic T is the key {}T)",
            mqtt.ip(),
            mqtt.port(),
            args.mqtt_prefix
        );
    }
    let failed = tokio::select! {
        _ = wait_for_stop_signal() => None,
        why = node.failure() => Some(why),
    };
    node.shutdown().await;
    match failed {
        None => Ok(()),
        Some(why) => Err(why),
    }
}

/// Ctrl-C (SIGINT) or SIGTERM: stop gracefully. (kill -9 is safe too: nothing acknowledged
/// is lost, it only skips the orderly close.)
async fn wait_for_stop_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// `--advertise-host`: a DNS name or an IP literal, without a port.
fn advertise_host(given: &str) -> Result<String, String> {
    let ip = given
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<std::net::IpAddr>();
    let name = !given.is_empty()
        && given.len() <= 253
        && given.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        });
    if ip.is_ok() || name {
        Ok(given.to_string())
    } else {
        Err(format!(
            "'{given}' is not a host name or an IP address (give the host alone, without a port)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;

    use clap::{CommandFactory, Parser, Subcommand};

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        command: Cmd,
    }

    #[derive(Subcommand)]
    enum Cmd {
        Serve(ServeArgs),
    }

    fn serve_args(args: &[&str]) -> ServeArgs {
        let argv: Vec<OsString> = ["firn", "serve"]
            .iter()
            .chain(args)
            .map(OsString::from)
            .collect();
        match crate::config::parse_from::<Cli>(&argv) {
            Ok((
                Cli {
                    command: Cmd::Serve(args),
                },
                _,
            )) => args,
            Err(_) => panic!("firn serve {args:?} is refused"),
        }
    }

    #[test]
    fn the_flags_defaults_are_the_node_configs_defaults() {
        if std::env::vars().any(|(k, _)| k.starts_with("FIRN_")) {
            eprintln!("skipped: FIRN_* variables are set in this environment");
            return;
        }
        let (config, host) = node_config(&serve_args(&[])).unwrap();
        assert_eq!(host, None);
        assert_eq!(
            format!("{config:?}"),
            format!("{:?}", NodeConfig::default())
        );
    }

    #[test]
    fn every_setting_is_read_from_its_firn_environment_variable() {
        let cli = Cli::command();
        let serve = cli.find_subcommand("serve").unwrap();
        for arg in serve.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            let env = arg.get_env().and_then(|e| e.to_str());
            if long == "help" || long == "print-config" {
                assert_eq!(env, None, "--{long}");
            } else {
                let want = format!("FIRN_{}", long.to_uppercase().replace('-', "_"));
                assert_eq!(env, Some(want.as_str()), "--{long}");
            }
        }
    }

    #[test]
    fn node_id_is_a_number_from_one_or_host_ordinal() {
        assert_eq!("3".parse(), Ok(NodeIdSetting::Id(3)));
        assert_eq!("host-ordinal".parse(), Ok(NodeIdSetting::HostOrdinal));
        assert!(
            "0".parse::<NodeIdSetting>()
                .unwrap_err()
                .contains("start at 1")
        );
        assert!("firn-0".parse::<NodeIdSetting>().is_err());
        assert_eq!(NodeIdSetting::HostOrdinal.to_string(), "host-ordinal");
        assert_eq!(
            serve_args(&["--node-id", "4"]).node_id,
            NodeIdSetting::Id(4)
        );
    }

    #[test]
    fn host_ordinal_is_one_more_than_the_host_names_trailing_number() {
        assert_eq!(node_id_from_host_name("firn-0"), Ok(1));
        assert_eq!(node_id_from_host_name("firn-2"), Ok(3));
        assert_eq!(
            node_id_from_host_name("firn-12.firn-peers.default.svc.cluster.local"),
            Ok(13)
        );
        for bad in ["firn", "", "firn-0x", "firn-99999999999999999999"] {
            let e = node_id_from_host_name(bad).unwrap_err();
            assert!(e.contains("does not end in a number"), "{bad}: {e}");
        }
    }

    fn region_readers(args: &[&str]) -> Result<firn_local::RegionReaders, String> {
        match node_config(&serve_args(args))?.0.local_region {
            LocalRegionSetting::Default(_, readers) | LocalRegionSetting::At(_, _, readers) => {
                Ok(readers)
            }
            LocalRegionSetting::Off => Err("off".into()),
        }
    }

    #[test]
    fn the_region_is_the_node_users_alone_unless_a_group_is_named() {
        use firn_local::RegionReaders::{Group, Owner};
        assert_eq!(region_readers(&[]), Ok(Owner));
        assert_eq!(
            region_readers(&["--local-region-group", "4242"]),
            Ok(Group(4242))
        );
        // Every Unix host has the group `root`, id 0.
        assert_eq!(
            region_readers(&["--local-region-group", "root"]),
            Ok(Group(0))
        );
        assert_eq!(
            region_readers(&["--local-region", "/dev/shm/r", "--local-region-group", "0"]),
            Ok(Group(0))
        );
        let mut file = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut file, b"local-region-group = \"7\"\n").unwrap();
        assert_eq!(
            region_readers(&["--config", file.path().to_str().unwrap()]),
            Ok(Group(7))
        );
    }

    #[test]
    fn a_region_group_that_is_not_is_refused_before_starting() {
        let e = region_readers(&["--local-region-group", "no-such-group-of-firn"]).unwrap_err();
        assert_eq!(
            e,
            "--local-region-group: no group named 'no-such-group-of-firn' on this host"
        );
        let e = region_readers(&["--local-region-group", "99999999999"]).unwrap_err();
        assert!(e.contains("is no group id"), "{e}");
        let e =
            region_readers(&["--local-region", "off", "--local-region-group", "0"]).unwrap_err();
        assert!(e.contains("--local-region is off"), "{e}");
    }

    #[test]
    fn a_bad_peers_list_is_refused_before_starting() {
        let e = node_config(&serve_args(&["--peers", "1=a:7381,x"])).unwrap_err();
        assert!(e.starts_with("--peers: "), "{e}");
    }
}

/// The line a started node prints: how to reach it with redis-cli and curl as it is set up
/// (over TLS, and signed in, when it takes only that).
fn banner(resp_port: u16, http_addr: &str, peer_addr: &str, tls: bool, users: bool) -> String {
    let (redis_tls, curl_tls, scheme) = if tls {
        (" --tls --cacert CA.pem", " --cacert CA.pem", "https")
    } else {
        ("", "", "http")
    };
    let (redis_user, curl_user) = if users {
        (
            " --user USER --pass PASSWORD",
            " -H 'Authorization: Bearer TOKEN'",
        )
    } else {
        ("", "")
    };
    format!(
        "firn serving: redis-cli -p {resp_port}{redis_tls}{redis_user}   |   \
         curl{curl_tls}{curl_user} {scheme}://{http_addr}/v1/kv/hello   |   peers {peer_addr}"
    )
}

#[cfg(test)]
mod banner_tests {
    use super::banner;

    #[test]
    fn the_banner_shows_how_to_reach_the_node_as_it_is_set_up() {
        let plain = banner(7379, "127.0.0.1:7380", "127.0.0.1:7381", false, false);
        assert!(plain.contains("redis-cli -p 7379   |"), "{plain}");
        assert!(
            plain.contains("curl http://127.0.0.1:7380/v1/kv/hello"),
            "{plain}"
        );
        let guarded = banner(7379, "127.0.0.1:7380", "127.0.0.1:7381", true, true);
        assert!(
            guarded.contains("--tls --cacert CA.pem --user USER"),
            "{guarded}"
        );
        assert!(
            guarded.contains("curl --cacert CA.pem -H 'Authorization: Bearer TOKEN' https://"),
            "{guarded}"
        );
    }
}
