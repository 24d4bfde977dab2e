//! Large values beside the log (SplitFT's bulk path). A value above the inline limit is
//! streamed in chunks to every replica of its shard ([`files`]), sealed on a majority, and
//! only then is its manifest proposed (`large/`). Reads stream the blob from this
//! node's file or, chunk by chunk, from another replica, checking every chunk's digest.
//! A replica that lacks a blob a version names fetches it ([`repair`]); files no version
//! names any more are deleted ([`sweep`]).

pub mod files;
pub mod repair;
pub mod sweep;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use bytes::Bytes;
use firn_model::{BlobRef, FirnError};
use firn_raft::{NodeId, ShardId, ShardReplica};
use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use self::files::{BlobFiles, digest};
use crate::cluster::layout::ClusterLayout;
use crate::disk::DiskSpace;
use crate::rpc::{Call, PeerClient, Rpc};
use firn_raft::peer::Lane;

/// How long a peer may take to write or read one chunk, or to seal a blob (an fsync of
/// what the last few chunks left unsynced).
pub const CHUNK_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// Chunks a reader fetches ahead of the one it sends.
const READ_AHEAD: usize = 2;

/// How the node sweeps its blob files (which live in `<data-dir>/blobs`, see
/// [`files::BlobFiles`]).
#[derive(Clone, Debug)]
pub struct BlobConfig {
    /// How often unused files are looked for.
    pub sweep_every: Duration,
    /// A file no version names is deleted once it is this old (an upload whose manifest is
    /// not yet applied must not be).
    pub grace: Duration,
}

/// The default sweep interval and grace: an hour covers any upload that is still going.
pub const SWEEP_EVERY_DEFAULT: Duration = Duration::from_secs(60);
pub const GRACE_DEFAULT: Duration = Duration::from_secs(3600);

/// Calls between nodes for blobs (see `crate::rpc`): chunks and reads of them on the bulk
/// lane, behind which nothing small waits.
#[derive(Debug, Serialize, Deserialize)]
pub struct BlobChunk {
    pub shard: ShardId,
    pub id: u128,
    /// The key, with the first chunk.
    pub key: Bytes,
    pub offset: u64,
    pub data: Bytes,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct BlobSeal(pub BlobRef);

#[derive(Debug, Serialize, Deserialize)]
pub struct BlobRead {
    pub shard: ShardId,
    pub id: u128,
    pub offset: u64,
    pub len: u32,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct BlobDiscard {
    pub shard: ShardId,
    pub id: u128,
}

impl Rpc for BlobChunk {
    const CALL: Call = Call::BlobChunk;
    const LANE: Lane = Lane::Bulk;
    type Reply = Result<(), FirnError>;
}

impl Rpc for BlobRead {
    const CALL: Call = Call::BlobRead;
    // Its answer is a chunk.
    const LANE: Lane = Lane::Bulk;
    type Reply = Result<Bytes, FirnError>;
}

crate::rpc::rpc! {
    BlobSeal => Result<(), FirnError>;
    BlobDiscard => ();
}

/// The replicas this node holds, as blobs look them up: a blob's versions are read from its
/// shard's replica here. `crate::replicas::Replicas` is the one; blobs name only this, so
/// that the replicas, which hand blobs what they apply, can depend on blobs and not the
/// other way round.
pub trait HeldReplicas: Send + Sync {
    fn held(&self, shard: ShardId) -> Option<Arc<ShardReplica>>;
}

pub struct Blobs {
    node_id: NodeId,
    files: Arc<BlobFiles>,
    peers: PeerClient,
    layout: watch::Receiver<Arc<ClusterLayout>>,
    replicas: Arc<dyn HeldReplicas>,
    config: BlobConfig,
    /// This node's data disk: an upload's chunks are refused here while it is low.
    disk: Arc<DiskSpace>,
    /// Makes ids unique among this node's uploads within one microsecond.
    counter: AtomicU32,
}

impl Blobs {
    pub fn new(
        config: BlobConfig,
        files: Arc<BlobFiles>,
        peers: PeerClient,
        layout: watch::Receiver<Arc<ClusterLayout>>,
        (node_id, replicas): (NodeId, Arc<dyn HeldReplicas>),
        disk: Arc<DiskSpace>,
    ) -> Self {
        Blobs {
            node_id,
            files,
            peers,
            layout,
            replicas,
            config,
            disk,
            counter: AtomicU32::new(0),
        }
    }

    /// A new blob id: this node, its clock, a counter.
    pub fn new_id(&self) -> u128 {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        ((self.node_id as u128) << 96)
            | ((firn_model::hlc::system_wall_us() as u128) << 32)
            | n as u128
    }

    /// The nodes that hold (or are being given) a replica of `shard`.
    pub fn holders(&self, shard: ShardId) -> Vec<NodeId> {
        let layout = self.layout.borrow().clone();
        match layout.shards.get(shard as usize) {
            Some(s) => layout
                .nodes
                .keys()
                .copied()
                .filter(|n| layout.holds(s, *n))
                .collect(),
            None => Vec::new(),
        }
    }

    /// Whether the layout (a routable one) gives `shard` to other nodes only.
    pub fn moved_away(&self, shard: ShardId) -> bool {
        let layout = self.layout.borrow().clone();
        layout.is_routable()
            && layout
                .shards
                .get(shard as usize)
                .is_some_and(|s| !layout.holds(s, self.node_id))
    }

    fn holds_here(&self, shard: ShardId) -> bool {
        self.replicas.held(shard).is_some() || self.holders(shard).contains(&self.node_id)
    }

    /// Runs a blocking file operation off the async threads.
    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&BlobFiles) -> Result<T, FirnError> + Send + 'static,
    ) -> Result<T, FirnError> {
        let files = self.files.clone();
        tokio::task::spawn_blocking(move || work(&files))
            .await
            .map_err(|e| FirnError::Internal(format!("blob file task: {e}")))?
    }

    /// Writes a chunk of an upload on `node` (this one or a peer).
    pub async fn write_at(&self, node: NodeId, chunk: BlobChunk) -> Result<(), FirnError> {
        if node == self.node_id {
            return self.serve_chunk(chunk).await;
        }
        self.peers
            .call_within(node, chunk, CHUNK_CALL_TIMEOUT)
            .await?
    }

    /// Seals an upload on `node`.
    pub async fn seal_at(&self, node: NodeId, blob: BlobRef) -> Result<(), FirnError> {
        if node == self.node_id {
            return self.serve_seal(BlobSeal(blob)).await;
        }
        self.peers
            .call_within(node, BlobSeal(blob), CHUNK_CALL_TIMEOUT)
            .await?
    }

    /// Drops an upload on `node`, as well as it can (the sweeper deletes what this misses).
    pub async fn discard_at(&self, node: NodeId, shard: ShardId, id: u128) {
        if node == self.node_id {
            self.serve_discard(BlobDiscard { shard, id }).await;
        } else {
            let _ = self.peers.call(node, BlobDiscard { shard, id }).await;
        }
    }

    /// A peer's chunk of an upload to this node's replica.
    pub async fn serve_chunk(&self, c: BlobChunk) -> Result<(), FirnError> {
        if !self.holds_here(c.shard) {
            return Err(FirnError::TryAgain(format!(
                "node {} holds no replica of shard {}",
                self.node_id, c.shard
            )));
        }
        // Every chunk: a large upload may be what fills the disk.
        self.disk.check()?;
        metrics::counter!("firn_blob_received_bytes_total").increment(c.data.len() as u64);
        self.blocking(move |f| f.write_chunk(c.shard, c.id, &c.key, c.offset, &c.data))
            .await
    }

    pub async fn serve_seal(&self, BlobSeal(blob): BlobSeal) -> Result<(), FirnError> {
        self.blocking(move |f| f.seal(&blob)).await
    }

    pub async fn serve_discard(&self, d: BlobDiscard) {
        let _ = self
            .blocking(move |f| {
                f.discard(d.shard, d.id);
                Ok(())
            })
            .await;
    }

    /// A chunk of a blob sealed here, for a peer: at most one chunk's bytes
    /// (`BLOB_CHUNK_BYTES`), so a request cannot make this node allocate more.
    pub async fn serve_read(&self, r: BlobRead) -> Result<Bytes, FirnError> {
        let len = chunk_read_len(r.len)?;
        self.blocking(move |f| {
            f.read(r.shard, r.id, r.offset, len)
                .map_err(|e| FirnError::TryAgain(format!("blob {}: {e}", r.id)))
        })
        .await
    }

    /// Chunk `index` of `blob`, from this node's file if it has one, else from the other
    /// holders in turn, its digest checked.
    async fn chunk(
        &self,
        blob: &BlobRef,
        index: usize,
        remote_only: bool,
    ) -> Result<Bytes, FirnError> {
        let (offset, len) = blob.chunks().nth(index).ok_or_else(|| {
            FirnError::Internal(format!("blob {} has no chunk {index}", blob.name()))
        })?;
        let expected = blob.digests[index];
        let mut last = FirnError::Unavailable(format!(
            "no replica of shard {} holds blob {}",
            blob.shard,
            blob.name()
        ));
        let here = (!remote_only && self.files.has(blob.shard, blob.id)).then_some(self.node_id);
        let others = self
            .holders(blob.shard)
            .into_iter()
            .filter(|n| *n != self.node_id);
        for node in here.into_iter().chain(others) {
            let read = BlobRead {
                shard: blob.shard,
                id: blob.id,
                offset,
                len: len as u32,
            };
            let data = if node == self.node_id {
                self.serve_read(read).await
            } else {
                self.peers
                    .call_within(node, read, CHUNK_CALL_TIMEOUT)
                    .await
                    .and_then(|r| r)
            };
            match data {
                Ok(data) => {
                    let data_for_digest = data.clone();
                    let sum = tokio::task::spawn_blocking(move || digest(&data_for_digest))
                        .await
                        .map_err(|e| FirnError::Internal(e.to_string()))?;
                    if sum == expected {
                        return Ok(data);
                    }
                    metrics::counter!("firn_blob_corrupt_chunks_total").increment(1);
                    last = FirnError::Internal(format!(
                        "node {node}'s chunk {index} of blob {} does not match its digest",
                        blob.name()
                    ));
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// The blob's bytes, chunk by chunk, as they are read (a few chunks ahead).
    pub fn stream(
        self: &Arc<Self>,
        blob: BlobRef,
    ) -> impl Stream<Item = Result<Bytes, FirnError>> + Send + 'static {
        let this = self.clone();
        let blob = Arc::new(blob);
        futures::stream::iter(0..blob.digests.len())
            .map(move |i| {
                let (this, blob) = (this.clone(), blob.clone());
                async move {
                    let data = this.chunk(&blob, i, false).await?;
                    metrics::counter!("firn_blob_read_bytes_total").increment(data.len() as u64);
                    Ok(data)
                }
            })
            .buffered(READ_AHEAD)
    }

    /// Bytes `start..end` of `blob` (`end` exclusive, within its size), only the chunks
    /// that hold them read: a ranged read of a large value (the file view's `Range`).
    pub fn stream_range(
        self: &Arc<Self>,
        blob: BlobRef,
        start: u64,
        end: u64,
    ) -> impl Stream<Item = Result<Bytes, FirnError>> + Send + 'static {
        let this = self.clone();
        let chunk = u64::from(blob.chunk_bytes.max(1));
        let end = end.min(blob.size);
        let chunks = if start < end {
            (start / chunk) as usize..((end - 1) / chunk) as usize + 1
        } else {
            0..0
        };
        let blob = Arc::new(blob);
        futures::stream::iter(chunks)
            .map(move |i| {
                let (this, blob) = (this.clone(), blob.clone());
                async move {
                    let data = this.chunk(&blob, i, false).await?;
                    let offset = i as u64 * chunk;
                    let from = start.saturating_sub(offset).min(data.len() as u64) as usize;
                    let to = (end - offset).min(data.len() as u64) as usize;
                    let part = data.slice(from..to.max(from));
                    metrics::counter!("firn_blob_read_bytes_total").increment(part.len() as u64);
                    Ok(part)
                }
            })
            .buffered(READ_AHEAD)
    }

    /// The whole blob in memory (RESP answers; bounded by the caller).
    pub async fn load(self: &Arc<Self>, blob: BlobRef) -> Result<Bytes, FirnError> {
        let mut out = Vec::with_capacity(blob.size as usize);
        let mut chunks = std::pin::pin!(self.stream(blob));
        while let Some(chunk) = chunks.next().await {
            out.extend_from_slice(&chunk?);
        }
        Ok(Bytes::from(out))
    }

    /// Copies `blob` here from the other holders, unless it is here already. A copy that
    /// failed part way goes on from the chunks it holds; its `.part` file, made before the
    /// first chunk is asked for, lets a restart of the process find it and go on from the
    /// chunks on disk.
    pub async fn fetch(&self, key: Bytes, blob: &BlobRef) -> Result<bool, FirnError> {
        if self.files.has(blob.shard, blob.id) {
            return Ok(false);
        }
        let (manifest, k) = (blob.clone(), key.clone());
        self.blocking(move |f| f.begin(&manifest, &k)).await?;
        let copied = async {
            for i in self.files.chunks_held(blob)..blob.digests.len() {
                // A repair waits (tried again later) rather than fill a low disk, which
                // would stop the node at the next write of its databases.
                self.disk.check()?;
                let data = self.chunk(blob, i, true).await?;
                let (offset, _) = blob.chunks().nth(i).expect("chunk exists");
                let (shard, id, key) = (blob.shard, blob.id, key.clone());
                self.blocking(move |f| f.write_chunk(shard, id, &key, offset, &data))
                    .await?;
            }
            Ok::<(), FirnError>(())
        };
        if let Err(e) = copied.await {
            // Its file stays for the next try; its descriptor does not.
            self.files.close(blob.shard, blob.id);
            return Err(e);
        }
        let sealed = blob.clone();
        self.blocking(move |f| f.seal(&sealed)).await?;
        Ok(true)
    }

    pub fn files(&self) -> &Arc<BlobFiles> {
        &self.files
    }

    pub fn config(&self) -> &BlobConfig {
        &self.config
    }

    /// This node's replica of `shard`, if it holds one.
    pub fn replica(&self, shard: ShardId) -> Option<Arc<ShardReplica>> {
        self.replicas.held(shard)
    }

    pub fn node_id(&self) -> NodeId {
        self.node_id
    }
}

/// The bytes a peer's blob read may ask for: at most one chunk.
fn chunk_read_len(len: u32) -> Result<usize, FirnError> {
    let len = len as usize;
    if len > firn_model::blob::BLOB_CHUNK_BYTES {
        return Err(FirnError::BadArgument(format!(
            "a blob read is at most {} bytes, not {len}",
            firn_model::blob::BLOB_CHUNK_BYTES
        )));
    }
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_reads_at_most_one_chunk_of_a_blob() {
        let chunk = firn_model::blob::BLOB_CHUNK_BYTES as u32;
        assert_eq!(chunk_read_len(chunk).unwrap(), chunk as usize);
        assert_eq!(chunk_read_len(7).unwrap(), 7);
        assert!(chunk_read_len(chunk + 1).is_err());
        assert!(chunk_read_len(u32::MAX).is_err());
    }

    #[test]
    fn chunks_of_large_values_take_the_bulk_lane_and_nothing_else_does() {
        assert_eq!(<BlobChunk as Rpc>::LANE, Lane::Bulk);
        assert_eq!(<BlobRead as Rpc>::LANE, Lane::Bulk);
        assert_eq!(<BlobSeal as Rpc>::LANE, Lane::Messages);
        assert_eq!(<BlobDiscard as Rpc>::LANE, Lane::Messages);
        assert_eq!(
            <crate::cluster::view::Describe as Rpc>::LANE,
            Lane::Messages
        );
    }
}
