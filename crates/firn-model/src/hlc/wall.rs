//! Firn's wall clock: the system clock, followed without its small steps.
//!
//! Every guarantee across shards rests on the nodes' clocks being within the bound of each
//! other *as measured*: a node measures its peers' clocks a few times a second, and waits
//! out what it measured ([`super::HybridClock::commit_wait`]). A clock that steps (NTP
//! setting it, an administrator, a VM resumed) makes the last measurement wrong at once,
//! and until the next one a write can be stamped against the old figures. So Firn does not
//! take a step of the system clock as it comes:
//!
//! - a step within `limit` (the cluster's `--max-clock-offset`) is **slewed**: Firn's clock
//!   runs at most [`SLEW_PPM`] faster or slower than the monotonic clock until it has
//!   caught up — a 100 ms step is taken in over 500 s, as `ntpd` would slew it — so every
//!   measurement stays true within [`MAX_RATE_PPM`] per second of its age;
//! - a step beyond `limit` is **taken at once** (a clock that far off is wrong for the
//!   cluster either way) and counted: the node's clock then stamps nothing until it has
//!   judged its peers' offsets again (`HybridClock::stamp`), and the offsets it measured
//!   before are corrected by the step (`steps_total_us`).
//!
//! The reading is the monotonic clock anchored at the first reading, plus a correction that
//! follows the system clock's offset from it under those two rules.

use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// How much faster or slower than the monotonic clock Firn's clock may run while it takes a
/// step in: 200 parts per million, 0.2 ms a second.
pub const SLEW_PPM: u64 = 200;

/// How fast one node's clock may drift from true time, as Firn assumes: its slew, and the
/// oscillator and NTP's frequency corrections (200 ppm, TrueTime's assumption). Two clocks
/// drift apart at most twice this; a measurement of a peer's offset loses that much
/// certainty per second of its age.
pub const MAX_RATE_PPM: u64 = SLEW_PPM + 200;

/// A step beyond this is taken at once (µs); set from `--max-clock-offset`.
static STEP_LIMIT_US: AtomicU64 = AtomicU64::new(500_000);

/// What tests add to the system clock's reading (µs).
static TEST_OFFSET_US: AtomicI64 = AtomicI64::new(0);

/// Steps taken at once so far, and their sum (µs, ahead positive).
static STEPS: AtomicU64 = AtomicU64::new(0);
static STEPS_TOTAL_US: AtomicI64 = AtomicI64::new(0);

static CLOCK: Mutex<Option<Discipline>> = Mutex::new(None);

/// Sets the largest step that is slewed rather than taken at once (`--max-clock-offset`;
/// 0 keeps the default, 500 ms).
pub fn set_step_limit_us(us: u64) {
    if us > 0 {
        STEP_LIMIT_US.store(us, Ordering::Relaxed);
    }
}

/// Shifts this process's reading of the system clock by `us` (negative: behind): how a
/// test gives one node a clock that steps (`firn serve --clock-offset-file`). Never set
/// otherwise.
pub fn set_test_offset_us(us: i64) {
    TEST_OFFSET_US.store(us, Ordering::Relaxed);
}

/// How many steps this clock has taken at once: a sample of a peer's offset whose round trip
/// saw this change is not a measurement.
pub fn steps() -> u64 {
    STEPS.load(Ordering::Acquire)
}

/// The sum of the steps taken at once (µs): an offset measured when it was `s` is off by
/// `steps_total_us() − s` now.
pub fn steps_total_us() -> i64 {
    STEPS_TOTAL_US.load(Ordering::Acquire)
}

/// Firn's wall clock: microseconds since the Unix epoch.
pub fn now_us() -> u64 {
    let mut clock = CLOCK.lock().unwrap_or_else(|p| p.into_inner());
    let (mono, system_ns) = (Instant::now(), system_ns());
    let limit_ns = STEP_LIMIT_US.load(Ordering::Relaxed).saturating_mul(1_000);
    let discipline = clock.get_or_insert_with(|| Discipline::new(mono, system_ns));
    let (ns, stepped_ns) = discipline.read(mono, system_ns, limit_ns);
    if stepped_ns != 0 {
        STEPS_TOTAL_US.fetch_add(stepped_ns / 1_000, Ordering::AcqRel);
        STEPS.fetch_add(1, Ordering::AcqRel);
    }
    (ns / 1_000).max(0) as u64
}

fn system_ns() -> i64 {
    let ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0);
    ns.saturating_add(TEST_OFFSET_US.load(Ordering::Relaxed).saturating_mul(1_000))
}

/// The monotonic clock anchored at a first reading of the system clock, and the correction
/// that makes it follow the system clock.
#[derive(Debug)]
struct Discipline {
    anchor: Instant,
    anchor_ns: i64,
    /// Added to the monotonic reading (ns).
    correction_ns: i64,
    /// When the correction last moved, and the fraction of a nanosecond of slew (in
    /// ns × ppm) carried over since.
    last: Instant,
    carry: u128,
}

impl Discipline {
    fn new(mono: Instant, system_ns: i64) -> Self {
        Discipline {
            anchor: mono,
            anchor_ns: system_ns,
            correction_ns: 0,
            last: mono,
            carry: 0,
        }
    }

    /// Firn's reading at `mono` when the system clock reads `system_ns`, and the step taken
    /// at once (0 when none).
    fn read(&mut self, mono: Instant, system_ns: i64, limit_ns: u64) -> (i64, i64) {
        let monotonic_ns = self
            .anchor_ns
            .saturating_add(mono.saturating_duration_since(self.anchor).as_nanos() as i64);
        let wanted = system_ns.saturating_sub(monotonic_ns);
        let gap = wanted.saturating_sub(self.correction_ns);
        let mut stepped = 0;
        if gap.unsigned_abs() > limit_ns {
            stepped = gap;
            self.correction_ns = wanted;
            self.carry = 0;
        } else {
            // The slew earned since the last reading (unused slew is not saved up, so a step
            // after a quiet hour is slewed like any other).
            let elapsed = mono.saturating_duration_since(self.last).as_nanos();
            self.carry += elapsed * SLEW_PPM as u128;
            let allowed = (self.carry / 1_000_000).min(i64::MAX as u128) as i64;
            self.carry %= 1_000_000;
            self.correction_ns += gap.clamp(-allowed, allowed);
        }
        self.last = self.last.max(mono);
        (monotonic_ns.saturating_add(self.correction_ns), stepped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const MS: i64 = 1_000_000;
    const LIMIT: u64 = 500 * MS as u64;

    /// Readings every `every` for `span`, the system clock `offset_ns` from the monotonic
    /// one; returns the last reading's correction.
    fn run(d: &mut Discipline, from: Instant, every: Duration, span: Duration, offset_ns: i64) {
        let mut t = from;
        while t < from + span {
            t += every;
            let monotonic = d.anchor_ns + t.duration_since(d.anchor).as_nanos() as i64;
            let (ns, stepped) = d.read(t, monotonic + offset_ns, LIMIT);
            assert_eq!(stepped, 0);
            assert_eq!(ns, monotonic + d.correction_ns);
        }
    }

    #[test]
    fn a_small_step_is_slewed_at_the_rate_and_caught_up() {
        let t0 = Instant::now();
        let mut d = Discipline::new(t0, 1_000 * MS);
        // The system clock steps 10 ms ahead: after 1 s of readings, 0.2 ms of it is taken.
        run(
            &mut d,
            t0,
            Duration::from_micros(7),
            Duration::from_secs(1),
            10 * MS,
        );
        let taken = d.correction_ns;
        assert!(
            (199_000..=200_002).contains(&taken),
            "0.2 ms a second, whatever the readings' pace: {taken} ns"
        );
        // Read rarely, the same rate.
        let mut d2 = Discipline::new(t0, 1_000 * MS);
        run(
            &mut d2,
            t0,
            Duration::from_millis(100),
            Duration::from_secs(1),
            10 * MS,
        );
        assert_eq!(d2.correction_ns, 200_000);
        // In 50 s it has caught up, and stays there.
        run(
            &mut d2,
            t0 + Duration::from_secs(1),
            Duration::from_millis(10),
            Duration::from_secs(50),
            10 * MS,
        );
        assert_eq!(d2.correction_ns, 10 * MS);
        // A step back is slewed the same way.
        run(
            &mut d2,
            t0 + Duration::from_secs(51),
            Duration::from_millis(10),
            Duration::from_secs(2),
            9 * MS,
        );
        assert_eq!(d2.correction_ns, 10 * MS - 400_000);
    }

    #[test]
    fn slew_is_not_saved_up_while_the_clock_agrees() {
        let t0 = Instant::now();
        let mut d = Discipline::new(t0, 0);
        run(
            &mut d,
            t0,
            Duration::from_millis(50),
            Duration::from_secs(3_600),
            0,
        );
        assert_eq!(d.correction_ns, 0);
        // A 100 ms step after an hour in agreement: 0.2 ms a second, not the hour's worth.
        let t = t0 + Duration::from_secs(3_600);
        run(
            &mut d,
            t,
            Duration::from_millis(50),
            Duration::from_secs(1),
            100 * MS,
        );
        assert_eq!(d.correction_ns, 200_000);
    }

    #[test]
    fn the_reading_never_goes_back_while_a_step_back_is_slewed() {
        let t0 = Instant::now();
        let mut d = Discipline::new(t0, 5_000 * MS);
        let mut last = 0;
        for i in 1..20_000u64 {
            let t = t0 + Duration::from_micros(i * 3);
            let monotonic = 5_000 * MS + (i * 3_000) as i64;
            let (ns, _) = d.read(t, monotonic - 400 * MS, LIMIT);
            assert!(ns >= last, "reading {i}: {ns} after {last}");
            last = ns;
        }
    }

    #[test]
    fn a_step_beyond_the_limit_is_taken_at_once() {
        let t0 = Instant::now();
        let mut d = Discipline::new(t0, 0);
        run(
            &mut d,
            t0,
            Duration::from_millis(10),
            Duration::from_secs(1),
            0,
        );
        let t = t0 + Duration::from_secs(2);
        let monotonic = 2_000 * MS;
        let (ns, stepped) = d.read(t, monotonic + 3_000 * MS, LIMIT);
        assert_eq!((ns, stepped), (monotonic + 3_000 * MS, 3_000 * MS));
        // And back: at once too.
        let (ns, stepped) = d.read(t + Duration::from_millis(1), monotonic + MS, LIMIT);
        assert_eq!((ns, stepped), (monotonic + MS, -3_000 * MS));
    }
}
