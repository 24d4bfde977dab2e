//! Deletes blob files no stored version names: versions removed by truncation, retention,
//! an overwrite in a `latest` keyspace, a dropped keyspace or FLUSHALL; uploads that never
//! finished (a `.part` file whose blob no version names); and the whole directory of a
//! shard this node no longer holds. A file is judged only once it is older than the grace
//! period, so that an upload whose manifest is still on its way through the log is never
//! taken for garbage.

use std::sync::Arc;
use std::time::SystemTime;

use firn_raft::ShardId;
use tokio::sync::watch;

use super::Blobs;

/// Sweeps every `sweep_every` until the node stops.
pub async fn run(blobs: Arc<Blobs>, mut stop: watch::Receiver<bool>) {
    let every = blobs.config().sweep_every;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
        let b = blobs.clone();
        match tokio::task::spawn_blocking(move || sweep(&b)).await {
            Ok(removed) if removed > 0 => {
                tracing::info!(removed, "removed blob files no version names");
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "the blob sweep failed"),
        }
    }
}

/// One pass: the number of files removed.
pub fn sweep(blobs: &Blobs) -> usize {
    let grace = blobs.config().grace;
    let old = |modified: SystemTime| {
        SystemTime::now()
            .duration_since(modified)
            .is_ok_and(|age| age >= grace)
    };
    let files = blobs.files();
    let mut removed = 0;
    for shard in files.shards() {
        let Some(replica) = blobs.replica(shard) else {
            if blobs.moved_away(shard) {
                removed += remove_shard(blobs, shard);
            }
            continue;
        };
        let store = replica.store();
        for found in files.list(shard) {
            if !old(found.modified) || files.uploading(shard, found.id, grace) {
                continue;
            }
            // A part file is kept too while a version names its blob: a fetch that a
            // restart cut short, which the replica goes on with when it opens.
            let unused = files
                    .key_of(shard, found.id)
                    .map_err(|e| e.to_string())
                    .and_then(|key| {
                        store
                            .blob_referenced(&key, found.id)
                            .map_err(|e| e.to_string())
                    })
                    .map(|used| !used)
                    .unwrap_or_else(|e| {
                        tracing::warn!(shard, error = %e, "could not tell whether a blob is used; keeping it");
                        false
                    });
            if unused {
                files.discard(shard, found.id);
                removed += 1;
            }
        }
    }
    metrics::counter!("firn_blob_files_removed_total").increment(removed as u64);
    removed
}

fn remove_shard(blobs: &Blobs, shard: ShardId) -> usize {
    let n = blobs.files().list(shard).len();
    tracing::info!(
        shard,
        files = n,
        "removing the blobs of a shard this node no longer holds"
    );
    blobs.files().remove_shard(shard);
    n
}
