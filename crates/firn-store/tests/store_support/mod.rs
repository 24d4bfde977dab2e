//! What the versioned store's tests share: a store in memory, and commands applied to it.

#![allow(dead_code)] // each test file uses its own part

use firn_model::KvWrite;
use std::sync::Arc;

use bytes::Bytes;
use firn_model::{CommitTs, FirnError, Key, PutRequest, ReadAt, Response, Written};
use firn_store::{Command, MemoryBackend, Op, VersionedStore};

pub fn key(s: &str) -> Key {
    Key::new(Bytes::copy_from_slice(s.as_bytes())).unwrap()
}

pub fn mem_store() -> VersionedStore {
    VersionedStore::open(Arc::new(MemoryBackend::default())).unwrap()
}

pub fn apply(store: &VersionedStore, wall_us: u64, op: Op) -> Result<Response, FirnError> {
    store.apply(
        &Command {
            ts: CommitTs::new(wall_us, 0),
            op,
        },
        Vec::new(),
    )
}

pub fn put_req(k: &str, v: &str) -> PutRequest {
    PutRequest::new(key(k), Bytes::copy_from_slice(v.as_bytes()))
}

pub fn put(store: &VersionedStore, wall_us: u64, k: &str, v: &str) -> Written {
    match apply(store, wall_us, Op::Kv(KvWrite::Put(put_req(k, v)))).unwrap() {
        Response::Written(mut w) => w.remove(0),
        other => panic!("unexpected {other:?}"),
    }
}

pub fn value_at(store: &VersionedStore, k: &str, at: ReadAt) -> Option<String> {
    store
        .get_live(key(k).as_bytes(), at)
        .unwrap()
        .and_then(|i| i.value)
        .map(|v| String::from_utf8(v.to_vec()).unwrap())
}
