//! Clock offsets to each peer, measured on the calls this node already makes to it (Raft's
//! appends and heartbeats, votes, forwarded requests): every answer carries the peer's wall
//! clock when it answered. A call sent at t₀ and answered at t₁ (this node's clock) with the
//! peer's reading p says the peer's clock is off by `p − (t₀ + t₁)/2`, give or take
//! `(t₁ − t₀)/2` — whatever the delays each way, the peer read its clock between t₀ and t₁.
//! The estimate kept is the tightest (the least uncertain) of the last two windows of
//! [`WINDOW`], so one slow round trip never hides a good one; a sample that cannot be true
//! together with the estimate (their intervals do not overlap: a clock jumped) replaces it
//! at once. A sample's uncertainty grows with its age by what two clocks may drift apart
//! ([`firn_model::hlc::wall::MAX_RATE_PPM`] each), and a step this node's own clock took
//! since it was measured shifts it by the step.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use firn_model::hlc::wall::{self, MAX_RATE_PPM};
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

/// One measurement: the offset, when it was taken, and the sum of this node's clock steps
/// then ([`firn_model::hlc::wall::steps_total_us`]).
#[derive(Clone, Copy, Debug)]
struct Sample {
    offset: ClockOffset,
    at: Instant,
    steps_total_us: i64,
}

impl Sample {
    /// The offset as it stands `now`: shifted by the steps this node's clock has taken
    /// since, its uncertainty grown by what two clocks can drift apart since it was taken.
    fn aged(&self, now: Instant, steps_total_us: i64) -> ClockOffset {
        let age_us = now.saturating_duration_since(self.at).as_micros() as u64;
        let drift_us = age_us.saturating_mul(2 * MAX_RATE_PPM) / 1_000_000;
        ClockOffset {
            offset_us: self
                .offset
                .offset_us
                .saturating_sub(steps_total_us.saturating_sub(self.steps_total_us)),
            uncertainty_us: self.offset.uncertainty_us.saturating_add(drift_us),
        }
    }
}

/// The samples of one peer: the best of the current window and of the one before.
#[derive(Clone, Copy, Debug)]
struct Windows {
    started: Instant,
    current: Sample,
    previous: Option<Sample>,
    last_sample: Instant,
}

/// Every peer's estimate.
#[derive(Debug, Default)]
pub struct ClockOffsets {
    peers: Mutex<HashMap<NodeId, Windows>>,
}

impl ClockOffsets {
    /// Records a call to `peer` sent at this node's wall clock `sent_wall_us`, when its clock
    /// had taken `sent_steps` steps ([`firn_model::hlc::wall::steps`]), and answered
    /// `round_trip` later with the peer's reading `peer_wall_us`. A round trip during which
    /// this node's clock stepped measures nothing.
    pub fn record(
        &self,
        peer: NodeId,
        (sent_wall_us, sent_steps): (u64, u64),
        round_trip: Duration,
        peer_wall_us: u64,
    ) {
        if wall::steps() != sent_steps {
            return;
        }
        let half = (round_trip.as_micros() as u64) / 2;
        let midpoint = sent_wall_us.saturating_add(half);
        let sample = ClockOffset {
            offset_us: peer_wall_us as i64 - midpoint as i64,
            uncertainty_us: half,
        };
        self.record_sample(peer, sample, Instant::now(), wall::steps_total_us());
    }

    fn record_sample(&self, peer: NodeId, offset: ClockOffset, now: Instant, steps_total_us: i64) {
        let sample = Sample {
            offset,
            at: now,
            steps_total_us,
        };
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        let w = peers.entry(peer).or_insert(Windows {
            started: now,
            current: sample,
            previous: None,
            last_sample: now,
        });
        let current = w.current.aged(now, steps_total_us);
        if now.duration_since(w.started) >= WINDOW {
            w.previous = Some(w.current);
            w.current = sample;
            w.started = now;
        } else if !offset.agrees_with(&current) {
            // The clock moved (one of the two, or both): what was measured before no
            // longer holds.
            w.previous = None;
            w.current = sample;
            w.started = now;
        } else if offset.uncertainty_us <= current.uncertainty_us {
            w.current = sample;
        }
        w.last_sample = now;
    }

    /// Each peer's estimate: the tighter of its two windows' best samples, as they stand now.
    pub fn estimates(&self) -> Vec<(NodeId, ClockOffset)> {
        self.estimates_at(Instant::now(), wall::steps_total_us())
    }

    fn estimates_at(&self, now: Instant, steps_total_us: i64) -> Vec<(NodeId, ClockOffset)> {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        peers.retain(|_, w| now.duration_since(w.last_sample) < STALE_AFTER);
        let mut out: Vec<(NodeId, ClockOffset)> = peers
            .iter()
            .map(|(peer, w)| {
                let current = w.current.aged(now, steps_total_us);
                let best = match w.previous.map(|p| p.aged(now, steps_total_us)) {
                    Some(p)
                        if p.uncertainty_us < current.uncertainty_us && p.agrees_with(&current) =>
                    {
                        p
                    }
                    _ => current,
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
        offsets.record(2, (1_000, wall::steps()), Duration::from_micros(200), 5_100);
        let (peer, o) = offsets.estimates()[0];
        assert_eq!((peer, o.offset_us), (2, 4_000));
        assert!((100..110).contains(&o.uncertainty_us), "{o:?}");
        assert_eq!(
            ClockOffset {
                offset_us: 4_000,
                uncertainty_us: 100
            }
            .at_least_us(),
            3_900
        );
        let behind = ClockOffset {
            offset_us: -50,
            uncertainty_us: 80,
        };
        assert_eq!(behind.at_least_us(), 0);
        // A round trip during which this node's clock stepped measures nothing.
        let none = ClockOffsets::default();
        none.record(
            2,
            (1_000, wall::steps() + 1),
            Duration::from_micros(200),
            5_100,
        );
        assert!(none.estimates().is_empty());
    }

    fn s(offset_us: i64, uncertainty_us: u64) -> ClockOffset {
        ClockOffset {
            offset_us,
            uncertainty_us,
        }
    }

    #[test]
    fn the_tightest_sample_of_two_windows_is_kept_and_a_new_offset_replaces_the_old() {
        let offsets = ClockOffsets::default();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        offsets.record_sample(1, s(10, 50), t0, 0);
        offsets.record_sample(1, s(900, 5_000), t0 + ms(10), 0);
        // The estimate 20 ms later: the tight sample, 16 µs less certain (800 ppm × 20 ms).
        assert_eq!(offsets.estimates_at(t0 + ms(20), 0)[0].1, s(10, 66));
        // A looser sample of the next window does not hide the tight one before it.
        offsets.record_sample(1, s(40, 5_000), t0 + WINDOW, 0);
        assert_eq!(offsets.estimates_at(t0 + WINDOW, 0)[0].1, s(10, 50 + 1_600));
        // One tighter than the old one has become, by its age, is.
        offsets.record_sample(1, s(30, 300), t0 + WINDOW + ms(1), 0);
        assert_eq!(
            offsets.estimates_at(t0 + WINDOW + ms(1), 0)[0].1,
            s(30, 300)
        );
        // The clock jumps by a second: the first sample that says so is the estimate.
        offsets.record_sample(1, s(1_000_000, 600), t0 + WINDOW + ms(5), 0);
        let now = t0 + WINDOW + ms(5);
        assert_eq!(offsets.estimates_at(now, 0)[0].1, s(1_000_000, 600));
        offsets.record_sample(1, s(1_000_020, 80), t0 + WINDOW * 3, 0);
        assert_eq!(
            offsets.estimates_at(t0 + WINDOW * 3, 0)[0].1.offset_us / 1_000,
            1_000
        );
        // A silent peer is dropped.
        assert!(
            offsets
                .estimates_at(t0 + WINDOW * 3 + STALE_AFTER, 0)
                .is_empty()
        );
    }

    #[test]
    fn an_old_sample_loses_certainty_and_a_step_of_this_clock_shifts_it() {
        let offsets = ClockOffsets::default();
        let t0 = Instant::now();
        offsets.record_sample(1, s(-2_000, 40), t0, 0);
        // A second later: 800 µs less certain.
        let later = t0 + Duration::from_secs(1);
        assert_eq!(offsets.estimates_at(later, 0)[0].1, s(-2_000, 840));
        // This node's clock has since stepped 3 s ahead: the peer is now 3 s behind it.
        assert_eq!(
            offsets.estimates_at(later, 3_000_000)[0].1,
            s(-3_002_000, 840)
        );
        // A fresh sample after the step agrees with the shifted estimate: it is kept as the
        // tighter one, not taken for a jump of the peer's clock.
        offsets.record_sample(1, s(-3_001_990, 30), later, 3_000_000);
        assert_eq!(
            offsets.estimates_at(later, 3_000_000)[0].1,
            s(-3_001_990, 30)
        );
    }
}
