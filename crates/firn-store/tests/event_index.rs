//! The event-time index: a read by event time answers what a walk over every stored version
//! answers — after puts with and without event times, deletes, retention by count and
//! truncation — and a store whose versions were written before the index existed builds it
//! when opened.

mod store_support;

use std::sync::Arc;

use bytes::Bytes;
use firn_model::{
    KeyRange, KeyspaceMode, KeyspaceSpec, KvWrite, PutRequest, ReadAt, Response, TruncateBefore,
    VersionInfo,
};
use std::ops::Bound;

use firn_store::backend::{Batch, Table};
use firn_store::{MemoryBackend, Op, StorageBackend, SystemOp, VersionedStore};
use proptest::prelude::*;
use store_support::{apply, key, mem_store};

/// What a walk over every stored version of `k` answers at event time `t`: the greatest
/// (event time, version) with event time at most `t`.
fn walked(store: &VersionedStore, k: &str, t: u64) -> Option<u64> {
    let history = store
        .history(key(k).as_bytes(), 1, None, usize::MAX, None)
        .unwrap_or_default();
    history
        .iter()
        .filter(|i: &&VersionInfo| i.event_time_us.is_some_and(|e| e <= t))
        .max_by_key(|i| (i.event_time_us, i.version))
        .map(|i| i.version)
}

#[derive(Clone, Debug)]
enum Step {
    Put(Option<u64>),
    Delete,
    Truncate(u64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => proptest::option::weighted(0.8, 0u64..40).prop_map(Step::Put),
        1 => Just(Step::Delete),
        1 => (1u64..30).prop_map(Step::Truncate),
    ]
}

proptest! {
    #[test]
    fn a_read_by_event_time_answers_what_a_walk_over_the_versions_does(
        steps in proptest::collection::vec(step(), 1..80),
        max_versions in proptest::option::of(1u64..6),
        latest in proptest::bool::weighted(0.2),
    ) {
        let store = mem_store();
        if max_versions.is_some() || latest {
            let spec = KeyspaceSpec {
                prefix: "r/".into(),
                max_versions: if latest { None } else { max_versions },
                mode: if latest { KeyspaceMode::Latest } else { KeyspaceMode::Versioned },
                ..KeyspaceSpec::default_keyspace()
            };
            apply(&store, 1, Op::System(SystemOp::KeyspaceCreate(spec))).unwrap();
        }
        for (i, s) in steps.iter().enumerate() {
            let wall = 10 + i as u64;
            let op = match s {
                Step::Put(e) => {
                    let mut put = PutRequest::new(key("r/k"), Bytes::from(format!("v{i}")));
                    put.event_time_us = *e;
                    Op::Kv(KvWrite::Put(put))
                }
                Step::Delete => Op::Kv(KvWrite::Delete { keys: vec![key("r/k")] }),
                Step::Truncate(v) => Op::Kv(KvWrite::Truncate {
                    target: KeyRange::Key(key("r/k")),
                    before: TruncateBefore::Version(*v),
                }),
            };
            apply(&store, wall, op).unwrap();
            for t in [0, 5, 13, 20, 27, 39, 40, u64::MAX] {
                let got = store.get(b"r/k", ReadAt::EventTime(t)).unwrap().map(|i| i.version);
                prop_assert_eq!(got, walked(&store, "r/k", t), "event time {} after {:?}", t, &steps[..=i]);
            }
        }
    }
}

#[test]
fn versions_written_before_the_index_existed_are_indexed_when_the_store_opens() {
    let backend = Arc::new(MemoryBackend::default());
    let store = VersionedStore::open(backend.clone()).unwrap();
    for (i, e) in [30u64, 10, 20].into_iter().enumerate() {
        let mut put = PutRequest::new(key("s"), Bytes::from(format!("v{}", i + 1)));
        put.event_time_us = Some(e);
        assert!(matches!(
            apply(&store, 10 + i as u64, Op::Kv(KvWrite::Put(put))).unwrap(),
            Response::Written(_)
        ));
    }
    assert_eq!(
        store
            .get(b"s", ReadAt::EventTime(25))
            .unwrap()
            .map(|i| i.version),
        Some(3)
    );
    // As a node from before the index left its tables: no rows, no mark. A read then finds
    // nothing — what the build below repairs.
    let rows = backend
        .range(
            Table::EventIndex,
            Bound::Unbounded,
            Bound::Unbounded,
            false,
            usize::MAX,
        )
        .unwrap();
    assert_eq!(rows.len(), 3);
    let mut lose = Batch::default();
    for (row, _) in rows {
        lose.remove(Table::EventIndex, row);
    }
    lose.remove(Table::System, b"event_index".to_vec());
    backend.write(lose).unwrap();
    assert_eq!(store.get(b"s", ReadAt::EventTime(25)).unwrap(), None);
    let reopened = VersionedStore::open(backend).unwrap();
    for (t, want) in [(5, None), (10, Some(2)), (25, Some(3)), (99, Some(1))] {
        assert_eq!(
            reopened
                .get(b"s", ReadAt::EventTime(t))
                .unwrap()
                .map(|i| i.version),
            want,
            "event time {t}"
        );
    }
}

/// Bitemporal: a late write for an event time already read changes what a read by event
/// time answers now, but not what it answered as of a time before the late write.
#[test]
fn a_read_at_an_event_time_as_of_a_time_is_what_was_known_then() {
    let store = mem_store();
    let put = |wall: u64, event: u64, v: &str| {
        let mut put = PutRequest::new(key("t"), Bytes::from(v.to_string()));
        put.event_time_us = Some(event);
        match apply(&store, wall, Op::Kv(KvWrite::Put(put))).unwrap() {
            Response::Written(w) => w[0].commit_ts,
            other => panic!("{other:?}"),
        }
    };
    let first = put(10, 100, "on time");
    let _other = put(20, 200, "next");
    let late = put(30, 100, "corrected late");
    let read = |at: ReadAt| {
        store
            .get(b"t", at)
            .unwrap()
            .and_then(|i| i.value)
            .map(|v| String::from_utf8(v.to_vec()).unwrap())
    };
    let as_known = |event_us, as_of| read(ReadAt::EventTimeAsOf { event_us, as_of });
    assert_eq!(
        read(ReadAt::EventTime(150)).as_deref(),
        Some("corrected late")
    );
    assert_eq!(as_known(150, first).as_deref(), Some("on time"));
    assert_eq!(as_known(150, late).as_deref(), Some("corrected late"));
    // Before anything was written at or below that event time: nothing known.
    assert_eq!(as_known(150, firn_model::CommitTs::new(5, 0)), None);
    assert_eq!(as_known(50, late), None);
    assert_eq!(as_known(250, first).as_deref(), Some("on time"));
}
