//! A consumer group's guarantees (Redis semantics, delivery policy `first`; or any policy
//! with server-side redelivery, `ACKWAIT`, see [`Options`]), checked on a recorded history.
//!
//! A harness records what its processes did to one stream and one group, each operation
//! with the times it was invoked and completed (nanoseconds on one monotonic clock):
//! adds (`XADD`, with a payload unique to the add), deliveries (`XREADGROUP … >`, "new", or
//! `XAUTOCLAIM` with a min-idle time, "claim": the entries returned, with their delivery
//! count when the harness knows it) and acks (`XACK` of one id, answering 1 or 0). Any of
//! them may be refused (it never happened) or end with an unknown outcome (a dropped
//! connection, a timeout: it may or may not have happened). At the end the harness drains
//! the group — claims every pending entry and reads `>` until nothing is left, acking all —
//! and records the group's pending ids (`XPENDING`) after every operation has completed,
//! [`History::final_pending`]. [`check`] then verifies:
//!
//! - **(a) Nothing acknowledged is lost.** Every id an acknowledged add answered is
//!   delivered at least once (the drain included) and is acked by the end: an XACK of it
//!   answered 1, or one had an unknown outcome and the id is not pending at the end. The
//!   same holds for every id any delivery returned (an add with an unknown outcome that took
//!   effect). Every delivered entry is explained by an add: by the id it was acknowledged
//!   with and its payload, or by the payload of an add with an unknown outcome invoked before
//!   the delivery completed; one id is never read with two payloads, nor one add at two ids.
//! - **(b) Acked means done.** Once an XACK of an id answered 1, no delivery invoked after
//!   that XACK completed returns the id, and the id is not pending at the end.
//! - **(c) One holder at a time.** The server's truth is the pending list: an id is owned by
//!   one consumer, and moves to another only by a claim. So:
//!   - `>` hands out an id at most once, ever: two "new" deliveries returning one id are a
//!     violation, and so is a "new" delivery of an id that some delivery had returned (and
//!     completed) before it began.
//!   - A claim with min-idle `m` takes an id only if its last delivery is `m` old: a claim
//!     that returned an id and completed less than `m` (minus [`CLOCK_SLACK_NS`]) after the
//!     start of a delivery of that id which completed before the claim began is a violation.
//!     (The server measures idle time by the stamps of its log entries; a stamp lies between
//!     its request's invocation and completion, so this bound is safe.)
//!   - After a claim moved an id from A to B, A still *believes* it holds it: A may process
//!     it and ack it. As in Redis, XACK does not check the owner, so whichever of A's and B's
//!     XACKs comes first answers 1 and the other answers 0; the id was processed twice
//!     (counted as a redelivery, the price of at-least-once). The rule is therefore on the
//!     answers: **at most one XACK of an id answers 1**, ever. An XACK answering 1 needs a
//!     delivery of the id invoked before it completed (one returning the id, or one whose
//!     outcome is unknown). An XACK answering 0 for an id a delivery returned before it
//!     began, when no other XACK of the id answered 1 or had an unknown outcome before it
//!     completed, shows the pending list lost the id.
//!   - **With ACKWAIT** ([`Options::ack_wait_ms`]), `>` also gives an id again once its
//!     last delivery is ACKWAIT old (a redelivery). Then the first rule gives way to the
//!     second: a `>` delivery of an id some delivery had returned (and completed) before it
//!     began is judged as a claim with min-idle ACKWAIT ([`Violation::RedeliveredTooSoon`]),
//!     and its delivery count as a claim's. Of two such deliveries of one id that overlap in
//!     time (claims too, under any policy), one came first and the other must have waited
//!     for it: a violation when neither order fits.
//!   - A delivery count, when the harness knows it, is 1 for a "new" delivery, and for a
//!     claim lies between 1 + the deliveries of the id completed before the claim began and
//!     1 + those invoked before it completed (unknown-outcome deliveries included).
//! - **(d) Redeliveries are counted**, not judged: at-least-once delivery may give an id
//!   several times (a crashed consumer's entries claimed by another, a claim racing an ack).
//!   [`Summary`] says how many.
//!
//! Like [`crate::log`], there is no search: each property is a direct comparison over the
//! history, and a [`Violation`] names the operations that show it. This module only judges
//! a history; it never runs operations, reads a clock or talks to a node. Stream ids are
//! never reused (XADD with `*` only), so an id names one entry for the whole history.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use firn_model::LogSeq;

mod violation;
pub use violation::{PhantomCause, Violation};

/// An operation's place in [`History::operations`].
pub type OpIndex = usize;

/// How far the server's clock (the stamps of its log entries) and the harness's may drift
/// apart over a run, and the rounding of idle times to milliseconds; only the min-idle rule
/// of claims uses it.
pub const CLOCK_SLACK_NS: u64 = 50_000_000;

/// What the checker must know of the group's options.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// The group's `ACKWAIT`: `>` may give an id again once its last delivery is this old.
    /// None (Redis's `first` without ACKWAIT): `>` hands an id out once.
    pub ack_wait_ms: Option<u64>,
}

/// How an operation ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome<T> {
    /// It answered this.
    Ok(T),
    /// Refused before it took effect (TRYAGAIN, CLUSTERDOWN, no connection): it never
    /// happened.
    Refused,
    /// It may or may not have taken effect (UNCERTAIN, a timeout, a dropped connection).
    Unknown,
}

/// One entry a delivery returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivered {
    pub id: LogSeq,
    pub payload: String,
    /// The delivery count the server reported with it (XPENDING's), if the harness knows it.
    pub deliveries: Option<u64>,
}

/// How a delivery chose its entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeliveryKind {
    /// `XREADGROUP … >`: entries never delivered to the group.
    New,
    /// `XAUTOCLAIM … min_idle_ms …` (without JUSTID): pending entries idle that long.
    Claim { min_idle_ms: u64 },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GroupOp {
    /// `XADD stream * … payload …`, answering the id.
    Add {
        payload: String,
        outcome: Outcome<LogSeq>,
    },
    Deliver {
        consumer: String,
        kind: DeliveryKind,
        outcome: Outcome<Vec<Delivered>>,
    },
    /// `XACK stream group id`, answering whether it removed the id from the pending list.
    Ack {
        consumer: String,
        id: LogSeq,
        outcome: Outcome<bool>,
    },
}

/// One operation as a process saw it; `completed_at` is when the answer came or the process
/// gave up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupOperation {
    pub process: usize,
    pub invoked_at: u64,
    pub completed_at: u64,
    pub op: GroupOp,
}

/// Every operation of a run, in any order, and the group's pending ids at the end.
#[derive(Clone, Debug, Default)]
pub struct History {
    pub operations: Vec<GroupOperation>,
    /// The pending ids as listed after every operation had completed (after the drain).
    pub final_pending: Vec<LogSeq>,
}

impl History {
    pub fn push(&mut self, operation: GroupOperation) -> OpIndex {
        self.operations.push(operation);
        self.operations.len() - 1
    }

    /// The violation in words, followed by each operation it names.
    pub fn explain(&self, violation: &Violation) -> String {
        crate::explain(violation, violation.operations(), &self.operations)
    }
}

impl Extend<GroupOperation> for History {
    fn extend<I: IntoIterator<Item = GroupOperation>>(&mut self, iter: I) {
        self.operations.extend(iter);
    }
}

/// What a history that passed contained.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub adds_acknowledged: usize,
    pub adds_refused: usize,
    pub adds_unknown: usize,
    /// Adds with an unknown outcome whose entry a delivery returned.
    pub adds_unknown_delivered: usize,
    /// Deliveries that answered, by kind, and those whose outcome is unknown.
    pub deliveries_new: usize,
    pub deliveries_claim: usize,
    pub deliveries_unknown: usize,
    /// Entries returned by all deliveries, and the distinct ids among them.
    pub entries_delivered: usize,
    pub ids_delivered: usize,
    /// Entries returned again after their id's first delivery (entries − ids), the ids
    /// delivered more than once, and the most deliveries of one id.
    pub redeliveries: usize,
    pub ids_redelivered: usize,
    pub deliveries_of_one_id_max: usize,
    pub acks_removed: usize,
    pub acks_found_nothing: usize,
    pub acks_unknown: usize,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} adds acknowledged ({} refused, {} unknown, {} of those delivered); {} ids \
             delivered in {} entries by {} `>` and {} claims ({} deliveries unknown): {} \
             redeliveries of {} ids, at most {} deliveries of one id; acks: {} removed, {} \
             found nothing, {} unknown",
            self.adds_acknowledged,
            self.adds_refused,
            self.adds_unknown,
            self.adds_unknown_delivered,
            self.ids_delivered,
            self.entries_delivered,
            self.deliveries_new,
            self.deliveries_claim,
            self.deliveries_unknown,
            self.redeliveries,
            self.ids_redelivered,
            self.deliveries_of_one_id_max,
            self.acks_removed,
            self.acks_found_nothing,
            self.acks_unknown,
        )
    }
}

/// What the history shows of one id.
#[derive(Default)]
struct Trace {
    /// The deliveries that returned it, with the count they reported.
    deliveries: Vec<(OpIndex, Option<u64>)>,
    /// Its XACKs that were not refused.
    acks: Vec<OpIndex>,
}

/// Checks `history` of a group without ACKWAIT; see [`check_with`].
pub fn check(history: &History) -> Result<Summary, Violation> {
    check_with(history, Options::default())
}

/// Checks `history` against the guarantees of a group with `options`; returns the first
/// violation found.
///
/// # Panics
///
/// If two adds carry one payload, or an operation completes before it is invoked: the
/// harness, not the group, is wrong then.
pub fn check_with(history: &History, options: Options) -> Result<Summary, Violation> {
    let ops = &history.operations;
    let mut summary = Summary::default();
    let mut add_by_payload: HashMap<&str, OpIndex> = HashMap::new();
    let mut add_by_id: BTreeMap<LogSeq, OpIndex> = BTreeMap::new();
    let mut traces: BTreeMap<LogSeq, Trace> = BTreeMap::new();
    // When each delivery of unknown outcome began: it may have delivered any id.
    let mut unknown_deliveries: Vec<u64> = Vec::new();
    for (i, o) in ops.iter().enumerate() {
        assert!(
            o.completed_at >= o.invoked_at,
            "op {i} completed at {} before it was invoked at {}",
            o.completed_at,
            o.invoked_at
        );
        match &o.op {
            GroupOp::Add { payload, outcome } => {
                if let Some(other) = add_by_payload.insert(payload, i) {
                    panic!("adds op {other} and op {i} carry one payload {payload:?}");
                }
                match outcome {
                    Outcome::Ok(id) => {
                        summary.adds_acknowledged += 1;
                        if let Some(first) = add_by_id.insert(*id, i) {
                            return Err(Violation::DuplicateId {
                                id: *id,
                                first,
                                second: i,
                            });
                        }
                    }
                    Outcome::Refused => summary.adds_refused += 1,
                    Outcome::Unknown => summary.adds_unknown += 1,
                }
            }
            GroupOp::Deliver { kind, outcome, .. } => match outcome {
                Outcome::Ok(_) if *kind == DeliveryKind::New => summary.deliveries_new += 1,
                Outcome::Ok(_) => summary.deliveries_claim += 1,
                Outcome::Refused => {}
                Outcome::Unknown => {
                    summary.deliveries_unknown += 1;
                    unknown_deliveries.push(o.invoked_at);
                }
            },
            GroupOp::Ack { id, outcome, .. } => {
                match outcome {
                    Outcome::Ok(true) => summary.acks_removed += 1,
                    Outcome::Ok(false) => summary.acks_found_nothing += 1,
                    Outcome::Refused => continue,
                    Outcome::Unknown => summary.acks_unknown += 1,
                }
                traces.entry(*id).or_default().acks.push(i);
            }
        }
    }
    unknown_deliveries.sort_unstable();

    // Every delivered entry, traced to the add that wrote it.
    let mut author_of_id: HashMap<LogSeq, OpIndex> = HashMap::new();
    let mut id_of_author: HashMap<OpIndex, LogSeq> = HashMap::new();
    for (d, o) in ops.iter().enumerate() {
        let GroupOp::Deliver {
            outcome: Outcome::Ok(entries),
            ..
        } = &o.op
        else {
            continue;
        };
        for e in entries {
            let add = author(ops, &add_by_payload, &add_by_id, d, e)?;
            let mismatch = |add| Violation::Mismatch {
                delivery: d,
                add,
                id: e.id,
            };
            match author_of_id.insert(e.id, add) {
                Some(other) if other != add => return Err(mismatch(other)),
                _ => {}
            }
            match id_of_author.insert(add, e.id) {
                Some(other) if other != e.id => return Err(mismatch(add)),
                _ => {}
            }
            summary.entries_delivered += 1;
            traces
                .entry(e.id)
                .or_default()
                .deliveries
                .push((d, e.deliveries));
        }
    }
    summary.adds_unknown_delivered = id_of_author
        .keys()
        .filter(|a| {
            matches!(
                ops[**a].op,
                GroupOp::Add {
                    outcome: Outcome::Unknown,
                    ..
                }
            )
        })
        .count();

    // What may never happen first, then what must have happened by the end.
    let id_histories = || {
        traces.iter().map(|(&id, trace)| IdHistory {
            ops,
            id,
            trace,
            unknown_deliveries: &unknown_deliveries,
            ack_wait_ms: options.ack_wait_ms,
        })
    };
    for h in id_histories() {
        h.check_new()?;
        h.check_acks()?;
        h.check_claims()?;
        h.check_counts()?;
        let n = h.trace.deliveries.len();
        if n > 0 {
            summary.ids_delivered += 1;
            summary.redeliveries += n - 1;
            summary.ids_redelivered += (n > 1) as usize;
            summary.deliveries_of_one_id_max = summary.deliveries_of_one_id_max.max(n);
        }
    }
    for (&id, &add) in &add_by_id {
        if traces.get(&id).is_none_or(|t| t.deliveries.is_empty()) {
            return Err(Violation::Lost { add, id });
        }
    }
    let final_pending: HashSet<LogSeq> = history.final_pending.iter().copied().collect();
    for h in id_histories() {
        h.check_end(final_pending.contains(&h.id))?;
    }
    // Pending at the end, yet never delivered as far as the history shows (an unknown add
    // taken by an unknown delivery): the drain did not finish.
    for &id in &history.final_pending {
        if !traces.contains_key(&id) {
            return Err(Violation::NotAcked { id, delivery: None });
        }
    }
    Ok(summary)
}

/// The add that wrote entry `e`, which delivery `d` returned: the one acknowledged with its
/// id (and then with its payload), else the one that wrote its payload with an unknown
/// outcome, invoked before the delivery completed.
fn author(
    ops: &[GroupOperation],
    add_by_payload: &HashMap<&str, OpIndex>,
    add_by_id: &BTreeMap<LogSeq, OpIndex>,
    d: OpIndex,
    e: &Delivered,
) -> Result<OpIndex, Violation> {
    let payload_of = |add: OpIndex| match &ops[add].op {
        GroupOp::Add { payload, .. } => payload.as_str(),
        _ => unreachable!("ids and payloads index adds only"),
    };
    let mismatch = |add| Violation::Mismatch {
        delivery: d,
        add,
        id: e.id,
    };
    if let Some(&add) = add_by_id.get(&e.id) {
        return if payload_of(add) == e.payload {
            Ok(add)
        } else {
            Err(mismatch(add))
        };
    }
    let phantom = |cause| Violation::Phantom {
        delivery: d,
        id: e.id,
        cause,
    };
    let Some(&add) = add_by_payload.get(e.payload.as_str()) else {
        return Err(phantom(PhantomCause::NoSuchAdd));
    };
    let GroupOp::Add { outcome, .. } = &ops[add].op else {
        unreachable!("payloads index adds only");
    };
    match outcome {
        // Acknowledged with another id: its entry returned at the wrong one.
        Outcome::Ok(_) => Err(mismatch(add)),
        Outcome::Refused => Err(phantom(PhantomCause::AddRefused(add))),
        Outcome::Unknown if ops[add].invoked_at > ops[d].completed_at => {
            Err(phantom(PhantomCause::AddLater(add)))
        }
        Outcome::Unknown => Ok(add),
    }
}

/// The rules about one id, over its deliveries and acks.
struct IdHistory<'a> {
    ops: &'a [GroupOperation],
    id: LogSeq,
    trace: &'a Trace,
    unknown_deliveries: &'a [u64],
    ack_wait_ms: Option<u64>,
}

impl IdHistory<'_> {
    fn kind(&self, d: OpIndex) -> DeliveryKind {
        match &self.ops[d].op {
            GroupOp::Deliver { kind, .. } => *kind,
            _ => unreachable!("traces list deliveries"),
        }
    }

    fn ack_answer(&self, a: OpIndex) -> Option<bool> {
        match &self.ops[a].op {
            GroupOp::Ack {
                outcome: Outcome::Ok(removed),
                ..
            } => Some(*removed),
            GroupOp::Ack { .. } => None,
            _ => unreachable!("traces list acks"),
        }
    }

    fn deliveries(&self) -> impl Iterator<Item = OpIndex> + '_ {
        self.trace.deliveries.iter().map(|(d, _)| *d)
    }

    /// Deliveries of unknown outcome invoked before `t`.
    fn unknown_before(&self, t: u64) -> usize {
        self.unknown_deliveries.partition_point(|&at| at < t)
    }

    /// `>` hands an id out once, and never after it was delivered (without ACKWAIT; with it,
    /// [`Self::check_claims`] judges redeliveries).
    fn check_new(&self) -> Result<(), Violation> {
        let ops = self.ops;
        if self.ack_wait_ms.is_some() {
            return Ok(());
        }
        let mut news = self
            .deliveries()
            .filter(|&d| self.kind(d) == DeliveryKind::New);
        let Some(new) = news.next() else {
            return Ok(());
        };
        if let Some(second) = news.next() {
            return Err(Violation::NewTwice {
                id: self.id,
                first: new,
                second,
            });
        }
        match self
            .deliveries()
            .find(|&d| d != new && ops[d].completed_at < ops[new].invoked_at)
        {
            Some(earlier) => Err(Violation::NewAfterDelivered {
                id: self.id,
                earlier,
                new,
            }),
            None => Ok(()),
        }
    }

    /// One XACK removes the id; nothing delivers it after; an XACK that removes it follows
    /// a delivery; one that finds nothing had a reason to.
    fn check_acks(&self) -> Result<(), Violation> {
        let (ops, id) = (self.ops, self.id);
        let mut removed: Vec<OpIndex> = (self.trace.acks.iter().copied())
            .filter(|&a| self.ack_answer(a) == Some(true))
            .collect();
        removed.sort_by_key(|&a| (ops[a].completed_at, a));
        if let [first, second, ..] = removed[..] {
            return Err(Violation::AckedTwice { id, first, second });
        }
        if let Some(&ack) = removed.first() {
            let done = ops[ack].completed_at;
            if let Some(delivery) = self.deliveries().find(|&d| ops[d].invoked_at > done) {
                return Err(Violation::DeliveredAfterAck { id, ack, delivery });
            }
            let delivered = self.deliveries().any(|d| ops[d].invoked_at < done);
            if !delivered && self.unknown_before(done) == 0 {
                return Err(Violation::AckOfUndelivered { id, ack });
            }
        }
        for &ack in &self.trace.acks {
            if self.ack_answer(ack) != Some(false) {
                continue;
            }
            let Some(delivery) = self
                .deliveries()
                .find(|&d| ops[d].completed_at < ops[ack].invoked_at)
            else {
                continue;
            };
            let other_may_have = self.trace.acks.iter().any(|&other| {
                other != ack
                    && self.ack_answer(other) != Some(false)
                    && ops[other].invoked_at < ops[ack].completed_at
            });
            if !other_may_have {
                return Err(Violation::AckFoundNothing { id, delivery, ack });
            }
        }
        Ok(())
    }

    /// The min-idle time a delivery of the id after another one needs: a claim's, or
    /// ACKWAIT for a `>` (None: `>` never redelivers, see [`Self::check_new`]).
    fn min_idle_ms(&self, d: OpIndex) -> Option<u64> {
        match self.kind(d) {
            DeliveryKind::Claim { min_idle_ms } => Some(min_idle_ms),
            DeliveryKind::New => self.ack_wait_ms,
        }
    }

    /// Whether delivery `later` may have taken the id after delivery `d`: as a claim (or a
    /// redelivery under ACKWAIT) once `d` was as idle as it asked.
    fn may_follow(&self, later: OpIndex, d: OpIndex) -> bool {
        let ops = self.ops;
        self.min_idle_ms(later).is_some_and(|ms| {
            ops[later].completed_at + CLOCK_SLACK_NS
                >= ops[d].invoked_at + ms.saturating_mul(1_000_000)
        })
    }

    /// A claim (or a redelivery by `>` under ACKWAIT) takes the id only once its last
    /// delivery is as idle as the claim asked; of two such deliveries that overlap in time,
    /// one came first, and the other must have waited for it.
    fn check_claims(&self) -> Result<(), Violation> {
        let ops = self.ops;
        let overlap = |a: OpIndex, b: OpIndex| {
            a != b
                && ops[a].completed_at >= ops[b].invoked_at
                && ops[b].completed_at >= ops[a].invoked_at
        };
        for claim in self.deliveries() {
            let Some(min_idle_ms) = self.min_idle_ms(claim) else {
                continue;
            };
            let latest = self
                .deliveries()
                .filter(|&d| d != claim && ops[d].completed_at < ops[claim].invoked_at)
                .max_by_key(|&d| ops[d].invoked_at)
                .filter(|&d| !self.may_follow(claim, d));
            let racing = || {
                self.deliveries().find(|&d| {
                    overlap(claim, d)
                        && self.min_idle_ms(d).is_some()
                        && !self.may_follow(claim, d)
                        && !self.may_follow(d, claim)
                })
            };
            let Some(earlier) = latest.or_else(racing) else {
                continue;
            };
            let id = self.id;
            return Err(match self.kind(claim) {
                DeliveryKind::New => Violation::RedeliveredTooSoon {
                    id,
                    earlier,
                    delivery: claim,
                    ack_wait_ms: min_idle_ms,
                },
                DeliveryKind::Claim { .. } => Violation::ClaimedTooSoon {
                    id,
                    earlier,
                    claim,
                    min_idle_ms,
                },
            });
        }
        Ok(())
    }

    /// Reported delivery counts lie within what the history allows.
    fn check_counts(&self) -> Result<(), Violation> {
        let ops = self.ops;
        for &(delivery, count) in &self.trace.deliveries {
            let Some(count) = count else {
                continue;
            };
            let (min, max) = match self.min_idle_ms(delivery) {
                None => (1, 1),
                Some(_) => {
                    let others = || self.deliveries().filter(|&d| d != delivery);
                    let before = others()
                        .filter(|&d| ops[d].completed_at < ops[delivery].invoked_at)
                        .count();
                    let maybe = others()
                        .filter(|&d| ops[d].invoked_at < ops[delivery].completed_at)
                        .count()
                        + self.unknown_before(ops[delivery].completed_at);
                    (1 + before as u64, 1 + maybe as u64)
                }
            };
            if count < min || count > max {
                return Err(Violation::DeliveryCount {
                    id: self.id,
                    delivery,
                    count,
                    min,
                    max,
                });
            }
        }
        Ok(())
    }

    /// Delivered means acked by the end, and acked means not pending at the end.
    fn check_end(&self, pending_at_end: bool) -> Result<(), Violation> {
        let removed_by =
            (self.trace.acks.iter().copied()).find(|&a| self.ack_answer(a) == Some(true));
        if let Some(ack) = removed_by {
            return match pending_at_end {
                true => Err(Violation::AckUndone { id: self.id, ack }),
                false => Ok(()),
            };
        }
        let first = self.deliveries().next();
        if first.is_none() && !pending_at_end {
            return Ok(());
        }
        let maybe_acked = (self.trace.acks.iter()).any(|&a| self.ack_answer(a).is_none());
        if maybe_acked && !pending_at_end {
            return Ok(());
        }
        Err(Violation::NotAcked {
            id: self.id,
            delivery: first,
        })
    }
}
