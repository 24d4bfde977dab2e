//! The log checker accepts a correct history (concurrent appends in either order, unknown
//! outcomes seen or not, nil reads) and rejects each kind of bad history, built by hand:
//! skips, order inversions, duplicate seqs, unstable and mismatched records, phantoms.

use bytes::Bytes;
use firn_check::log::{
    AppendOutcome, History, Known, LogOp, LogOperation, OpIndex, PhantomCause, ReadOutcome, Record,
    Violation, check,
};
use firn_model::LogSeq;

fn seq(n: u64) -> LogSeq {
    LogSeq::new(1_700_000_000_000 + n, 0)
}

fn bytes(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn tags(t: &[&str]) -> Vec<Bytes> {
    t.iter().map(|t| bytes(t)).collect()
}

/// Appends a record with `tags` and `payload`, invoked and completed at `at`.
fn append(
    h: &mut History,
    process: usize,
    at: (u64, u64),
    t: &[&str],
    payload: &str,
    outcome: AppendOutcome,
) -> OpIndex {
    h.push(LogOperation {
        process,
        invoked_at: at.0,
        completed_at: at.1,
        op: LogOp::Append {
            tags: tags(t),
            payload: bytes(payload),
            outcome,
        },
    })
}

fn acked(n: u64) -> AppendOutcome {
    AppendOutcome::Ok(seq(n))
}

/// `read_next(tag, seq(min))` at `at`, answering `(seq, tags, payload)` or nil.
fn read(
    h: &mut History,
    process: usize,
    at: (u64, u64),
    tag: &str,
    min: u64,
    answer: Option<(u64, &[&str], &str)>,
) -> OpIndex {
    let outcome = ReadOutcome::Ok(answer.map(|(n, t, payload)| Record {
        seq: seq(n),
        tags: tags(t),
        payload: bytes(payload),
    }));
    read_outcome(h, process, at, tag, min, outcome)
}

fn read_outcome(
    h: &mut History,
    process: usize,
    at: (u64, u64),
    tag: &str,
    min: u64,
    outcome: ReadOutcome,
) -> OpIndex {
    h.push(LogOperation {
        process,
        invoked_at: at.0,
        completed_at: at.1,
        op: LogOp::ReadNext {
            tag: bytes(tag),
            min: seq(min),
            outcome,
        },
    })
}

fn rejected(h: &History) -> Violation {
    match check(h) {
        Ok(summary) => panic!("a bad history passed: {summary:?}"),
        Err(v) => {
            // Every violation names its operations in words.
            let explained = h.explain(&v);
            for i in v.operations() {
                assert!(explained.contains(&format!("op {i}")), "{explained}");
            }
            v
        }
    }
}

/// The skip `read` makes, answering `answered`, past `missed`'s record at `seq(missed_n)`.
fn skip(
    read: OpIndex,
    answered: Option<u64>,
    missed: OpIndex,
    missed_n: u64,
    known: Known,
) -> Violation {
    Violation::Skip {
        read,
        answered: answered.map(seq),
        missed,
        missed_seq: seq(missed_n),
        known,
    }
}

#[test]
fn a_correct_history_passes_with_its_counts() {
    let mut h = History::default();
    // Two appends in sequence, then two overlapping ones that took seqs in the other order
    // than they began: allowed, neither was acknowledged before the other began.
    append(&mut h, 0, (0, 10), &["a", "b"], "p0-0", acked(10));
    append(&mut h, 0, (11, 20), &["a"], "p0-1", acked(20));
    append(&mut h, 1, (21, 40), &["b"], "p1-0", acked(35));
    append(&mut h, 2, (22, 30), &["a", "c"], "p2-0", acked(30));
    // An unknown outcome that took effect (read later), one that did not, and a refusal.
    append(&mut h, 1, (41, 50), &["c"], "p1-1", AppendOutcome::Unknown);
    append(&mut h, 2, (41, 50), &["c"], "p2-1", AppendOutcome::Unknown);
    append(&mut h, 2, (51, 52), &["a"], "p2-2", AppendOutcome::Fail);
    // A follower of tag a from the start.
    read(&mut h, 3, (60, 61), "a", 0, Some((10, &["a", "b"], "p0-0")));
    read(&mut h, 3, (62, 63), "a", 11, Some((20, &["a"], "p0-1")));
    read(
        &mut h,
        3,
        (64, 65),
        "a",
        21,
        Some((30, &["a", "c"], "p2-0")),
    );
    read(&mut h, 3, (66, 67), "a", 31, None);
    // Tag c: the unknown append shows up, at the same seq both times.
    read(&mut h, 4, (60, 61), "c", 0, Some((30, &["a", "c"], "p2-0")));
    read(&mut h, 4, (62, 63), "c", 31, Some((45, &["c"], "p1-1")));
    read(&mut h, 5, (64, 65), "c", 40, Some((45, &["c"], "p1-1")));
    // A read concurrent with the append of seq 35 may miss it, one after may not.
    read(&mut h, 5, (25, 36), "b", 11, None);
    read(&mut h, 5, (41, 42), "b", 11, Some((35, &["b"], "p1-0")));
    read_outcome(&mut h, 5, (43, 44), "b", 0, ReadOutcome::Fail);
    let summary = check(&h).unwrap_or_else(|v| panic!("{}", h.explain(&v)));
    assert_eq!(summary.appends_acknowledged, 4);
    assert_eq!(summary.appends_unknown, 2);
    assert_eq!(summary.appends_unknown_seen, 1);
    assert_eq!(summary.appends_failed, 1);
    assert_eq!(summary.reads_record, 7);
    assert_eq!(summary.reads_nil, 2);
    assert_eq!(summary.reads_failed, 1);
    assert_eq!(summary.records_read, 5);
}

#[test]
fn a_read_past_an_acknowledged_record_is_a_skip() {
    let mut h = History::default();
    let missed = append(&mut h, 0, (0, 10), &["a"], "p0-0", acked(10));
    append(&mut h, 0, (11, 20), &["a", "b"], "p0-1", acked(20));
    // Both were acknowledged before the read began; it answers the second.
    let r = read(&mut h, 1, (30, 31), "a", 5, Some((20, &["a", "b"], "p0-1")));
    assert_eq!(
        rejected(&h),
        skip(r, Some(20), missed, 10, Known::Acknowledged)
    );
}

#[test]
fn a_nil_read_past_an_acknowledged_record_of_another_home_is_a_skip() {
    let mut h = History::default();
    // The record's first tag is b (its home), the read is of its second tag.
    let missed = append(&mut h, 0, (0, 10), &["b", "a"], "p0-0", acked(10));
    let r = read(&mut h, 1, (30, 31), "a", 10, None);
    assert_eq!(rejected(&h), skip(r, None, missed, 10, Known::Acknowledged));
}

#[test]
fn a_read_past_a_record_another_read_returned_is_a_skip() {
    let mut h = History::default();
    // The append's outcome is unknown, but a read returned its record: it exists.
    let missed = append(&mut h, 0, (0, 100), &["a"], "p0-0", AppendOutcome::Unknown);
    let by = read(&mut h, 1, (10, 20), "a", 0, Some((15, &["a"], "p0-0")));
    let r = read(&mut h, 2, (30, 31), "a", 0, None);
    assert_eq!(rejected(&h), skip(r, None, missed, 15, Known::ReadBy(by)));
}

#[test]
fn an_append_below_one_acknowledged_before_it_began_is_an_order_inversion() {
    // The later append acknowledged, or of unknown outcome but read: its seq is known.
    for later_outcome in [acked(40), AppendOutcome::Unknown] {
        let mut h = History::default();
        // Different tags (and so shards): the order is total across them.
        let earlier = append(&mut h, 0, (0, 10), &["a"], "p0-0", acked(50));
        let later = append(&mut h, 1, (11, 20), &["b"], "p1-0", later_outcome);
        read(&mut h, 2, (30, 31), "b", 0, Some((40, &["b"], "p1-0")));
        assert_eq!(
            rejected(&h),
            Violation::OrderInversion {
                earlier,
                earlier_seq: seq(50),
                later,
                later_seq: seq(40),
            }
        );
    }
}

#[test]
fn two_appends_acknowledged_with_one_seq_are_a_duplicate() {
    let mut h = History::default();
    // Concurrent, on different tags: only the seq gives them away.
    let first = append(&mut h, 0, (0, 10), &["a"], "p0-0", acked(7));
    let second = append(&mut h, 1, (0, 10), &["b"], "p1-0", acked(7));
    assert_eq!(
        rejected(&h),
        Violation::DuplicateSeq {
            seq: seq(7),
            first,
            second,
        }
    );
}

#[test]
fn an_unknown_append_read_at_two_seqs_is_unstable() {
    let mut h = History::default();
    append(&mut h, 0, (0, 100), &["a"], "p0-0", AppendOutcome::Unknown);
    let first = read(&mut h, 1, (10, 20), "a", 0, Some((15, &["a"], "p0-0")));
    let second = read(&mut h, 2, (30, 40), "a", 0, Some((16, &["a"], "p0-0")));
    assert!(matches!(
        rejected(&h),
        Violation::Unstable { first: f, second: s, first_record, second_record }
            if f == first && s == second && first_record.seq == seq(15)
                && second_record.seq == seq(16)
    ));
}

#[test]
fn one_seq_read_as_two_records_is_unstable() {
    let mut h = History::default();
    append(&mut h, 0, (0, 100), &["a"], "p0-0", AppendOutcome::Unknown);
    append(&mut h, 1, (0, 100), &["a"], "p1-0", AppendOutcome::Unknown);
    let first = read(&mut h, 2, (10, 20), "a", 0, Some((15, &["a"], "p0-0")));
    let second = read(&mut h, 3, (30, 40), "a", 0, Some((15, &["a"], "p1-0")));
    assert!(matches!(
        rejected(&h),
        Violation::Unstable { first: f, second: s, first_record, second_record }
            if f == first && s == second && first_record.payload == "p0-0"
                && second_record.payload == "p1-0"
    ));
}

#[test]
fn an_acknowledged_seq_read_with_another_payload_or_tags_is_a_mismatch() {
    for (tags, payload) in [(&["a"][..], "p9-9"), (&["a", "b"][..], "p0-0")] {
        let mut h = History::default();
        let append = append(&mut h, 0, (0, 10), &["a"], "p0-0", acked(10));
        let r = read(&mut h, 1, (20, 30), "a", 0, Some((10, tags, payload)));
        assert!(matches!(
            rejected(&h),
            Violation::Mismatch { read, append: a, record }
                if read == r && a == append && record.payload == payload
        ));
    }
}

#[test]
fn an_acknowledged_record_read_at_another_seq_is_a_mismatch() {
    let mut h = History::default();
    let append = append(&mut h, 0, (0, 10), &["a"], "p0-0", acked(10));
    let r = read(&mut h, 1, (5, 8), "a", 0, Some((9, &["a"], "p0-0")));
    assert!(matches!(
        rejected(&h),
        Violation::Mismatch { read, append: a, .. } if read == r && a == append
    ));
}

#[test]
fn a_record_no_append_explains_is_a_phantom() {
    let mut h = History::default();
    let failed = append(&mut h, 0, (0, 10), &["a"], "p0-0", AppendOutcome::Fail);
    let r = read(&mut h, 1, (20, 30), "a", 0, Some((15, &["a"], "p0-0")));
    assert!(matches!(
        rejected(&h),
        Violation::Phantom { read, cause: PhantomCause::AppendFailed(a), .. }
            if read == r && a == failed
    ));

    let mut h = History::default();
    let r = read(&mut h, 1, (20, 30), "a", 0, Some((15, &["a"], "nobody's")));
    assert!(matches!(
        rejected(&h),
        Violation::Phantom { read, cause: PhantomCause::NoSuchAppend, .. } if read == r
    ));

    let mut h = History::default();
    let r = read(&mut h, 1, (20, 30), "a", 0, Some((15, &["a"], "p0-0")));
    let later = append(&mut h, 0, (40, 50), &["a"], "p0-0", AppendOutcome::Unknown);
    assert!(matches!(
        rejected(&h),
        Violation::Phantom { read, cause: PhantomCause::AppendLater(a), .. }
            if read == r && a == later
    ));
}

#[test]
fn a_record_below_the_min_or_without_the_tag_is_outside_the_query() {
    for (tag, min) in [("a", 11), ("b", 0)] {
        let mut h = History::default();
        append(&mut h, 0, (0, 10), &["a"], "p0-0", acked(10));
        let r = read(&mut h, 1, (20, 30), tag, min, Some((10, &["a"], "p0-0")));
        assert!(matches!(
            rejected(&h),
            Violation::OutsideQuery { read, .. } if read == r
        ));
    }
}

mod generated {
    use super::*;
    use proptest::prelude::*;

    const TAGS: [&str; 3] = ["a", "b", "c"];

    /// Operations with random overlapping intervals, each taking effect at a point inside
    /// its interval on a sequential log (seqs given in point order, reads answering from
    /// what took effect before their point): correct by construction, so the checker must
    /// accept every one, whatever appends' outcomes were lost or refused.
    fn correct_history() -> impl Strategy<Value = History> {
        let op = (0u64..200, 1u64..40, 0u64..1000, 0u8..7, 1u8..8, 0u64..30);
        proptest::collection::vec(op, 1..40).prop_map(|specs| {
            let mut at_point: Vec<(u64, usize, LogOperation)> = specs
                .into_iter()
                .enumerate()
                .map(|(i, (start, len, point, kind, tag_bits, min))| {
                    let (invoked_at, completed_at) = (start * 2, (start + len) * 2 + 1);
                    let point_at = invoked_at + 1 + point % (completed_at - invoked_at);
                    let chosen: Vec<&str> = (0..3)
                        .filter(|b| tag_bits & (1 << b) != 0)
                        .map(|b| TAGS[b])
                        .collect();
                    let op = if kind < 4 {
                        LogOp::Append {
                            tags: tags(&chosen),
                            payload: bytes(&format!("p{i}")),
                            // Set when the log runs; `kind` says how it ends.
                            outcome: AppendOutcome::Fail,
                        }
                    } else {
                        LogOp::ReadNext {
                            tag: bytes(chosen[0]),
                            min: seq(min),
                            outcome: ReadOutcome::Fail,
                        }
                    };
                    let o = LogOperation {
                        process: i,
                        invoked_at,
                        completed_at,
                        op,
                    };
                    (point_at, kind as usize, o)
                })
                .collect();
            at_point.sort_by_key(|(p, _, o)| (*p, o.process));
            let mut log: Vec<Record> = Vec::new();
            let mut next = 0;
            for (_, kind, o) in at_point.iter_mut() {
                match &mut o.op {
                    LogOp::Append {
                        tags,
                        payload,
                        outcome,
                    } => {
                        // kind 0: acknowledged; 1: unknown, took effect; 2: refused; 3:
                        // unknown, never took effect.
                        if *kind <= 1 {
                            next += 1 + (o.process as u64 % 3);
                            log.push(Record {
                                seq: seq(next),
                                tags: tags.clone(),
                                payload: payload.clone(),
                            });
                        }
                        *outcome = match kind {
                            0 => AppendOutcome::Ok(seq(next)),
                            2 => AppendOutcome::Fail,
                            _ => AppendOutcome::Unknown,
                        };
                    }
                    LogOp::ReadNext { tag, min, outcome } => {
                        let found = log.iter().find(|r| r.seq >= *min && r.tags.contains(tag));
                        *outcome = if *kind == 6 {
                            ReadOutcome::Fail
                        } else {
                            ReadOutcome::Ok(found.cloned())
                        };
                    }
                }
            }
            at_point.into_iter().map(|(_, _, o)| o).collect()
        })
    }

    proptest! {
        #[test]
        fn every_correct_history_passes(h in correct_history()) {
            if let Err(v) = check(&h) {
                panic!("{}", h.explain(&v));
            }
        }
    }
}
