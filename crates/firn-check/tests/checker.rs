//! The checker accepts linearizable histories and rejects the ones a stale read path, a lost
//! update or a reordered write produce.

use firn_check::register::{Register, RegisterOp as Op, RegisterOut as Out};
use firn_check::{Operation, Verdict, check};

fn op(
    client: usize,
    invoked_at: u64,
    completed_at: Option<u64>,
    op: Op,
    out: Option<Out>,
) -> Operation<Op, Out> {
    Operation {
        client,
        invoked_at,
        completed_at,
        op,
        out,
    }
}

fn put(v: &str) -> Op {
    Op::Put(v.into())
}

fn read(version: u64, v: Option<&str>) -> Option<Out> {
    Some(Out::Read {
        version,
        value: v.map(String::from),
    })
}

#[test]
fn sequential_history_is_linearizable() {
    let h = vec![
        op(0, 0, Some(1), put("a"), Some(Out::Written(1))),
        op(0, 2, Some(3), Op::Get, read(1, Some("a"))),
        op(
            0,
            4,
            Some(5),
            Op::CPut {
                if_version: 1,
                value: "b".into(),
            },
            Some(Out::Written(2)),
        ),
        op(
            0,
            6,
            Some(7),
            Op::CPut {
                if_version: 1,
                value: "c".into(),
            },
            Some(Out::Conflict(2)),
        ),
        op(0, 8, Some(9), Op::Get, read(2, Some("b"))),
    ];
    assert_eq!(check(&Register::default(), &h), Verdict::Linearizable);
}

#[test]
fn concurrent_reads_may_see_either_side_of_an_overlapping_write() {
    let h = vec![
        op(0, 0, Some(1), put("a"), Some(Out::Written(1))),
        op(1, 2, Some(10), put("b"), Some(Out::Written(2))),
        op(2, 3, Some(4), Op::Get, read(1, Some("a"))),
        op(3, 5, Some(6), Op::Get, read(2, Some("b"))),
    ];
    assert_eq!(check(&Register::default(), &h), Verdict::Linearizable);
}

#[test]
fn a_stale_read_after_an_acknowledged_write_is_rejected() {
    // The write of "b" completed at 3; a read invoked at 4 still sees "a": what a replica
    // that serves reads without a read index produces.
    let h = vec![
        op(0, 0, Some(1), put("a"), Some(Out::Written(1))),
        op(0, 2, Some(3), put("b"), Some(Out::Written(2))),
        op(1, 4, Some(5), Op::Get, read(1, Some("a"))),
    ];
    assert!(matches!(
        check(&Register::default(), &h),
        Verdict::NotLinearizable(_)
    ));
}

#[test]
fn a_read_going_back_in_time_is_rejected() {
    // Two reads during a slow write: once one saw the new value, a later one cannot see the
    // old one.
    let h = vec![
        op(0, 0, Some(1), put("a"), Some(Out::Written(1))),
        op(1, 2, Some(20), put("b"), Some(Out::Written(2))),
        op(2, 3, Some(4), Op::Get, read(2, Some("b"))),
        op(3, 5, Some(6), Op::Get, read(1, Some("a"))),
    ];
    assert!(matches!(
        check(&Register::default(), &h),
        Verdict::NotLinearizable(_)
    ));
}

#[test]
fn two_conditional_writes_cannot_both_win_the_same_version() {
    let h = vec![
        op(0, 0, Some(1), put("a"), Some(Out::Written(1))),
        op(
            1,
            2,
            Some(5),
            Op::CPut {
                if_version: 1,
                value: "x".into(),
            },
            Some(Out::Written(2)),
        ),
        op(
            2,
            3,
            Some(6),
            Op::CPut {
                if_version: 1,
                value: "y".into(),
            },
            Some(Out::Written(2)),
        ),
    ];
    assert!(matches!(
        check(&Register::default(), &h),
        Verdict::NotLinearizable(_)
    ));
}

#[test]
fn an_unknown_outcome_may_or_may_not_have_happened() {
    let took_effect = vec![
        op(0, 0, None, put("a"), None),
        op(1, 5, Some(6), Op::Get, read(1, Some("a"))),
    ];
    assert_eq!(
        check(&Register::default(), &took_effect),
        Verdict::Linearizable
    );
    let did_not = vec![
        op(0, 0, None, put("a"), None),
        op(1, 5, Some(6), Op::Get, read(0, None)),
    ];
    assert_eq!(check(&Register::default(), &did_not), Verdict::Linearizable);
    // But it cannot take effect before it was invoked.
    let too_early = vec![
        op(1, 0, Some(1), Op::Get, read(1, Some("a"))),
        op(0, 5, None, put("a"), None),
    ];
    assert!(matches!(
        check(&Register::default(), &too_early),
        Verdict::NotLinearizable(_)
    ));
}

mod generated {
    use super::*;
    use firn_check::Model;
    use proptest::prelude::*;

    /// Operations with random overlapping intervals whose answers come from running the
    /// register in the order of points chosen inside each interval: linearizable by
    /// construction, so the checker must accept every one.
    fn linearizable_history() -> impl Strategy<Value = Vec<Operation<Op, Out>>> {
        proptest::collection::vec((0u64..100, 1u64..30, 0u64..1000, 0u8..3, 0u64..4), 1..14)
            .prop_map(|specs| {
                let mut ops: Vec<(u64, Operation<Op, Out>)> = specs
                    .into_iter()
                    .enumerate()
                    .map(|(i, (start, len, point, kind, ver))| {
                        let point_at = start + point % (len + 1);
                        let o = match kind {
                            0 => Op::Put(format!("v{i}")),
                            1 => Op::Get,
                            _ => Op::CPut {
                                if_version: ver,
                                value: format!("c{i}"),
                            },
                        };
                        (
                            point_at,
                            op(i, start * 2, Some((start + len) * 2 + 1), o, None),
                        )
                    })
                    .collect();
                ops.sort_by_key(|(p, o)| (*p, o.client));
                let mut reg = Register::default();
                for (_, o) in ops.iter_mut() {
                    let out = match &o.op {
                        Op::Put(_) => Out::Written(reg.version + 1),
                        Op::Get => Out::Read {
                            version: reg.version,
                            value: reg.value.clone(),
                        },
                        Op::CPut { if_version, .. } if *if_version == reg.version => {
                            Out::Written(reg.version + 1)
                        }
                        Op::CPut { .. } => Out::Conflict(reg.version),
                    };
                    reg = reg
                        .step(&o.op, Some(&out))
                        .expect("the register accepts its own answers");
                    o.out = Some(out);
                }
                ops.into_iter().map(|(_, o)| o).collect()
            })
    }

    proptest! {
        #[test]
        fn every_history_produced_by_a_linearization_is_accepted(h in linearizable_history()) {
            prop_assert_eq!(check(&Register::default(), &h), Verdict::Linearizable);
        }
    }
}
