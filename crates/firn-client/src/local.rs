//! Local reads: a client on the same host as a node reads `LOCAL on` keyspaces from the
//! node's shared-memory region ([`firn_local`]), with no request, no system call and no
//! server thread, and falls back to an ordinary read over RESP when the region cannot
//! answer (the key is not published there, its shard is not here, the replica is behind
//! the client's causality token).
//!
//! ```no_run
//! # async fn demo() -> firn_client::Result<()> {
//! let node = firn_client::Client::connect("127.0.0.1:7379").await?;
//! let local = firn_client::LocalClient::open(node).await?;
//! let read = local.get(b"sensor/1").await?;
//! println!("{:?} (version {}, {:?})", read.value, read.version, read.bound);
//! # Ok(()) }
//! ```

use std::sync::Mutex;

use bytes::Bytes;
use firn_local::{Bound, LocalRead, RegionReader, RemoteReason};
use firn_model::{CommitTs, LocalRegionInfo, ReadAt, ReadConsistency};

use crate::{Client, ClientError, PutOptions, Result, WriteAck};

/// How fresh a read is, as the answer states it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadBound {
    /// Read from the region under this node's leader lease: it shows every write
    /// acknowledged before the read began.
    Linearizable,
    /// Read from a replica's region: it holds every write to the key stamped up to
    /// `at_least`, and misses at most what was written in the last `staleness_us_max` µs.
    Stale {
        at_least: CommitTs,
        staleness_us_max: u64,
    },
    /// Read from the node over RESP (linearizable), because the region could not answer.
    Remote(RemoteReason),
}

/// A read's answer: the key's newest version and how fresh it is. `value` is `None` for a
/// deleted key; read from the node, an absent or deleted key has version 0 (the node's GET
/// answers nil for both), read from the region a deletion keeps its version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalGet {
    pub value: Option<Bytes>,
    pub version: u64,
    pub commit_ts: CommitTs,
    pub bound: ReadBound,
}

/// A [`Client`] with the shared-memory region of the node it is connected to.
pub struct LocalClient {
    remote: Client,
    region: RegionReader,
    /// The newest stamp this client has seen (its causality token): a local read never
    /// answers older than it.
    token: Mutex<CommitTs>,
    /// The token as the remote session last heard it.
    told: Mutex<CommitTs>,
}

impl LocalClient {
    /// Asks the node where its region is (`FIRN.LOCAL`) and opens it read-only. Refuses a
    /// region this host cannot open (the node is on another host), one of another layout
    /// version, or one that is not the node's live region (another cluster, an older run).
    pub async fn open(remote: Client) -> Result<Self> {
        let region = open_region(&remote.local_region().await?)?;
        Ok(LocalClient {
            remote,
            region,
            token: Mutex::new(CommitTs::ZERO),
            told: Mutex::new(CommitTs::ZERO),
        })
    }

    /// The region itself, for reads that manage their own buffer
    /// ([`RegionReader::get_into`]) or their own token.
    pub fn region(&self) -> &RegionReader {
        &self.region
    }

    /// The connection reads fall back to (and writes go through).
    pub fn remote(&self) -> &Client {
        &self.remote
    }

    /// The region alone: a hit, or why the node must be asked. Never blocks, never
    /// allocates on a miss; the fast path.
    pub fn get_local(&self, key: &[u8]) -> LocalRead {
        let token = self.token();
        let read = self
            .region
            .get(key, (token > CommitTs::ZERO).then_some(token));
        if let LocalRead::Hit(hit) = &read {
            self.observe(hit.commit_ts);
        }
        read
    }

    /// The key's newest version: from the region when it can answer, else from the node.
    pub async fn get(&self, key: &[u8]) -> Result<LocalGet> {
        let reason = match self.get_local(key) {
            LocalRead::Hit(hit) => {
                return Ok(LocalGet {
                    value: hit.value.map(Bytes::from),
                    version: hit.version,
                    commit_ts: hit.commit_ts,
                    bound: match hit.bound {
                        Bound::Linearizable { .. } => ReadBound::Linearizable,
                        Bound::Stale {
                            at_least,
                            staleness_us_max,
                        } => ReadBound::Stale {
                            at_least,
                            staleness_us_max,
                        },
                    },
                });
            }
            LocalRead::Remote(reason) => reason,
        };
        self.tell_remote().await?;
        let info = self
            .remote
            .get(key, ReadAt::Latest, ReadConsistency::Linearizable)
            .await?;
        let (value, version, commit_ts) = match info {
            Some(v) => (v.value, v.version, v.commit_ts),
            None => (None, 0, CommitTs::ZERO),
        };
        self.observe(commit_ts);
        Ok(LocalGet {
            value,
            version,
            commit_ts,
            bound: ReadBound::Remote(reason),
        })
    }

    /// Raises this client's causality token (a stamp seen elsewhere, or a write's).
    pub fn observe(&self, stamp: CommitTs) {
        let mut t = self.token.lock().unwrap_or_else(|p| p.into_inner());
        *t = (*t).max(stamp);
    }

    /// This client's causality token.
    pub fn token(&self) -> CommitTs {
        *self.token.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Puts `value` through the node and raises the token to the write's stamp, so the
    /// next local read of the key shows it or goes to the node.
    pub async fn put(&self, key: &[u8], value: &[u8]) -> Result<WriteAck> {
        let ack = self.remote.put(key, value, PutOptions::default()).await?;
        self.observe(ack.commit_ts);
        Ok(ack)
    }

    /// Hands the token to the remote session before a read there, once per rise.
    async fn tell_remote(&self) -> Result<()> {
        let token = self.token();
        let behind = *self.told.lock().unwrap_or_else(|p| p.into_inner()) < token;
        if behind {
            self.remote.after(token).await?;
            let mut told = self.told.lock().unwrap_or_else(|p| p.into_inner());
            *told = (*told).max(token);
        }
        Ok(())
    }
}

/// Opens the region a node announced (`FIRN.LOCAL`): read-only, refused if this host cannot
/// open it (the node is elsewhere), if it is of another layout version or cluster, or if it
/// is not the node's live region (its incarnation differs from the announced one).
pub fn open_region(info: &LocalRegionInfo) -> Result<RegionReader> {
    let cluster = firn_local::parse_cluster_id(&info.cluster_id).ok_or_else(|| {
        ClientError::Protocol(format!(
            "cluster id '{}' is not 32 hex digits",
            info.cluster_id
        ))
    })?;
    let region =
        RegionReader::open(std::path::Path::new(&info.path), Some(cluster)).map_err(|e| {
            ClientError::Invalid(format!(
                "cannot open node {}'s region at {} (is the node on this host?): {e}",
                info.node_id, info.path
            ))
        })?;
    let found = region.header().incarnation;
    if found != info.incarnation {
        return Err(ClientError::Invalid(format!(
            "the region at {} is not node {}'s live region (incarnation {found} there, {} \
             announced)",
            info.path, info.node_id, info.incarnation
        )));
    }
    Ok(region)
}
