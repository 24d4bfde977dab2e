//! A shard's snapshot file as a replica takes one in — received from a leader, or found on
//! its disk after a restart: opened (the trailer and the meta it holds, checksummed), its
//! whole dump checked (every record, the count and the checksum), then installed into a
//! store's tables in memory, pair by pair, as `firn_raft::snapshot::install` loads it.

use firn_raft::snapshot::{SnapshotFile, install};
use firn_store::MemoryBackend;

pub fn snapshot_file(data: &[u8]) {
    let file = crate::file_of(data);
    let Ok((_meta, snapshot)) = SnapshotFile::open(file.path()) else {
        return;
    };
    if snapshot.verify().is_err() {
        return;
    }
    let _ = install(&MemoryBackend::default(), &snapshot, file.path());
}
