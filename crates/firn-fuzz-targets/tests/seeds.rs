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
    for (name, bytes) in seeds("peer_stream") {
        use tokio_util::codec::Decoder;
        let mut input = bytes::BytesMut::from(&bytes[..]);
        let mut codec = firn_raft::peer::codec();
        let mut frames = 0;
        while let Ok(Some(frame)) = codec.decode(&mut input) {
            let read = firn_raft::peer::read_request(&frame).is_some()
                || firn_raft::peer::read_response(&frame).is_some();
            assert!(read, "peer_stream/{name}: frame {frames}");
            frames += 1;
        }
        let whole = !["cut", "too-long"].contains(&name.as_str());
        assert_eq!(whole, frames > 0 && input.is_empty(), "peer_stream/{name}");
    }
    for (name, bytes) in seeds("blob_file") {
        let files = firn_node::blob::files::BlobFiles::new(dir.path().join(&name));
        let path = files.path(2, BLOB_ID);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &bytes[2..]).unwrap();
        let key = files.key_of(2, BLOB_ID).unwrap();
        let expected: &[u8] = match name.as_str() {
            "other-key" => b"cams/cam3",
            _ => firn_fuzz_targets::BLOB_FILE_KEY,
        };
        assert_eq!(key, expected, "blob_file/{name}");
        assert!(files.read(2, BLOB_ID, 0, 1).is_ok(), "blob_file/{name}");
    }
    for (name, bytes) in seeds("http_headers") {
        let text = std::str::from_utf8(&bytes).unwrap();
        let segment = text.lines().next().unwrap();
        let path = firn_node::http::fs::path::FsPath::parse(segment)
            .unwrap_or_else(|e| panic!("http_headers/{name}: {e}"));
        assert_eq!(
            path.at.is_some(),
            segment.contains('@'),
            "http_headers/{name}"
        );
    }
    for (name, bytes) in seeds("host_calls") {
        use firn_node::functions::sandbox::Effect;
        let outcome = firn_fuzz_targets::host_calls::run_program(&bytes);
        match name.as_str() {
            "every-call" => {
                let outcome = outcome.unwrap();
                let kinds: Vec<&str> = outcome
                    .effects
                    .iter()
                    .map(|e| match e {
                        Effect::Put(..) => "put",
                        Effect::Del(..) => "del",
                        Effect::Incr(..) => "incr",
                        Effect::XAdd(..) => "xadd",
                        Effect::Append(..) => "append",
                        Effect::Publish(..) => "publish",
                    })
                    .collect();
                assert_eq!(kinds, ["put", "del", "incr", "xadd", "append", "publish"]);
                assert_eq!(outcome.reply, Some(Bytes::from("21.5")));
                // `log` keeps the line as it is; `fd_write` (stdout) trims its end.
                assert_eq!(outcome.log, ["a line for the log\n", "a line for the log"]);
            }
            "read-fails" => assert!(outcome.is_err(), "{name}"),
            _ => assert!(outcome.is_ok(), "host_calls/{name}: {:?}", outcome.err()),
        }
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

/// A frame as a peer connection carries one: an envelope (id, body, sender's wall clock;
/// postcard writes a struct as its fields in order) after the codec's length.
fn framed(frames: &[Vec<u8>]) -> Vec<u8> {
    use tokio_util::codec::Encoder;
    let mut out = bytes::BytesMut::new();
    for body in frames {
        firn_raft::peer::codec()
            .encode(Bytes::copy_from_slice(body), &mut out)
            .unwrap();
    }
    out.to_vec()
}

fn envelope<T: serde::Serialize>(id: u64, body: T) -> Vec<u8> {
    postcard::to_stdvec(&(id, body, 1_790_000_000_000_000u64)).unwrap()
}

#[test]
#[ignore = "writes fuzz/corpus: run by hand"]
fn write_peer_stream_seeds() {
    use firn_raft::peer::{PeerRequest, PeerResponse};
    use firn_raft::snapshot_transfer::SnapshotChunk;
    use firn_raft::types::{SnapshotMeta, Vote};
    use openraft::raft::{AppendEntriesRequest, VoteRequest};

    let heartbeat = envelope(
        1,
        PeerRequest::Append {
            shard: 3,
            rpc: AppendEntriesRequest {
                vote: Vote::new_committed(2, 1),
                prev_log_id: None,
                entries: Vec::new(),
                leader_commit: None,
            },
        },
    );
    let vote = envelope(
        2,
        PeerRequest::Vote {
            shard: 3,
            rpc: VoteRequest::new(Vote::new(3, 2), None),
        },
    );
    let chunk = envelope(
        3,
        PeerRequest::SnapshotChunk(SnapshotChunk {
            shard: 3,
            vote: Vote::new_committed(2, 1),
            meta: SnapshotMeta::default(),
            total_bytes: 8,
            offset: 0,
            bytes: b"FIRNSNAP".to_vec(),
        }),
    );
    let app = envelope(4, PeerRequest::App(b"forwarded write".to_vec()));
    let answered = envelope(4, PeerResponse::App(b"answer".to_vec()));
    let refused = envelope(5, PeerResponse::Error("busy: retry".into()));
    seed("peer_stream", "heartbeat", &framed(&[heartbeat.clone()]));
    seed("peer_stream", "vote", &framed(&[vote.clone()]));
    seed("peer_stream", "snapshot-chunk", &framed(&[chunk]));
    seed(
        "peer_stream",
        "requests",
        &framed(&[heartbeat, vote, app.clone()]),
    );
    seed("peer_stream", "answers", &framed(&[answered, refused]));
    let whole = framed(&[app]);
    seed("peer_stream", "cut", &whole[..whole.len() - 3]);
    // A length past the limit: the connection is closed before anything is read.
    seed("peer_stream", "too-long", &u32::MAX.to_be_bytes());
}

const BLOB_ID: u128 = 0x0102_0304_0506_0708_090a_0b0c_0d0e_0f10;

/// A sealed blob file as the node writes one, after a peer read's two bytes.
fn blob_file(read: [u8; 2], key: &[u8], data: &[u8]) -> Vec<u8> {
    use firn_node::blob::files::{BlobFiles, digest};
    let dir = tempfile::tempdir().unwrap();
    let files = BlobFiles::new(dir.path().to_path_buf());
    let (shard, id) = (2, BLOB_ID);
    files.write_chunk(shard, id, key, 0, data).unwrap();
    files
        .seal(&BlobRef {
            shard,
            id,
            size: data.len() as u64,
            chunk_bytes: firn_model::blob::BLOB_CHUNK_BYTES as u32,
            digests: vec![digest(data)],
        })
        .unwrap();
    let mut seed = read.to_vec();
    seed.extend(std::fs::read(files.path(shard, id)).unwrap());
    seed
}

#[test]
#[ignore = "writes fuzz/corpus: run by hand"]
fn write_blob_file_seeds() {
    let key = firn_fuzz_targets::BLOB_FILE_KEY;
    seed(
        "blob_file",
        "small",
        &blob_file([0, 4], key, b"a large value's first bytes"),
    );
    seed(
        "blob_file",
        "read-past-end",
        &blob_file([200, 255], key, &[7; 1000]),
    );
    seed(
        "blob_file",
        "other-key",
        &blob_file([3, 1], b"cams/cam3", &[1; 64]),
    );
}

#[test]
#[ignore = "writes fuzz/corpus: run by hand"]
fn write_http_headers_seeds() {
    let requests: &[(&str, &str)] = &[
        ("plain", "cams/cam3\nAccept: */*"),
        (
            "file-range",
            "cams/cam3@2026-11-29T10:02:07.5Z\nRange: bytes=2-5\nIf-Range: \"7\"\nAccept: application/octet-stream",
        ),
        (
            "conditional",
            "docs/readme\nIf-None-Match: \"6\", W/\"7\"\nRange: bytes=-3",
        ),
        (
            "directory",
            "cams/@1790000000000000-3\nAccept: text/html,application/xhtml+xml,application/json;q=0.9",
        ),
        (
            "write-once",
            "orders/17\nIdempotency-Key: order-17-try\nFirn-Producer: checkout\nFirn-After: 1790000000000000-3\nAuthorization: Bearer s3cret-token",
        ),
        (
            "key-with-at",
            "mail/a@b.example@2026-11-29T10:02:07Z\nRange: bytes=0-",
        ),
    ];
    for (name, text) in requests {
        seed("http_headers", name, text.as_bytes());
    }
}

/// A program for `host_calls`'s module: its records (a call's number, eight arguments),
/// then `data`, which the records point at through [`HOST_DATA`].
fn host_program(records: &[(u8, [i32; 8])], data: &[u8]) -> Vec<u8> {
    let mut out = (records.len() as u32).to_le_bytes().to_vec();
    for (call, args) in records {
        out.push(*call);
        for a in args {
            out.extend_from_slice(&a.to_le_bytes());
        }
    }
    out.extend_from_slice(data);
    out
}

/// Where a program's data lands in the module's memory: after its count and `records`.
fn host_data(records: usize) -> i32 {
    (firn_fuzz_targets::host_calls::INPUT_AT
        + 4
        + records as u32 * firn_fuzz_targets::host_calls::RECORD_BYTES) as i32
}

#[test]
#[ignore = "writes fuzz/corpus: run by hand"]
fn write_host_calls_seeds() {
    // The data: a key, a value, fields and tags as `[u32 LE length][bytes]…`, an iovec
    // (pointer, length) and its text, a log record's id.
    let mut data = Vec::new();
    let mut place = |bytes: &[u8]| {
        let at = data.len() as i32;
        data.extend_from_slice(bytes);
        (at, bytes.len() as i32)
    };
    let key = place(b"sensors/kitchen");
    let value = place(b"21.5");
    let fields = place(b"\x04\x00\x00\x00temp\x04\x00\x00\x0021.5");
    let tags = place(b"\x07\x00\x00\x00kitchen");
    let text = place(b"a line for the log\n");
    let id = place(b"1-0");
    let iovec = place(&[0u8; 8]);
    let fail = place(b"!down");
    // Every call once, with pointers into the data and answers at 0x100 (4 KiB of room).
    let calls = 26;
    let d = host_data(calls);
    let (k, v, f, t, x, i, io) = (
        d + key.0,
        d + value.0,
        d + fields.0,
        d + tags.0,
        d + text.0,
        d + id.0,
        d + iovec.0,
    );
    // The iovec names the text: its pointer and length, in place.
    data[iovec.0 as usize..iovec.0 as usize + 4].copy_from_slice(&x.to_le_bytes());
    data[iovec.0 as usize + 4..iovec.0 as usize + 8].copy_from_slice(&text.1.to_le_bytes());
    let (out, cap) = (0x100, 0x1000);
    let records: Vec<(u8, [i32; 8])> = vec![
        (0, [0; 8]),
        (1, [0; 8]),
        (2, [0; 8]),
        (3, [0; 8]),
        (4, [0; 8]),
        (5, [0, out, cap, 0, 0, 0, 0, 0]),
        (6, [0, out, cap, 0, 0, 0, 0, 0]),
        (7, [k, key.1, out, cap, 0, 0, 0, 0]),
        (8, [k, key.1, 3, 0, out, cap, 0, 0]),
        (9, [k, key.1, 1_000_000, 0, out, cap, 0, 0]),
        (10, [k, 8, 0, 0, out, cap, 0, 0]),
        (11, [k, key.1, t + 4, tags.1 - 4, i, id.1, out, cap]),
        (12, [k, key.1, v, value.1, 0, 0, 0, 0]),
        (13, [k, key.1, 0, 0, 0, 0, 0, 0]),
        (14, [k, key.1, 5, 0, 0, 0, 0, 0]),
        (15, [k, key.1, f, fields.1, 0, 0, 0, 0]),
        (16, [k, key.1, t, tags.1, v, value.1, 0, 0]),
        (17, [k, key.1, v, value.1, 0, 0, 0, 0]),
        (18, [v, value.1, 0, 0, 0, 0, 0, 0]),
        (19, [x, text.1, 0, 0, 0, 0, 0, 0]),
        (20, [1, io, 1, out, 0, 0, 0, 0]),
        (21, [out, 16, 0, 0, 0, 0, 0, 0]),
        (22, [0, 0, 0, out, 0, 0, 0, 0]),
        (23, [1, out, 0, 0, 0, 0, 0, 0]),
        (24, [out, out + 4, 0, 0, 0, 0, 0, 0]),
        (25, [out, out + 4, 0, 0, 0, 0, 0, 0]),
    ];
    assert_eq!(records.len(), calls);
    seed("host_calls", "every-call", &host_program(&records, &data));
    // One program per call, alone (its pointers into the data moved to where the data is
    // then), and a read that fails.
    let d1 = host_data(1);
    let into_data = d..d + data.len() as i32;
    for (n, record) in records.iter().enumerate() {
        let moved = record.1.map(|a| {
            if into_data.contains(&a) {
                a - d + d1
            } else {
                a
            }
        });
        seed(
            "host_calls",
            &format!("call-{n}"),
            &host_program(&[(record.0, moved)], &data),
        );
    }
    seed(
        "host_calls",
        "read-fails",
        &host_program(&[(7, [d1 + fail.0, fail.1, out, cap, 0, 0, 0, 0])], &data),
    );
}
