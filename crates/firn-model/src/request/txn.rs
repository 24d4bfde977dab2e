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
    /// Every write of the transaction is a version stamped at this one stamp, on every shard.
    Committed(CommitTs),
    Aborted,
}
