//! Transactions across shards: the names their parts share between nodes (docs/architecture.md,
//! "Transactions across shards").

use serde::{Deserialize, Serialize};

use crate::hlc::CommitTs;

/// A transaction across shards: the coordinating node, a counter and random bits, so that
/// two coordinators never name two transactions alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TxnId(pub u128);

impl TxnId {
    pub fn to_bytes(self) -> [u8; 16] {
        self.0.to_be_bytes()
    }
}

impl std::fmt::Display for TxnId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// How a transaction ended, as its anchor's record says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnOutcome {
    /// Every write of the transaction is a version stamped `at`, on every shard; its steps
    /// ran, or — `otherwise` — its compares failed and its `otherwise` steps ran.
    Committed {
        at: CommitTs,
        otherwise: bool,
    },
    Aborted,
}

/// What a transaction checks of a key before it runs (etcd's compare): the transaction's
/// steps run when every compare holds, its `otherwise` steps when one does not.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compare {
    pub key: crate::Key,
    pub target: CompareTarget,
    pub op: CompareOp,
}

/// What of the key's newest version a [`Compare`] looks at, and the operand.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CompareTarget {
    /// The number of the key's newest version while it has a value; 0 when it has none
    /// (never written, deleted).
    Version(crate::Version),
    /// The key's value; a key without a string value has none, which is `!=` any value and
    /// neither `<` nor `>` one.
    Value(bytes::Bytes),
    /// Whether the key has a value (`=` and `!=` only).
    Exists(bool),
    /// The commit stamp of the key's newest version, a deletion's included (`ZERO`: never
    /// written). `WATCH` is a compare of it, `<=` the stamp it saw.
    Stamp(CommitTs),
    /// Whether the lease is live (`=`) or not (`!=`); the compare's key is the lease's
    /// [`crate::lease_key`]. What `SET … LEASE id` checks.
    Lease(crate::LeaseId),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CompareOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CompareOp {
    /// The operator as written (`=`, `!=`, `<`, `<=`, `>`, `>=`).
    pub fn parse(s: &str) -> Option<CompareOp> {
        Some(match s {
            "=" | "==" => CompareOp::Eq,
            "!=" => CompareOp::Ne,
            "<" => CompareOp::Lt,
            "<=" => CompareOp::Le,
            ">" => CompareOp::Gt,
            ">=" => CompareOp::Ge,
            _ => return None,
        })
    }

    fn holds(self, ordering: std::cmp::Ordering) -> bool {
        use std::cmp::Ordering::*;
        match self {
            CompareOp::Eq => ordering == Equal,
            CompareOp::Ne => ordering != Equal,
            CompareOp::Lt => ordering == Less,
            CompareOp::Le => ordering != Greater,
            CompareOp::Gt => ordering == Greater,
            CompareOp::Ge => ordering != Less,
        }
    }
}

/// A key's newest state, as a [`Compare`] sees it.
#[derive(Clone, Debug, Default)]
pub struct Compared<'a> {
    /// The newest version's number while the key has a value; 0 otherwise.
    pub version: crate::Version,
    /// The string value, if the key has one.
    pub value: Option<&'a [u8]>,
    pub exists: bool,
    /// The newest version's stamp, a deletion's included.
    pub stamp: CommitTs,
    /// For a [`CompareTarget::Lease`]: whether the lease is live.
    pub lease_live: bool,
}

impl Compare {
    /// Refuses a compare that can never mean anything (an order on `EXISTS`).
    pub fn check(&self) -> Result<(), crate::FirnError> {
        match (&self.target, self.op) {
            (CompareTarget::Exists(_), CompareOp::Eq | CompareOp::Ne) => Ok(()),
            (CompareTarget::Exists(_), _) => Err(crate::FirnError::BadArgument(
                "EXISTS compares with = or != only".into(),
            )),
            (CompareTarget::Lease(_), CompareOp::Eq | CompareOp::Ne) => Ok(()),
            (CompareTarget::Lease(_), _) => Err(crate::FirnError::BadArgument(
                "a lease compares with = or != only".into(),
            )),
            _ => Ok(()),
        }
    }

    /// Whether the compare holds of `key`'s state `now`.
    pub fn holds(&self, now: &Compared<'_>) -> bool {
        match &self.target {
            CompareTarget::Version(v) => self.op.holds(now.version.cmp(v)),
            CompareTarget::Value(v) => match now.value {
                Some(mine) => self.op.holds(mine.cmp(v.as_ref())),
                None => self.op == CompareOp::Ne,
            },
            CompareTarget::Exists(e) => self.op.holds(now.exists.cmp(e)),
            CompareTarget::Stamp(t) => self.op.holds(now.stamp.cmp(t)),
            CompareTarget::Lease(_) => self.op.holds(now.lease_live.cmp(&true)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compare(target: CompareTarget, op: &str) -> Compare {
        Compare {
            key: crate::Key::new("k").unwrap(),
            target,
            op: CompareOp::parse(op).unwrap(),
        }
    }

    #[test]
    fn compares_hold_as_their_operators_say() {
        let now = Compared {
            version: 3,
            value: Some(b"b"),
            exists: true,
            stamp: CommitTs::new(10, 0),
            lease_live: true,
        };
        assert!(compare(CompareTarget::Lease(7), "=").holds(&now));
        assert!(!compare(CompareTarget::Lease(7), "!=").holds(&now));
        assert!(compare(CompareTarget::Version(3), "=").holds(&now));
        assert!(compare(CompareTarget::Version(4), "<").holds(&now));
        assert!(!compare(CompareTarget::Version(3), ">").holds(&now));
        assert!(compare(CompareTarget::Value("a".into()), ">").holds(&now));
        assert!(compare(CompareTarget::Exists(true), "=").holds(&now));
        assert!(compare(CompareTarget::Stamp(CommitTs::new(10, 0)), "<=").holds(&now));
        assert!(!compare(CompareTarget::Stamp(CommitTs::new(9, 0)), "<=").holds(&now));
        // A key without a value: != any value, and no order.
        let absent = Compared::default();
        assert!(compare(CompareTarget::Value("a".into()), "!=").holds(&absent));
        assert!(!compare(CompareTarget::Value("a".into()), "<").holds(&absent));
        assert!(compare(CompareTarget::Version(0), "=").holds(&absent));
        assert!(compare(CompareTarget::Exists(true), ">").check().is_err());
    }
}
