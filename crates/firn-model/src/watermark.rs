//! Event-time watermarks: per keyspace, "every write with event time ≤ W has arrived", and
//! what becomes of a write that comes later (docs/architecture.md, "Watermarks, late data
//! and corrections").

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::FirnError;
use crate::hlc::CommitTs;

/// What a write at or below the watermark becomes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LatePolicy {
    /// Kept, as a version like any other, marked as a correction (`FIRN.HISTORY …
    /// CORRECTIONS` lists it). Nothing a writer sends is lost.
    #[default]
    Keep,
    /// Refused with `LATE`; nothing is written.
    Refuse,
}

impl FromStr for LatePolicy {
    type Err = FirnError;
    fn from_str(s: &str) -> Result<Self, FirnError> {
        match s.to_ascii_lowercase().as_str() {
            "keep" => Ok(LatePolicy::Keep),
            "refuse" => Ok(LatePolicy::Refuse),
            _ => Err(FirnError::BadArgument(format!(
                "unknown late policy '{s}'; use keep or refuse"
            ))),
        }
    }
}

impl fmt::Display for LatePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LatePolicy::Keep => "keep",
            LatePolicy::Refuse => "refuse",
        })
    }
}

/// A keyspace's rules for event time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatermarkPolicy {
    /// The allowed lateness L: at a write's commit stamp t the watermark is at least t − L,
    /// so a write whose event time is more than L behind the time Firn stamps it is late.
    /// `None`: only `FIRN.WATERMARK … ADVANCE` moves the watermark.
    pub lateness_us: Option<u64>,
    pub late: LatePolicy,
}

/// A keyspace's watermark state on one shard: the policy and the highest watermark a
/// writer advanced it to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatermarkState {
    pub advanced_us: Option<u64>,
    pub policy: WatermarkPolicy,
}

impl WatermarkState {
    /// The watermark at commit stamp `at`: the advanced one, or `at − L`, whichever is
    /// higher (`None`: no watermark yet).
    pub fn at(&self, at: CommitTs) -> Option<u64> {
        let by_lateness = self
            .policy
            .lateness_us
            .map(|l| at.wall_us.saturating_sub(l));
        self.advanced_us.max(by_lateness)
    }

    /// Whether a write with event time `event_us` stamped `at` is late: at or below the
    /// watermark.
    pub fn is_late(&self, event_us: u64, at: CommitTs) -> bool {
        self.at(at).is_some_and(|w| event_us <= w)
    }
}

/// What `FIRN.WATERMARK prefix` answers, and what one shard tells of its part.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatermarkInfo {
    /// The keyspace (its prefix).
    pub prefix: String,
    /// The watermark now: every write with event time at or below it has arrived.
    pub watermark_us: Option<u64>,
    pub state: WatermarkState,
    /// For a read that waits for completeness: the first commit stamp at which a writer's
    /// advance reached the event time asked about (on that key's shard).
    pub reached_at: Option<CommitTs>,
}

/// Requests of the watermark subsystem.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WatermarkRequest {
    /// The keyspace's watermark; with `wait_for`, once it has reached that event time
    /// (`NOTCOMPLETE` after `timeout_ms`).
    Get {
        prefix: String,
        wait_for: Option<u64>,
        timeout_ms: u64,
    },
    /// Moves the watermark up to `to_us` (a lower one is refused, nothing changed).
    Advance { prefix: String, to_us: u64 },
    /// Sets the keyspace's allowed lateness and late policy.
    Policy {
        prefix: String,
        policy: WatermarkPolicy,
    },
}

impl WatermarkRequest {
    pub fn prefix(&self) -> &str {
        match self {
            WatermarkRequest::Get { prefix, .. }
            | WatermarkRequest::Advance { prefix, .. }
            | WatermarkRequest::Policy { prefix, .. } => prefix,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watermark_is_the_higher_of_the_advance_and_the_lateness_bound() {
        let at = CommitTs::new(10_000, 0);
        let none = WatermarkState::default();
        assert_eq!(none.at(at), None);
        assert!(!none.is_late(0, at));
        let advanced = WatermarkState {
            advanced_us: Some(5_000),
            ..Default::default()
        };
        assert!(advanced.is_late(5_000, at));
        assert!(!advanced.is_late(5_001, at));
        let both = WatermarkState {
            advanced_us: Some(5_000),
            policy: WatermarkPolicy {
                lateness_us: Some(2_000),
                late: LatePolicy::Refuse,
            },
        };
        assert_eq!(both.at(at), Some(8_000));
        assert!(both.is_late(8_000, at));
        assert!(!both.is_late(8_001, at));
        assert_eq!(both.at(CommitTs::new(1_000, 0)), Some(5_000));
    }
}
