//! Watermarks on one shard's store: a write at or below its keyspace's watermark is kept as
//! a correction or refused, the same on every replica because it is judged at apply from
//! the entry's stamp; advances are remembered with the stamp that reached them, and all of
//! it survives the store being opened again.

mod store_support;

use std::sync::Arc;

use firn_model::{
    CommitTs, FirnError, KeyspaceSpec, KvWrite, LatePolicy, Response, WatermarkPolicy,
};
use firn_store::{MemoryBackend, Op, SystemOp, VersionedStore, WatermarkOp};
use store_support::{apply, key, put_req};

fn put_at(
    store: &VersionedStore,
    wall: u64,
    k: &str,
    v: &str,
    event: u64,
) -> Result<Response, FirnError> {
    let mut put = put_req(k, v);
    put.event_time_us = Some(event);
    apply(store, wall, Op::Kv(KvWrite::Put(put)))
}

fn watermark(store: &VersionedStore, wall: u64, op: WatermarkOp) -> Result<Response, FirnError> {
    apply(store, wall, Op::System(SystemOp::Watermark(op)))
}

#[test]
fn late_writes_are_judged_at_apply_and_the_state_survives_a_reopen() {
    let backend = Arc::new(MemoryBackend::default());
    let store = VersionedStore::open(backend.clone()).unwrap();
    let spec = KeyspaceSpec {
        prefix: "s/".into(),
        ..KeyspaceSpec::default_keyspace()
    };
    apply(&store, 1, Op::System(SystemOp::KeyspaceCreate(spec))).unwrap();
    // No such keyspace: refused.
    let e = watermark(
        &store,
        2,
        WatermarkOp::Advance {
            prefix: "t/".into(),
            to_us: 5,
        },
    );
    assert!(matches!(e, Err(FirnError::KeyspaceNotFound(_))), "{e:?}");

    put_at(&store, 10, "s/a", "one", 100).unwrap();
    watermark(
        &store,
        20,
        WatermarkOp::Advance {
            prefix: "s/".into(),
            to_us: 200,
        },
    )
    .unwrap();
    // Backwards: refused at apply too.
    assert!(
        watermark(
            &store,
            21,
            WatermarkOp::Advance {
                prefix: "s/".into(),
                to_us: 150
            }
        )
        .is_err()
    );
    watermark(
        &store,
        30,
        WatermarkOp::Advance {
            prefix: "s/".into(),
            to_us: 300,
        },
    )
    .unwrap();
    // Late, kept: a correction.
    put_at(&store, 40, "s/a", "fix", 150).unwrap();
    // Another keyspace is not judged by this one's watermark.
    put_at(&store, 41, "other", "x", 1).unwrap();
    let corrections = store
        .corrections(key("s/a").as_bytes(), 1, None, 10, None)
        .unwrap();
    assert_eq!(
        corrections.iter().map(|v| v.version).collect::<Vec<_>>(),
        vec![2]
    );
    assert!(
        store
            .corrections(key("other").as_bytes(), 1, None, 10, None)
            .unwrap()
            .is_empty()
    );
    // As of before the correction, none.
    let before = store
        .corrections(
            key("s/a").as_bytes(),
            1,
            None,
            10,
            Some(CommitTs::new(39, u32::MAX)),
        )
        .unwrap();
    assert!(before.is_empty());

    // The first stamp an advance reached each event time.
    let info = store.watermark_info(b"s/a", true, Some(250)).unwrap();
    assert_eq!(info.prefix, "s/");
    assert_eq!(info.state.advanced_us, Some(300));
    assert_eq!(info.reached_at.map(|t| t.wall_us), Some(30));
    let info = store.watermark_info(b"s/", false, Some(120)).unwrap();
    assert_eq!(info.reached_at.map(|t| t.wall_us), Some(20));
    assert_eq!(
        store
            .watermark_info(b"s/", false, Some(301))
            .unwrap()
            .reached_at,
        None
    );

    // Refuse, and a lateness measured against the entry's stamp.
    let policy = WatermarkPolicy {
        lateness_us: Some(1_000),
        late: LatePolicy::Refuse,
    };
    watermark(
        &store,
        50,
        WatermarkOp::Policy {
            prefix: "s/".into(),
            policy,
        },
    )
    .unwrap();
    let e = put_at(&store, 5_000, "s/a", "too late", 3_999);
    assert!(
        matches!(
            e,
            Err(FirnError::Late {
                watermark_us: 4_000,
                ..
            })
        ),
        "{e:?}"
    );
    put_at(&store, 5_000, "s/a", "in time", 4_001).unwrap();
    assert_eq!(
        store
            .history(key("s/a").as_bytes(), 1, None, 10, None)
            .unwrap()
            .len(),
        3
    );

    // Opened again: the same state, the same judgement.
    drop(store);
    let store = VersionedStore::open(backend).unwrap();
    assert_eq!(store.watermark_state("s/").policy, policy);
    assert_eq!(store.watermark_state("s/").advanced_us, Some(300));
    assert!(matches!(
        put_at(&store, 6_000, "s/a", "late again", 250),
        Err(FirnError::Late { .. })
    ));
    let corrections = store
        .corrections(key("s/a").as_bytes(), 1, None, 10, None)
        .unwrap();
    assert_eq!(corrections.len(), 1);
    // Dropping the keyspace forgets its watermark.
    apply(
        &store,
        7_000,
        Op::System(SystemOp::KeyspaceDrop {
            prefix: "s/".into(),
        }),
    )
    .unwrap();
    assert_eq!(store.watermark_state("s/"), Default::default());
}
