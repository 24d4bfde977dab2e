//! One keyspace with types: a stream is a key, its making and its end are versions, and a
//! command for another type than the key holds is refused without a change.

mod group_support;

use bytes::Bytes;
use firn_model::{
    CommitTs, FirnError, GroupChange, GroupOptions, GroupStart, KeyKind, KvWrite, LogSeq,
    NewRecord, PutRequest, ReadAt, StreamId, WriteCondition,
};
use firn_store::backend::Table;
use firn_store::command::{Command, Op, StreamAppend};
use firn_store::{LogOp, VersionedStore};
use group_support::{add, apply, change, key, store};

fn xadd(id: u64) -> Op {
    Op::Log(LogOp::Append {
        log: key(),
        home: 0,
        records: vec![NewRecord {
            tags: vec![key()],
            payload: firn_model::log::encode_fields(&[(Bytes::from("f"), Bytes::from("v"))]),
        }],
        stream: Some(StreamAppend {
            id: StreamId::Exact(LogSeq::new(id, 0)),
            trim: None,
            no_create: false,
        }),
    })
}

fn set(value: &str, return_previous: bool) -> Op {
    Op::Kv(KvWrite::Put(PutRequest {
        key: key(),
        value: Bytes::from(value.to_string()),
        condition: WriteCondition::Always,
        event_time_us: None,
        return_previous,
        life: Default::default(),
    }))
}

fn del() -> Op {
    Op::Kv(KvWrite::Delete { keys: vec![key()] })
}

/// Rows the stream `s` has in the log's and the groups' tables.
fn stream_rows(store: &VersionedStore) -> usize {
    let dump = store.backend().dump().unwrap();
    dump.tables
        .iter()
        .filter(|(t, _)| {
            matches!(
                t,
                Table::LogEntries
                    | Table::LogTags
                    | Table::Groups
                    | Table::GroupPending
                    | Table::GroupConsumers
            )
        })
        .map(|(_, rows)| rows.len())
        .sum()
}

#[test]
fn a_stream_is_a_key_whose_making_and_end_are_versions() {
    let store = store();
    add(&store, 1, 1);
    add(&store, 2, 2);
    change(
        &store,
        3,
        GroupChange::Create {
            entries_read: None,
            start: GroupStart::Id(LogSeq::ZERO),
            mkstream: false,
            options: GroupOptions::default(),
        },
    )
    .unwrap();
    group_support::deliver(&store, 4, "c", 10);
    assert!(stream_rows(&store) > 0);
    assert_eq!(store.live_keys(), 1);
    let made = store.get(b"s", ReadAt::Latest).unwrap().unwrap();
    assert_eq!(
        (made.version, made.kind, made.value),
        (1, KeyKind::Stream, None)
    );

    // DEL ends it: its entries, its tag and its group with its pending entries go.
    apply(&store, 5, del()).unwrap();
    assert_eq!(stream_rows(&store), 0);
    assert_eq!(store.live_keys(), 0);
    let history = store.history(b"s", 1, None, 10, None).unwrap();
    let shown: Vec<(u64, KeyKind, bool)> = history
        .iter()
        .map(|i| (i.version, i.kind, i.deleted))
        .collect();
    assert_eq!(
        shown,
        [(1, KeyKind::Stream, false), (2, KeyKind::String, true)]
    );
    // A read as of the stream's time still sees that it was a stream.
    let then = store
        .get(b"s", ReadAt::AsOf(CommitTs::new(4_000, 0)))
        .unwrap()
        .unwrap();
    assert_eq!(then.kind, KeyKind::Stream);
}

#[test]
fn a_string_refuses_stream_commands_and_a_stream_refuses_reading_its_value() {
    let store = store();
    apply(&store, 1, set("v", false)).unwrap();
    let before = store.backend().dump().unwrap();
    assert_eq!(apply(&store, 2, xadd(1)), Err(FirnError::WrongType));
    assert_eq!(
        change(
            &store,
            3,
            GroupChange::Create {
                entries_read: None,
                start: GroupStart::Id(LogSeq::ZERO),
                mkstream: true,
                options: GroupOptions::default(),
            }
        ),
        Err(FirnError::WrongType)
    );
    assert_eq!(
        store.log_page(b"s", b"s", LogSeq::ZERO, LogSeq::MAX, 10, false, None, true),
        Err(FirnError::WrongType)
    );
    assert_eq!(store.groups(&key()), Err(FirnError::WrongType));
    // Refused without a change (but for the shard's last stamp).
    let after = store.backend().dump().unwrap();
    let rows = |d: &firn_store::backend::Dump| {
        d.tables
            .iter()
            .filter(|(t, _)| *t != Table::System)
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(rows(&before), rows(&after));

    // SET replaces a stream; SET … GET on one is refused and writes nothing.
    apply(&store, 4, del()).unwrap();
    apply(&store, 5, xadd(1)).unwrap();
    assert_eq!(apply(&store, 6, set("x", true)), Err(FirnError::WrongType));
    assert_eq!(
        store.get(b"s", ReadAt::Latest).unwrap().unwrap().kind,
        KeyKind::Stream
    );
    apply(&store, 7, set("x", false)).unwrap();
    assert_eq!(stream_rows(&store), 0);
    let now = store.get(b"s", ReadAt::Latest).unwrap().unwrap();
    assert_eq!(
        (now.kind, now.value),
        (KeyKind::String, Some(Bytes::from("x")))
    );
    assert_eq!(store.live_keys(), 1);
}

/// A delete that shares a storage batch with the XADD before it removes that entry too,
/// though the entry is not in storage yet when the delete walks the stream.
#[test]
fn a_delete_in_the_batch_of_an_append_removes_the_appended_entry() {
    let store = store();
    add(&store, 1, 1);
    let (append, delete) = (
        Command {
            ts: CommitTs::new(2_000, 0),
            op: xadd(2),
        },
        Command {
            ts: CommitTs::new(3_000, 0),
            op: del(),
        },
    );
    let results = store.apply_batch(&[&append, &delete], Vec::new()).unwrap();
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(stream_rows(&store), 0);
    // A stream made again under the name starts empty, its ids free again.
    apply(&store, 4, xadd(1)).unwrap();
    let page = store
        .log_page(b"s", b"s", LogSeq::ZERO, LogSeq::MAX, 10, false, None, true)
        .unwrap();
    assert_eq!(page.records.len(), 1);
}
