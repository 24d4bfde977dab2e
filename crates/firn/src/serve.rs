//! `firn serve`: its flags, and running one node until Ctrl-C or SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use firn_model::Limits;
use firn_node::config::LocalRegionSetting;
use firn_node::{NodeConfig, RunningNode};

#[derive(Args)]
pub struct ServeArgs {
    #[arg(long, default_value = "127.0.0.1:7379")]
    resp_addr: SocketAddr,
    #[arg(long, default_value = "127.0.0.1:7380")]
    http_addr: SocketAddr,
    #[arg(long, default_value = "firn-data")]
    data_dir: PathBuf,
    /// Keep nothing after exit and skip fsync (tests only: acknowledged writes can be lost).
    #[arg(long)]
    in_memory: bool,
    /// Largest value carried inline through the Raft log, in bytes (at most 16 MiB); a
    /// larger one is stored beside the log as a blob (up to 16 GiB over HTTP, 64 MiB over
    /// RESP).
    #[arg(long, default_value_t = firn_model::limits::VALUE_BYTES_MAX_DEFAULT)]
    max_value_bytes: usize,
    /// Allow FLUSHALL to drop every key.
    #[arg(long)]
    allow_flushall: bool,
    /// How often age-based retention runs.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    retention_interval: Duration,
    /// Snapshot (and purge the log) every this many entries.
    #[arg(long, default_value_t = 100_000)]
    snapshot_every: u64,
    /// An idle shard's leader closes time this often, so that reads at a time (ASOF) wait
    /// at most about this long for it to be closed; 0 turns it off (an idle cluster then
    /// uses less CPU, and a read at a recent time on an idle shard waits for its next write).
    #[arg(long, default_value = "50ms", value_parser = humantime::parse_duration)]
    close_time_every: Duration,
    /// This node's id in the cluster.
    #[arg(long, default_value_t = 1)]
    node_id: u64,
    /// Listener for the other nodes of the cluster.
    #[arg(long, default_value = "127.0.0.1:7381")]
    peer_addr: SocketAddr,
    /// Form a cluster of these nodes, this one included: ID=PEER_ADDR,… (none: a single
    /// node, which others may join). Only read when the cluster is first created.
    #[arg(long, default_value = "")]
    peers: String,
    /// Join the cluster of the node at this peer address (any member); its replicas move
    /// here so that shards and leaders spread evenly.
    #[arg(long, conflicts_with = "peers")]
    join: Option<String>,
    /// Shards in a cluster (a single node has one).
    #[arg(long, default_value_t = firn_node::config::CLUSTER_SHARDS_DEFAULT)]
    shards: u32,
    /// Replicas per shard, capped by the node count.
    #[arg(long, default_value_t = firn_node::config::REPLICATION_DEFAULT)]
    replication: usize,
    /// Most RESP connections open at once; one more is told `ERR max number of clients
    /// reached` and closed.
    #[arg(long, default_value_t = firn_node::config::RESP_CONNECTIONS_MAX)]
    max_connections: usize,
    /// Most bytes of log records this node keeps in its local log index, so that repeated
    /// reads of a tag's records skip the shards that index it (default 64 MiB); 0 turns it
    /// off.
    #[arg(long, default_value_t = firn_node::config::LOG_INDEX_BYTES_DEFAULT)]
    log_index_bytes: usize,
    /// The shared-memory region that `LOCAL on` keyspaces are published in, for clients on
    /// this host: a file path (a path in /dev/shm keeps the kernel from writing it back to
    /// disk), or `off`. Default: `local.region` in the data directory.
    #[arg(long)]
    local_region: Option<String>,
    /// Entries in the region (a power of two): at most this many keys are published.
    #[arg(long, default_value_t = firn_local::RegionConfig::default().entries)]
    local_entries: u32,
    /// Largest value published in the region; a larger one is read from the node.
    #[arg(long, default_value_t = firn_local::RegionConfig::default().value_bytes_max)]
    local_value_bytes: u32,
    /// Least time between two moves of one shard's leader toward its clients, to different
    /// nodes (keyspaces with FOLLOW on): a workload that alternates faster is followed at most
    /// once per interval. Read by the node that leads the meta group.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    follow_interval: Duration,
    /// How often the logs of `DURABILITY memory` keyspaces are fsync'd in the background: a
    /// crash of a majority of a shard's replicas at once can lose what they acknowledged
    /// since the last checkpoint.
    #[arg(long, default_value = "100ms", value_parser = humantime::parse_duration)]
    memory_checkpoint_every: Duration,
    /// How often blob files (large values) that no stored version names are looked for.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    blob_sweep_every: Duration,
    /// How old an unused blob file must be before it is deleted: longer than any upload
    /// takes between its seal and its manifest's commit.
    #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
    blob_grace: Duration,
}

/// The region setting the three `--local-*` flags describe, checked.
fn local_region(
    at: Option<&str>,
    entries: u32,
    value_bytes_max: u32,
) -> Result<LocalRegionSetting, String> {
    let config = firn_local::RegionConfig {
        entries,
        value_bytes_max,
        ..firn_local::RegionConfig::default()
    };
    config
        .validate()
        .map_err(|e| format!("--local-entries / --local-value-bytes: {e}"))?;
    Ok(match at {
        Some("off") => LocalRegionSetting::Off,
        Some(path) => LocalRegionSetting::At(path.into(), config),
        None => LocalRegionSetting::Default(config),
    })
}

pub async fn serve(args: ServeArgs) -> Result<(), String> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new("info,openraft=warn,fjall=warn,lsm_tree=warn")
            }),
        )
        .init();
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
    let config = NodeConfig {
        resp_addr: args.resp_addr,
        http_addr: args.http_addr,
        data_dir: args.data_dir,
        in_memory: args.in_memory,
        limits: Limits {
            value_bytes_max: args.max_value_bytes,
        },
        allow_flushall: args.allow_flushall,
        retention_interval: args.retention_interval,
        snapshot_every_entries: args.snapshot_every,
        close_time_every: args.close_time_every,
        node_id: args.node_id,
        peer_addr: args.peer_addr,
        peers: firn_node::cluster::layout::parse_peers(&args.peers).map_err(|e| e.to_string())?,
        shards: args.shards,
        replication: args.replication,
        join: args.join,
        resp_connections_max: args.max_connections,
        log_index_bytes: args.log_index_bytes,
        local_region: local_region(
            args.local_region.as_deref(),
            args.local_entries,
            args.local_value_bytes,
        )?,
        follow_interval: args.follow_interval,
        memory_checkpoint_every: args.memory_checkpoint_every,
        blob_sweep_every: args.blob_sweep_every,
        blob_grace: args.blob_grace,
    };
    let node = RunningNode::start(config)
        .await
        .map_err(|e| e.to_string())?;
    println!(
        "firn serving: redis-cli -p {}   |   curl http://{}/v1/kv/hello   |   peers {}",
        node.resp_addr.port(),
        node.http_addr,
        node.peer_addr
    );
    wait_for_stop_signal().await;
    node.shutdown().await;
    Ok(())
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
