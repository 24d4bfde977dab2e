//! A replica that lacks a blob one of its versions names fetches it from the shard's other
//! holders: one it was down for (the version arrived later, through the log), or one a
//! snapshot it installed names. Each replica's store tells the queue what it applies. A
//! fetch that fails (no holder answered, a chunk did not match its digest) is tried again
//! later, for as long as a version here names the blob: until then the value has one copy
//! fewer than its shard has replicas.
//!
//! What is wanted survives a restart: a blob this node lacks gets its `.part` file (the
//! header alone, fsync'd) when the version naming it is applied, before the apply is
//! answered — and so before the applied state can be made durable without it — and for a
//! snapshot installed, before any of its blobs is fetched. Fetches go one at a time and a
//! 16 GiB one takes minutes, so those queued behind it would otherwise have lived in memory
//! only. When the replica opens again, the fetches its part files show go on, from the
//! chunks on disk.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use firn_model::{BlobRef, CommitTs, WatchEvent};
use firn_raft::ShardId;
use firn_store::{AppliedSink, VersionedStore};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::Blobs;
use super::files::BlobFiles;

/// The name the repair sink is attached under in each store.
pub const SINK_NAME: &str = "blob-repair";

/// The wait before a failed fetch is tried again; each failure of it doubles the wait, up to
/// [`RETRY_WAIT_MAX`].
pub const RETRY_WAIT_FIRST: Duration = Duration::from_secs(1);
pub const RETRY_WAIT_MAX: Duration = Duration::from_secs(60);

/// Most failed fetches waiting to be tried again (each holds its blob's manifest: up to
/// 128 KiB for a 16 GiB value). A failure past it is not kept
/// (`firn_blob_repairs_total{outcome="dropped"}`): reads still fetch that blob from another
/// replica, and a snapshot installed here later looks for it again.
pub const RETRIES_MAX: usize = 1_024;

/// What the repair task is asked to look at.
#[derive(Debug)]
pub enum Repair {
    /// A version of `key` applied here names `blob`.
    Blob { key: Bytes, blob: BlobRef },
    /// The shard's contents changed wholesale (a snapshot installed): check every blob.
    Shard(ShardId),
    /// A replica of the shard opened here (the node started, or the shard moved here): go
    /// on with the fetches its `.part` files show were under way when the node stopped (or
    /// look for every blob it names, if a snapshot's were not all marked wanted before).
    Resume(ShardId),
}

/// Where the replicas of a node report the blobs they apply: the repair queue, and the
/// node's blob files (where a blob it lacks is marked wanted).
#[derive(Clone)]
pub struct RepairIntake {
    pub queue: mpsc::UnboundedSender<Repair>,
    pub files: Arc<BlobFiles>,
}

impl RepairIntake {
    /// The sink a replica of `shard` attaches to its store.
    pub fn sink(&self, shard: ShardId) -> RepairSink {
        RepairSink {
            shard,
            intake: self.clone(),
        }
    }

    /// A replica of `shard` opened here: go on with the fetches it had under way.
    pub fn resume(&self, shard: ShardId) {
        let _ = self.queue.send(Repair::Resume(shard));
    }
}

/// Tells the repair queue of every blob a shard applies, having marked each one this node
/// lacks as wanted ([`BlobFiles::want`]).
pub struct RepairSink {
    shard: ShardId,
    intake: RepairIntake,
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
            // Noted on disk first: a restart before the listing has made its blobs wanted
            // lists them again.
            if let Err(e) = self.intake.files.rescan(self.shard) {
                tracing::warn!(shard = self.shard, error = %e, "could not note that a shard's blobs are to be looked for; a restart before they are forgets them");
            }
            let _ = self.intake.queue.send(Repair::Shard(self.shard));
        }
        for v in versions {
            if let Some(blob) = &v.info.blob {
                // A stat where the blob is here (the usual case: its upload wrote it); a file
                // made and fsync'd where it is not.
                if let Err(e) = self.intake.files.want(blob, v.key.as_bytes()) {
                    tracing::warn!(shard = self.shard, blob = %blob.name(), error = %e, "could not mark a blob this replica lacks as wanted; a restart before its fetch forgets it");
                }
                let _ = self.intake.queue.send(Repair::Blob {
                    key: Bytes::copy_from_slice(v.key.as_bytes()),
                    blob: blob.clone(),
                });
            }
        }
    }
}

/// A failed fetch waiting to be tried again.
struct Retry {
    key: Bytes,
    blob: BlobRef,
    due: Instant,
    /// How long it waited last (doubled at its next failure).
    wait: Duration,
}

/// Works the queue, and the retries of failed fetches, until the node stops.
pub async fn run(
    blobs: Arc<Blobs>,
    mut queue: mpsc::UnboundedReceiver<Repair>,
    mut stop: watch::Receiver<bool>,
) {
    let mut retries: HashMap<(ShardId, u128), Retry> = HashMap::new();
    loop {
        let next_due = retries.values().map(|r| r.due).min();
        let job = tokio::select! {
            job = queue.recv() => match job {
                Some(job) => Some(job),
                None => return,
            },
            _ = until(next_due) => None,
            _ = stop.changed() => return,
        };
        let wanted = match job {
            Some(Repair::Blob { key, blob }) => vec![(key, blob, Duration::ZERO)],
            Some(Repair::Shard(shard)) => shard_blobs(&blobs, shard).await,
            Some(Repair::Resume(shard)) if blobs.files().rescan_due(shard) => {
                shard_blobs(&blobs, shard).await
            }
            Some(Repair::Resume(shard)) => unfinished(&blobs, shard).await,
            None => due(&blobs, &mut retries).await,
        };
        for (key, blob, waited) in wanted {
            // Written here by its upload, or fetched already: nothing to do.
            match blobs.fetch(key.clone(), &blob).await {
                Ok(false) => {}
                Ok(true) => {
                    retries.remove(&(blob.shard, blob.id));
                    tracing::info!(shard = blob.shard, blob = %blob.name(), size = blob.size, "fetched a blob this replica lacked");
                    metrics::counter!("firn_blob_repairs_total", "outcome" => "fetched")
                        .increment(1);
                }
                Err(e) => {
                    let wait = (waited * 2).clamp(RETRY_WAIT_FIRST, RETRY_WAIT_MAX);
                    tracing::warn!(shard = blob.shard, blob = %blob.name(), error = %e, retry_in = ?wait, "could not fetch a blob this replica lacks; reads fetch it from another replica");
                    metrics::counter!("firn_blob_repairs_total", "outcome" => "failed")
                        .increment(1);
                    let id = (blob.shard, blob.id);
                    if retries.len() >= RETRIES_MAX && !retries.contains_key(&id) {
                        metrics::counter!("firn_blob_repairs_total", "outcome" => "dropped")
                            .increment(1);
                        continue;
                    }
                    let due = Instant::now() + wait;
                    retries.insert(
                        id,
                        Retry {
                            key,
                            blob,
                            due,
                            wait,
                        },
                    );
                }
            }
        }
    }
}

/// Waits until `due`; never, without one.
async fn until(due: Option<Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due).await,
        None => std::future::pending().await,
    }
}

/// Every blob a replica here of `shard` names, to fetch the missing ones.
async fn shard_blobs(blobs: &Blobs, shard: ShardId) -> Vec<(Bytes, BlobRef, Duration)> {
    let Some(replica) = blobs.replica(shard) else {
        return Vec::new();
    };
    let (store, files) = (replica.store().clone(), blobs.files().clone());
    // Each blob lacking here is marked wanted before any is fetched (see the module's doc).
    let listed = tokio::task::spawn_blocking(move || {
        let found = store.blobs()?;
        let mut all_marked = true;
        for (key, blob) in &found {
            if let Err(e) = files.want(blob, key.as_bytes()) {
                all_marked = false;
                tracing::warn!(shard = blob.shard, blob = %blob.name(), error = %e, "could not mark a blob this replica lacks as wanted");
            }
        }
        if all_marked {
            files.rescanned(shard);
        }
        Ok::<_, firn_model::FirnError>(found)
    });
    match listed.await {
        Ok(Ok(found)) => found
            .into_iter()
            .map(|(k, b)| (Bytes::copy_from_slice(k.as_bytes()), b, Duration::ZERO))
            .collect(),
        other => {
            tracing::warn!(shard, ?other, "listing a shard's blobs failed");
            Vec::new()
        }
    }
}

/// The blobs of `shard` with a `.part` file here that a version of the replica names: fetches
/// (or uploads to this node) cut short, to go on with. A part file whose blob no version
/// names is an upload that never finished: the sweep's.
async fn unfinished(blobs: &Arc<Blobs>, shard: ShardId) -> Vec<(Bytes, BlobRef, Duration)> {
    let Some(replica) = blobs.replica(shard) else {
        return Vec::new();
    };
    let (store, files) = (replica.store().clone(), blobs.files().clone());
    let found = tokio::task::spawn_blocking(move || {
        let mut out = Vec::new();
        for part in files.list(shard).into_iter().filter(|f| f.part) {
            let Ok(key) = files.key_of(shard, part.id) else {
                continue;
            };
            match store.blob_named(&key, part.id) {
                Ok(Some(blob)) => out.push((Bytes::from(key), blob, Duration::ZERO)),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(shard, error = %e, "could not tell whether a part file's blob is named")
                }
            }
        }
        out
    });
    found.await.unwrap_or_default()
}

/// The retries that are due, taken out of `retries`: those a version of a replica here
/// still names (the others are dropped: nothing here wants them any more).
async fn due(
    blobs: &Blobs,
    retries: &mut HashMap<(ShardId, u128), Retry>,
) -> Vec<(Bytes, BlobRef, Duration)> {
    let now = Instant::now();
    let ready: Vec<(ShardId, u128)> = retries
        .iter()
        .filter(|(_, r)| r.due <= now)
        .map(|(id, _)| *id)
        .collect();
    let mut out = Vec::new();
    for id in ready {
        let Some(r) = retries.remove(&id) else {
            continue;
        };
        let Some(replica) = blobs.replica(r.blob.shard) else {
            continue;
        };
        let (store, key, blob_id) = (replica.store().clone(), r.key.clone(), r.blob.id);
        let named = tokio::task::spawn_blocking(move || store.blob_referenced(&key, blob_id))
            .await
            .is_ok_and(|named| named.unwrap_or(true));
        if named {
            out.push((r.key, r.blob, r.wait));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use firn_model::blob::BLOB_CHUNK_BYTES;
    use firn_model::{Key, VersionInfo};
    use firn_store::MemoryBackend;

    use super::*;
    use crate::blob::files::digest;

    fn applied(key: &str, blob: &BlobRef) -> WatchEvent {
        WatchEvent {
            key: Key::new(Bytes::copy_from_slice(key.as_bytes())).unwrap(),
            info: VersionInfo {
                version: 1,
                commit_ts: CommitTs::new(1, 0),
                event_time_us: None,
                deleted: false,
                value: None,
                blob: Some(blob.clone()),
                kind: firn_model::KeyKind::String,
            },
        }
    }

    #[test]
    fn a_blob_applied_here_without_its_file_is_wanted_on_disk_before_the_apply_returns() {
        let dir = tempfile::tempdir().unwrap();
        let files = Arc::new(BlobFiles::new(dir.path().to_path_buf()));
        let (queue, mut queued) = mpsc::unbounded_channel();
        let sink = RepairIntake {
            queue,
            files: files.clone(),
        }
        .sink(2);
        let store = VersionedStore::open(Arc::new(MemoryBackend::default())).unwrap();
        let data = vec![1u8; 100];
        let blob = |id| BlobRef {
            shard: 2,
            id,
            size: data.len() as u64,
            chunk_bytes: BLOB_CHUNK_BYTES as u32,
            digests: vec![digest(&data)],
        };
        // Blob 8 was uploaded here (sealed); blob 9 was not.
        files.write_chunk(2, 8, b"big/a", 0, &data).unwrap();
        files.seal(&blob(8)).unwrap();
        let events = [applied("big/a", &blob(8)), applied("big/b", &blob(9))];
        sink.applied(&store, &events, CommitTs::new(1, 0), false);

        let mut parts: Vec<u128> = files
            .list(2)
            .into_iter()
            .filter(|f| f.part)
            .map(|f| f.id)
            .collect();
        parts.sort();
        assert_eq!(
            parts,
            vec![9],
            "only the blob lacking here is marked wanted"
        );
        assert_eq!(files.key_of(2, 9).unwrap(), b"big/b");
        // And both are queued for the repair task (which finds blob 8 here and skips it).
        for id in [8, 9] {
            match queued.try_recv() {
                Ok(Repair::Blob { blob, .. }) => assert_eq!(blob.id, id),
                other => panic!("expected blob {id} queued, got {other:?}"),
            }
        }

        // A snapshot installed: noted on disk before the listing is queued.
        assert!(!files.rescan_due(2));
        sink.applied(&store, &[], CommitTs::new(2, 0), true);
        assert!(files.rescan_due(2));
        assert!(matches!(queued.try_recv(), Ok(Repair::Shard(2))));
        assert_eq!(files.list(2).len(), 2, "the note is not taken for a blob");
        files.rescanned(2);
        assert!(!files.rescan_due(2));
    }
}
