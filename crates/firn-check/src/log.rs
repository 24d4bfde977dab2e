//! The tagged shared log's guarantees, checked on a recorded history.
//!
//! A harness records what its processes did: appends of a record (tags and a payload) and
//! `read_next(tag, min)` reads, each with the times it was invoked and completed on one
//! monotonic clock. [`check`] verifies what the log promises:
//!
//! - **Total order.** If append A was acknowledged before append B was invoked,
//!   `seq(A) < seq(B)`; no two acknowledged appends share a seq.
//! - **No skips.** A read that answers record r (or nil) passed over no record with its tag
//!   and `min ≤ seq < r.seq` (any `seq ≥ min` for nil) that was known before the read was
//!   invoked: acknowledged to its appender, or returned by a read that had completed — a
//!   record a read returned is committed, so it can no more vanish than an acknowledged one.
//! - **Stable.** A record is always read with the seq its append was acknowledged with, and
//!   with the tags and payload appended; an append whose outcome is unknown may never be
//!   read, but once read it is always read at the same seq, and no seq ever reads as two
//!   different records.
//!
//! There is no search (unlike [`crate::check`]): each property is a direct comparison over
//! the history, so a [`Violation`] names the operations that break it. This module only
//! judges a history; it never runs operations, reads a clock or talks to a node.
//!
//! A read's record is traced back to the append that wrote it by its payload, so payloads
//! must be unique across a history's appends (a harness writes its process and operation
//! number into each).

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use bytes::Bytes;
use firn_model::LogSeq;

mod violation;
pub use violation::{Known, PhantomCause, Violation};

/// An operation's place in [`History::operations`].
pub type OpIndex = usize;

/// A record as a read returned it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub seq: LogSeq,
    pub tags: Vec<Bytes>,
    pub payload: Bytes,
}

/// How an append ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppendOutcome {
    /// Acknowledged with this seq.
    Ok(LogSeq),
    /// Refused before it took effect (TRYAGAIN, CLUSTERDOWN): it never happened.
    Fail,
    /// It may or may not have taken effect (UNCERTAIN, a timeout, a dropped connection).
    Unknown,
}

/// How a read ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadOutcome {
    /// The first record with the tag and `seq ≥ min`, or nil.
    Ok(Option<Record>),
    /// It answered nothing; it observed nothing.
    Fail,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogOp {
    Append {
        tags: Vec<Bytes>,
        payload: Bytes,
        outcome: AppendOutcome,
    },
    ReadNext {
        tag: Bytes,
        min: LogSeq,
        outcome: ReadOutcome,
    },
}

/// One operation as a process saw it. Times are from one monotonic clock (e.g. nanoseconds
/// since the test began); `completed_at` is when the answer came or the process gave up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogOperation {
    pub process: usize,
    pub invoked_at: u64,
    pub completed_at: u64,
    pub op: LogOp,
}

/// Every operation of a run, in any order.
#[derive(Clone, Debug, Default)]
pub struct History {
    pub operations: Vec<LogOperation>,
}

impl History {
    pub fn push(&mut self, operation: LogOperation) -> OpIndex {
        self.operations.push(operation);
        self.operations.len() - 1
    }

    /// The violation in words, followed by each operation it names.
    pub fn explain(&self, violation: &Violation) -> String {
        crate::explain(violation, violation.operations(), &self.operations)
    }
}

impl FromIterator<LogOperation> for History {
    fn from_iter<I: IntoIterator<Item = LogOperation>>(iter: I) -> Self {
        History {
            operations: iter.into_iter().collect(),
        }
    }
}

impl Extend<LogOperation> for History {
    fn extend<I: IntoIterator<Item = LogOperation>>(&mut self, iter: I) {
        self.operations.extend(iter);
    }
}

/// What a history that passed contained.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub appends_acknowledged: usize,
    pub appends_failed: usize,
    pub appends_unknown: usize,
    /// Appends with an unknown outcome that a read showed took effect.
    pub appends_unknown_seen: usize,
    pub reads_record: usize,
    pub reads_nil: usize,
    pub reads_failed: usize,
    /// Distinct records read.
    pub records_read: usize,
}

impl fmt::Display for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} tags [", self.seq)?;
        for (i, tag) in self.tags.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(f, "{sep}{}", String::from_utf8_lossy(tag))?;
        }
        write!(f, "] payload {:?}", String::from_utf8_lossy(&self.payload))
    }
}

/// An append whose record has a seq: acknowledged with it, or (outcome unknown) read at it.
struct Placed {
    seq: LogSeq,
    /// When the record was first known to exist, and how.
    known_at: u64,
    known: Known,
}

/// Checks `history` against the log's guarantees; returns the first violation found.
///
/// # Panics
///
/// If two appends carry one payload, or an operation completes before it is invoked: the
/// harness, not the log, is wrong then.
pub fn check(history: &History) -> Result<Summary, Violation> {
    let ops = &history.operations;
    let mut summary = Summary::default();
    let mut by_payload: HashMap<&Bytes, OpIndex> = HashMap::new();
    let mut acked_by_seq: BTreeMap<LogSeq, OpIndex> = BTreeMap::new();
    let mut placed: HashMap<OpIndex, Placed> = HashMap::new();
    for (i, o) in ops.iter().enumerate() {
        assert!(
            o.completed_at >= o.invoked_at,
            "op {i} completed at {} before it was invoked at {}",
            o.completed_at,
            o.invoked_at
        );
        match &o.op {
            LogOp::Append {
                payload, outcome, ..
            } => {
                if let Some(other) = by_payload.insert(payload, i) {
                    panic!("appends op {other} and op {i} carry one payload {payload:?}");
                }
                match outcome {
                    AppendOutcome::Ok(seq) => {
                        summary.appends_acknowledged += 1;
                        if let Some(&first) = acked_by_seq.get(seq) {
                            return Err(Violation::DuplicateSeq {
                                seq: *seq,
                                first,
                                second: i,
                            });
                        }
                        acked_by_seq.insert(*seq, i);
                        placed.insert(
                            i,
                            Placed {
                                seq: *seq,
                                known_at: o.completed_at,
                                known: Known::Acknowledged,
                            },
                        );
                    }
                    AppendOutcome::Fail => summary.appends_failed += 1,
                    AppendOutcome::Unknown => summary.appends_unknown += 1,
                }
            }
            LogOp::ReadNext { outcome, .. } => match outcome {
                ReadOutcome::Ok(Some(_)) => summary.reads_record += 1,
                ReadOutcome::Ok(None) => summary.reads_nil += 1,
                ReadOutcome::Fail => summary.reads_failed += 1,
            },
        }
    }

    // Every record read: what its query allows, which append wrote it, and the same record
    // at every read of its seq. Reads in completion order, so that the first read of an
    // unknown append's record is the one that places it.
    let mut reads: Vec<OpIndex> = (0..ops.len())
        .filter(|&i| matches!(ops[i].op, LogOp::ReadNext { .. }))
        .collect();
    reads.sort_by_key(|&i| (ops[i].completed_at, i));
    let mut first_read_of_seq: HashMap<LogSeq, (OpIndex, &Record)> = HashMap::new();
    let mut first_read_of_append: HashMap<OpIndex, (OpIndex, &Record)> = HashMap::new();
    for &read in &reads {
        let LogOp::ReadNext {
            tag,
            min,
            outcome: ReadOutcome::Ok(Some(record)),
        } = &ops[read].op
        else {
            continue;
        };
        if record.seq < *min || !record.tags.contains(tag) {
            return Err(Violation::OutsideQuery {
                read,
                record: Box::new(record.clone()),
            });
        }
        let append = author(ops, &by_payload, &acked_by_seq, read, record)?;
        if let Some((first, first_record)) = first_read_of_seq.get(&record.seq) {
            if *first_record != record {
                return Err(Violation::Unstable {
                    first: *first,
                    first_record: Box::new((*first_record).clone()),
                    second: read,
                    second_record: Box::new(record.clone()),
                });
            }
        } else {
            first_read_of_seq.insert(record.seq, (read, record));
        }
        match first_read_of_append.get(&append) {
            Some((first, first_record)) if first_record.seq != record.seq => {
                return Err(Violation::Unstable {
                    first: *first,
                    first_record: Box::new((*first_record).clone()),
                    second: read,
                    second_record: Box::new(record.clone()),
                });
            }
            Some(_) => {}
            None => {
                first_read_of_append.insert(append, (read, record));
            }
        }
        // The first read to return a record is the earliest to complete (reads are sorted).
        let completed_at = ops[read].completed_at;
        let entry = placed.entry(append).or_insert_with(|| {
            summary.appends_unknown_seen += 1;
            Placed {
                seq: record.seq,
                known_at: completed_at,
                known: Known::ReadBy(read),
            }
        });
        if completed_at < entry.known_at {
            entry.known_at = completed_at;
            entry.known = Known::ReadBy(read);
        }
    }
    summary.records_read = first_read_of_seq.len();

    check_order(ops, &placed)?;
    check_no_skips(ops, &reads, &placed)?;
    Ok(summary)
}

/// The append that wrote `record`, which `read` returned: the one acknowledged with its seq
/// (and then it must be exactly that append's record), else the one that wrote its payload
/// with an unknown outcome.
fn author(
    ops: &[LogOperation],
    by_payload: &HashMap<&Bytes, OpIndex>,
    acked_by_seq: &BTreeMap<LogSeq, OpIndex>,
    read: OpIndex,
    record: &Record,
) -> Result<OpIndex, Violation> {
    let mismatch = |append| Violation::Mismatch {
        read,
        append,
        record: Box::new(record.clone()),
    };
    let wrote = |append: OpIndex| match &ops[append].op {
        LogOp::Append { tags, payload, .. } => *tags == record.tags && *payload == record.payload,
        LogOp::ReadNext { .. } => unreachable!("seqs and payloads index appends only"),
    };
    if let Some(&append) = acked_by_seq.get(&record.seq) {
        return if wrote(append) {
            Ok(append)
        } else {
            Err(mismatch(append))
        };
    }
    let phantom = |cause| Violation::Phantom {
        read,
        record: Box::new(record.clone()),
        cause,
    };
    let Some(&append) = by_payload.get(&record.payload) else {
        return Err(phantom(PhantomCause::NoSuchAppend));
    };
    let LogOp::Append { outcome, .. } = &ops[append].op else {
        unreachable!("payloads index appends only");
    };
    match outcome {
        // Acknowledged with another seq: its record read at the wrong one.
        AppendOutcome::Ok(_) => Err(mismatch(append)),
        AppendOutcome::Fail => Err(phantom(PhantomCause::AppendFailed(append))),
        AppendOutcome::Unknown if ops[append].invoked_at > ops[read].completed_at => {
            Err(phantom(PhantomCause::AppendLater(append)))
        }
        AppendOutcome::Unknown if !wrote(append) => Err(mismatch(append)),
        AppendOutcome::Unknown => Ok(append),
    }
}

/// Total order: every append with a seq is above every append acknowledged before it was
/// invoked. Sorting the acknowledged appends by completion makes "the greatest seq
/// acknowledged before time t" a prefix maximum: O(n log n).
fn check_order(ops: &[LogOperation], placed: &HashMap<OpIndex, Placed>) -> Result<(), Violation> {
    let mut acked: Vec<(u64, LogSeq, OpIndex)> = ops
        .iter()
        .enumerate()
        .filter_map(|(i, o)| match o.op {
            LogOp::Append {
                outcome: AppendOutcome::Ok(seq),
                ..
            } => Some((o.completed_at, seq, i)),
            _ => None,
        })
        .collect();
    acked.sort();
    // greatest[k]: the greatest seq (and its append) among acked[..=k].
    let mut greatest: Vec<(LogSeq, OpIndex)> = Vec::with_capacity(acked.len());
    for &(_, seq, i) in &acked {
        let best = match greatest.last() {
            Some(&(s, j)) if s > seq => (s, j),
            _ => (seq, i),
        };
        greatest.push(best);
    }
    let mut later: Vec<OpIndex> = placed.keys().copied().collect();
    later.sort();
    for later in later {
        let later_seq = placed[&later].seq;
        let before = acked.partition_point(|&(t, _, _)| t < ops[later].invoked_at);
        let Some(&(earlier_seq, earlier)) = before.checked_sub(1).map(|k| &greatest[k]) else {
            continue;
        };
        if earlier_seq >= later_seq {
            return Err(Violation::OrderInversion {
                earlier,
                earlier_seq,
                later,
                later_seq,
            });
        }
    }
    Ok(())
}

/// No skips: between a read's min and its answer, no record of its tag that was known
/// before it began. A correct history has few records in that gap (only those appended
/// while the read ran), so walking it is cheap.
fn check_no_skips(
    ops: &[LogOperation],
    reads: &[OpIndex],
    placed: &HashMap<OpIndex, Placed>,
) -> Result<(), Violation> {
    let mut by_tag: HashMap<&Bytes, BTreeMap<LogSeq, OpIndex>> = HashMap::new();
    for (&append, p) in placed {
        let LogOp::Append { tags, .. } = &ops[append].op else {
            unreachable!("only appends are placed");
        };
        for tag in tags {
            by_tag.entry(tag).or_default().insert(p.seq, append);
        }
    }
    for &read in reads {
        let LogOp::ReadNext {
            tag,
            min,
            outcome: ReadOutcome::Ok(answer),
        } = &ops[read].op
        else {
            continue;
        };
        let Some(records) = by_tag.get(tag) else {
            continue;
        };
        let answered = answer.as_ref().map(|r| r.seq);
        let gap = match answered {
            Some(seq) => records.range(*min..seq),
            None => records.range(*min..),
        };
        for (&missed_seq, &missed) in gap {
            let p = &placed[&missed];
            if p.known_at < ops[read].invoked_at {
                return Err(Violation::Skip {
                    read,
                    answered,
                    missed,
                    missed_seq,
                    known: p.known,
                });
            }
        }
    }
    Ok(())
}
