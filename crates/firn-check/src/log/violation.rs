//! What [`check`](super::check) reports when a history breaks the log's guarantees: the
//! first broken guarantee and the operations (by [`OpIndex`]) that show it.

use std::fmt;

use firn_model::LogSeq;

use super::{OpIndex, Record};

/// How a skipped record was known before the read that skipped it began.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Known {
    /// Its append was acknowledged.
    Acknowledged,
    /// This read, completed by then, had returned it.
    ReadBy(OpIndex),
}

/// Why no append explains a record a read returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PhantomCause {
    /// No append wrote its payload.
    NoSuchAppend,
    /// The append that wrote its payload was refused.
    AppendFailed(OpIndex),
    /// The append that wrote its payload was invoked only after the read completed.
    AppendLater(OpIndex),
}

/// The first guarantee a history breaks, and the operations that show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// Two appends were acknowledged with one seq.
    DuplicateSeq {
        seq: LogSeq,
        first: OpIndex,
        second: OpIndex,
    },
    /// `earlier` was acknowledged before `later` was invoked, yet `later`'s seq (acknowledged,
    /// or read) is not above `earlier`'s.
    OrderInversion {
        earlier: OpIndex,
        earlier_seq: LogSeq,
        later: OpIndex,
        later_seq: LogSeq,
    },
    /// `read` answered `answered` (`None`: nil) past `missed`'s record, which has the tag,
    /// is at or above the read's min, and was known before the read was invoked.
    Skip {
        read: OpIndex,
        answered: Option<LogSeq>,
        missed: OpIndex,
        missed_seq: LogSeq,
        known: Known,
    },
    /// Two reads returned different records for one seq, or one append's record at two
    /// seqs.
    Unstable {
        first: OpIndex,
        first_record: Box<Record>,
        second: OpIndex,
        second_record: Box<Record>,
    },
    /// `read` returned a record that is not what `append` wrote and was acknowledged with:
    /// the append's seq with other tags or payload, or its payload at another seq or with
    /// other tags.
    Mismatch {
        read: OpIndex,
        append: OpIndex,
        record: Box<Record>,
    },
    /// `read` returned a record no append explains.
    Phantom {
        read: OpIndex,
        record: Box<Record>,
        cause: PhantomCause,
    },
    /// `read` returned a record its query excludes: below its min, or without its tag.
    OutsideQuery { read: OpIndex, record: Box<Record> },
}

impl Violation {
    /// The operations it names, in the order it names them.
    pub fn operations(&self) -> Vec<OpIndex> {
        match self {
            Violation::DuplicateSeq { first, second, .. }
            | Violation::Unstable { first, second, .. } => vec![*first, *second],
            Violation::OrderInversion { earlier, later, .. } => vec![*earlier, *later],
            Violation::Skip {
                read,
                missed,
                known,
                ..
            } => match known {
                Known::Acknowledged => vec![*read, *missed],
                Known::ReadBy(by) => vec![*read, *missed, *by],
            },
            Violation::Mismatch { read, append, .. } => vec![*read, *append],
            Violation::Phantom { read, cause, .. } => match cause {
                PhantomCause::NoSuchAppend => vec![*read],
                PhantomCause::AppendFailed(a) | PhantomCause::AppendLater(a) => vec![*read, *a],
            },
            Violation::OutsideQuery { read, .. } => vec![*read],
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::DuplicateSeq { seq, first, second } => write!(
                f,
                "duplicate seq: appends op {first} and op {second} were both acknowledged with {seq}"
            ),
            Violation::OrderInversion {
                earlier,
                earlier_seq,
                later,
                later_seq,
            } => write!(
                f,
                "order inversion: append op {earlier} was acknowledged with {earlier_seq} before \
                 append op {later} began, yet op {later} has {later_seq}"
            ),
            Violation::Skip {
                read,
                answered,
                missed,
                missed_seq,
                known,
            } => {
                let answered = answered.map_or("nil".to_string(), |s| s.to_string());
                let known = match known {
                    Known::Acknowledged => "acknowledged".to_string(),
                    Known::ReadBy(by) => format!("returned by read op {by}"),
                };
                write!(
                    f,
                    "skip: read op {read} answered {answered}, passing over {missed_seq} \
                     (append op {missed}), {known} before the read began"
                )
            }
            Violation::Unstable {
                first,
                first_record,
                second,
                second_record,
            } => write!(
                f,
                "unstable record: read op {first} returned {first_record}, read op {second} \
                 returned {second_record}"
            ),
            Violation::Mismatch {
                read,
                append,
                record,
            } => write!(
                f,
                "mismatch: read op {read} returned {record}, which is not what append op \
                 {append} wrote and was acknowledged with"
            ),
            Violation::Phantom {
                read,
                record,
                cause,
            } => {
                let cause = match cause {
                    PhantomCause::NoSuchAppend => "no append wrote that payload".to_string(),
                    PhantomCause::AppendFailed(a) => format!("append op {a} was refused"),
                    PhantomCause::AppendLater(a) => {
                        format!("append op {a} began only after the read completed")
                    }
                };
                write!(f, "phantom: read op {read} returned {record}; {cause}")
            }
            Violation::OutsideQuery { read, record } => write!(
                f,
                "outside the query: read op {read} returned {record}, below its min or \
                 without its tag"
            ),
        }
    }
}

impl std::error::Error for Violation {}
