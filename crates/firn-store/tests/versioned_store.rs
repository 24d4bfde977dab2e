//! Behaviour of the versioned state machine, on both backends.

use firn_model::KvWrite;
use firn_store::SystemOp;
use std::sync::Arc;

use bytes::Bytes;
use firn_model::{
    CommitTs, Durability, FirnError, KeyRange, KeyspaceSpec, ReadAt, Response, TruncateBefore,
    WatchFrom, WriteCondition,
};
use firn_store::{Command, FjallBackend, MemoryBackend, Op, StorageBackend, VersionedStore};
use proptest::prelude::*;

mod store_support;
use store_support::*;

#[test]
fn each_put_makes_the_next_version_with_a_growing_commit_ts() {
    let store = mem_store();
    let a = put(&store, 100, "k", "a");
    let b = put(&store, 100, "k", "b"); // same proposal time: apply raises it
    let c = put(&store, 50, "k", "c"); // an older proposal time: raised too
    assert_eq!((a.version, b.version, c.version), (1, 2, 3));
    assert!(a.commit_ts < b.commit_ts && b.commit_ts < c.commit_ts);
    assert_eq!(b.commit_ts, CommitTs::new(100, 1));
    assert_eq!(value_at(&store, "k", ReadAt::Latest).as_deref(), Some("c"));
    assert_eq!(
        value_at(&store, "k", ReadAt::Version(1)).as_deref(),
        Some("a")
    );
    assert_eq!(
        value_at(&store, "k", ReadAt::AsOf(a.commit_ts)).as_deref(),
        Some("a")
    );
    assert_eq!(
        value_at(&store, "k", ReadAt::AsOf(CommitTs::new(99, 0))),
        None
    );
}

#[test]
fn cput_with_stale_version_conflicts_and_writes_nothing() {
    let store = mem_store();
    put(&store, 1, "k", "a");
    put(&store, 2, "k", "b");
    let mut req = put_req("k", "stale");
    req.condition = WriteCondition::IfVersion(1);
    let err = apply(&store, 3, Op::Kv(KvWrite::Put(req))).unwrap_err();
    assert_eq!(err, FirnError::Conflict { current: 2 });
    assert_eq!(value_at(&store, "k", ReadAt::Latest).as_deref(), Some("b"));
    assert_eq!(store.history(b"k", 1, None, 100, None).unwrap().len(), 2);

    let mut req = put_req("k", "fresh");
    req.condition = WriteCondition::IfVersion(2);
    apply(&store, 4, Op::Kv(KvWrite::Put(req))).unwrap();
    assert_eq!(
        value_at(&store, "k", ReadAt::Latest).as_deref(),
        Some("fresh")
    );

    let mut absent = put_req("new", "x");
    absent.condition = WriteCondition::IfVersion(0);
    apply(&store, 5, Op::Kv(KvWrite::Put(absent.clone()))).unwrap();
    assert_eq!(
        apply(&store, 6, Op::Kv(KvWrite::Put(absent))).unwrap_err(),
        FirnError::Conflict { current: 1 }
    );
}

#[test]
fn delete_writes_a_tombstone_version_that_history_shows() {
    let store = mem_store();
    put(&store, 1, "k", "a");
    let Response::Written(w) = apply(
        &store,
        2,
        Op::Kv(KvWrite::Delete {
            keys: vec![key("k"), key("absent")],
        }),
    )
    .unwrap() else {
        panic!()
    };
    assert!(w[0].existed && !w[1].existed);
    assert_eq!(w[0].version, 2);
    assert_eq!(value_at(&store, "k", ReadAt::Latest), None);
    assert_eq!(store.live_keys(), 0);
    let history = store.history(b"k", 1, None, 10, None).unwrap();
    assert_eq!(history.len(), 2);
    assert!(history[1].deleted && !history[0].deleted);
    // A deleted key counts as absent for if_version 0.
    let mut req = put_req("k", "again");
    req.condition = WriteCondition::IfVersion(0);
    let Response::Written(w) = apply(&store, 3, Op::Kv(KvWrite::Put(req))).unwrap() else {
        panic!()
    };
    assert_eq!(w[0].version, 3);
}

#[test]
fn history_as_of_t_ends_at_the_version_a_read_at_t_sees() {
    let store = mem_store();
    for (wall, v) in [(10, "a"), (20, "b"), (30, "c")] {
        put(&store, wall, "k", v);
    }
    let versions = |as_of: Option<CommitTs>| -> Vec<u64> {
        store
            .history(b"k", 1, None, 10, as_of)
            .unwrap()
            .iter()
            .map(|i| i.version)
            .collect()
    };
    assert_eq!(versions(None), [1, 2, 3]);
    assert_eq!(versions(Some(CommitTs::new(25, 0))), [1, 2]);
    assert_eq!(versions(Some(CommitTs::new(20, 0))), [1, 2]);
    assert_eq!(versions(Some(CommitTs::new(9, 0))), Vec::<u64>::new());
    // TO still bounds it.
    assert_eq!(
        store
            .history(b"k", 1, Some(1), 10, Some(CommitTs::new(99, 0)))
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn event_time_reads_pick_the_greatest_event_time_not_after_t() {
    let store = mem_store();
    for (wall, ev, v) in [
        (1, 300, "late-sensor"),
        (2, 100, "early"),
        (3, 200, "middle"),
    ] {
        let mut req = put_req("s", v);
        req.event_time_us = Some(ev);
        apply(&store, wall, Op::Kv(KvWrite::Put(req))).unwrap();
    }
    assert_eq!(
        value_at(&store, "s", ReadAt::EventTime(250)).as_deref(),
        Some("middle")
    );
    assert_eq!(
        value_at(&store, "s", ReadAt::EventTime(300)).as_deref(),
        Some("late-sensor")
    );
    assert_eq!(value_at(&store, "s", ReadAt::EventTime(99)), None);
}

#[test]
fn replay_of_a_prefix_is_in_commit_order_across_keys() {
    let store = mem_store();
    put(&store, 1, "p/b", "1");
    put(&store, 2, "p/a", "2");
    put(&store, 3, "p/b", "3");
    put(&store, 4, "q", "not under the prefix");
    let replay = store
        .replay(&KeyRange::Prefix("p/".into()), WatchFrom::Version(1))
        .unwrap();
    let order: Vec<_> = replay
        .iter()
        .map(|e| e.info.value.clone().unwrap())
        .collect();
    assert_eq!(order, vec!["1", "2", "3"]);
    let from_time = store
        .replay(
            &KeyRange::Prefix("p/".into()),
            WatchFrom::Time(CommitTs::new(2, 0)),
        )
        .unwrap();
    assert_eq!(from_time.len(), 2);
}

#[test]
fn scan_pages_by_cursor_and_filters_by_pattern_and_time() {
    let store = mem_store();
    for i in 0..10 {
        put(&store, 10 + i, &format!("user:{i}"), "x");
    }
    put(&store, 30, "zzz", "x");
    let page = store.scan(b"user:", None, 4, None, ReadAt::Latest).unwrap();
    assert_eq!(page.keys.len(), 4);
    let rest = store
        .scan(
            b"user:",
            page.next_cursor.as_deref(),
            100,
            None,
            ReadAt::Latest,
        )
        .unwrap();
    assert_eq!(rest.keys.len(), 6);
    assert!(rest.next_cursor.is_none());
    let matched = store
        .scan(b"", None, 100, Some(b"user:[1-3]"), ReadAt::Latest)
        .unwrap();
    assert_eq!(matched.keys.len(), 3);
    // A deleted key is not listed, but the page says it looked at its tombstone.
    let Response::Written(gone) = apply(
        &store,
        40,
        Op::Kv(KvWrite::Delete {
            keys: vec![key("user:9")],
        }),
    )
    .unwrap() else {
        panic!()
    };
    let after = store
        .scan(b"user:", None, 100, None, ReadAt::Latest)
        .unwrap();
    assert_eq!(after.keys.len(), 9);
    assert_eq!(after.seen_through, Some(gone[0].commit_ts));
    let early = store
        .scan(
            b"user:",
            None,
            100,
            None,
            ReadAt::AsOf(CommitTs::end_of_micros(12)),
        )
        .unwrap();
    assert_eq!(early.keys.len(), 3);
}

#[test]
fn fjall_backend_keeps_versions_and_bookkeeping_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let backend: Arc<dyn StorageBackend> =
            Arc::new(FjallBackend::open_path(dir.path()).unwrap());
        let store = VersionedStore::open(backend.clone()).unwrap();
        put(&store, 1, "k", "a");
        put(&store, 2, "k", "b");
        store
            .apply(
                &Command {
                    ts: CommitTs::new(3, 0),
                    op: Op::Kv(KvWrite::Delete {
                        keys: vec![key("k")],
                    }),
                },
                vec![(b"applied".to_vec(), b"7".to_vec())],
            )
            .unwrap();
        backend.persist().unwrap();
    }
    let backend: Arc<dyn StorageBackend> = Arc::new(FjallBackend::open_path(dir.path()).unwrap());
    let store = VersionedStore::open(backend).unwrap();
    assert_eq!(store.history(b"k", 1, None, 10, None).unwrap().len(), 3);
    assert_eq!(
        store.system_get(b"applied").unwrap().as_deref(),
        Some(&b"7"[..])
    );
    assert_eq!(store.last_commit_ts(), CommitTs::new(3, 0));
    assert_eq!(put(&store, 1, "k", "c").version, 4);
}

#[test]
fn dump_and_load_reproduce_the_state() {
    let a = mem_store();
    put(&a, 1, "k", "a");
    put(&a, 2, "j", "b");
    let b = mem_store();
    b.backend().load(a.backend().dump().unwrap()).unwrap();
    b.reload().unwrap();
    assert_eq!(value_at(&b, "j", ReadAt::Latest).as_deref(), Some("b"));
    assert_eq!(b.live_keys(), 2);
}

/// Restoring a snapshot replaces a key's history: the next write continues the snapshot's,
/// not the one the store held before (nothing apply remembers outlives the restore).
#[test]
fn a_restored_snapshot_replaces_what_apply_remembers() {
    let a = mem_store();
    put(&a, 1, "k", "a1");
    let b = mem_store();
    for i in 0..3 {
        put(&b, 1 + i, "k", "b");
    }
    b.backend().load(a.backend().dump().unwrap()).unwrap();
    b.reload().unwrap();
    let next = put(&b, 10, "k", "after");
    assert_eq!(next.version, 2, "the snapshot's k is at version 1");
    assert_eq!(value_at(&b, "k", ReadAt::Version(1)).as_deref(), Some("a1"));
}

proptest! {
    /// Against a plain model (a list of (commit_ts, value) per key), every as-of read agrees.
    #[test]
    fn as_of_reads_agree_with_a_simple_model(ops in proptest::collection::vec((0u8..3, 0u64..50, proptest::option::of(0u8..5)), 1..60)) {
        let store = mem_store();
        let mut model: Vec<(u8, CommitTs, Option<u8>)> = Vec::new();
        for (k, wall, value) in ops {
            let name = format!("k{k}");
            let op = match value {
                Some(v) => Op::Kv(KvWrite::Put(put_req(&name, &v.to_string()))),
                None => Op::Kv(KvWrite::Delete { keys: vec![key(&name)] }),
            };
            let resp = apply(&store, wall, op).unwrap();
            let Response::Written(w) = resp else { panic!() };
            if value.is_some() || w[0].existed {
                model.push((k, w[0].commit_ts, value));
            }
        }
        let last = store.last_commit_ts();
        for k in 0..3u8 {
            for probe in 0..=last.wall_us + 1 {
                let t = CommitTs::end_of_micros(probe);
                let expected = model.iter().rev().find(|(mk, ts, _)| *mk == k && *ts <= t).and_then(|(_, _, v)| *v);
                let got = value_at(&store, &format!("k{k}"), ReadAt::AsOf(t));
                prop_assert_eq!(got, expected.map(|v| v.to_string()));
            }
        }
    }

    /// A long history, truncated below some version: a read at any time finds the version
    /// a full scan would (the search gallops and bisects), or says the answer was truncated.
    #[test]
    fn as_of_search_over_long_truncated_histories(
        gaps in proptest::collection::vec(1u64..4, 1..150),
        cut in 0usize..150,
    ) {
        let store = mem_store();
        let mut stamps = Vec::new();
        let mut wall = 0;
        for (i, gap) in gaps.iter().enumerate() {
            wall += gap;
            stamps.push(put(&store, wall, "k", &format!("v{}", i + 1)).commit_ts);
        }
        let before = (cut % (stamps.len() + 1)) as u64;
        if before > 1 {
            apply(&store, wall + 1, Op::Kv(KvWrite::Truncate {
                target: KeyRange::Key(key("k")),
                before: TruncateBefore::Version(before),
            })).unwrap();
        }
        let oldest = before.max(1);
        // Probe exactly at each stamp and just after it.
        let probes = (0..=wall + 1).flat_map(|w| [CommitTs::new(w, 0), CommitTs::end_of_micros(w)]);
        for t in probes {
            let expected = (oldest..=stamps.len() as u64)
                .rev()
                .find(|v| stamps[*v as usize - 1] <= t);
            match store.get(b"k", ReadAt::AsOf(t)) {
                Ok(got) => {
                    prop_assert_eq!(got.map(|i| i.version), expected);
                    prop_assert!(expected.is_some() || oldest == 1);
                }
                Err(FirnError::Compacted { oldest: o }) => {
                    prop_assert_eq!((expected, o), (None, oldest));
                }
                Err(e) => prop_assert!(false, "{e}"),
            }
        }
    }
}

proptest! {
    /// Whatever ran before — bulk deletes, FLUSHALL, refused commands in the same batch, a
    /// reload — a write's version is the one after the newest version in storage (what
    /// anything apply remembers between commands must not get wrong).
    #[test]
    fn a_writes_version_follows_the_stored_meta_whatever_came_before(
        steps in proptest::collection::vec((0u8..6, 0u8..3, 1u64..4), 1..80),
    ) {
        let store = mem_store();
        let stored_latest = |k: &str| store.meta(k.as_bytes()).unwrap().map_or(0, |m| m.latest);
        for (i, (kind, k, n)) in steps.into_iter().enumerate() {
            let (k, wall) = (format!("k{k}"), i as u64 + 1);
            let before = stored_latest(&k);
            let cmd = |op: Op| Command { ts: CommitTs::new(wall, 0), op };
            let written = match kind {
                0 => Some(apply(&store, wall, Op::Kv(KvWrite::Put(put_req(&k, "v")))).unwrap()),
                1 => Some(apply(&store, wall, Op::Kv(KvWrite::Delete { keys: vec![key(&k)] })).unwrap()),
                2 => {
                    let before = TruncateBefore::Version(n);
                    apply(&store, wall, Op::Kv(KvWrite::Truncate { target: KeyRange::Key(key(&k)), before })).unwrap();
                    None
                }
                3 => {
                    apply(&store, wall, Op::Kv(KvWrite::FlushAll)).unwrap();
                    None
                }
                4 => {
                    // A refused put, then one that writes, in one storage batch.
                    let mut stale = put_req(&k, "stale");
                    stale.condition = WriteCondition::IfVersion(before + n);
                    let cmds = [cmd(Op::Kv(KvWrite::Put(stale))), cmd(Op::Kv(KvWrite::Put(put_req(&k, "v"))))];
                    let refs: Vec<&Command> = cmds.iter().collect();
                    let mut results = store.apply_batch(&refs, Vec::new()).unwrap();
                    prop_assert!(results[0].is_err());
                    Some(results.remove(1).unwrap())
                }
                _ => {
                    store.reload().unwrap();
                    None
                }
            };
            if let Some(Response::Written(w)) = written {
                if w[0].existed || kind != 1 {
                    prop_assert_eq!(w[0].version, before + 1, "step {}: {:?} on {}", i, kind, k);
                }
                prop_assert_eq!(stored_latest(&k), w[0].version);
            }
        }
    }
}

#[test]
fn a_batch_of_commands_applies_in_order_and_a_rejected_one_changes_nothing() {
    let store = mem_store();
    let cmd = |wall: u64, v: &str, cond: WriteCondition| {
        let mut p = put_req("k", v);
        p.condition = cond;
        Command {
            ts: CommitTs::new(wall, 0),
            op: Op::Kv(KvWrite::Put(p)),
        }
    };
    let cmds = [
        cmd(10, "a", WriteCondition::IfVersion(0)),
        cmd(10, "b", WriteCondition::IfVersion(1)), // sees the first put inside the batch
        cmd(10, "stale", WriteCondition::IfVersion(1)),
        cmd(9, "c", WriteCondition::Always),
        Command {
            ts: CommitTs::new(9, 0),
            op: Op::Kv(KvWrite::Delete {
                keys: vec![key("k"), key("never")],
            }),
        },
    ];
    let refs: Vec<&Command> = cmds.iter().collect();
    let results = store
        .apply_batch(&refs, vec![(b"applied".to_vec(), b"5".to_vec())])
        .unwrap();
    assert_eq!(results[2], Err(FirnError::Conflict { current: 2 }));
    let versions: Vec<_> = results
        .iter()
        .filter_map(|r| match r {
            Ok(Response::Written(w)) => Some(w[0].version),
            _ => None,
        })
        .collect();
    assert_eq!(versions, vec![1, 2, 3, 4]);
    let history = store.history(b"k", 1, None, 10, None).unwrap();
    let values: Vec<_> = history.iter().map(|i| i.value.clone()).collect();
    assert_eq!(
        values,
        vec![Some("a".into()), Some("b".into()), Some("c".into()), None]
    );
    assert!(history.windows(2).all(|w| w[0].commit_ts < w[1].commit_ts));
    assert_eq!(store.live_keys(), 0);
    assert_eq!(
        store.system_get(b"applied").unwrap().as_deref(),
        Some(&b"5"[..])
    );
}

#[test]
fn a_store_serves_only_the_keys_of_its_lane_and_a_misrouted_write_changes_nothing() {
    let store =
        VersionedStore::open_in_lane(Arc::new(MemoryBackend::default()), Durability::Memory)
            .unwrap();
    let memory = KeyspaceSpec {
        prefix: "m/".into(),
        durability: Durability::Memory,
        ..KeyspaceSpec::default_keyspace()
    };
    apply(&store, 1, Op::System(SystemOp::KeyspaceCreate(memory))).unwrap();
    let w = put(&store, 10, "m/a", "1");
    assert_eq!(w.durability, Durability::Memory);

    // A key of the default (disk) keyspace was routed here by an old layout: refused.
    let refused = apply(&store, 20, Op::Kv(KvWrite::Put(put_req("d/a", "x"))));
    assert!(
        matches!(refused, Err(FirnError::TryAgain(_))),
        "{refused:?}"
    );
    assert!(matches!(
        store.get(b"d/a", ReadAt::Latest),
        Err(FirnError::TryAgain(_))
    ));
    // One misrouted key in an MSET refuses the whole of it, before anything is written.
    let mset = Op::Kv(KvWrite::MSet {
        items: vec![
            (key("m/b"), Bytes::from_static(b"2")),
            (key("d/b"), Bytes::from_static(b"2")),
        ],
    });
    assert!(matches!(
        apply(&store, 30, mset),
        Err(FirnError::TryAgain(_))
    ));
    assert_eq!(value_at(&store, "m/b", ReadAt::Latest), None);
    assert_eq!(
        value_at(&store, "m/a", ReadAt::Latest).as_deref(),
        Some("1")
    );
}
