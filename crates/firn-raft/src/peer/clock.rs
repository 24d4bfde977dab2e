//! Clock offsets to each peer, measured on the calls this node already makes to it (Raft's
//! appends and heartbeats, votes, forwarded requests): every answer carries the peer's wall
//! clock when it answered. A call sent at t₀ and answered at t₁ (this node's clock) with the
//! peer's reading p says the peer's clock is off by `p − (t₀ + t₁)/2`, give or take
//! `(t₁ − t₀)/2` — whatever the delays each way, the peer read its clock between t₀ and t₁.
//! The estimate kept is the tightest (the least uncertain) of the last two windows of
//! [`WINDOW`], so one slow round trip never hides a good one; a sample that cannot be true
//! together with the estimate (their intervals do not overlap: a clock jumped) replaces it
//! at once.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::types::NodeId;

/// How long one window of samples lasts.
pub const WINDOW: Duration = Duration::from_secs(2);
/// An estimate with no sample for this long is dropped (the peer is silent).
pub const STALE_AFTER: Duration = Duration::from_secs(10);

/// How far a peer's clock is from this node's, as measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockOffset {
    /// The peer's clock minus this node's, in microseconds.
    pub offset_us: i64,
    /// Half the round trip of the call that measured it: the true offset is within
    /// `offset_us ± uncertainty_us`.
    pub uncertainty_us: u64,
}

impl ClockOffset {
    /// The least the offset can be in magnitude: |offset| − uncertainty (0 when the
    /// interval holds 0).
    pub fn at_least_us(&self) -> u64 {
        self.offset_us
            .unsigned_abs()
            .saturating_sub(self.uncertainty_us)
    }

    /// Whether both can be true of one clock offset: their intervals overlap.
    fn agrees_with(&self, other: &ClockOffset) -> bool {
        let gap = self.offset_us.abs_diff(other.offset_us);
        gap <= self.uncertainty_us.saturating_add(other.uncertainty_us)
    }
}

/// The samples of one peer: the best of the current window and of the one before.
#[derive(Clone, Copy, Debug)]
struct Windows {
    started: Instant,
    current: ClockOffset,
    previous: Option<ClockOffset>,
    last_sample: Instant,
}

/// Every peer's estimate.
#[derive(Debug, Default)]
pub struct ClockOffsets {
    peers: Mutex<HashMap<NodeId, Windows>>,
}

impl ClockOffsets {
    /// Records a call to `peer` sent at this node's wall clock `sent_wall_us` and answered
    /// `round_trip` later, with the peer's reading `peer_wall_us`.
    pub fn record(&self, peer: NodeId, sent_wall_us: u64, round_trip: Duration, peer_wall_us: u64) {
        let half = (round_trip.as_micros() as u64) / 2;
        let midpoint = sent_wall_us.saturating_add(half);
        let sample = ClockOffset {
            offset_us: peer_wall_us as i64 - midpoint as i64,
            uncertainty_us: half,
        };
        self.record_sample(peer, sample, Instant::now());
    }

    fn record_sample(&self, peer: NodeId, sample: ClockOffset, now: Instant) {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        let w = peers.entry(peer).or_insert(Windows {
            started: now,
            current: sample,
            previous: None,
            last_sample: now,
        });
        if now.duration_since(w.started) >= WINDOW {
            w.previous = Some(w.current);
            w.current = sample;
            w.started = now;
        } else if !sample.agrees_with(&w.current) {
            // The clock moved (one of the two, or both): what was measured before no
            // longer holds.
            w.previous = None;
            w.current = sample;
            w.started = now;
        } else if sample.uncertainty_us <= w.current.uncertainty_us {
            w.current = sample;
        }
        w.last_sample = now;
    }

    /// Each peer's estimate: the tighter of its two windows' best samples.
    pub fn estimates(&self) -> Vec<(NodeId, ClockOffset)> {
        self.estimates_at(Instant::now())
    }

    fn estimates_at(&self, now: Instant) -> Vec<(NodeId, ClockOffset)> {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        peers.retain(|_, w| now.duration_since(w.last_sample) < STALE_AFTER);
        let mut out: Vec<(NodeId, ClockOffset)> = peers
            .iter()
            .map(|(peer, w)| {
                let best = match w.previous {
                    Some(p)
                        if p.uncertainty_us < w.current.uncertainty_us
                            && p.agrees_with(&w.current) =>
                    {
                        p
                    }
                    _ => w.current,
                };
                (*peer, best)
            })
            .collect();
        out.sort_by_key(|(peer, _)| *peer);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offset_is_the_peer_reading_against_the_midpoint_of_the_round_trip() {
        let offsets = ClockOffsets::default();
        // Sent at 1,000, answered 200 µs later by a peer reading 5,100: 4,000 ahead ± 100.
        offsets.record(2, 1_000, Duration::from_micros(200), 5_100);
        let (peer, o) = offsets.estimates()[0];
        assert_eq!(
            (peer, o),
            (
                2,
                ClockOffset {
                    offset_us: 4_000,
                    uncertainty_us: 100
                }
            )
        );
        assert_eq!(o.at_least_us(), 3_900);
        let behind = ClockOffset {
            offset_us: -50,
            uncertainty_us: 80,
        };
        assert_eq!(behind.at_least_us(), 0);
    }

    #[test]
    fn the_tightest_sample_of_two_windows_is_kept_and_a_new_offset_replaces_the_old() {
        let offsets = ClockOffsets::default();
        let t0 = Instant::now();
        let s = |offset_us, uncertainty_us| ClockOffset {
            offset_us,
            uncertainty_us,
        };
        offsets.record_sample(1, s(10, 50), t0);
        offsets.record_sample(1, s(900, 5_000), t0 + Duration::from_millis(10));
        assert_eq!(
            offsets.estimates_at(t0 + Duration::from_millis(20))[0].1,
            s(10, 50)
        );
        // A looser sample of the next window does not hide the tight one before it.
        offsets.record_sample(1, s(40, 300), t0 + WINDOW);
        assert_eq!(offsets.estimates_at(t0 + WINDOW)[0].1, s(10, 50));
        // The clock jumps by a second: the first sample that says so is the estimate.
        offsets.record_sample(1, s(1_000_000, 600), t0 + WINDOW + Duration::from_millis(5));
        let now = t0 + WINDOW + Duration::from_millis(6);
        assert_eq!(offsets.estimates_at(now)[0].1, s(1_000_000, 600));
        offsets.record_sample(1, s(1_000_020, 80), t0 + WINDOW * 3);
        assert_eq!(offsets.estimates_at(now)[0].1.offset_us / 1_000, 1_000);
        // A silent peer is dropped.
        assert!(
            offsets
                .estimates_at(t0 + WINDOW * 3 + STALE_AFTER)
                .is_empty()
        );
    }
}
