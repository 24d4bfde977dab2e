//! Consumer groups in one shard's store: delivery, the pending list, acks, claims and
//! delivery counts follow Redis, with the entry's stamp as the only clock, so two replicas
//! applying the same entries hold the same groups.

use bytes::Bytes;
use firn_model::KvWrite;
use firn_model::{
    ClaimOptions, FirnError, GroupChange, GroupEntry, GroupOptions, GroupStart, LogSeq, Response,
};
use firn_store::LogOp;
use firn_store::backend::Table;
use firn_store::command::Op;

mod group_support;
use group_support::*;

#[test]
fn delivery_hands_each_entry_to_one_consumer_once_and_records_it_pending() {
    let s = store();
    for id in 1..=5 {
        add(&s, 100, id);
    }
    create(&s, 200, GroupStart::Id(LogSeq::ZERO)).unwrap();
    assert!(matches!(
        create(&s, 201, GroupStart::Last),
        Err(FirnError::BusyGroup)
    ));
    assert_eq!(deliver(&s, 300, "a", 2), ids(&[1, 2]));
    assert_eq!(deliver(&s, 301, "b", 10), ids(&[3, 4, 5]));
    assert_eq!(deliver(&s, 302, "a", 10), ids(&[]));
    add(&s, 400, 6);
    assert_eq!(deliver(&s, 401, "a", 10), ids(&[6]));

    let summary = s.pending_summary(&key(), b"g").unwrap();
    assert_eq!(summary.count, 6);
    assert_eq!(summary.first, Some(LogSeq::new(1, 0)));
    assert_eq!(summary.last, Some(LogSeq::new(6, 0)));
    assert_eq!(
        summary.consumers,
        vec![(Bytes::from("a"), 3), (Bytes::from("b"), 3)]
    );
    // Delivery time is the delivering entry's stamp: idle at 1300 ms is 1000 ms.
    let pending = s
        .pending(
            &key(),
            b"g",
            None,
            LogSeq::ZERO,
            LogSeq::MAX,
            10,
            Some(b"a"),
            1_300,
        )
        .unwrap();
    let seen: Vec<(LogSeq, u64, u64)> = pending
        .iter()
        .map(|p| (p.seq, p.idle_ms, p.deliveries))
        .collect();
    assert_eq!(
        seen,
        vec![
            (LogSeq::new(1, 0), 1_000, 1),
            (LogSeq::new(2, 0), 1_000, 1),
            (LogSeq::new(6, 0), 899, 1)
        ]
    );
}

#[test]
fn noack_delivers_without_pending_and_ack_drops_only_what_is_pending() {
    let s = store();
    add(&s, 100, 1);
    add(&s, 100, 2);
    create(&s, 200, GroupStart::Id(LogSeq::ZERO)).unwrap();
    let r = change(
        &s,
        300,
        GroupChange::Deliver {
            consumer: Bytes::from("a"),
            count: 1,
            noack: true,
        },
    )
    .unwrap();
    assert!(matches!(r, Response::GroupEntries { ref entries, .. } if entries.len() == 1));
    assert_eq!(s.pending_summary(&key(), b"g").unwrap().count, 0);
    assert_eq!(deliver(&s, 301, "a", 5), ids(&[2]));
    let acked = change(
        &s,
        302,
        GroupChange::Ack {
            ids: ids(&[1, 2, 2, 9]),
        },
    )
    .unwrap();
    assert_eq!(acked, Response::Count(1));
    assert_eq!(s.pending_summary(&key(), b"g").unwrap().count, 0);
}

#[test]
fn reading_own_pending_entries_counts_a_delivery_and_shows_deleted_entries_as_none() {
    let s = store();
    for id in 1..=3 {
        add(&s, 100, id);
    }
    create(&s, 200, GroupStart::Id(LogSeq::ZERO)).unwrap();
    deliver(&s, 300, "a", 3);
    apply(
        &s,
        310,
        Op::Log(LogOp::StreamDel {
            key: key(),
            ids: ids(&[2]),
        }),
    )
    .unwrap();
    let r = change(
        &s,
        400,
        GroupChange::Pending {
            consumer: Bytes::from("a"),
            after: LogSeq::ZERO,
            count: 10,
        },
    )
    .unwrap();
    let Response::GroupEntries { entries, .. } = r else {
        panic!("{r:?}")
    };
    let shown: Vec<(LogSeq, bool)> = entries
        .iter()
        .map(|GroupEntry { seq, record }| (*seq, record.is_some()))
        .collect();
    assert_eq!(
        shown,
        vec![
            (LogSeq::new(1, 0), true),
            (LogSeq::new(2, 0), false),
            (LogSeq::new(3, 0), true)
        ]
    );
    let pending = s
        .pending(&key(), b"g", None, LogSeq::ZERO, LogSeq::MAX, 10, None, 400)
        .unwrap();
    assert!(pending.iter().all(|p| p.deliveries == 2 && p.idle_ms == 0));
    // Another consumer's read of its own pending list shows nothing.
    let r = change(
        &s,
        401,
        GroupChange::Pending {
            consumer: Bytes::from("b"),
            after: LogSeq::ZERO,
            count: 10,
        },
    )
    .unwrap();
    assert!(matches!(r, Response::GroupEntries { ref entries, .. } if entries.is_empty()));
}

#[test]
fn claims_move_idle_entries_and_count_deliveries() {
    let s = store();
    for id in 1..=4 {
        add(&s, 100, id);
    }
    create(&s, 200, GroupStart::Id(LogSeq::ZERO)).unwrap();
    deliver(&s, 1_000, "a", 4);
    let claim = |ms, min_idle_ms, options| {
        change(
            &s,
            ms,
            GroupChange::Claim {
                consumer: Bytes::from("b"),
                min_idle_ms,
                ids: ids(&[1, 2]),
                options,
            },
        )
        .unwrap()
    };
    // Not idle long enough: nothing moves.
    let r = claim(1_500, 1_000, ClaimOptions::default());
    assert!(matches!(r, Response::GroupEntries { ref entries, .. } if entries.is_empty()));
    let r = claim(2_500, 1_000, ClaimOptions::default());
    assert!(matches!(r, Response::GroupEntries { ref entries, .. } if entries.len() == 2));
    let pending = s
        .pending(
            &key(),
            b"g",
            None,
            LogSeq::ZERO,
            LogSeq::MAX,
            10,
            Some(b"b"),
            2_500,
        )
        .unwrap();
    assert!(pending.iter().all(|p| p.deliveries == 2 && p.idle_ms == 0));
    // JUSTID leaves the count; RETRYCOUNT and IDLE set it and the idle time.
    let r = claim(
        2_600,
        0,
        ClaimOptions {
            just_id: true,
            retry_count: Some(7),
            idle_ms: Some(50),
            ..ClaimOptions::default()
        },
    );
    assert_eq!(r, Response::Ids(ids(&[1, 2])));
    let pending = s
        .pending(
            &key(),
            b"g",
            None,
            LogSeq::ZERO,
            LogSeq::MAX,
            10,
            Some(b"b"),
            2_600,
        )
        .unwrap();
    assert!(pending.iter().all(|p| p.deliveries == 7 && p.idle_ms == 50));

    // XAUTOCLAIM from 0 with COUNT 1: one entry, then the next start.
    let r = change(
        &s,
        5_000,
        GroupChange::AutoClaim {
            consumer: Bytes::from("c"),
            min_idle_ms: 1_000,
            start: LogSeq::ZERO,
            count: 1,
            just_id: false,
        },
    )
    .unwrap();
    let Response::AutoClaimed { next, entries, .. } = r else {
        panic!("{r:?}")
    };
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].seq, LogSeq::new(1, 0));
    assert_eq!(next, LogSeq::new(2, 0));
    // A deleted entry is dropped from the list and reported.
    apply(
        &s,
        5_010,
        Op::Log(LogOp::StreamDel {
            key: key(),
            ids: ids(&[3]),
        }),
    )
    .unwrap();
    let r = change(
        &s,
        6_000,
        GroupChange::AutoClaim {
            consumer: Bytes::from("c"),
            min_idle_ms: 0,
            start: next,
            count: 10,
            just_id: true,
        },
    )
    .unwrap();
    let Response::AutoClaimed {
        next,
        entries,
        deleted,
        ..
    } = r
    else {
        panic!("{r:?}")
    };
    assert_eq!(next, LogSeq::ZERO);
    assert_eq!(
        entries.iter().map(|e| e.seq).collect::<Vec<_>>(),
        ids(&[2, 4])
    );
    assert_eq!(deleted, ids(&[3]));
    assert_eq!(s.pending_summary(&key(), b"g").unwrap().count, 3);
}

#[test]
fn a_missing_stream_or_group_answers_redis_errors_and_flushall_drops_groups() {
    let s = store();
    assert!(matches!(
        create(&s, 100, GroupStart::Last),
        Err(FirnError::BadArgument(_))
    ));
    let r = change(
        &s,
        101,
        GroupChange::Deliver {
            consumer: Bytes::from("a"),
            count: 1,
            noack: false,
        },
    );
    assert_eq!(
        r.unwrap_err().to_string(),
        "No such key 's' or consumer group 'g' in XREADGROUP with GROUP option"
    );
    change(
        &s,
        102,
        GroupChange::Create {
            entries_read: None,
            start: GroupStart::Last,
            mkstream: true,
            options: GroupOptions::default(),
        },
    )
    .unwrap();
    assert_eq!(s.groups(&key()).unwrap().len(), 1);
    add(&s, 200, 1);
    deliver(&s, 201, "a", 1);
    apply(&s, 300, Op::Kv(KvWrite::FlushAll)).unwrap();
    for table in [Table::Groups, Table::GroupPending, Table::GroupConsumers] {
        let rows = s
            .backend()
            .range(
                table,
                std::ops::Bound::Unbounded,
                std::ops::Bound::Unbounded,
                false,
                10,
            )
            .unwrap();
        assert!(rows.is_empty(), "{table:?} after FLUSHALL");
    }
}

#[test]
fn two_replicas_applying_the_same_entries_hold_the_same_groups() {
    let run = || {
        let s = store();
        for id in 1..=6 {
            add(&s, 100, id);
        }
        create(&s, 200, GroupStart::Id(LogSeq::ZERO)).unwrap();
        deliver(&s, 300, "a", 3);
        deliver(&s, 400, "b", 3);
        change(&s, 500, GroupChange::Ack { ids: ids(&[2]) }).unwrap();
        change(
            &s,
            2_000,
            GroupChange::AutoClaim {
                consumer: Bytes::from("c"),
                min_idle_ms: 1_000,
                start: LogSeq::ZERO,
                count: 2,
                just_id: false,
            },
        )
        .unwrap();
        let dump = s.backend().dump().unwrap();
        dump.tables
            .into_iter()
            .filter(|(t, _)| {
                matches!(
                    t,
                    Table::Groups | Table::GroupPending | Table::GroupConsumers
                )
            })
            .collect::<Vec<_>>()
    };
    let (one, two) = (run(), run());
    assert!(one.iter().any(|(_, rows)| !rows.is_empty()));
    assert_eq!(one, two);
}
