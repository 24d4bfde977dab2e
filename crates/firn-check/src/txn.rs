//! Checking a history of transactions for strict serializability, as Jepsen's Elle does
//! for read-write registers: every write of a key is a value no other write used, so a read
//! names the transaction it read from, and the store's own history of each key (its
//! versions, oldest first) gives the order of its writes. From these the checker builds
//! the dependency graph of the committed transactions —
//!
//! - *ww*: a transaction wrote the version after another's (write–write),
//! - *wr*: a transaction read a value another wrote (write–read),
//! - *rw*: a transaction read a version another overwrote next (an anti-dependency),
//! - *rt*: a transaction completed before another was invoked (real time) —
//!
//! and looks for a cycle: a history is strictly serializable only if the graph has none.
//! A cycle of ww edges only is G0 (dirty writes); of ww and wr, G1c (circular information
//! flow); one with an rw edge is G2 (anti-dependency: lost updates, write skew, read skew);
//! one that needs an rt edge is a real-time violation (a stale read). Besides cycles: a read
//! of a value an aborted transaction wrote (G1a), of a value no one wrote, a transaction not
//! reading its own earlier write, a committed write missing from the store's history, and
//! a transaction whose writes are in it only in part.
//!
//! Transactions whose outcome is unknown (a connection dropped, `UNCERTAIN`) count as
//! committed when any of their writes is in the store's history, else as never run.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

/// One step of a transaction. Values are unique per key among all writes; `None` read: the
/// key had no value (before its first write).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mop {
    Read { key: String, value: Option<u64> },
    Write { key: String, value: u64 },
}

/// What the client was told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Committed,
    /// Definitely not applied (refused).
    Aborted,
    /// May or may not have been applied; its reads are not known.
    Unknown,
}

/// One transaction as a client ran it; times from one monotonic clock.
#[derive(Clone, Debug)]
pub struct Txn {
    pub client: usize,
    pub invoked_at: u64,
    pub completed_at: u64,
    pub status: Status,
    pub mops: Vec<Mop>,
}

/// Each key's values in the order the store holds its versions, oldest first.
pub type VersionOrder = BTreeMap<String, Vec<u64>>;

/// A kind of dependency between two transactions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Edge {
    WW,
    WR,
    RW,
    RealTime,
}

/// What is wrong with a history; transactions are named by their index in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Anomaly {
    /// G1a: `reader` read a value only the aborted transaction `writer` wrote.
    AbortedRead {
        reader: usize,
        writer: usize,
        key: String,
        value: u64,
    },
    /// `reader` read a value no transaction wrote, or one missing from the store's history.
    UnknownRead {
        reader: usize,
        key: String,
        value: u64,
    },
    /// `txn` read `key` after writing it and did not see its own write.
    OwnWriteUnseen { txn: usize, key: String },
    /// A committed write missing from the key's history (lost).
    LostWrite {
        writer: usize,
        key: String,
        value: u64,
    },
    /// An aborted transaction's write in the key's history.
    AbortedWriteKept {
        writer: usize,
        key: String,
        value: u64,
    },
    /// Some of a transaction's writes are in the store's history and others are not.
    PartlyApplied { txn: usize },
    /// A cycle of dependencies: each transaction with the edge to the next (the last's to
    /// the first).
    Cycle {
        kind: CycleKind,
        steps: Vec<(usize, Edge)>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CycleKind {
    G0,
    G1c,
    G2,
    RealTime,
}

impl fmt::Display for Anomaly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Anomaly::Cycle { kind, steps } => {
                write!(f, "{kind:?} cycle:")?;
                for (t, e) in steps {
                    write!(f, " T{t} -{e:?}->")?;
                }
                write!(f, " T{}", steps.first().map_or(0, |s| s.0))
            }
            other => write!(f, "{other:?}"),
        }
    }
}

/// What a clean history held.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Transactions that took effect (committed, and unknown ones found applied).
    pub committed: usize,
    /// Dependency edges between them, real-time ones included.
    pub edges: usize,
}

/// Checks `txns` against each key's version order in the store.
pub fn check(txns: &[Txn], versions: &VersionOrder) -> Result<Summary, Vec<Anomaly>> {
    let mut anomalies = Vec::new();
    let mut writer: HashMap<(&str, u64), usize> = HashMap::new();
    for (i, t) in txns.iter().enumerate() {
        for m in &t.mops {
            if let Mop::Write { key, value } = m {
                writer.insert((key.as_str(), *value), i);
            }
        }
    }
    let position: HashMap<(&str, u64), usize> = versions
        .iter()
        .flat_map(|(k, vs)| {
            vs.iter()
                .enumerate()
                .map(move |(i, v)| ((k.as_str(), *v), i))
        })
        .collect();
    let in_history = |key: &str, value: u64| position.contains_key(&(key, value));

    // Which transactions took effect.
    let mut effective = vec![false; txns.len()];
    for (i, t) in txns.iter().enumerate() {
        let writes: Vec<(&str, u64)> = t
            .mops
            .iter()
            .filter_map(|m| match m {
                Mop::Write { key, value } => Some((key.as_str(), *value)),
                Mop::Read { .. } => None,
            })
            .collect();
        let kept = writes.iter().filter(|(k, v)| in_history(k, *v)).count();
        match t.status {
            Status::Committed => {
                effective[i] = true;
                for (k, v) in writes.iter().filter(|(k, v)| !in_history(k, *v)) {
                    anomalies.push(Anomaly::LostWrite {
                        writer: i,
                        key: k.to_string(),
                        value: *v,
                    });
                }
            }
            Status::Aborted => {
                for (k, v) in writes.iter().filter(|(k, v)| in_history(k, *v)) {
                    anomalies.push(Anomaly::AbortedWriteKept {
                        writer: i,
                        key: k.to_string(),
                        value: *v,
                    });
                }
            }
            Status::Unknown => {
                effective[i] = kept > 0;
                if kept > 0 && kept < writes.len() {
                    anomalies.push(Anomaly::PartlyApplied { txn: i });
                }
            }
        }
    }

    let mut graph = Graph::new(txns.len());
    // ww: each version's writer before the next version's.
    for (key, values) in versions {
        for pair in values.windows(2) {
            if let (Some(&a), Some(&b)) = (
                writer.get(&(key.as_str(), pair[0])),
                writer.get(&(key.as_str(), pair[1])),
            ) {
                graph.add(a, b, Edge::WW);
            }
        }
    }
    // wr and rw, from each committed read; and reads of one's own writes.
    for (i, t) in txns.iter().enumerate() {
        if !effective[i] || t.status == Status::Unknown {
            continue;
        }
        let mut own: HashMap<&str, u64> = HashMap::new();
        for m in &t.mops {
            match m {
                Mop::Write { key, value } => {
                    own.insert(key.as_str(), *value);
                }
                Mop::Read { key, value } => {
                    if let Some(mine) = own.get(key.as_str()) {
                        if *value != Some(*mine) {
                            anomalies.push(Anomaly::OwnWriteUnseen {
                                txn: i,
                                key: key.clone(),
                            });
                        }
                        continue;
                    }
                    let next_index = match value {
                        None => 0,
                        Some(v) => match (
                            writer.get(&(key.as_str(), *v)),
                            position.get(&(key.as_str(), *v)),
                        ) {
                            (Some(&w), _) if txns[w].status == Status::Aborted => {
                                anomalies.push(Anomaly::AbortedRead {
                                    reader: i,
                                    writer: w,
                                    key: key.clone(),
                                    value: *v,
                                });
                                continue;
                            }
                            (Some(&w), Some(&p)) => {
                                graph.add(w, i, Edge::WR);
                                p + 1
                            }
                            _ => {
                                anomalies.push(Anomaly::UnknownRead {
                                    reader: i,
                                    key: key.clone(),
                                    value: *v,
                                });
                                continue;
                            }
                        },
                    };
                    if let Some(next) = versions.get(key).and_then(|vs| vs.get(next_index))
                        && let Some(&w) = writer.get(&(key.as_str(), *next))
                    {
                        graph.add(i, w, Edge::RW);
                    }
                }
            }
        }
    }
    // rt: answered committed before the other was invoked. (One whose outcome was unknown
    // may take effect after its client gave up: it is ordered after what came before it,
    // never before what came after.)
    let mut by_completion: Vec<usize> = (0..txns.len()).filter(|&i| effective[i]).collect();
    by_completion.sort_by_key(|&i| txns[i].completed_at);
    for (n, &a) in by_completion.iter().enumerate() {
        if txns[a].status != Status::Committed {
            continue;
        }
        for &b in &by_completion[n + 1..] {
            if txns[a].completed_at < txns[b].invoked_at {
                graph.add(a, b, Edge::RealTime);
            }
        }
    }
    anomalies.extend(graph.cycles());
    if anomalies.is_empty() {
        Ok(Summary {
            committed: effective.iter().filter(|e| **e).count(),
            edges: graph.edges,
        })
    } else {
        Err(anomalies)
    }
}

/// The dependency graph, each edge kept once with its kinds.
struct Graph {
    out: Vec<BTreeMap<usize, Vec<Edge>>>,
    edges: usize,
}

impl Graph {
    fn new(n: usize) -> Self {
        Graph {
            out: vec![BTreeMap::new(); n],
            edges: 0,
        }
    }

    fn add(&mut self, from: usize, to: usize, edge: Edge) {
        if from == to {
            return;
        }
        let kinds = self.out[from].entry(to).or_default();
        if !kinds.contains(&edge) {
            kinds.push(edge);
            self.edges += 1;
        }
    }

    /// One cycle for each strongly connected component of more than one transaction,
    /// classified by the weakest edges that close it.
    fn cycles(&self) -> Vec<Anomaly> {
        let mut found = Vec::new();
        for component in self.components().into_iter().filter(|c| c.len() > 1) {
            // The weakest kind a cycle needs: try with ww only, then ww+wr, then +rw, then all.
            let tiers: [(&[Edge], CycleKind); 4] = [
                (&[Edge::WW], CycleKind::G0),
                (&[Edge::WW, Edge::WR], CycleKind::G1c),
                (&[Edge::WW, Edge::WR, Edge::RW], CycleKind::G2),
                (
                    &[Edge::WW, Edge::WR, Edge::RW, Edge::RealTime],
                    CycleKind::RealTime,
                ),
            ];
            for (allowed, kind) in tiers {
                if let Some(steps) = self.cycle_within(&component, allowed) {
                    found.push(Anomaly::Cycle { kind, steps });
                    break;
                }
            }
        }
        found
    }

    /// A cycle through the component's nodes using only `allowed` edges, if there is one
    /// (a breadth-first search back to each start node).
    fn cycle_within(&self, component: &[usize], allowed: &[Edge]) -> Option<Vec<(usize, Edge)>> {
        let inside: std::collections::HashSet<usize> = component.iter().copied().collect();
        let step = |n: usize| {
            self.out[n].iter().filter_map(|(&to, kinds)| {
                let kind = kinds.iter().filter(|k| allowed.contains(k)).min()?;
                inside.contains(&to).then_some((to, *kind))
            })
        };
        for &start in component {
            let mut came: HashMap<usize, (usize, Edge)> = HashMap::new();
            let mut queue = std::collections::VecDeque::from([start]);
            while let Some(n) = queue.pop_front() {
                for (to, kind) in step(n) {
                    if to == start {
                        let mut steps = vec![(n, kind)];
                        let mut at = n;
                        while at != start {
                            let (from, k) = came[&at];
                            steps.push((from, k));
                            at = from;
                        }
                        steps.reverse();
                        return Some(steps);
                    }
                    if let std::collections::hash_map::Entry::Vacant(e) = came.entry(to) {
                        e.insert((n, kind));
                        queue.push_back(to);
                    }
                }
            }
        }
        None
    }

    /// Strongly connected components (Tarjan's algorithm, iteratively).
    fn components(&self) -> Vec<Vec<usize>> {
        let n = self.out.len();
        let mut index = vec![usize::MAX; n];
        let mut low = vec![0; n];
        let mut on_stack = vec![false; n];
        let mut stack = Vec::new();
        let mut next = 0;
        let mut out = Vec::new();
        for root in 0..n {
            if index[root] != usize::MAX {
                continue;
            }
            let mut work: Vec<(usize, Vec<usize>)> =
                vec![(root, self.out[root].keys().copied().collect())];
            index[root] = next;
            low[root] = next;
            next += 1;
            stack.push(root);
            on_stack[root] = true;
            while let Some((v, pending)) = work.last_mut() {
                let v = *v;
                if let Some(w) = pending.pop() {
                    if index[w] == usize::MAX {
                        index[w] = next;
                        low[w] = next;
                        next += 1;
                        stack.push(w);
                        on_stack[w] = true;
                        work.push((w, self.out[w].keys().copied().collect()));
                    } else if on_stack[w] {
                        low[v] = low[v].min(index[w]);
                    }
                    continue;
                }
                work.pop();
                if let Some((parent, _)) = work.last() {
                    low[*parent] = low[*parent].min(low[v]);
                }
                if low[v] == index[v] {
                    let mut component = Vec::new();
                    while let Some(w) = stack.pop() {
                        on_stack[w] = false;
                        component.push(w);
                        if w == v {
                            break;
                        }
                    }
                    out.push(component);
                }
            }
        }
        out
    }
}
