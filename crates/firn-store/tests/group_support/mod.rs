//! What the consumer-group tests share: a store in memory, and one stream `s` with a
//! group `g` changed by entries whose stamps the test chooses.
#![allow(dead_code)]

use firn_store::LogOp;
use std::sync::Arc;

use bytes::Bytes;
use firn_model::log::encode_fields;
use firn_model::{
    CommitTs, FirnError, GroupChange, GroupOptions, GroupStart, Key, LogSeq, NewRecord, Response,
    StreamId,
};
use firn_store::backend::MemoryBackend;
use firn_store::command::{Command, Op, StreamAppend};
use firn_store::store::VersionedStore;

pub fn store() -> VersionedStore {
    VersionedStore::open(Arc::new(MemoryBackend::default())).unwrap()
}

pub fn key() -> Key {
    Key::new("s").unwrap()
}

pub fn apply(store: &VersionedStore, ms: u64, op: Op) -> Result<Response, FirnError> {
    store.apply(
        &Command {
            ts: CommitTs::new(ms * 1_000, 0),
            op,
        },
        Vec::new(),
    )
}

pub fn add(store: &VersionedStore, ms: u64, id: u64) {
    add_fields(store, ms, id, &[("f", &id.to_string())]);
}

/// Appends the entry `id-0` with these fields to the stream.
pub fn add_fields(store: &VersionedStore, ms: u64, id: u64, fields: &[(&str, &str)]) {
    let fields: Vec<(Bytes, Bytes)> = fields
        .iter()
        .map(|(f, v)| (Bytes::from(f.to_string()), Bytes::from(v.to_string())))
        .collect();
    apply(
        store,
        ms,
        Op::Log(LogOp::Append {
            log: key(),
            home: 0,
            records: vec![NewRecord {
                tags: vec![key()],
                payload: encode_fields(&fields),
            }],
            stream: Some(StreamAppend {
                id: StreamId::Exact(LogSeq::new(id, 0)),
                trim: None,
                no_create: false,
            }),
        }),
    )
    .unwrap();
}

pub fn change(store: &VersionedStore, ms: u64, change: GroupChange) -> Result<Response, FirnError> {
    apply(
        store,
        ms,
        Op::Group {
            key: key(),
            group: Bytes::from("g"),
            change,
        },
    )
}

pub fn deliver(store: &VersionedStore, ms: u64, consumer: &str, count: usize) -> Vec<LogSeq> {
    let r = change(
        store,
        ms,
        GroupChange::Deliver {
            consumer: Bytes::from(consumer.to_string()),
            count,
            noack: false,
        },
    )
    .unwrap();
    let Response::GroupEntries { entries, .. } = r else {
        panic!("{r:?}")
    };
    entries.iter().map(|e| e.seq).collect()
}

pub fn ids(ns: &[u64]) -> Vec<LogSeq> {
    ns.iter().map(|n| LogSeq::new(*n, 0)).collect()
}

pub fn create(store: &VersionedStore, ms: u64, start: GroupStart) -> Result<Response, FirnError> {
    change(
        store,
        ms,
        GroupChange::Create {
            entries_read: None,
            start,
            mkstream: false,
            options: GroupOptions::default(),
        },
    )
}
