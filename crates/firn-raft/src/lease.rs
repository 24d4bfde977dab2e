//! The leader lease as a deadline others can use: how long this replica may answer reads
//! as the leader without asking a quorum (the node publishes it beside its shared-memory
//! values, so a reader on the host knows when a local read is linearizable).

use std::time::{Duration, Instant};

use openraft::Instant as _;
use openraft::ReadPolicy;
use openraft::async_runtime::watch::WatchReceiver;

use crate::shard::{ELECTION_TIMEOUT_MAX_MS, ShardReplica};

/// The part of the lease given up for clock-rate differences between this host and the
/// followers' (openraft's followers time the same lease on their own clocks): a fifth.
const LEASE_MARGIN: Duration = Duration::from_millis(ELECTION_TIMEOUT_MAX_MS / 5);

/// Longest the check waits for this replica to apply the leader's read index.
const LEASE_APPLY_WAIT: Duration = Duration::from_millis(100);

impl ShardReplica {
    /// Until when this replica's reads are linearizable without a quorum round trip:
    /// `Some(t)` when it leads, openraft confirms the lease, and it has applied the read
    /// index (so every write of earlier terms is applied here too). `None`: it does not
    /// lead, or the lease has lapsed. The deadline is the last quorum acknowledgement plus
    /// the lease, less [`LEASE_MARGIN`]; a lone voter's lease runs from now (no other node
    /// can be elected while it is the only voter).
    pub async fn confirmed_lease(&self) -> Option<Instant> {
        let (leads, acked) = {
            let metrics = self.raft.metrics();
            let m = metrics.borrow_watched();
            (
                m.current_leader == Some(self.node_id),
                m.last_quorum_acked
                    .as_ref()
                    .map(|a| Instant::now() - a.elapsed()),
            )
        };
        // No lease on a clock beyond the bound on clock offsets.
        if !leads || !self.clock.within_bound() {
            return None;
        }
        let single = self.raft.voter_ids().count() <= 1;
        let linearizer = self
            .raft
            .get_read_linearizer(ReadPolicy::LeaseRead)
            .await
            .ok()?;
        self.wait_applied(linearizer.read_log_id().index(), LEASE_APPLY_WAIT)
            .await
            .ok()?;
        let from = if single { Instant::now() } else { acked? };
        Some(from + Duration::from_millis(ELECTION_TIMEOUT_MAX_MS) - LEASE_MARGIN)
    }
}
