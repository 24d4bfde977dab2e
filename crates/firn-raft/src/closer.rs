//! Closing time on a shard without writes (docs/architecture.md, "Closed time").
//!
//! A write closes time by itself; a shard with none needs its leader to append `CloseTime`
//! entries, each fsync'd on every replica. While someone reads closed time — a read at a
//! time, a snapshot, a local read with a token, a log read across homes, a node's
//! local-read region — the leader closes every `every` of quiet (50 ms by default). When
//! nobody has for [`DEMAND_HOLDS`], it closes only once an `idle_every` (1 s by default; all
//! the shards a node leads at one tick, so they share an fsync), and an idle cluster hardly
//! writes; a read that then finds its time not yet closed asks the shard's leader to close
//! it at once ([`Demand`], `ShardReplica::close_through`), and closes go on every `every`
//! again for a while.

use firn_store::SystemOp;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use firn_model::HybridClock;
use firn_store::{Command, Op, VersionedStore};
use openraft::Raft;
use openraft::async_runtime::watch::WatchReceiver;
use openraft::errors::RaftError;

use crate::state_machine::ShardStateMachine;
use crate::types::{FirnRaft, LogCommand, NodeId};

/// How long closes stay every `every` after someone last wanted one.
pub const DEMAND_HOLDS: Duration = Duration::from_secs(10);

/// Longest a close entry is waited for before the next tick tries again.
const CLOSE_WAIT: Duration = Duration::from_secs(10);

/// How a shard's leader closes time when the shard has no writes.
#[derive(Clone, Debug)]
pub struct ClosePolicy {
    /// A close once the shard has been quiet this long, while closes are wanted.
    pub every: Duration,
    /// When nobody wants closes: one at the node's tick that starts each `idle_every` (at
    /// least `every`), if the shard has been quiet `every`.
    pub idle_every: Duration,
    /// Set while something reads closed time without asking for it (a node's local-read
    /// region, whose readers send no request): closes are always wanted then.
    pub always: Arc<AtomicBool>,
}

/// When closed time was last wanted, on the leader, and last asked for, on any replica.
#[derive(Debug, Default)]
pub struct Demand {
    /// Wall µs of the last close wanted here (see [`Demand::want`]).
    wanted_us: AtomicU64,
    /// Wall µs of the last time a reader here asked the leader (see [`Demand::may_ask`]).
    asked_us: AtomicU64,
}

impl Demand {
    /// A close was wanted: the closer keeps closing every `every` for [`DEMAND_HOLDS`].
    pub(crate) fn want(&self, now_us: u64) {
        self.wanted_us.fetch_max(now_us, Ordering::Relaxed);
    }

    fn wanted_since(&self, now_us: u64, within: Duration) -> bool {
        now_us.saturating_sub(self.wanted_us.load(Ordering::Relaxed)) < within.as_micros() as u64
    }

    /// Whether a reader here should ask the leader for a close now: at most one ask per
    /// `gap`, however many readers wait (the others wait for the close it brings).
    pub(crate) fn may_ask(&self, now_us: u64, gap: Duration) -> bool {
        let last = self.asked_us.load(Ordering::Relaxed);
        now_us.saturating_sub(last) >= gap.as_micros() as u64
            && self
                .asked_us
                .compare_exchange(last, now_us, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}

/// Whether the leader closes time at the tick of `now_us` (the node's ticks are at
/// `phase_us` of `every`), the shard having been quiet `quiet`: at every tick while closes
/// are wanted, else at one tick an `idle_every` — the same tick for all the shards the node
/// leads, so that their closes share an fsync.
fn due(policy: &ClosePolicy, demand: &Demand, now_us: u64, phase_us: u64, quiet: Duration) -> bool {
    let every_us = (policy.every.as_micros() as u64).max(1);
    let idle_us = (policy.idle_every.as_micros() as u64).max(every_us);
    let idle_tick = now_us.wrapping_sub(phase_us) % idle_us < every_us;
    quiet >= policy.every
        && (idle_tick
            || policy.always.load(Ordering::Relaxed)
            || demand.wanted_since(now_us, DEMAND_HOLDS))
}

/// Keeps time closing while this replica leads: at each tick, proposes a `CloseTime` entry
/// stamped now when [`due`] says so. Writes close time too, so a busy shard gets none.
///
/// The closers of a node look at the same moments: a phase of `every` on the wall clock,
/// the node's own. The close entries of the shards a node leads then reach its log
/// together and share one group commit's fsync, and so do those a follower gets from one
/// leader; apart, each entry cost a node an fsync of its own. Each node has its own phase
/// (spread by its id) so that the nodes' closes do not all land at one moment, a burst of
/// work every interval in every node at once (measured: it made a client's accesses to the
/// leader no faster than through another node, in a debug build on 2 cores).
pub(crate) async fn run(
    raft: Raft<FirnRaft, ShardStateMachine>,
    node_id: NodeId,
    store: Arc<VersionedStore>,
    clock: Arc<HybridClock>,
    policy: ClosePolicy,
    demand: Arc<Demand>,
) {
    let every_us = (policy.every.as_micros() as u64).max(1);
    // Node ids 1, 2, 3 … at 0.62, 0.24, 0.85 … of the interval (the golden ratio's steps).
    let phase_us = ((node_id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 11) as f64
        / (1u64 << 53) as f64
        * every_us as f64) as u64;
    loop {
        tokio::time::sleep(firn_model::hlc::until_wall_phase(every_us, phase_us)).await;
        if raft.metrics().borrow_watched().current_leader != Some(node_id) {
            continue;
        }
        // A clock beyond the bound on clock offsets closes nothing.
        let Ok(now) = clock.stamp() else {
            continue;
        };
        let quiet = Duration::from_micros(now.wall_us.saturating_sub(store.applied_ts().wall_us));
        if !due(&policy, &demand, now.wall_us, phase_us, quiet) {
            continue;
        }
        let close = LogCommand(Command {
            ts: now,
            op: Op::System(SystemOp::CloseTime),
        });
        // Without a quorum the entry waits; the next tick tries again.
        if let Ok(Err(RaftError::Fatal(_))) =
            tokio::time::timeout(CLOSE_WAIT, raft.client_write(close)).await
        {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000;
    /// The node's ticks: at 20 ms of each 50 ms; 1,000,020 ms is one a second.
    const PHASE: u64 = 20 * MS;
    const IDLE_TICK: u64 = 1_000_000 * MS + PHASE;

    fn policy() -> ClosePolicy {
        ClosePolicy {
            every: Duration::from_millis(50),
            idle_every: Duration::from_secs(1),
            always: Arc::default(),
        }
    }

    #[test]
    fn an_unwanted_shard_closes_at_one_tick_a_second_once_quiet() {
        let (p, d) = (policy(), Demand::default());
        let quiet = Duration::from_millis(60);
        let closes: Vec<u64> = (0..40)
            .map(|k| IDLE_TICK + k * 50 * MS)
            .filter(|t| due(&p, &d, *t + 3 * MS, PHASE, quiet))
            .collect();
        assert_eq!(
            closes,
            vec![IDLE_TICK, IDLE_TICK + 1_000 * MS],
            "one tick in twenty, a tick woken 3 ms late included"
        );
        let too_soon = Duration::from_millis(30);
        assert!(
            !due(&p, &d, IDLE_TICK, PHASE, too_soon),
            "never before `every`"
        );
    }

    #[test]
    fn a_wanted_shard_closes_every_interval_for_a_while() {
        let (p, d) = (policy(), Demand::default());
        let quiet = Duration::from_millis(60);
        let tick = IDLE_TICK + 100 * MS;
        assert!(!due(&p, &d, tick, PHASE, quiet));
        d.want(tick - 50 * MS);
        assert!(due(&p, &d, tick, PHASE, quiet));
        let too_soon = Duration::from_millis(30);
        assert!(!due(&p, &d, tick, PHASE, too_soon), "never before `every`");
        let later = tick + DEMAND_HOLDS.as_micros() as u64;
        assert!(!due(&p, &d, later, PHASE, quiet), "the want has worn off");
        p.always.store(true, Ordering::Relaxed);
        assert!(due(&p, &d, later, PHASE, quiet), "a region reads it");
    }

    #[test]
    fn readers_ask_once_an_interval() {
        let d = Demand::default();
        let gap = Duration::from_millis(50);
        let now = 1_000_000 * MS;
        assert!(d.may_ask(now, gap));
        assert!(!d.may_ask(now + 10 * MS, gap));
        assert!(d.may_ask(now + 50 * MS, gap));
    }
}
