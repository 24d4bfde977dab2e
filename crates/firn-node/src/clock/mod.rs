//! Clock offsets, bounded (docs/architecture.md, "Clock offsets, bounded"). The peer
//! transport measures every peer's clock offset on the answers to this node's calls
//! (`firn_raft::peer::clock`); this module judges this node's clock against
//! `--max-clock-offset` a few times a second and acts on it (CockroachDB's rule):
//!
//! - beyond the bound — off by more than it, at least (the measurement's uncertainty
//!   taken off), from a majority of its peers — the node's clock stamps nothing
//!   (`CLOCKSKEW` for a write it would stamp, no time closed), its replicas stand for no
//!   election and hand away the leaderships they hold, and no read is answered from a
//!   leader's lease; a log line says so;
//! - back within it, all of that ends.
//!
//! With two nodes neither can tell which clock is wrong: both stop stamping until they
//! agree again. A node alone has nobody to disagree with.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use firn_model::HybridClock;
use firn_model::hlc::wall;
use firn_raft::NodeId;
use firn_raft::peer::{ClockOffset, PeerPool};
use serde::{Deserialize, Serialize};

/// How often the node looks at its clock offsets.
pub const LOOK_EVERY: Duration = Duration::from_millis(250);

/// The default bound on the offset between any two nodes' clocks (CockroachDB's too).
pub const MAX_CLOCK_OFFSET_DEFAULT: Duration = Duration::from_millis(500);

/// What a node shows of its clock (`/v1/cluster`, `firn cluster status`, the web page).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockView {
    /// The bound, in microseconds (0: not enforced).
    pub max_offset_us: u64,
    /// Whether this node's clock is within it.
    pub within_bound: bool,
    /// Each peer's clock offset from this node's, as measured.
    pub peers: BTreeMap<NodeId, ClockOffset>,
}

/// This node's clock, its peers' offsets, and the bound.
pub struct ClockBound {
    clock: Arc<HybridClock>,
    pool: Arc<PeerPool>,
    max_offset: Duration,
    /// A file holding milliseconds to shift this process's clock by (tests only).
    offset_file: Option<PathBuf>,
    view: RwLock<ClockView>,
    /// The clock's steps taken at once, and their sum (µs), as last logged.
    steps_seen: Mutex<(u64, i64)>,
}

impl ClockBound {
    pub fn new(
        clock: Arc<HybridClock>,
        pool: Arc<PeerPool>,
        max_offset: Duration,
        offset_file: Option<PathBuf>,
    ) -> Self {
        wall::set_step_limit_us(max_offset.as_micros() as u64);
        ClockBound {
            steps_seen: Mutex::new((wall::steps(), wall::steps_total_us())),
            clock,
            pool,
            max_offset,
            offset_file,
            view: RwLock::new(ClockView {
                max_offset_us: max_offset.as_micros() as u64,
                within_bound: true,
                peers: BTreeMap::new(),
            }),
        }
    }

    pub fn clock(&self) -> &Arc<HybridClock> {
        &self.clock
    }

    /// What the last look found.
    pub fn view(&self) -> ClockView {
        self.view.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Judges the peers' offsets, and tells the clock, the log and the metrics.
    pub fn look(&self) {
        // Read before the offsets: a step after this is judged at the next look.
        let steps = wall::steps();
        let (seen, seen_total_us) = *self.steps_seen.lock().unwrap_or_else(|p| p.into_inner());
        if steps != seen {
            let total_us = wall::steps_total_us();
            tracing::warn!(
                "this node's clock stepped by {:+} ms (beyond --max-clock-offset, so taken at \
                 once; smaller steps are slewed at {} ppm): its peers' offsets are judged again \
                 before it stamps another write",
                (total_us - seen_total_us) / 1_000,
                wall::SLEW_PPM
            );
            metrics::counter!("firn_clock_steps_total").increment(steps - seen);
            *self.steps_seen.lock().unwrap_or_else(|p| p.into_inner()) = (steps, total_us);
        }
        let peers: BTreeMap<NodeId, ClockOffset> = self.pool.clock_offsets().into_iter().collect();
        for (peer, o) in &peers {
            let peer = peer.to_string();
            metrics::gauge!("firn_clock_offset_us", "peer" => peer.clone()).set(o.offset_us as f64);
            metrics::gauge!("firn_clock_offset_uncertainty_us", "peer" => peer)
                .set(o.uncertainty_us as f64);
        }
        let why = beyond_bound(&peers, self.max_offset);
        let was_within = self.clock.within_bound();
        match (&why, was_within) {
            (Some(why), true) => tracing::error!("{why}"),
            (None, false) => tracing::warn!(
                "this node's clock is back within --max-clock-offset of its peers': it stamps \
                 writes and may lead again"
            ),
            _ => {}
        }
        metrics::gauge!("firn_clock_beyond_bound").set(why.is_some() as u8 as f64);
        metrics::gauge!("firn_clock_max_offset_us").set(self.max_offset.as_micros() as f64);
        let within_bound = why.is_none();
        self.clock.set_beyond_bound(why);
        let lead = commit_wait_lead_us(&peers, self.max_offset);
        self.clock.set_lead_us((!peers.is_empty()).then_some(lead));
        self.clock.set_judged_steps(steps);
        metrics::gauge!("firn_clock_commit_wait_us").set(lead as f64);
        *self.view.write().unwrap_or_else(|p| p.into_inner()) = ClockView {
            max_offset_us: self.max_offset.as_micros() as u64,
            within_bound,
            peers,
        };
    }

    /// Shifts this process's clock by the milliseconds the offset file holds (tests give a
    /// node a clock that is off this way, and change it while it runs).
    pub fn read_offset_file(&self) {
        let Some(path) = &self.offset_file else {
            return;
        };
        let ms = std::fs::read_to_string(path)
            .ok()
            .and_then(|text| text.trim().parse::<i64>().ok())
            .unwrap_or(0);
        firn_model::hlc::set_wall_offset_us(ms.saturating_mul(1_000));
    }
}

/// How far this node's clock may be ahead of its slowest peer's: for each peer, its clock is
/// within `offset ± uncertainty` of this one's, so it has passed a stamp taken here once this
/// clock is `uncertainty − offset` past it. The most over the peers within the bound, 0 when
/// none may be behind. A peer certainly beyond the bound is not waited for: beyond it a node
/// stamps nothing, and no wait within the bound would cover it. With `max` zero (the check
/// off) nothing is waited for. Writes acknowledged here wait that long after their stamp
/// ([`HybridClock::commit_wait`]).
pub fn commit_wait_lead_us(peers: &BTreeMap<NodeId, ClockOffset>, max: Duration) -> u64 {
    let max_us = max.as_micros() as u64;
    peers
        .values()
        .filter(|o| o.at_least_us() <= max_us)
        .map(|o| (o.uncertainty_us as i64).saturating_sub(o.offset_us).max(0) as u64)
        .max()
        .unwrap_or(0)
}

/// Why this node's clock is beyond `max` — off by more than it, at least, from a majority of
/// the peers measured — or `None` while it is within (or `max` is zero: not enforced).
pub fn beyond_bound(peers: &BTreeMap<NodeId, ClockOffset>, max: Duration) -> Option<String> {
    let max_us = max.as_micros() as u64;
    if max_us == 0 || peers.is_empty() {
        return None;
    }
    let far: Vec<(&NodeId, &ClockOffset)> = peers
        .iter()
        .filter(|(_, o)| o.at_least_us() > max_us)
        .collect();
    if far.len() * 2 <= peers.len() {
        return None;
    }
    let named: Vec<String> = far
        .iter()
        .map(|(n, o)| format!("node {n}: {:+} ms", -o.offset_us / 1_000))
        .collect();
    Some(format!(
        "this node's clock is beyond --max-clock-offset ({} ms) from {} of its {} peers ({}): \
         it stamps no writes and leads no shard until it is back within bound; send writes \
         to another node",
        max.as_millis(),
        far.len(),
        peers.len(),
        named.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn off(offset_us: i64, uncertainty_us: u64) -> ClockOffset {
        ClockOffset {
            offset_us,
            uncertainty_us,
        }
    }

    /// Peers 2, 3, … with these offsets from this node's clock.
    fn peers(offsets: &[ClockOffset]) -> BTreeMap<NodeId, ClockOffset> {
        offsets
            .iter()
            .enumerate()
            .map(|(i, o)| (i as u64 + 2, *o))
            .collect()
    }

    #[test]
    fn a_clock_ahead_of_a_peer_waits_out_the_lead_and_one_behind_waits_nothing() {
        let max = Duration::from_millis(500);
        // Alone: nothing to wait for.
        assert_eq!(commit_wait_lead_us(&BTreeMap::new(), max), 0);
        // Peers ahead of this clock (by more than the uncertainty): nothing.
        assert_eq!(
            commit_wait_lead_us(&peers(&[off(2_000, 100), off(900, 50)]), max),
            0
        );
        // Clocks that agree: the uncertainty of the measurement.
        assert_eq!(
            commit_wait_lead_us(&peers(&[off(10, 60), off(-5, 40)]), max),
            50
        );
        // One peer 250 ms behind: its offset and uncertainty, the most over the peers.
        assert_eq!(
            commit_wait_lead_us(&peers(&[off(-250_000, 80), off(20, 30)]), max),
            250_080
        );
        // A peer certainly beyond the bound is not waited for (it stamps nothing); one
        // that may be within it is, by all it may be behind.
        assert_eq!(
            commit_wait_lead_us(&peers(&[off(-2_000_000, 80), off(-100, 30)]), max),
            130
        );
        assert_eq!(
            commit_wait_lead_us(&peers(&[off(-500_050, 80)]), max),
            500_130
        );
        // The check off: nothing.
        assert_eq!(
            commit_wait_lead_us(&peers(&[off(-2_000, 80)]), Duration::ZERO),
            0
        );
    }

    #[test]
    fn a_clock_is_beyond_the_bound_when_a_majority_of_peers_are_certainly_far() {
        let max = Duration::from_millis(500);
        // Alone, or all near: within.
        assert_eq!(beyond_bound(&BTreeMap::new(), max), None);
        assert_eq!(
            beyond_bound(&peers(&[off(100, 10), off(-400, 50)]), max),
            None
        );
        // Two peers both a second behind this clock: this one is ahead — beyond.
        let why = beyond_bound(&peers(&[off(-1_000_000, 100), off(-1_000_200, 80)]), max).unwrap();
        assert!(
            why.contains("2 of its 2 peers") && why.contains("+1000 ms"),
            "{why}"
        );
        // One of two far (the other node's clock is the wrong one): within.
        assert_eq!(
            beyond_bound(&peers(&[off(-1_000_000, 100), off(0, 80)]), max),
            None
        );
        // Far only within the uncertainty: not certainly beyond.
        assert_eq!(
            beyond_bound(&peers(&[off(600_000, 200_000), off(600_000, 200_000)]), max),
            None
        );
        // A single peer far (two nodes): beyond — neither can tell whose clock is wrong.
        assert!(beyond_bound(&peers(&[off(700_000, 10)]), max).is_some());
        // Not enforced.
        assert_eq!(
            beyond_bound(&peers(&[off(-9_000_000, 1)]), Duration::ZERO),
            None
        );
    }
}
