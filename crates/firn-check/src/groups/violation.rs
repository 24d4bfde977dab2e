//! What [`check`](super::check) reports when a consumer group's history breaks a guarantee:
//! the first broken guarantee and the operations (by [`OpIndex`]) that show it.

use std::fmt;

use firn_model::LogSeq;

use super::OpIndex;

/// Why no add explains an entry a delivery returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PhantomCause {
    /// No add wrote its payload.
    NoSuchAdd,
    /// The add that wrote its payload was refused.
    AddRefused(OpIndex),
    /// The add that wrote its payload was invoked only after the delivery completed.
    AddLater(OpIndex),
}

/// The first guarantee a history breaks, and the operations that show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// Two adds were acknowledged with one id.
    DuplicateId {
        id: LogSeq,
        first: OpIndex,
        second: OpIndex,
    },
    /// `delivery` returned `id` with a payload that is not the one `add` wrote (`add`
    /// acknowledged with `id`, or `add`'s payload read at another id, or one id read with
    /// two payloads).
    Mismatch {
        delivery: OpIndex,
        add: OpIndex,
        id: LogSeq,
    },
    /// `delivery` returned an entry no add explains.
    Phantom {
        delivery: OpIndex,
        id: LogSeq,
        cause: PhantomCause,
    },
    /// An acknowledged add's id was never delivered (the drain at the end included).
    Lost { add: OpIndex, id: LogSeq },
    /// A delivered id was not acked by the end: no XACK answered 1, and either none had an
    /// unknown outcome or the id is still pending.
    NotAcked {
        id: LogSeq,
        delivery: Option<OpIndex>,
    },
    /// An id an XACK removed (answered 1) is pending again at the end.
    AckUndone { id: LogSeq, ack: OpIndex },
    /// Two `>` deliveries returned one id: it was handed out fresh twice.
    NewTwice {
        id: LogSeq,
        first: OpIndex,
        second: OpIndex,
    },
    /// A `>` delivery returned an id that `earlier` had delivered (completed) before it began.
    NewAfterDelivered {
        id: LogSeq,
        earlier: OpIndex,
        new: OpIndex,
    },
    /// `delivery` began after `ack` had removed the id (answered 1), and returned it.
    DeliveredAfterAck {
        id: LogSeq,
        ack: OpIndex,
        delivery: OpIndex,
    },
    /// Two XACKs of one id both answered 1: two consumers held it at once.
    AckedTwice {
        id: LogSeq,
        first: OpIndex,
        second: OpIndex,
    },
    /// An XACK answered 1 for an id that no delivery begun before it completed returned.
    AckOfUndelivered { id: LogSeq, ack: OpIndex },
    /// An XACK answered 0 for an id `delivery` had delivered before it began and that no
    /// other XACK had (or may have) removed: the pending list lost it.
    AckFoundNothing {
        id: LogSeq,
        delivery: OpIndex,
        ack: OpIndex,
    },
    /// A claim with `min_idle_ms` took an id that `earlier` delivered too recently for it to
    /// have been idle that long.
    ClaimedTooSoon {
        id: LogSeq,
        earlier: OpIndex,
        claim: OpIndex,
        min_idle_ms: u64,
    },
    /// A `>` delivery (`delivery`, under ACKWAIT) gave `id` again less than `ack_wait_ms`
    /// after `earlier` had delivered it: it was not due yet.
    RedeliveredTooSoon {
        id: LogSeq,
        earlier: OpIndex,
        delivery: OpIndex,
        ack_wait_ms: u64,
    },
    /// `delivery` reported a delivery count for `id` outside what the history allows.
    DeliveryCount {
        id: LogSeq,
        delivery: OpIndex,
        count: u64,
        min: u64,
        max: u64,
    },
}

impl Violation {
    /// The operations it names, in the order it names them.
    pub fn operations(&self) -> Vec<OpIndex> {
        match self {
            Violation::DuplicateId { first, second, .. }
            | Violation::NewTwice { first, second, .. }
            | Violation::AckedTwice { first, second, .. } => vec![*first, *second],
            Violation::Mismatch { delivery, add, .. } => vec![*delivery, *add],
            Violation::Phantom {
                delivery, cause, ..
            } => match cause {
                PhantomCause::NoSuchAdd => vec![*delivery],
                PhantomCause::AddRefused(a) | PhantomCause::AddLater(a) => vec![*delivery, *a],
            },
            Violation::Lost { add, .. } => vec![*add],
            Violation::NotAcked { delivery, .. } => delivery.iter().copied().collect(),
            Violation::AckUndone { ack, .. } | Violation::AckOfUndelivered { ack, .. } => {
                vec![*ack]
            }
            Violation::NewAfterDelivered { earlier, new, .. } => vec![*earlier, *new],
            Violation::DeliveredAfterAck { ack, delivery, .. } => vec![*ack, *delivery],
            Violation::AckFoundNothing { delivery, ack, .. } => vec![*delivery, *ack],
            Violation::ClaimedTooSoon { earlier, claim, .. } => vec![*earlier, *claim],
            Violation::RedeliveredTooSoon {
                earlier, delivery, ..
            } => vec![*earlier, *delivery],
            Violation::DeliveryCount { delivery, .. } => vec![*delivery],
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::DuplicateId { id, first, second } => write!(
                f,
                "duplicate id: adds op {first} and op {second} were both acknowledged with {id}"
            ),
            Violation::Mismatch { delivery, add, id } => write!(
                f,
                "mismatch: delivery op {delivery} returned {id} with a payload that is not the \
                 one add op {add} wrote there"
            ),
            Violation::Phantom {
                delivery,
                id,
                cause,
            } => {
                let cause = match cause {
                    PhantomCause::NoSuchAdd => "no add wrote its payload".to_string(),
                    PhantomCause::AddRefused(a) => format!("add op {a} was refused"),
                    PhantomCause::AddLater(a) => {
                        format!("add op {a} began only after the delivery completed")
                    }
                };
                write!(f, "phantom: delivery op {delivery} returned {id}; {cause}")
            }
            Violation::Lost { add, id } => write!(
                f,
                "lost: add op {add} was acknowledged with {id}, which was never delivered"
            ),
            Violation::NotAcked { id, delivery } => match delivery {
                Some(d) => write!(
                    f,
                    "not acked: {id} (delivered by op {d}) was not acked by the end"
                ),
                None => write!(f, "not acked: {id} is pending at the end"),
            },
            Violation::AckUndone { id, ack } => write!(
                f,
                "ack undone: ack op {ack} removed {id}, yet it is pending at the end"
            ),
            Violation::NewTwice { id, first, second } => write!(
                f,
                "delivered new twice: `>` deliveries op {first} and op {second} both returned {id}"
            ),
            Violation::NewAfterDelivered { id, earlier, new } => write!(
                f,
                "new after delivered: `>` delivery op {new} returned {id}, which op {earlier} \
                 had delivered before it began"
            ),
            Violation::DeliveredAfterAck { id, ack, delivery } => write!(
                f,
                "delivered after ack: op {delivery} returned {id} though it began after ack op \
                 {ack} had removed it"
            ),
            Violation::AckedTwice { id, first, second } => write!(
                f,
                "acked twice: acks op {first} and op {second} both removed {id}"
            ),
            Violation::AckOfUndelivered { id, ack } => write!(
                f,
                "ack of undelivered: ack op {ack} removed {id}, which no delivery begun before \
                 it returned"
            ),
            Violation::AckFoundNothing { id, delivery, ack } => write!(
                f,
                "pending entry lost: ack op {ack} found {id} not pending, though op {delivery} \
                 delivered it before and no other ack may have removed it"
            ),
            Violation::ClaimedTooSoon {
                id,
                earlier,
                claim,
                min_idle_ms,
            } => write!(
                f,
                "claimed too soon: claim op {claim} (min idle {min_idle_ms} ms) took {id}, which \
                 op {earlier} had delivered too recently"
            ),
            Violation::RedeliveredTooSoon {
                id,
                earlier,
                delivery,
                ack_wait_ms,
            } => write!(
                f,
                "redelivered too soon: `>` delivery op {delivery} gave {id} again less than \
                 ACKWAIT ({ack_wait_ms} ms) after op {earlier} had delivered it"
            ),
            Violation::DeliveryCount {
                id,
                delivery,
                count,
                min,
                max,
            } => write!(
                f,
                "delivery count: op {delivery} reported {id} delivered {count} times; the \
                 history allows {min} to {max}"
            ),
        }
    }
}

impl std::error::Error for Violation {}
