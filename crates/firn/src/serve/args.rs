//! `firn serve`'s flags: the one list of a node's settings and their defaults. Each is
//! also read from `FIRN_<FLAG>` in the environment and from a config file (see
//! `crate::config`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::node_id::NodeIdSetting;
use crate::config::Setting;

#[derive(Args)]
pub struct ServeArgs {
    /// Read settings from this TOML file: `key = value` lines, each key a flag's long name
    /// (`data-dir = "/var/lib/firn"`). A flag, then its `FIRN_<FLAG>` environment variable,
    /// take precedence over the file; the file over the default.
    #[arg(long, env = "FIRN_CONFIG", value_name = "PATH")]
    pub(crate) config: Option<PathBuf>,
    /// Print the settings this node would run with, each with where it came from, as a
    /// config file, and exit without starting.
    #[arg(long)]
    pub(crate) print_config: bool,
    /// Where the node takes Redis (RESP) clients.
    #[arg(long, env = "FIRN_RESP_ADDR", default_value = "127.0.0.1:7379")]
    pub(crate) resp_addr: SocketAddr,
    /// Where the node serves HTTP/JSON, the web page and /metrics.
    #[arg(long, env = "FIRN_HTTP_ADDR", default_value = "127.0.0.1:7380")]
    pub(crate) http_addr: SocketAddr,
    /// The node's Raft logs, state, snapshots and large values (one node a directory).
    #[arg(long, env = "FIRN_DATA_DIR", default_value = "firn-data")]
    pub(crate) data_dir: PathBuf,
    /// Keep nothing after exit and skip fsync (tests only: acknowledged writes can be lost).
    #[arg(long, env = "FIRN_IN_MEMORY")]
    pub(crate) in_memory: bool,
    /// Largest value carried inline through the Raft log, in bytes (at most 16 MiB); a
    /// larger one is stored beside the log as a blob (up to 16 GiB over HTTP, 64 MiB over
    /// RESP).
    #[arg(long, env = "FIRN_MAX_VALUE_BYTES", default_value_t = firn_model::limits::VALUE_BYTES_MAX_DEFAULT)]
    pub(crate) max_value_bytes: usize,
    /// Allow FLUSHALL to drop every key.
    #[arg(long, env = "FIRN_ALLOW_FLUSHALL")]
    pub(crate) allow_flushall: bool,
    /// How often age-based retention runs.
    #[arg(long, env = "FIRN_RETENTION_INTERVAL", default_value = "10s", value_parser = humantime::parse_duration)]
    pub(crate) retention_interval: Duration,
    /// Snapshot (and purge the log) every this many entries.
    #[arg(long, env = "FIRN_SNAPSHOT_EVERY", default_value_t = 100_000)]
    pub(crate) snapshot_every: u64,
    /// Log entries kept behind each snapshot: a replica that fell at most this far behind
    /// (a restart, a short partition) catches up from the log instead of being sent a
    /// snapshot of the whole shard. 0 purges the log up to the snapshot.
    #[arg(long, env = "FIRN_SNAPSHOT_CATCHUP_ENTRIES", default_value_t = firn_node::config::SNAPSHOT_CATCHUP_ENTRIES_DEFAULT)]
    pub(crate) snapshot_catchup_entries: u64,
    /// A shard's leader closes time when the shard has been quiet this long (it looks this
    /// often), while closed time is wanted: a read at a time (ASOF), a snapshot or a local
    /// read asked for it in the last 10 s, or a LOCAL keyspace is published; each close is
    /// an entry fsync'd on every replica. 0 turns closing off (an idle cluster then writes
    /// nothing for it, and a read at a recent time on an idle shard waits for its next
    /// write).
    #[arg(long, env = "FIRN_CLOSE_TIME_EVERY", default_value = "50ms", value_parser = humantime::parse_duration)]
    pub(crate) close_time_every: Duration,
    /// How often a shard's leader closes time when nobody wants it: a read that then finds
    /// its time not closed asks the leader to close it at once (a commit's wait), and closes
    /// go on every --close-time-every for 10 s. At most --close-time-every: no difference.
    #[arg(long, env = "FIRN_CLOSE_TIME_IDLE_EVERY", default_value = "1s", value_parser = humantime::parse_duration)]
    pub(crate) close_time_idle_every: Duration,
    /// The bound on the offset between this node's clock and its peers' clocks, measured on
    /// the traffic between them: a node whose clock is beyond it from a majority of its
    /// peers stamps no writes (CLOCKSKEW), leads no shard and answers no read from a leader
    /// lease until it is back within it. Every guarantee about time holds within this bound.
    /// 0 turns the check off.
    #[arg(long, env = "FIRN_MAX_CLOCK_OFFSET", default_value = "500ms", value_parser = humantime::parse_duration)]
    pub(crate) max_clock_offset: Duration,
    /// For tests: a file holding milliseconds to shift this node's clock by (read four
    /// times a second), to make a node whose clock is off on purpose.
    #[arg(long, env = "FIRN_CLOCK_OFFSET_FILE", hide = true)]
    pub(crate) clock_offset_file: Option<PathBuf>,
    /// This node's id in the cluster: a number from 1, or `host-ordinal`: one more than
    /// the number that ends this host's name, as a Kubernetes StatefulSet names its pods
    /// (`firn-0` is node 1, `firn-2` node 3).
    #[arg(long, env = "FIRN_NODE_ID", default_value_t = NodeIdSetting::Id(1))]
    pub(crate) node_id: NodeIdSetting,
    /// Listener for the other nodes of the cluster.
    #[arg(long, env = "FIRN_PEER_ADDR", default_value = "127.0.0.1:7381")]
    pub(crate) peer_addr: SocketAddr,
    /// Form a cluster of these nodes, this one included: ID=PEER_ADDR,… (none: a single
    /// node, which others may join). Only read when the cluster is first created.
    #[arg(long, env = "FIRN_PEERS", default_value = "")]
    pub(crate) peers: String,
    /// Join the cluster of the node at this peer address (any member); its replicas move
    /// here so that shards and leaders spread evenly.
    #[arg(long, env = "FIRN_JOIN", conflicts_with = "peers")]
    pub(crate) join: Option<String>,
    /// The host name or IP other nodes and clients reach this node by, when it differs from
    /// the address it listens on (`0.0.0.0` in a container; a pod's DNS name). It is
    /// announced with each listener's port: to the cluster when joining, and to clients in
    /// CLUSTER SLOTS, SHARDS and NODES and /v1/cluster. Default: the listening addresses.
    #[arg(long, env = "FIRN_ADVERTISE_HOST", value_parser = advertise_host)]
    pub(crate) advertise_host: Option<String>,
    /// Shards in a cluster (a single node has one).
    #[arg(long, env = "FIRN_SHARDS", default_value_t = firn_node::config::CLUSTER_SHARDS_DEFAULT)]
    pub(crate) shards: u32,
    /// Replicas per shard, capped by the node count.
    #[arg(long, env = "FIRN_REPLICATION", default_value_t = firn_node::config::REPLICATION_DEFAULT)]
    pub(crate) replication: usize,
    /// Most RESP connections open at once; one more is told `ERR max number of clients
    /// reached` and closed. The open-file limit is raised to fit (up to the hard limit;
    /// past it fewer are taken, and the node says so).
    #[arg(long, env = "FIRN_MAX_CONNECTIONS", default_value_t = firn_node::config::RESP_CONNECTIONS_MAX)]
    pub(crate) max_connections: usize,
    /// Longest a RESP client may take none of its replies while some wait to go out (it
    /// pipelines and never reads, or a subscriber stopped reading): it is disconnected then.
    #[arg(long, env = "FIRN_MAX_OUTPUT_STALL", default_value = "60s", value_parser = humantime::parse_duration)]
    pub(crate) max_output_stall: Duration,
    /// Listen for MQTT 3.1.1 and 5.0 clients here (off by default; TLS and --users apply
    /// as on the other ports). Its connections are bounded by --max-connections too.
    #[arg(long, env = "FIRN_MQTT_ADDR")]
    pub(crate) mqtt_addr: Option<SocketAddr>,
    /// The key prefix MQTT topics live under: topic `T` is the key `PREFIX T`; messages
    /// published without retain go to the log named by the prefix without its `/`.
    #[arg(long, env = "FIRN_MQTT_PREFIX", default_value = firn_node::mqtt::PREFIX_DEFAULT)]
    pub(crate) mqtt_prefix: String,
    /// This cluster is a site named NAME that sends keys, logs and streams to a hub (with
    /// --hub and --uplink): on the hub, its key K is `sites/NAME/K`.
    #[arg(long, env = "FIRN_SITE", requires = "hub")]
    pub(crate) site: Option<String>,
    /// The hub a site sends to: any node of the hub's cluster, as
    /// `redis://[user:password@]host:port` (its RESP address), or `rediss://…` over TLS
    /// (with --hub-ca).
    #[arg(long, env = "FIRN_HUB", requires = "site")]
    pub(crate) hub: Option<String>,
    /// What a site sends to its hub, comma-separated: key prefixes (`sensor/`), logs
    /// (`log:NAME`) and streams (`stream:KEY`), as `sites/NAME/…` at the hub. Each version,
    /// record and entry goes up once, in order, committed at the hub with the site's cursor.
    /// `twin:PREFIX`: the device twins under PREFIX go both ways, their reported documents
    /// up and their desired documents down (as --downlink takes keys).
    #[arg(long, env = "FIRN_UPLINK", requires = "site")]
    pub(crate) uplink: Option<String>,
    /// What a site takes from its hub: key prefixes, comma-separated (`config/`). The
    /// hub's `sites/NAME/P…` are the desired state of the site's `P…`: once a second the
    /// site's keys are made the same (written where they differ, deleted where the hub has
    /// none).
    #[arg(long, env = "FIRN_DOWNLINK", requires = "site")]
    pub(crate) downlink: Option<String>,
    /// The hub's cluster id (32 hex digits, `firn_cluster_id` in its CLUSTER INFO): a site
    /// sends only to the hub it first reached, or to the one named here (to move it to a
    /// new hub).
    #[arg(long, env = "FIRN_HUB_CLUSTER_ID", requires = "site")]
    pub(crate) hub_cluster_id: Option<String>,
    /// The CA bundle (PEM) a hub given as `rediss://` is checked against: its certificate
    /// must be signed by it (or be in it) and name the host dialled.
    #[arg(long, env = "FIRN_HUB_CA", value_name = "PATH", requires = "site")]
    pub(crate) hub_ca: Option<PathBuf>,
    /// Most bytes of log records this node keeps in its local log index, so that repeated
    /// reads of a tag's records skip the shards that index it (default 64 MiB); 0 turns it
    /// off.
    #[arg(long, env = "FIRN_LOG_INDEX_BYTES", default_value_t = firn_node::config::LOG_INDEX_BYTES_DEFAULT)]
    pub(crate) log_index_bytes: usize,
    /// The shared-memory region that `LOCAL on` keyspaces are published in, for clients on
    /// this host: a file path (a path in /dev/shm keeps the kernel from writing it back to
    /// disk), or `off`. Default: `local.region` in the data directory.
    #[arg(long, env = "FIRN_LOCAL_REGION")]
    pub(crate) local_region: Option<String>,
    /// Entries in the region (a power of two): at most this many keys are published.
    #[arg(long, env = "FIRN_LOCAL_ENTRIES", default_value_t = firn_local::RegionConfig::default().entries)]
    pub(crate) local_entries: u32,
    /// Largest value published in the region; a larger one is read from the node.
    #[arg(long, env = "FIRN_LOCAL_VALUE_BYTES", default_value_t = firn_local::RegionConfig::default().value_bytes_max)]
    pub(crate) local_value_bytes: u32,
    /// A group (a name, or a number) whose members may read the region: the file is then
    /// given to it with mode 0640; the node's user must be root or a member. Default: the
    /// node's user alone (mode 0600). Whoever reads the region reads every `LOCAL`
    /// keyspace, whatever --users grants them.
    #[arg(long, env = "FIRN_LOCAL_REGION_GROUP", value_name = "GROUP")]
    pub(crate) local_region_group: Option<String>,
    /// Least time between two moves of one shard's leader toward its clients, to different
    /// nodes (keyspaces with FOLLOW on): a workload that alternates faster is followed at most
    /// once per interval. Read by the node that leads the meta group.
    #[arg(long, env = "FIRN_FOLLOW_INTERVAL", default_value = "30s", value_parser = humantime::parse_duration)]
    pub(crate) follow_interval: Duration,
    /// How often the logs of `DURABILITY memory` keyspaces are fsync'd in the background: a
    /// crash of a majority of a shard's replicas at once can lose what they acknowledged
    /// since the last checkpoint.
    #[arg(long, env = "FIRN_MEMORY_CHECKPOINT_EVERY", default_value = "100ms", value_parser = humantime::parse_duration)]
    pub(crate) memory_checkpoint_every: Duration,
    /// How many stripes (a log and a state database each, with its own fsync) a new data
    /// directory gets: a node's groups are spread over them, so they do not take turns in one
    /// database. Default: 4 on a machine of 4 or more cores, else 1 (more fsyncs cost more
    /// than they give on a small machine). Kept in the directory for its life; given for an
    /// existing directory, it must match.
    #[arg(long, env = "FIRN_STRIPES", value_parser = clap::value_parser!(u16).range(1..=64))]
    pub(crate) stripes: Option<u16>,
    /// Appends of a shard's replication to one follower sent before their answers
    /// (pipelining): more cut a put's wait for its followers under load, at some CPU.
    /// Default: 16 on a machine of 4 or more cores, else 1 (each append after the answer
    /// to the one before).
    #[arg(long, env = "FIRN_APPENDS_IN_FLIGHT", value_parser = clap::value_parser!(u16).range(1..=firn_node::node::APPENDS_IN_FLIGHT_MAX as i64))]
    pub(crate) appends_in_flight: Option<u16>,
    /// How often blob files (large values) that no stored version names are looked for.
    #[arg(long, env = "FIRN_BLOB_SWEEP_EVERY", default_value = "60s", value_parser = humantime::parse_duration)]
    pub(crate) blob_sweep_every: Duration,
    /// How old an unused blob file must be before it is deleted: longer than any upload
    /// takes between its seal and its manifest's commit.
    #[arg(long, env = "FIRN_BLOB_GRACE", default_value = "1h", value_parser = humantime::parse_duration)]
    pub(crate) blob_grace: Duration,
    /// Writes that add data (values, records, keyspaces) are refused with NOSPACE while the
    /// data directory's filesystem has fewer bytes free than this, so that the disk never
    /// fills: reads, deletes and truncations go on, and writes resume once space is freed.
    /// 0 turns the check off.
    #[arg(long, env = "FIRN_DISK_RESERVE_BYTES", default_value_t = firn_node::disk::DISK_RESERVE_BYTES_DEFAULT)]
    pub(crate) disk_reserve_bytes: u64,
    /// A users file: users with passwords (RESP AUTH), bearer tokens (HTTP) and the key
    /// prefixes each may read, write and administer. Without it nothing is checked.
    #[arg(long, env = "FIRN_USERS")]
    pub(crate) users: Option<std::path::PathBuf>,
    /// The node's certificate chain (PEM): TLS on the RESP and HTTP listeners, which then
    /// take TLS and plain text on the same port (unless --tls-required), and, with
    /// --tls-ca, the certificate this node presents to its peers.
    #[arg(long, env = "FIRN_TLS_CERT", value_name = "PATH")]
    pub(crate) tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, env = "FIRN_TLS_KEY", value_name = "PATH")]
    pub(crate) tls_key: Option<PathBuf>,
    /// CA bundle (PEM): connections between nodes are then mutual TLS, each node's
    /// certificate checked against it; a plain or unverified peer is refused. Without it,
    /// peer traffic is plain text.
    #[arg(long, env = "FIRN_TLS_CA", value_name = "PATH")]
    pub(crate) tls_ca: Option<PathBuf>,
    /// Refuse plain-text clients on the RESP and HTTP listeners (needs --tls-cert).
    #[arg(long, env = "FIRN_TLS_REQUIRED")]
    pub(crate) tls_required: bool,
    /// Every setting with where it came from (set by `crate::config::parse`).
    #[arg(skip)]
    pub settings: Vec<Setting>,
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

/// `firn serve ARGS` as the tests parse it: a command line with `serve` alone.
#[cfg(test)]
pub(crate) mod test_cli {
    use std::ffi::OsString;

    use clap::{Parser, Subcommand};

    use super::ServeArgs;

    #[derive(Parser)]
    pub(crate) struct Cli {
        #[command(subcommand)]
        pub(crate) command: Cmd,
    }

    #[derive(Subcommand)]
    pub(crate) enum Cmd {
        Serve(ServeArgs),
    }

    /// The command line `firn serve ARGS`.
    pub(crate) fn argv(args: &[&str]) -> Vec<OsString> {
        ["firn", "serve"]
            .iter()
            .chain(args)
            .map(OsString::from)
            .collect()
    }

    /// `firn serve ARGS` parsed, as a config file and the environment would leave it.
    pub(crate) fn serve_args(args: &[&str]) -> ServeArgs {
        match crate::config::parse_from::<Cli>(&argv(args)) {
            Ok((
                Cli {
                    command: Cmd::Serve(args),
                },
                _,
            )) => args,
            Err(_) => panic!("firn serve {args:?} is refused"),
        }
    }
}
