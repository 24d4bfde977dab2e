//! How a node is started.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use firn_model::Limits;

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
}

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
        }
    }
}
