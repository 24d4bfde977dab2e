//! The transaction checker accepts serial histories and rejects each anomaly it names: lost
//! updates, write skew, read skew (a transaction seen in part), dirty and aborted reads, a
//! stale read after a commit, lost and partly applied writes.

use firn_check::txn::{Anomaly, CycleKind, Edge, Mop, Status, Txn, VersionOrder, check};

fn r(key: &str, value: Option<u64>) -> Mop {
    Mop::Read {
        key: key.into(),
        value,
    }
}

fn w(key: &str, value: u64) -> Mop {
    Mop::Write {
        key: key.into(),
        value,
    }
}

/// Transactions one after another in real time (each invoked after the last completed),
/// all committed.
fn serial(mops: Vec<Vec<Mop>>) -> Vec<Txn> {
    mops.into_iter()
        .enumerate()
        .map(|(i, mops)| Txn {
            client: i,
            invoked_at: 10 * i as u64,
            completed_at: 10 * i as u64 + 5,
            status: Status::Committed,
            mops,
        })
        .collect()
}

/// The same transactions, all concurrent.
fn concurrent(mops: Vec<Vec<Mop>>) -> Vec<Txn> {
    let mut txns = serial(mops);
    for t in &mut txns {
        (t.invoked_at, t.completed_at) = (0, 100);
    }
    txns
}

fn order(keys: &[(&str, &[u64])]) -> VersionOrder {
    keys.iter()
        .map(|(k, vs)| (k.to_string(), vs.to_vec()))
        .collect()
}

fn cycle_kind(result: Result<firn_check::txn::Summary, Vec<Anomaly>>) -> CycleKind {
    match result.expect_err("the history was accepted").as_slice() {
        [Anomaly::Cycle { kind, .. }] => *kind,
        other => panic!("not one cycle: {other:?}"),
    }
}

#[test]
fn a_serial_history_is_accepted() {
    let txns = serial(vec![
        vec![r("x", None), w("x", 1), w("y", 1)],
        vec![r("x", Some(1)), r("y", Some(1)), w("y", 2)],
        vec![r("y", Some(2)), w("x", 3), r("x", Some(3))],
    ]);
    let summary = check(&txns, &order(&[("x", &[1, 3]), ("y", &[1, 2])])).unwrap();
    assert_eq!(summary.committed, 3);
}

#[test]
fn a_lost_update_is_a_g2_cycle() {
    // Both read x's first version and wrote over it.
    let txns = concurrent(vec![
        vec![r("x", None), w("x", 1)],
        vec![r("x", None), w("x", 2)],
    ]);
    assert_eq!(
        cycle_kind(check(&txns, &order(&[("x", &[1, 2])]))),
        CycleKind::G2
    );
}

#[test]
fn write_skew_is_a_g2_cycle() {
    // Each read both keys as they were and wrote one of them.
    let txns = concurrent(vec![
        vec![r("x", None), r("y", None), w("x", 1)],
        vec![r("x", None), r("y", None), w("y", 1)],
    ]);
    assert_eq!(
        cycle_kind(check(&txns, &order(&[("x", &[1]), ("y", &[1])]))),
        CycleKind::G2
    );
}

#[test]
fn a_transaction_seen_in_part_is_a_cycle() {
    // T0 wrote x and y; T1 saw its x and not its y.
    let txns = concurrent(vec![
        vec![w("x", 1), w("y", 1)],
        vec![r("x", Some(1)), r("y", None)],
    ]);
    let result = check(&txns, &order(&[("x", &[1]), ("y", &[1])]));
    let Err(anomalies) = result else {
        panic!("a fractured read was accepted")
    };
    assert!(
        matches!(&anomalies[..], [Anomaly::Cycle { kind: CycleKind::G2, steps }]
            if steps.iter().any(|(_, e)| *e == Edge::RW) && steps.iter().any(|(_, e)| *e == Edge::WR)),
        "{anomalies:?}"
    );
}

#[test]
fn reads_of_aborted_and_unwritten_values_are_refused() {
    let mut txns = concurrent(vec![
        vec![w("x", 1)],
        vec![r("x", Some(1))],
        vec![r("x", Some(9))],
    ]);
    txns[0].status = Status::Aborted;
    let anomalies = check(&txns, &order(&[("x", &[])])).unwrap_err();
    assert!(anomalies.contains(&Anomaly::AbortedRead {
        reader: 1,
        writer: 0,
        key: "x".into(),
        value: 1
    }));
    assert!(anomalies.contains(&Anomaly::UnknownRead {
        reader: 2,
        key: "x".into(),
        value: 9
    }));
}

#[test]
fn a_stale_read_after_a_commit_is_a_real_time_cycle() {
    // T0 committed x=1 before T1 began; T1 still read x as absent.
    let txns = serial(vec![vec![w("x", 1)], vec![r("x", None)]]);
    assert_eq!(
        cycle_kind(check(&txns, &order(&[("x", &[1])]))),
        CycleKind::RealTime
    );
    // Concurrent, the same reads are fine (T1 ordered first).
    let txns = concurrent(vec![vec![w("x", 1)], vec![r("x", None)]]);
    assert!(check(&txns, &order(&[("x", &[1])])).is_ok());
}

#[test]
fn circular_writes_are_g0_and_circular_reads_g1c() {
    // T0's x before T1's, T1's y before T0's.
    let txns = concurrent(vec![vec![w("x", 1), w("y", 1)], vec![w("x", 2), w("y", 2)]]);
    assert_eq!(
        cycle_kind(check(&txns, &order(&[("x", &[1, 2]), ("y", &[2, 1])]))),
        CycleKind::G0
    );
    // Each read the other's write.
    let txns = concurrent(vec![
        vec![w("x", 1), r("y", Some(1))],
        vec![w("y", 1), r("x", Some(1))],
    ]);
    assert_eq!(
        cycle_kind(check(&txns, &order(&[("x", &[1]), ("y", &[1])]))),
        CycleKind::G1c
    );
}

#[test]
fn lost_partial_and_unseen_own_writes_are_refused() {
    let mut txns = concurrent(vec![
        vec![w("x", 1)],
        vec![w("x", 2), w("y", 2)],
        vec![w("z", 3), r("z", None)],
        vec![w("x", 4)],
    ]);
    txns[1].status = Status::Unknown;
    txns[3].status = Status::Aborted;
    let anomalies = check(&txns, &order(&[("x", &[2, 4]), ("y", &[]), ("z", &[3])])).unwrap_err();
    for expected in [
        Anomaly::LostWrite {
            writer: 0,
            key: "x".into(),
            value: 1,
        },
        Anomaly::PartlyApplied { txn: 1 },
        Anomaly::OwnWriteUnseen {
            txn: 2,
            key: "z".into(),
        },
        Anomaly::AbortedWriteKept {
            writer: 3,
            key: "x".into(),
            value: 4,
        },
    ] {
        assert!(
            anomalies.contains(&expected),
            "{expected:?} not in {anomalies:?}"
        );
    }
}

#[test]
fn an_unknown_transaction_counts_when_its_writes_are_kept() {
    let mut txns = serial(vec![vec![w("x", 1)], vec![r("x", Some(1))]]);
    txns[0].status = Status::Unknown;
    // Its outcome came after its client gave up: the later read of it is no violation.
    assert_eq!(check(&txns, &order(&[("x", &[1])])).unwrap().committed, 2);
    // Not kept: never ran, and the read of it names a value no one committed.
    assert!(check(&txns, &order(&[("x", &[])])).is_err());
}
