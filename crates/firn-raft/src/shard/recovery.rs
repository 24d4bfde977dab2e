//! A memory replica's recovery after a restart, as the replica records it: whether it is
//! recovering, how it ended, and what it tells the others (`firn-node::recovery` decides).

use std::sync::atomic::Ordering;

use openraft::async_runtime::watch::WatchReceiver;

use super::ShardReplica;

impl ShardReplica {
    /// Whether this replica is recovering (a memory replica restarted and not yet caught
    /// up): it refuses votes and stands for no election.
    pub fn is_recovering(&self) -> bool {
        self.recovering.load(Ordering::Acquire)
    }

    /// Ends recovery because a majority of the group's voters had restarted
    /// ([`recovered`](Self::recovered)); until the replica has seen a leader elected since
    /// its restart, [`restarted_without_leader`](Self::restarted_without_leader) still says
    /// so to the others.
    pub fn recovered_by_count(&self) {
        self.counted_out.store(true, Ordering::Release);
        self.recovered();
    }

    /// Whether this replica restarted and can vouch for no more than its disk holds: it is
    /// recovering, or it ended its recovery by the majority count and no leader has been
    /// elected since. What the group's recovering replicas count. A replica that ended its
    /// recovery by the count must go on counting: were it to say "no", the replicas after it
    /// could miss the majority and stay recovering — refusing its votes — so that with a
    /// voter missing (say two of three back after every node restarted) no leader could
    /// ever be elected.
    pub fn restarted_without_leader(&self) -> bool {
        if self.is_recovering() {
            return true;
        }
        if !self.counted_out.load(Ordering::Acquire) {
            return false;
        }
        let led_since = {
            let m = self.raft.metrics();
            let m = m.borrow_watched();
            m.current_leader.is_some() && m.current_term > self.opened_in_term
        };
        if led_since {
            self.counted_out.store(false, Ordering::Release);
        }
        !led_since
    }

    /// Ends recovery: the replica has applied everything its leader had committed after it
    /// restarted (or a majority of the group is recovering too, and the group goes on from
    /// what its disks hold). It votes and stands for election again.
    pub fn recovered(&self) {
        if self.recovering.swap(false, Ordering::AcqRel) {
            // Not while the node's clock is beyond the bound (`follow_clock_bound`).
            self.raft.runtime_config().elect(self.clock.within_bound());
            tracing::info!(
                shard = self.shard_id,
                "memory replica recovered: it votes again"
            );
        }
    }
}
