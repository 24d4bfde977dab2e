//! Writes the seeds of the corpora of the targets whose inputs are files or bodies Firn
//! writes itself — snapshots, regions, manifests — with Firn's own writers, plus request
//! bodies and modules as users send them. Run by hand when a format changes:
//!
//! ```sh
//! cargo test -p firn-fuzz-targets --test seeds -- --ignored
//! ```
//!
//! Every seed is at most 4 KiB, the longest input `scripts/fuzz` lets the fuzzer make.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use firn_local::{RegionConfig, RegionReaders, RegionWriter, ShardState};
use firn_model::{BlobRef, CommitTs, KeyKind};
use firn_raft::FirnRaft;
use firn_raft::types::LogId;
use firn_store::backend::{Batch, Table};
use firn_store::record::{self, KeyMeta, Stored, VersionRecord};
use firn_store::{MemoryBackend, StorageBackend};

const SEED_BYTES_MAX: usize = 4096;

fn corpus(target: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn seed(target: &str, name: &str, bytes: &[u8]) {
    assert!(
        bytes.len() <= SEED_BYTES_MAX,
        "{target}/{name} is {} bytes",
        bytes.len()
    );
    std::fs::write(corpus(target).join(name), bytes).unwrap();
}

const TS: CommitTs = CommitTs::new(1_790_000_000_000_000, 3);

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

/// A region written by the node's `RegionWriter`, small enough to be a seed.
fn region(shape: impl FnOnce(&mut RegionWriter)) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("region");
    let config = RegionConfig {
        entries: 8,
        key_bytes_max: 24,
        value_bytes_max: 16,
        shards_max: 2,
    };
    let mut writer = RegionWriter::open(&path, config, 1, RegionReaders::Owner).unwrap();
    shape(&mut writer);
    // As a reader sees it while the node runs: a writer closes its shards when dropped.
    let bytes = std::fs::read(&path).unwrap();
    drop(writer);
    bytes
}

#[test]
#[ignore = "writes fuzz/corpus: run by hand"]
fn write_local_region_seeds() {
    seed("local_region", "empty", &region(|_| {}));
    let state = |lease_until_mono_ns| ShardState {
        applied: TS,
        closed: CommitTs::new(TS.wall_us - 5_000, 0),
        lease_until_mono_ns,
    };
    let published = |w: &mut RegionWriter| {
        w.set_cluster_id([0xab; 16]);
        w.heartbeat();
        w.open_shard(0);
        w.open_shard(1);
        w.publish(0, b"a", Some(b"1"), 1, TS);
        w.publish(0, b"key", None, 2, TS);
        w.publish(1, b"local/temperature", Some(b"21.5 degrees"), 7, TS);
        w.publish_not_local(1, b"absent-too-big", 3, TS);
    };
    seed(
        "local_region",
        "stale-reads",
        &region(|w| {
            published(w);
            w.set_shard_state(0, state(0));
            w.set_shard_state(1, state(0));
        }),
    );
    seed(
        "local_region",
        "leased",
        &region(|w| {
            published(w);
            w.set_shard_state(0, state(u64::MAX));
            w.set_shard_state(1, state(u64::MAX));
        }),
    );
    seed(
        "local_region",
        "closed-shard",
        &region(|w| {
            published(w);
            w.close_shard(1);
            w.invalidate_shard(0);
        }),
    );
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
#[ignore = "writes fuzz/corpus: run by hand"]
fn write_http_seeds() {
    let queries: &[(&str, &str)] = &[
        ("latest", ""),
        ("version", "version=3"),
        (
            "as-of",
            "as_of=2026-11-30T01:02:03.000004Z&consistency=local",
        ),
        ("as-of-exact", "as_of=1790000000000000-2"),
        ("event-time", "event_time=1790000000000000&complete=true"),
        (
            "bitemporal",
            "event_time=2026-11-29T00:00:00Z&as_of=1790000000000000",
        ),
        (
            "scan",
            "prefix=user%2F&limit=100&cursor=user%2F42&consistency=lease",
        ),
        ("scan-b64", "limit=10&cursor=b64%3AAP8A"),
        (
            "mget",
            "key=a&key=b%20c&key=%E2%82%AC&consistency=linearizable",
        ),
        (
            "log-range",
            "start=1790000000000-0&end=1790000000001&limit=50",
        ),
        ("log-block", "start=1790000000000&block_ms=5000&ttl=90s"),
        ("duration", "max_age=7d&ttl=3600"),
    ];
    for (name, query) in queries {
        seed("http_params", name, query.as_bytes());
    }
    let bodies: &[(&str, &str)] = &[
        (
            "doc-example",
            r#"{"compare": [{"key": "a", "version": 3}, {"key": "b", "exists": false},
 {"key": "c", "value": "x", "op": "!="}, {"key": "d", "stamp": "1790000000000000-1", "op": "<="}],
 "then": [{"op": "put", "key": "a", "value": "1"}, {"op": "delete", "key": "b"},
 {"op": "get", "key": "c"}, {"op": "incr", "key": "n", "by": 2},
 {"op": "append", "log": "events", "records": [{"tags": ["paid"], "value": "a"}]}],
 "else": [{"op": "get", "key": "a"}]}"#,
        ),
        ("empty", "{}"),
        (
            "cas",
            r#"{"compare":[{"key":"lock","version":0}],"then":[{"op":"put","key":"lock","value":"me","if_version":0}]}"#,
        ),
        (
            "base64",
            r#"{"compare":[{"key":"k","value_base64":"AP8=","op":">="}],"then":[{"op":"put","key":"k","value_base64":"AQI="}],"else":[{"op":"incr","key":"misses"}]}"#,
        ),
        (
            "stamp-rfc3339",
            r#"{"compare":[{"key":"k","stamp":"2026-11-30T01:00:00Z","op":"<"}],"then":[{"op":"delete","key":"k"}]}"#,
        ),
    ];
    for (name, body) in bodies {
        seed("http_txn", name, body.as_bytes());
    }
}

#[test]
#[ignore = "writes fuzz/corpus: run by hand"]
fn write_wasm_module_seeds() {
    let modules: &[(&str, &str)] = &[
        (
            "minimal",
            r#"(module (func (export "run") (result i32) (i32.const 0)))"#,
        ),
        (
            "host-calls",
            r#"(module
                (import "firn" "put" (func $put (param i32 i32 i32 i32) (result i32)))
                (import "firn" "reply" (func $reply (param i32 i32)))
                (memory (export "memory") 1)
                (data (i32.const 0) "k1v1")
                (func (export "run") (result i32)
                    (drop (call $put (i32.const 0) (i32.const 2) (i32.const 2) (i32.const 2)))
                    (call $reply (i32.const 0) (i32.const 2))
                    (i32.const 0)))"#,
        ),
        (
            "reactor",
            r#"(module
                (memory (export "memory") 1 2)
                (global $ready (mut i32) (i32.const 0))
                (table 2 funcref)
                (elem (i32.const 0) $init)
                (func $init (export "_initialize") (global.set $ready (i32.const 1)))
                (func (export "run") (result i32)
                    (if (result i32) (global.get $ready)
                        (then (i32.const 0)) (else (i32.const 1)))))"#,
        ),
        (
            "start",
            r#"(module
                (global $n (mut i64) (i64.const 0))
                (func $count (local $i i32)
                    (loop $l
                        (global.set $n (i64.add (global.get $n) (i64.const 1)))
                        (local.set $i (i32.add (local.get $i) (i32.const 1)))
                        (br_if $l (i32.lt_u (local.get $i) (i32.const 100)))))
                (start $count)
                (func (export "run") (result i32) (i32.wrap_i64 (global.get $n))))"#,
        ),
        (
            "wrong-run-type",
            r#"(module (func (export "run") (param i32) (result i32) (local.get 0)))"#,
        ),
        (
            "unknown-import",
            r#"(module (import "env" "nope" (func)) (func (export "run") (result i32) (i32.const 0)))"#,
        ),
    ];
    for (name, text) in modules {
        seed("wasm_module", name, &wat::parse_str(text).unwrap());
    }
}

fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(corpus(target))
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}

/// The seeds get past their readers' first checks, so that the fuzzer starts deep inside.
#[test]
fn the_seeds_are_read_whole_by_their_readers() {
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in seeds("snapshot_file") {
        let path = dir.path().join(&name);
        std::fs::write(&path, bytes).unwrap();
        let (_, file) = firn_raft::snapshot::SnapshotFile::open(&path).unwrap();
        file.verify()
            .unwrap_or_else(|e| panic!("snapshot_file/{name}: {e}"));
    }
    for (name, bytes) in seeds("local_region") {
        let path = dir.path().join(&name);
        std::fs::write(&path, bytes).unwrap();
        let region = firn_local::RegionReader::open(&path, None).unwrap();
        let read = region.get(b"a", None);
        // Found (and answered) unless nothing is published or its shard is closed.
        let found = ["leased", "stale-reads"].contains(&name.as_str());
        assert_eq!(
            found,
            matches!(read, firn_local::LocalRead::Hit(_)),
            "{name}: {read:?}"
        );
    }
    let sandbox = firn_node::functions::sandbox::Sandbox::new().unwrap();
    for (name, bytes) in seeds("wasm_module") {
        let compiled = sandbox.compile(&bytes);
        let refused = ["unknown-import", "wrong-run-type"].contains(&name.as_str());
        assert_eq!(compiled.is_err(), refused, "wasm_module/{name}");
    }
    for (name, bytes) in seeds("http_txn") {
        let body: firn_node::http::txn::TxnBody = serde_json::from_slice(&bytes).unwrap();
        body.into_write()
            .unwrap_or_else(|e| panic!("http_txn/{name}: {e}"));
    }
    for (name, bytes) in seeds("blob_manifest") {
        let read = record::decode::<VersionRecord>(&bytes).is_ok()
            || postcard::from_bytes::<BlobRef>(&bytes).is_ok_and(|b| b.is_consistent());
        assert!(read, "blob_manifest/{name}");
    }
}

/// A backup file written by Firn's own writer, with these lines (and their bytes).
fn backup(lines: &[(firn_client::backup_file::Line, &[u8])]) -> Vec<u8> {
    use firn_client::backup_file::Writer;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("seed.backup");
    let header = serde_json::json!({
        "firn_backup": 2, "at": "1795000000000000-0", "at_time": "2026-11-30T05:00:00Z",
        "keyspaces": [],
    });
    let mut writer = Writer::start(std::fs::File::create(&path).unwrap(), &header).unwrap();
    for (line, bytes) in lines {
        match line.size() {
            Some(_) => writer.with_payload(line, bytes).unwrap(),
            None => writer.line(line).unwrap(),
        }
    }
    writer.finish().unwrap();
    std::fs::read(&path).unwrap()
}

#[test]
#[ignore = "writes fuzz/corpus: run by hand"]
fn write_backup_file_seeds() {
    use firn_client::backup_file::{EntryHead, GroupLine, KeyHead, Line, PendingLine, RecordHead};
    use firn_model::{GroupOptions, LogSeq};
    seed("backup_file", "empty", &backup(&[]));
    let key = |k: &[u8], size| {
        Line::Key(KeyHead {
            key: k.to_vec(),
            event_time_us: Some(1_795_000_000_000_000),
            size,
        })
    };
    seed(
        "backup_file",
        "keys",
        &backup(&[(key(b"sensor/1", 4), b"21.5"), (key(&[0xff, 0], 0), b"")]),
    );
    let everything = backup(&[
        (key(b"k", 1), b"v"),
        (
            Line::Entry(EntryHead {
                stream: b"orders".to_vec(),
                id: LogSeq::new(1_795, 0),
                size: 3,
            }),
            b"f=v",
        ),
        (
            Line::Record(RecordHead {
                log: b"audit".to_vec(),
                seq: LogSeq::new(1_795, 65_536),
                tags: vec![b"a".to_vec(), vec![0xfe]],
                held: Some(vec![b"a".to_vec()]),
                size: 5,
            }),
            b"hello",
        ),
        (
            Line::Group(GroupLine {
                stream: b"orders".to_vec(),
                name: b"g".to_vec(),
                last_delivered: LogSeq::new(1_795, 0),
                options: GroupOptions::default(),
                consumers: vec![b"c".to_vec()],
            }),
            b"",
        ),
        (
            Line::Pending(PendingLine {
                id: LogSeq::new(1_795, 0),
                consumer: b"c".to_vec(),
                deliveries: 2,
                delivered_ms: 1_795_000,
            }),
            b"",
        ),
    ]);
    assert!(firn_client::backup_file::check("seed", &mut &everything[..]).is_ok());
    seed("backup_file", "every-line", &everything);
}
