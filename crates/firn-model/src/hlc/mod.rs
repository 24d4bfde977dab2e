//! Hybrid logical clock timestamps.
//!
//! A [`CommitTs`] is (wall-clock microseconds since the Unix epoch, logical counter), ordered
//! lexicographically. Only the shard leader reads the clock, when it proposes a write; apply
//! never does (it only raises a stamp above the previous one, deterministically).

pub mod wall;

use std::fmt;
use std::str::FromStr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// A hybrid logical clock timestamp: the commit time of a version.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct CommitTs {
    pub wall_us: u64,
    pub logical: u32,
}

impl CommitTs {
    pub const ZERO: CommitTs = CommitTs {
        wall_us: 0,
        logical: 0,
    };
    pub const MAX: CommitTs = CommitTs {
        wall_us: u64::MAX,
        logical: u32::MAX,
    };

    pub const fn new(wall_us: u64, logical: u32) -> Self {
        CommitTs { wall_us, logical }
    }

    /// The last timestamp within wall-clock microsecond `wall_us`: a user's "at time T" in
    /// microseconds includes every write stamped in that microsecond.
    pub const fn end_of_micros(wall_us: u64) -> Self {
        CommitTs {
            wall_us,
            logical: u32::MAX,
        }
    }

    /// The greatest timestamp strictly smaller than `self` (`ZERO` stays `ZERO`).
    pub fn predecessor(self) -> Self {
        match self.logical.checked_sub(1) {
            Some(logical) => CommitTs {
                wall_us: self.wall_us,
                logical,
            },
            None if self.wall_us == 0 => CommitTs::ZERO,
            None => CommitTs {
                wall_us: self.wall_us - 1,
                logical: u32::MAX,
            },
        }
    }

    /// The smallest timestamp strictly greater than `self`.
    pub fn successor(self) -> Self {
        match self.logical.checked_add(1) {
            Some(logical) => CommitTs {
                wall_us: self.wall_us,
                logical,
            },
            None => CommitTs {
                wall_us: self.wall_us.saturating_add(1),
                logical: 0,
            },
        }
    }
}

impl fmt::Display for CommitTs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.wall_us, self.logical)
    }
}

impl FromStr for CommitTs {
    type Err = String;

    /// Parses the exact form `WALL_US-LOGICAL` that [`Display`](fmt::Display) writes.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (wall, logical) = s.split_once('-').ok_or_else(|| {
            format!("'{s}' is not a commit timestamp of the form WALL_US-LOGICAL")
        })?;
        let wall_us = wall
            .parse::<u64>()
            .map_err(|_| format!("'{wall}' is not a whole number of microseconds"))?;
        let logical = logical
            .parse::<u32>()
            .map_err(|_| format!("'{logical}' is not a logical counter (0..=4294967295)"))?;
        Ok(CommitTs { wall_us, logical })
    }
}

/// The source of wall-clock time, injectable so that tests control it.
pub type WallClock = fn() -> u64;

/// Microseconds since the Unix epoch by Firn's wall clock: the system clock, its small steps
/// slewed and its large ones counted ([`wall`]).
pub fn system_wall_us() -> u64 {
    wall::now_us()
}

/// Shifts this process's reading of the system clock by `us` (negative: behind): how a test
/// gives one node a clock that steps (`firn serve --clock-offset-file`), as a machine whose
/// clock was set would have. Never set otherwise.
pub fn set_wall_offset_us(us: i64) {
    wall::set_test_offset_us(us);
}

/// How long until the wall clock next reads `phase_us` past a multiple of `every_us` µs (a
/// whole period when it does now): tasks that wait for it with the same phase act at the
/// same moments, on this node and on any whose clock agrees.
pub fn until_wall_phase(every_us: u64, phase_us: u64) -> std::time::Duration {
    wait_for_phase(system_wall_us(), every_us, phase_us)
}

fn wait_for_phase(wall_us: u64, every_us: u64, phase_us: u64) -> std::time::Duration {
    let every_us = every_us.max(1);
    let at = (wall_us + every_us - phase_us % every_us) % every_us;
    std::time::Duration::from_micros(every_us - at)
}

/// How long a write stamped `ts` waits at wall clock `now_us` under a lead of `lead_us`
/// judged `since_us` ago ([`HybridClock::commit_wait`]).
fn wait_for(ts: CommitTs, lead_us: u64, since_us: u64, now_us: u64) -> Option<std::time::Duration> {
    let drift = since_us.saturating_mul(2 * wall::MAX_RATE_PPM) / 1_000_000;
    let until = ts.wall_us.saturating_add(lead_us).saturating_add(drift);
    (until > now_us).then(|| std::time::Duration::from_micros(until - now_us))
}

/// How far this clock may be ahead of its slowest peer's, as measured, and when that was
/// judged: the measurements lose certainty as they age ([`wall::MAX_RATE_PPM`]).
#[derive(Clone, Copy, Debug)]
struct Lead {
    us: u64,
    judged: Instant,
}

/// A hybrid logical clock: never goes backwards, follows the wall clock when it can. A
/// node whose wall clock is found beyond the cluster's bound on clock offsets, or stepped
/// and not yet judged again, stamps nothing until it is back ([`HybridClock::stamp`]).
#[derive(Debug)]
pub struct HybridClock {
    wall: WallClock,
    /// How many steps the wall clock has taken at once ([`wall::steps`]).
    steps: fn() -> u64,
    last: Mutex<CommitTs>,
    /// Set while the wall clock is beyond the bound; `why` says by how much.
    beyond: AtomicBool,
    why: Mutex<String>,
    /// The steps the last judgement of the peers' offsets took into account.
    judged_steps: AtomicU64,
    /// How far this clock may be ahead of its slowest peer's: a write is acknowledged only
    /// once its stamp is that far behind this clock ([`HybridClock::commit_wait`]). `None`:
    /// a node alone waits for nothing.
    lead: Mutex<Option<Lead>>,
}

impl HybridClock {
    pub fn new(wall: WallClock) -> Self {
        Self::with_steps(wall, wall::steps)
    }

    fn with_steps(wall: WallClock, steps: fn() -> u64) -> Self {
        HybridClock {
            wall,
            steps,
            last: Mutex::new(CommitTs::ZERO),
            beyond: AtomicBool::new(false),
            why: Mutex::new(String::new()),
            judged_steps: AtomicU64::new(steps()),
            lead: Mutex::new(None),
        }
    }

    /// Sets how far this clock may be ahead of its slowest peer's (µs; 0 when none may be
    /// behind) as judged now, or that it has no peer (`None`).
    pub fn set_lead_us(&self, us: Option<u64>) {
        let lead = us.map(|us| Lead {
            us,
            judged: Instant::now(),
        });
        *self.lead.lock().unwrap_or_else(|p| p.into_inner()) = lead;
    }

    /// Records that the peers' offsets were judged with the wall clock's first `steps`
    /// steps taken into account (read before the offsets were): a step after them stops
    /// this clock's stamps until the next judgement.
    pub fn set_judged_steps(&self, steps: u64) {
        self.judged_steps.store(steps, Ordering::Release);
    }

    /// How long a write stamped `ts` must still wait before it is acknowledged: until every
    /// peer's clock, as measured, has passed `ts`, so that a write another client begins
    /// after the acknowledgement — at any shard, whatever leader stamps it — gets a larger
    /// stamp. Nothing while the clocks agree (the time the write took to commit has passed
    /// already); up to the lead on a clock that is ahead. The lead grows with the time since
    /// it was judged, by what two clocks can drift apart in it.
    ///
    /// A stamp can be ahead of this wall clock (stamps never go back, so after the clock
    /// stepped back they go on from the highest one): the wait covers that too.
    pub fn commit_wait(&self, ts: CommitTs) -> Option<std::time::Duration> {
        let lead = (*self.lead.lock().unwrap_or_else(|p| p.into_inner()))?;
        let since_us = lead.judged.elapsed().as_micros() as u64;
        wait_for(ts, lead.us, since_us, (self.wall)())
    }

    /// A stamp for a write: [`HybridClock::now`], unless the wall clock is beyond the
    /// bound on clock offsets, or took a step at once since the peers' offsets were last
    /// judged (`CLOCKSKEW`, and nothing is stamped). A node alone is never refused a step.
    pub fn stamp(&self) -> Result<CommitTs, crate::FirnError> {
        let wall_us = self.trusted_wall_us("stamps no writes")?;
        Ok(self.next(wall_us))
    }

    /// The time a read "at now" is taken at on this node: its wall clock, refused like a
    /// stamp (`CLOCKSKEW`) while the clock is beyond the bound or stepped and not yet judged
    /// — a read at now from a clock that far behind would miss writes acknowledged before
    /// it began.
    pub fn read_now(&self) -> Result<CommitTs, crate::FirnError> {
        let wall_us = self.trusted_wall_us("takes no reads at now")?;
        Ok(CommitTs::new(wall_us, 0))
    }

    /// The wall clock, unless it is beyond the bound or took a step at once since the
    /// peers' offsets were last judged (a node alone is never refused a step); `refuses`
    /// says what the node does not do meanwhile.
    fn trusted_wall_us(&self, refuses: &str) -> Result<u64, crate::FirnError> {
        if self.beyond.load(Ordering::Acquire) {
            let why = self.why.lock().unwrap_or_else(|p| p.into_inner()).clone();
            return Err(crate::FirnError::ClockSkew(why));
        }
        // The wall clock is read before the steps are: a step this reading took is seen.
        let wall_us = (self.wall)();
        let alone = self
            .lead
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_none();
        if !alone && (self.steps)() != self.judged_steps.load(Ordering::Acquire) {
            return Err(crate::FirnError::ClockSkew(format!(
                "this node's clock stepped beyond --max-clock-offset: it {refuses} until it \
                 has judged its peers' clocks again (within a quarter of a second); send the \
                 request again"
            )));
        }
        Ok(wall_us)
    }

    /// Marks the wall clock beyond the bound (`Some`, with why) or back within it.
    pub fn set_beyond_bound(&self, why: Option<String>) {
        let beyond = why.is_some();
        *self.why.lock().unwrap_or_else(|p| p.into_inner()) = why.unwrap_or_default();
        self.beyond.store(beyond, Ordering::Release);
    }

    /// Whether the wall clock is within the bound on clock offsets (as far as known).
    pub fn within_bound(&self) -> bool {
        !self.beyond.load(Ordering::Acquire)
    }

    pub fn system() -> Self {
        Self::new(system_wall_us)
    }

    /// A fresh timestamp, greater than every one this clock has issued or observed.
    pub fn now(&self) -> CommitTs {
        self.next((self.wall)())
    }

    fn next(&self, wall_us: u64) -> CommitTs {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let next = if wall_us > last.wall_us {
            CommitTs::new(wall_us, 0)
        } else {
            last.successor()
        };
        *last = next;
        next
    }

    /// Records a timestamp seen elsewhere (a committed entry, a causality token), so that
    /// later stamps are above it.
    pub fn observe(&self, ts: CommitTs) {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if ts > *last {
            *last = ts;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_beyond_the_bound_stamps_nothing_until_it_is_back() {
        let clock = HybridClock::system();
        let first = clock.stamp().unwrap();
        clock.set_beyond_bound(Some("3 s ahead".into()));
        assert!(!clock.within_bound());
        assert!(clock.read_now().is_err());
        match clock.stamp() {
            Err(crate::FirnError::ClockSkew(why)) => assert_eq!(why, "3 s ahead"),
            other => panic!("{other:?}"),
        }
        clock.set_beyond_bound(None);
        assert!(clock.stamp().unwrap() > first);
    }

    #[test]
    fn the_wait_ends_at_the_next_moment_of_the_phase() {
        let us = std::time::Duration::from_micros;
        assert_eq!(wait_for_phase(1_234_567, 50_000, 0), us(15_433));
        assert_eq!(
            wait_for_phase(1_250_000, 50_000, 0),
            us(50_000),
            "at it: a whole period"
        );
        assert_eq!(wait_for_phase(1_299_999, 50_000, 0), us(1));
        assert_eq!(wait_for_phase(7, 0, 0), us(1), "no period: at once");
        // With a phase: the next time that is `phase` past a multiple.
        assert_eq!(wait_for_phase(1_234_567, 50_000, 20_000), us(35_433));
        assert_eq!(wait_for_phase(1_234_567, 50_000, 40_000), us(5_433));
        assert_eq!(wait_for_phase(1_240_000, 50_000, 40_000), us(50_000));
        assert_eq!(
            wait_for_phase(1_234_567, 50_000, 90_000),
            us(5_433),
            "a phase past the period wraps"
        );
        // Whenever a task asks, it wakes at a moment of the phase, within one period.
        for wall in [10_003_000, 10_041_000, 10_007_000, 99_999_999] {
            let wait = wait_for_phase(wall, 50_000, 7_000).as_micros() as u64;
            assert_eq!((wall + wait) % 50_000, 7_000, "from {wall}");
            assert!((1..=50_000).contains(&wait), "from {wall}: {wait}");
        }
    }

    fn frozen_wall() -> u64 {
        1_000
    }

    #[test]
    fn a_write_waits_until_its_stamp_is_the_lead_behind_the_clock() {
        let us = std::time::Duration::from_micros;
        // No peers: acknowledged at once, even a stamp ahead of the wall clock.
        let clock = HybridClock::new(frozen_wall);
        assert_eq!(clock.commit_wait(CommitTs::new(1_000, 0)), None);
        assert_eq!(clock.commit_wait(CommitTs::new(5_000, 0)), None);
        // Peers whose clocks are all ahead: only a stamp ahead of this wall clock waits.
        assert_eq!(wait_for(CommitTs::new(1_000, 0), 0, 0, 1_000), None);
        assert_eq!(
            wait_for(CommitTs::new(1_400, 2), 0, 0, 1_000),
            Some(us(400))
        );
        // Stamped now: the whole lead. Stamped long enough ago: nothing.
        assert_eq!(
            wait_for(CommitTs::new(1_000, 0), 300, 0, 1_000),
            Some(us(300))
        );
        assert_eq!(
            wait_for(CommitTs::new(800, 3), 300, 0, 1_000),
            Some(us(100))
        );
        assert_eq!(wait_for(CommitTs::new(700, 0), 300, 0, 1_000), None);
        // A lead judged 250 ms ago has grown by what two clocks drift apart in that time.
        let drift = 250_000 * 2 * wall::MAX_RATE_PPM / 1_000_000;
        assert_eq!(drift, 200);
        assert_eq!(
            wait_for(CommitTs::new(1_000, 0), 300, 250_000, 1_000),
            Some(us(300 + drift))
        );
        // The clock itself: a lead set now waits about the lead.
        clock.set_lead_us(Some(300));
        let wait = clock.commit_wait(CommitTs::new(1_000, 0)).unwrap();
        assert!((us(300)..us(400)).contains(&wait), "{wait:?}");
    }

    static STEPS: AtomicU64 = AtomicU64::new(0);

    fn test_steps() -> u64 {
        STEPS.load(Ordering::Relaxed)
    }

    #[test]
    fn a_clock_that_stepped_stamps_nothing_until_its_peers_are_judged_again() {
        let clock = HybridClock::with_steps(frozen_wall, test_steps);
        // Alone: a step changes nothing.
        STEPS.store(1, Ordering::Relaxed);
        let first = clock.stamp().unwrap();
        // With peers: refused from the step until a judgement that took it into account.
        clock.set_lead_us(Some(0));
        match clock.stamp() {
            Err(crate::FirnError::ClockSkew(why)) => assert!(why.contains("stepped"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert!(clock.read_now().is_err(), "nor a read at now");
        clock.set_judged_steps(1);
        assert_eq!(clock.read_now().unwrap(), CommitTs::new(1_000, 0));
        let second = clock.stamp().unwrap();
        assert!(second > first);
        STEPS.store(2, Ordering::Relaxed);
        assert!(clock.stamp().is_err());
        // Nothing refused moved the clock on.
        assert_eq!(clock.now(), second.successor());
    }

    #[test]
    fn clock_is_strictly_monotonic_when_the_wall_clock_stands_still() {
        let clock = HybridClock::new(frozen_wall);
        let a = clock.now();
        let b = clock.now();
        assert_eq!(a, CommitTs::new(1_000, 0));
        assert_eq!(b, CommitTs::new(1_000, 1));
    }

    #[test]
    fn observed_timestamps_push_the_clock_forward() {
        let clock = HybridClock::new(frozen_wall);
        clock.observe(CommitTs::new(5_000, 7));
        assert_eq!(clock.now(), CommitTs::new(5_000, 8));
    }

    #[test]
    fn successor_carries_into_the_wall_clock() {
        assert_eq!(CommitTs::new(3, u32::MAX).successor(), CommitTs::new(4, 0));
    }

    #[test]
    fn predecessor_borrows_from_the_wall_clock() {
        assert_eq!(
            CommitTs::new(4, 0).predecessor(),
            CommitTs::new(3, u32::MAX)
        );
        assert_eq!(CommitTs::new(4, 7).predecessor(), CommitTs::new(4, 6));
        assert_eq!(CommitTs::ZERO.predecessor(), CommitTs::ZERO);
        let t = CommitTs::new(9, 3);
        assert_eq!(t.predecessor().successor(), t);
    }

    #[test]
    fn display_and_parse_round_trip() {
        let ts = CommitTs::new(1_763_781_234_567_890, 42);
        assert_eq!(ts.to_string().parse::<CommitTs>().unwrap(), ts);
        assert!("12".parse::<CommitTs>().is_err());
        assert!("x-1".parse::<CommitTs>().is_err());
    }
}
