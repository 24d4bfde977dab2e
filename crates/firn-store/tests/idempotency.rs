//! Idempotent writes (`Op::Once`): a write sent again with the same key applies nothing and
//! answers what it answered first — also its refusal, also within one storage batch, also
//! after the store is opened again — until the key leaves the producer's window.

use bytes::Bytes;
use firn_model::limits::IDEM_WINDOW_US;
use firn_model::{CommitTs, FirnError, IdemKey, KeyChange, KvWrite, Response, WriteCondition};
use firn_store::{Command, Op};

mod store_support;
use store_support::*;

fn incr(producer: &str, id: &str, by: i64) -> Op {
    Op::Once {
        key: IdemKey::new(
            Bytes::from(producer.to_string()),
            Bytes::from(id.to_string()),
        )
        .unwrap(),
        op: Box::new(Op::Kv(KvWrite::Change {
            key: key("n"),
            change: KeyChange::IncrBy(by),
        })),
    }
}

fn count(store: &firn_store::VersionedStore) -> Option<String> {
    value_at(store, "n", firn_model::ReadAt::Latest)
}

#[test]
fn a_write_sent_again_with_its_key_applies_once_and_answers_the_same() {
    let store = mem_store();
    let first = apply(&store, 100, incr("dev-1", "a", 5)).unwrap();
    let again = apply(&store, 200, incr("dev-1", "a", 5)).unwrap();
    assert_eq!(first, again, "the first answer, again");
    assert_eq!(count(&store).as_deref(), Some("5"));
    // Another id, another producer with the same id: each applies.
    apply(&store, 300, incr("dev-1", "b", 1)).unwrap();
    apply(&store, 400, incr("dev-2", "a", 1)).unwrap();
    assert_eq!(count(&store).as_deref(), Some("7"));

    // Twice in one storage batch: once.
    let twice: Vec<Command> = (0..2)
        .map(|i| Command {
            ts: CommitTs::new(500 + i, 0),
            op: Op::Once {
                key: IdemKey::new("dev-3".into(), "x".into()).unwrap(),
                op: Box::new(Op::Kv(KvWrite::Put(put_req("p", "v")))),
            },
        })
        .collect();
    let answers = store
        .apply_batch(&twice.iter().collect::<Vec<_>>(), Vec::new())
        .unwrap();
    assert_eq!(answers[0], answers[1]);
    assert_eq!(store.history(b"p", 1, None, 10, None).unwrap().len(), 1);
}

#[test]
fn a_refusal_is_remembered_too_and_the_window_ends() {
    let store = mem_store();
    put(&store, 100, "k", "taken");
    let nx = |id: &str| Op::Once {
        key: IdemKey::new("dev".into(), Bytes::from(id.to_string())).unwrap(),
        op: Box::new(Op::Kv(KvWrite::Put({
            let mut p = put_req("k", "mine");
            p.condition = WriteCondition::IfVersion(0);
            p
        }))),
    };
    let refused = apply(&store, 200, nx("1"));
    assert!(matches!(refused, Err(FirnError::Conflict { .. })));
    // Opened again over the same storage (a restart): it still remembers.
    let store = firn_store::VersionedStore::open(store.backend().clone()).unwrap();
    apply(
        &store,
        300,
        Op::Kv(KvWrite::Delete {
            keys: vec![key("k")],
        }),
    )
    .unwrap();
    // The key's first answer stands, though the write would apply now.
    assert_eq!(apply(&store, 400, nx("1")), refused);
    assert_eq!(
        value_at(&store, "k", firn_model::ReadAt::Latest),
        None,
        "a remembered refusal wrote"
    );
    // Past the window (a later write forgets it), the key is new again.
    apply(&store, 500 + IDEM_WINDOW_US, incr("other", "z", 1)).unwrap();
    assert!(matches!(
        apply(&store, 600 + IDEM_WINDOW_US, nx("1")),
        Ok(Response::Written(_))
    ));
    assert_eq!(
        value_at(&store, "k", firn_model::ReadAt::Latest).as_deref(),
        Some("mine")
    );
    // The same key with another request: refused, nothing applied, the first answer kept.
    let mut other = IdemKey::new("dev".into(), "1".into()).unwrap();
    other.request = 7;
    let reused = apply(
        &store,
        700 + IDEM_WINDOW_US,
        Op::Once {
            key: other,
            op: Box::new(Op::Kv(KvWrite::Delete {
                keys: vec![key("k")],
            })),
        },
    );
    assert!(
        matches!(&reused, Err(FirnError::BadArgument(m)) if m.contains("another request")),
        "{reused:?}"
    );
    assert_eq!(
        value_at(&store, "k", firn_model::ReadAt::Latest).as_deref(),
        Some("mine")
    );
    // An empty or oversized part of a key is refused.
    assert!(IdemKey::new("".into(), "x".into()).is_err());
    assert!(IdemKey::new("p".into(), Bytes::from(vec![b'x'; 257])).is_err());
}
