use bytes::Bytes;
use firn_model::{BlobRef, KeyKind};
use firn_raft::FirnRaft;
use firn_raft::types::LogId;
use firn_store::backend::{Batch, Table};
use firn_store::record::{self, KeyMeta, Stored, VersionRecord};
use firn_store::{MemoryBackend, StorageBackend};

use crate::{TS, seed, seeds};

fn applied(term: u64, index: u64) -> Vec<u8> {
    use openraft::vote::RaftLeaderId;
    let leader = openraft::alias::CommittedLeaderIdOf::<FirnRaft>::new(term, 1);
    postcard::to_stdvec(&LogId::new(leader, index)).unwrap()
}

fn version(value: Stored) -> Vec<u8> {
    record::encode(&VersionRecord {
        commit_ts: TS,
        event_time_us: Some(1_790_000_000_000_000),
        value,
    })
}

fn manifest(size: u64, chunk_bytes: u32) -> BlobRef {
    BlobRef {
        shard: 2,
        id: 0x0102_0304_0506_0708_090a_0b0c_0d0e_0f10,
        size,
        chunk_bytes,
        digests: vec![[7; 32]; size.div_ceil(u64::from(chunk_bytes)) as usize],
    }
}

/// A snapshot file built by `firn_raft::snapshot::build` from a store's tables.
fn snapshot(pairs: &[(Table, Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let backend = MemoryBackend::default();
    let mut batch = Batch::default();
    for (table, key, value) in pairs {
        batch.put(*table, key.clone(), value.clone());
    }
    backend.write(batch).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shard0.snapshot");
    firn_raft::snapshot::build(&backend, &path).unwrap();
    std::fs::read(&path).unwrap()
}

#[test]
#[ignore = "writes fuzz/corpus: run by hand"]
fn write_snapshot_file_seeds() {
    seed("snapshot_file", "empty", &snapshot(&[]));
    let meta = KeyMeta {
        latest: 2,
        latest_ts: TS,
        oldest: 1,
        kind: KeyKind::String,
        ..KeyMeta::default()
    };
    let pairs = vec![
        (Table::System, b"raft_applied".to_vec(), applied(3, 42)),
        (Table::KeyMeta, b"k".to_vec(), record::encode(&meta)),
        (
            Table::Versions,
            record::version_key(b"k", 1),
            version(Stored::Inline(Bytes::from_static(b"v1"))),
        ),
        (
            Table::Versions,
            record::version_key(b"k", 2),
            version(Stored::Tombstone),
        ),
        (
            Table::Versions,
            record::version_key(b"big", 1),
            version(Stored::Blob(manifest(10 << 20, 4 << 20))),
        ),
    ];
    seed("snapshot_file", "keys", &snapshot(&pairs));
    let every_table: Vec<_> = Table::ALL
        .into_iter()
        .enumerate()
        .map(|(i, t)| (t, vec![b'k', i as u8], vec![i as u8; i * 3]))
        .collect();
    seed("snapshot_file", "every-table", &snapshot(&every_table));
}

#[test]
#[ignore = "writes fuzz/corpus: run by hand"]
fn write_blob_manifest_seeds() {
    let small = manifest(10, 4);
    seed(
        "blob_manifest",
        "bare-small",
        &postcard::to_stdvec(&small).unwrap(),
    );
    let large = manifest(9 << 20, 4 << 20);
    seed(
        "blob_manifest",
        "bare-large",
        &postcard::to_stdvec(&large).unwrap(),
    );
    seed(
        "blob_manifest",
        "version-blob",
        &version(Stored::Blob(large)),
    );
    seed(
        "blob_manifest",
        "version-inline",
        &version(Stored::Inline(Bytes::from_static(b"a small value"))),
    );
    seed(
        "blob_manifest",
        "version-tombstone",
        &version(Stored::Tombstone),
    );
    seed("blob_manifest", "version-stream", &version(Stored::Stream));
}

#[test]
fn the_snapshot_seeds_verify() {
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in seeds("snapshot_file") {
        let path = dir.path().join(&name);
        std::fs::write(&path, bytes).unwrap();
        let (_, file) = firn_raft::snapshot::SnapshotFile::open(&path).unwrap();
        file.verify()
            .unwrap_or_else(|e| panic!("snapshot_file/{name}: {e}"));
    }
}

#[test]
fn the_manifest_seeds_are_read() {
    for (name, bytes) in seeds("blob_manifest") {
        let read = record::decode::<VersionRecord>(&bytes).is_ok()
            || postcard::from_bytes::<BlobRef>(&bytes).is_ok_and(|b| b.is_consistent());
        assert!(read, "blob_manifest/{name}");
    }
}
