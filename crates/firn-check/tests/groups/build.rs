//! Builders of hand-made consumer-group histories for `tests/groups.rs`: entry `n` is added
//! with payload `e{n}` and id `id(n)`; times are in milliseconds.

use firn_check::groups::{
    Delivered, DeliveryKind, GroupOp, GroupOperation, History, OpIndex, Options, Outcome,
};
use firn_model::LogSeq;

pub const MS: u64 = 1_000_000;

pub fn id(n: u64) -> LogSeq {
    LogSeq::new(1_700_000_000_000 + n, 0)
}

pub fn push(h: &mut History, process: usize, at: (u64, u64), op: GroupOp) -> OpIndex {
    h.push(GroupOperation {
        process,
        invoked_at: at.0 * MS,
        completed_at: at.1 * MS,
        op,
    })
}

/// An add of entry `n` (payload `e{n}`), acknowledged with `id(n)`.
pub fn add(h: &mut History, at: (u64, u64), n: u64) -> OpIndex {
    let op = GroupOp::Add {
        payload: format!("e{n}"),
        outcome: Outcome::Ok(id(n)),
    };
    push(h, 0, at, op)
}

pub fn entries(ns: &[u64]) -> Vec<Delivered> {
    ns.iter()
        .map(|&n| Delivered {
            id: id(n),
            payload: format!("e{n}"),
            deliveries: None,
        })
        .collect()
}

pub fn deliver(
    h: &mut History,
    at: (u64, u64),
    c: usize,
    kind: DeliveryKind,
    ns: &[u64],
) -> OpIndex {
    let op = GroupOp::Deliver {
        consumer: format!("c{c}"),
        kind,
        outcome: Outcome::Ok(entries(ns)),
    };
    push(h, c, at, op)
}

pub fn new(h: &mut History, at: (u64, u64), c: usize, ns: &[u64]) -> OpIndex {
    deliver(h, at, c, DeliveryKind::New, ns)
}

pub fn claim(h: &mut History, at: (u64, u64), c: usize, min_idle_ms: u64, ns: &[u64]) -> OpIndex {
    deliver(h, at, c, DeliveryKind::Claim { min_idle_ms }, ns)
}

pub fn ack(h: &mut History, at: (u64, u64), c: usize, n: u64, outcome: Outcome<bool>) -> OpIndex {
    let op = GroupOp::Ack {
        consumer: format!("c{c}"),
        id: id(n),
        outcome,
    };
    push(h, c, at, op)
}

/// A group's options with an ACKWAIT of 1000 ms.
pub const ACK_WAIT: Options = Options {
    ack_wait_ms: Some(1_000),
};

/// Entry 1 delivered new to c1 at [2, 3] ms, which crashes; `>` gives it again to c2 at
/// `again`; c2's ack removes it, and c1's late one finds nothing.
pub fn redelivered(again: (u64, u64)) -> History {
    let mut h = History::default();
    add(&mut h, (0, 1), 1);
    new(&mut h, (2, 3), 1, &[1]);
    new(&mut h, again, 2, &[1]);
    ack(&mut h, (again.1 + 1, again.1 + 2), 2, 1, Outcome::Ok(true));
    ack(&mut h, (again.1 + 3, again.1 + 4), 1, 1, Outcome::Ok(false));
    h
}

/// Sets the delivery count delivery `d` reported with its entries.
pub fn set_count(h: &mut History, d: OpIndex, count: u64) {
    match &mut h.operations[d].op {
        GroupOp::Deliver {
            outcome: Outcome::Ok(entries),
            ..
        } => entries.iter_mut().for_each(|e| e.deliveries = Some(count)),
        other => panic!("op {d} is not a delivery that answered: {other:?}"),
    }
}
