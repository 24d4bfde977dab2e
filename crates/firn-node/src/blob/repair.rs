//! A replica that lacks a blob one of its versions names fetches it from the shard's other
//! holders: one it was down for (the version arrived later, through the log), or one a
//! snapshot it installed names. Each replica's store tells the queue what it applies.

use std::sync::Arc;

use bytes::Bytes;
use firn_model::{BlobRef, CommitTs, WatchEvent};
use firn_raft::ShardId;
use firn_store::{AppliedSink, VersionedStore};
use tokio::sync::{mpsc, watch};

use super::Blobs;

/// The name the repair sink is attached under in each store.
pub const SINK_NAME: &str = "blob-repair";

/// What the repair task is asked to look at.
#[derive(Debug)]
pub enum Repair {
    /// A version of `key` applied here names `blob`.
    Blob { key: Bytes, blob: BlobRef },
    /// The shard's contents changed wholesale (a snapshot installed): check every blob.
    Shard(ShardId),
}

/// Tells the repair queue of every blob a shard applies.
pub struct RepairSink {
    pub shard: ShardId,
    pub queue: mpsc::UnboundedSender<Repair>,
}

impl AppliedSink for RepairSink {
    fn applied(
        &self,
        _store: &VersionedStore,
        versions: &[WatchEvent],
        _closed: CommitTs,
        reset: bool,
    ) {
        if reset {
            let _ = self.queue.send(Repair::Shard(self.shard));
        }
        for v in versions {
            if let Some(blob) = &v.info.blob {
                let _ = self.queue.send(Repair::Blob {
                    key: Bytes::copy_from_slice(v.key.as_bytes()),
                    blob: blob.clone(),
                });
            }
        }
    }
}

/// Works the queue until the node stops.
pub async fn run(
    blobs: Arc<Blobs>,
    mut queue: mpsc::UnboundedReceiver<Repair>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let job = tokio::select! {
            job = queue.recv() => match job {
                Some(job) => job,
                None => return,
            },
            _ = stop.changed() => return,
        };
        let wanted = match job {
            Repair::Blob { key, blob } => vec![(key, blob)],
            Repair::Shard(shard) => match blobs.replicas().get(shard) {
                Some(replica) => {
                    let store = replica.store().clone();
                    match tokio::task::spawn_blocking(move || store.blobs()).await {
                        Ok(Ok(found)) => found
                            .into_iter()
                            .map(|(k, b)| (Bytes::copy_from_slice(k.as_bytes()), b))
                            .collect(),
                        other => {
                            tracing::warn!(shard, ?other, "listing a shard's blobs failed");
                            Vec::new()
                        }
                    }
                }
                None => Vec::new(),
            },
        };
        for (key, blob) in wanted {
            // Written here by its upload, or fetched already: nothing to do.
            match blobs.fetch(key, &blob).await {
                Ok(false) => {}
                Ok(true) => {
                    tracing::info!(shard = blob.shard, blob = %blob.name(), size = blob.size, "fetched a blob this replica lacked");
                    metrics::counter!("firn_blob_repairs_total", "outcome" => "fetched")
                        .increment(1);
                }
                Err(e) => {
                    tracing::warn!(shard = blob.shard, blob = %blob.name(), error = %e, "could not fetch a blob this replica lacks; reads fetch it from another replica");
                    metrics::counter!("firn_blob_repairs_total", "outcome" => "failed")
                        .increment(1);
                }
            }
        }
    }
}
