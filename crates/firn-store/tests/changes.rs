//! A prefix's changes after a position: the same versions, in the same order, as a replay of
//! the whole prefix filtered by hand — however the writes, the position and the bound fall.

use firn_model::{CommitTs, KeyRange, KvWrite, WatchFrom};
use firn_store::{ChangePosition, Op, VersionedStore};
use proptest::prelude::*;

mod store_support;
use store_support::*;

/// What `changes` must answer, computed from the full replay.
fn expected(
    store: &VersionedStore,
    prefix: &str,
    after: &ChangePosition,
    through: CommitTs,
    limit: usize,
) -> Vec<ChangePosition> {
    let all = store
        .replay(
            &KeyRange::Prefix(bytes::Bytes::copy_from_slice(prefix.as_bytes())),
            WatchFrom::Time(CommitTs::default()),
        )
        .unwrap();
    let mut want: Vec<ChangePosition> = all
        .iter()
        .map(ChangePosition::of)
        .filter(|p| p > after && p.commit_ts <= through)
        .collect();
    want.sort();
    want.truncate(limit);
    want
}

fn positions(
    store: &VersionedStore,
    prefix: &str,
    after: &ChangePosition,
    through: CommitTs,
    limit: usize,
) -> Vec<ChangePosition> {
    store
        .changes(prefix.as_bytes(), after, through, limit)
        .unwrap()
        .iter()
        .map(ChangePosition::of)
        .collect()
}

#[test]
fn changes_come_in_commit_order_after_the_position_and_through_the_bound() {
    let store = mem_store();
    put(&store, 10, "s/a", "1");
    put(&store, 20, "s/b", "1");
    put(&store, 30, "s/a", "2");
    put(&store, 35, "other", "x");
    apply(
        &store,
        40,
        Op::Kv(KvWrite::Delete {
            keys: vec![key("s/b")],
        }),
    )
    .unwrap();
    put(&store, 50, "s/c", "1");

    let from_start = positions(
        &store,
        "s/",
        &ChangePosition::default(),
        CommitTs::new(100, 0),
        100,
    );
    let seen: Vec<(String, u64)> = from_start
        .iter()
        .map(|p| (String::from_utf8(p.key.clone()).unwrap(), p.version))
        .collect();
    assert_eq!(
        seen,
        [("s/a", 1), ("s/b", 1), ("s/a", 2), ("s/b", 2), ("s/c", 1)]
            .map(|(k, v)| (k.to_string(), v))
    );
    // After the second change, through 40: the third and the delete.
    let after = from_start[1].clone();
    let some = positions(&store, "s/", &after, CommitTs::new(40, 0), 100);
    assert_eq!(some, from_start[2..4].to_vec());
    // A limit keeps the first ones.
    assert_eq!(
        positions(&store, "s/", &after, CommitTs::new(100, 0), 1),
        from_start[2..3].to_vec()
    );
    // Nothing after the last.
    assert!(positions(&store, "s/", &from_start[4], CommitTs::new(100, 0), 100).is_empty());

    // Two keys written at one stamp: after the first, the second is still to come.
    let items = ["s/d", "s/e"].map(|k| (key(k), bytes::Bytes::from_static(b"1")));
    apply(
        &store,
        60,
        Op::Kv(KvWrite::MSet {
            items: items.to_vec(),
        }),
    )
    .unwrap();
    let both = positions(&store, "s/", &from_start[4], CommitTs::new(100, 0), 100);
    assert_eq!(both.len(), 2);
    assert_eq!(both[0].commit_ts, both[1].commit_ts);
    let second = positions(&store, "s/", &both[0], CommitTs::new(100, 0), 100);
    assert_eq!(second, both[1..].to_vec());
}

#[derive(Clone, Debug)]
enum Step {
    Put(u8),
    Delete(u8),
    /// One command writing several keys at one stamp.
    PutMany(Vec<u8>),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u8..6).prop_map(Step::Put),
        1 => (0u8..6).prop_map(Step::Delete),
        1 => proptest::collection::vec(0u8..6, 1..4).prop_map(Step::PutMany),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn changes_equal_the_filtered_replay(
        steps in proptest::collection::vec(step(), 1..60),
        after_at in 0usize..70,
        through_at in 0u64..70,
        limit in 1usize..20,
    ) {
        let store = mem_store();
        // Keys 0..4 under the prefix, 4 and 5 beside it.
        let name = |k: u8| if k < 4 { format!("p/{k}") } else { format!("q/{k}") };
        for (i, s) in steps.iter().enumerate() {
            let at = 10 * (i as u64 + 1);
            let op = match s {
                Step::Put(k) => KvWrite::Put(put_req(&name(*k), &i.to_string())),
                Step::Delete(k) => KvWrite::Delete { keys: vec![key(&name(*k))] },
                Step::PutMany(ks) => {
                    let mut ks = ks.clone();
                    ks.sort();
                    ks.dedup();
                    KvWrite::MSet {
                        items: ks.iter().map(|k| (key(&name(*k)), bytes::Bytes::from(i.to_string()))).collect(),
                    }
                }
            };
            apply(&store, at, Op::Kv(op)).unwrap();
        }
        let all = expected(&store, "p/", &ChangePosition::default(), CommitTs::new(u64::MAX, 0), usize::MAX);
        // A position that is a change, or none yet.
        let after = all.get(after_at % (all.len() + 1)).cloned().unwrap_or_default();
        let through = CommitTs::new(10 * through_at, 0);
        prop_assert_eq!(
            positions(&store, "p/", &after, through, limit),
            expected(&store, "p/", &after, through, limit)
        );
    }
}

#[test]
fn a_position_reads_back_from_a_trigger_cursor_as_stored() {
    // A trigger's cursor key holds a position as postcard writes it: (wall µs, logical, key,
    // version), field after field — as cursors written before the type had a name.
    let stored = postcard::to_allocvec(&(1_700_000u64, 3u32, b"s/a".to_vec(), 7u64)).unwrap();
    let read: ChangePosition = postcard::from_bytes(&stored).unwrap();
    assert_eq!(
        read,
        ChangePosition {
            commit_ts: CommitTs::new(1_700_000, 3),
            key: b"s/a".to_vec(),
            version: 7,
        }
    );
    assert_eq!(postcard::to_allocvec(&read).unwrap(), stored);
}
