//! Linearizability checking for recorded histories.
//!
//! A test harness records every operation its clients ran, with the time it was invoked and
//! the time it completed (or that its outcome is unknown: a timeout, a dropped connection).
//! [`check`] decides whether some total order of the operations respects real time (an
//! operation that completed before another was invoked comes first) and explains every
//! answer by a sequential [`Model`]. It is the Wing & Gong search with Lowe's memoization of
//! (linearized set, model state): exponential in the worst case, fast on the short per-key
//! histories a test produces. Linearizability is local, so a multi-key history is checked
//! one key at a time ([`check_per_key`]).
//!
//! Operations whose outcome is unknown may take effect at any time after their invocation,
//! or never; the check succeeds once every completed operation is explained.
//!
//! The shared log's guarantees (total order, no skips, stable records) are checked by
//! [`log::check`], directly rather than by search.

use std::collections::{BTreeMap, HashSet};
use std::hash::Hash;

pub mod groups;
pub mod log;
pub mod register;
pub mod txn;

/// A checker's verdict in words, followed by each operation of `operations` it names (by
/// index): what the shared log's and consumer groups' histories print when they fail.
pub fn explain<O: std::fmt::Debug>(
    verdict: &impl std::fmt::Display,
    named: impl IntoIterator<Item = usize>,
    operations: &[O],
) -> String {
    let mut out = verdict.to_string();
    for i in named {
        out.push_str(&format!("\n  op {i}: {:?}", operations[i]));
    }
    out
}

/// A sequential specification.
pub trait Model: Clone + Eq + Hash {
    type Op;
    type Out: PartialEq;

    /// The state after `op` answered `out` (`None`: outcome unknown, any effect allowed), or
    /// `None` if the model cannot produce that answer from this state.
    fn step(&self, op: &Self::Op, out: Option<&Self::Out>) -> Option<Self>;
}

/// One operation as a client saw it. Times are from one monotonic clock (e.g. nanoseconds
/// since the test began).
#[derive(Clone, Debug)]
pub struct Operation<Op, Out> {
    pub client: usize,
    pub invoked_at: u64,
    /// `None`: the outcome is unknown (the request may or may not have taken effect).
    pub completed_at: Option<u64>,
    pub op: Op,
    pub out: Option<Out>,
}

/// Why a history is not linearizable: the longest prefix the search could explain, and the
/// operations that could not come next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub explained: usize,
    pub stuck_on: Vec<usize>,
}

/// Most search states remembered; a larger search is refused rather than exhausting memory.
pub const SEARCH_STATES_MAX: usize = 2_000_000;

#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Linearizable,
    NotLinearizable(Violation),
    /// The search exceeded [`SEARCH_STATES_MAX`]: no verdict.
    TooLarge,
}

/// Bit set of linearized operations.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Bits(Vec<u64>);

impl Bits {
    fn new(n: usize) -> Self {
        Bits(vec![0; n.div_ceil(64)])
    }
    fn get(&self, i: usize) -> bool {
        self.0[i / 64] & (1 << (i % 64)) != 0
    }
    fn set(&mut self, i: usize, on: bool) {
        if on {
            self.0[i / 64] |= 1 << (i % 64);
        } else {
            self.0[i / 64] &= !(1 << (i % 64));
        }
    }
}

/// Checks one history against `initial`.
pub fn check<M: Model>(initial: &M, history: &[Operation<M::Op, M::Out>]) -> Verdict {
    let n = history.len();
    let completed: Vec<usize> = (0..n)
        .filter(|&i| history[i].completed_at.is_some())
        .collect();
    let mut done = Bits::new(n);
    let mut done_completed = 0usize;
    let mut seen: HashSet<(Bits, M)> = HashSet::new();
    // Depth-first search; each frame is (state before, op linearized, next candidate index).
    let mut stack: Vec<(M, usize)> = Vec::new();
    let mut state = initial.clone();
    let mut next_candidate = 0usize;
    let mut best = (0usize, Vec::new());
    loop {
        if done_completed == completed.len() {
            return Verdict::Linearizable;
        }
        // An op may come next only if it was invoked before every pending completed op
        // returned.
        let horizon = (0..n)
            .filter(|&i| !done.get(i))
            .filter_map(|i| history[i].completed_at)
            .min()
            .unwrap_or(u64::MAX);
        let mut chosen = None;
        for (i, operation) in history.iter().enumerate().skip(next_candidate) {
            if done.get(i) || operation.invoked_at > horizon {
                continue;
            }
            let Some(next_state) = state.step(&operation.op, operation.out.as_ref()) else {
                continue;
            };
            done.set(i, true);
            let fresh = seen.insert((done.clone(), next_state.clone()));
            done.set(i, false);
            if fresh {
                chosen = Some((i, next_state));
                break;
            }
        }
        if let Some((i, next_state)) = chosen {
            if seen.len() > SEARCH_STATES_MAX {
                return Verdict::TooLarge;
            }
            done.set(i, true);
            stack.push((std::mem::replace(&mut state, next_state), i));
            done_completed += history[i].completed_at.is_some() as usize;
            next_candidate = 0;
            continue;
        }
        if stack.len() >= best.0 {
            let stuck = (0..n)
                .filter(|&i| !done.get(i) && history[i].completed_at.is_some())
                .collect();
            best = (stack.len(), stuck);
        }
        // Backtrack: undo the last choice and try the next candidate after it.
        let Some((previous, i)) = stack.pop() else {
            return Verdict::NotLinearizable(Violation {
                explained: best.0,
                stuck_on: best.1,
            });
        };
        done.set(i, false);
        done_completed -= history[i].completed_at.is_some() as usize;
        state = previous;
        next_candidate = i + 1;
    }
}

/// One operation of model `M`.
pub type OperationOf<M> = Operation<<M as Model>::Op, <M as Model>::Out>;

/// Operations tagged with the key they touched.
pub type KeyedHistory<K, M> = [(K, Operation<<M as Model>::Op, <M as Model>::Out>)];

/// Checks a history of single-key operations key by key; returns the first key that fails.
pub fn check_per_key<K: Ord + Clone, M: Model>(
    initial: &M,
    history: &KeyedHistory<K, M>,
) -> Result<(), (K, Verdict)>
where
    M::Op: Clone,
    M::Out: Clone,
{
    let mut by_key: BTreeMap<K, Vec<OperationOf<M>>> = BTreeMap::new();
    for (k, op) in history {
        by_key.entry(k.clone()).or_default().push(op.clone());
    }
    for (k, ops) in by_key {
        match check(initial, &ops) {
            Verdict::Linearizable => {}
            other => return Err((k, other)),
        }
    }
    Ok(())
}
