//! Keyspaces: registered key prefixes with a storage mode, a retention and a durability.
//! The longest registered prefix of a key names its keyspace; `""` catches all.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::FirnError;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyspaceMode {
    /// Keep every version (subject to retention).
    Versioned,
    /// Keep only the newest version.
    Latest,
    /// Store no value: a put only reaches watchers.
    Notify,
}

impl FromStr for KeyspaceMode {
    type Err = FirnError;
    fn from_str(s: &str) -> Result<Self, FirnError> {
        match s.to_ascii_lowercase().as_str() {
            "versioned" => Ok(KeyspaceMode::Versioned),
            "latest" => Ok(KeyspaceMode::Latest),
            "notify" => Ok(KeyspaceMode::Notify),
            _ => Err(FirnError::BadArgument(format!(
                "unknown keyspace mode '{s}'; use versioned, latest or notify"
            ))),
        }
    }
}

impl fmt::Display for KeyspaceMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KeyspaceMode::Versioned => "versioned",
            KeyspaceMode::Latest => "latest",
            KeyspaceMode::Notify => "notify",
        })
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// The log entry is fsync'd (on a majority) before the write is acknowledged.
    #[default]
    Disk,
    /// The log entry is held in the memory of a majority of the shard's replicas before the
    /// write is acknowledged; it reaches the disk at the next checkpoint (SplitFT). A crash
    /// of a minority loses nothing acknowledged; a crash of a majority at once can lose what
    /// was written since the last checkpoint.
    Memory,
}

impl Durability {
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Disk => "disk",
            Durability::Memory => "memory",
        }
    }
}

impl FromStr for Durability {
    type Err = FirnError;
    fn from_str(s: &str) -> Result<Self, FirnError> {
        match s.to_ascii_lowercase().as_str() {
            "disk" => Ok(Durability::Disk),
            "memory" => Ok(Durability::Memory),
            _ => Err(FirnError::BadArgument(format!(
                "unknown durability '{s}'; use disk or memory"
            ))),
        }
    }
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A keyspace definition as stored in the state machine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyspaceSpec {
    /// Key prefix, as UTF-8 text so that it can be shown and typed.
    pub prefix: String,
    pub mode: KeyspaceMode,
    /// Keep at most this many versions per key (the newest); `None` = unbounded.
    pub max_versions: Option<u64>,
    /// Drop versions older than this many microseconds, never the newest of a key.
    pub max_age_us: Option<u64>,
    pub durability: Durability,
    /// The default TTL of its keys, in milliseconds: a write without a lifetime of its own
    /// (a plain `SET`, `MSET`, a key an `INCR` makes) lives this long; `None`: for ever.
    #[serde(default)]
    pub ttl_ms: Option<u64>,
}

impl KeyspaceSpec {
    /// The keyspace every key belongs to unless a longer prefix is registered.
    pub fn default_keyspace() -> Self {
        KeyspaceSpec {
            prefix: String::new(),
            mode: KeyspaceMode::Versioned,
            max_versions: None,
            max_age_us: None,
            durability: Durability::Disk,
            ttl_ms: None,
        }
    }

    pub fn validate(&self) -> Result<(), FirnError> {
        if self.prefix.len() > crate::limits::KEY_BYTES_MAX {
            return Err(FirnError::KeyTooLarge {
                len: self.prefix.len(),
                max: crate::limits::KEY_BYTES_MAX,
            });
        }
        if self.max_versions == Some(0) {
            return Err(FirnError::BadArgument(
                "max_versions must be at least 1 (the newest version is always kept)".into(),
            ));
        }
        if self.max_age_us == Some(0) {
            return Err(FirnError::BadArgument(
                "max_age must be greater than 0".into(),
            ));
        }
        if self
            .ttl_ms
            .is_some_and(|t| t == 0 || t > crate::limits::TTL_MS_MAX)
        {
            return Err(FirnError::BadArgument(format!(
                "a keyspace's ttl is 1 ms to {} ms",
                crate::limits::TTL_MS_MAX
            )));
        }
        Ok(())
    }
}

/// Where a shard's leader goes for a keyspace's sake (DAL's placement).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Follow {
    /// Leaders stay where the cluster put them.
    #[default]
    Off,
    /// A shard's leader moves to the node most of the keyspace's requests come from.
    On,
    /// A shard's leader is kept on this node (a pin: it never follows).
    Pin(u64),
}

impl FromStr for Follow {
    type Err = FirnError;
    fn from_str(s: &str) -> Result<Self, FirnError> {
        match s.to_ascii_lowercase().as_str() {
            "on" => Ok(Follow::On),
            "off" => Ok(Follow::Off),
            other => other.parse().map(Follow::Pin).map_err(|_| {
                FirnError::BadArgument(format!(
                    "unknown follow setting '{s}'; use on, off or a node id to pin leaders to"
                ))
            }),
        }
    }
}

impl fmt::Display for Follow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Follow::Off => f.write_str("off"),
            Follow::On => f.write_str("on"),
            Follow::Pin(node) => write!(f, "{node}"),
        }
    }
}

/// Where a keyspace's data sits relative to the code that uses it: node-side placement,
/// kept in the cluster layout beside the [`KeyspaceSpec`] (a shard's apply never needs it,
/// so it is not in a shard's state and not in its log).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyspacePlacement {
    /// Publish the newest values in each node's shared-memory region (`LOCAL on`), where a
    /// client on the same host reads them without a request.
    #[serde(default)]
    pub local: bool,
    #[serde(default)]
    pub follow: Follow,
}

/// Parses `on` / `off` (the LOCAL option's values).
pub fn parse_on_off(option: &str, s: &str) -> Result<bool, FirnError> {
    match s.to_ascii_lowercase().as_str() {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(FirnError::BadArgument(format!(
            "{option} takes on or off, not '{s}'"
        ))),
    }
}

/// A keyspace as a user defines it: the rules its shards apply, and its placement.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyspaceDef {
    pub spec: KeyspaceSpec,
    pub placement: KeyspacePlacement,
}

impl KeyspaceDef {
    pub fn new(spec: KeyspaceSpec) -> Self {
        KeyspaceDef {
            spec,
            placement: KeyspacePlacement::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follow_parses_on_off_and_a_node_and_refuses_anything_else() {
        assert_eq!("ON".parse::<Follow>().unwrap(), Follow::On);
        assert_eq!("off".parse::<Follow>().unwrap(), Follow::Off);
        assert_eq!("3".parse::<Follow>().unwrap(), Follow::Pin(3));
        assert_eq!(Follow::Pin(3).to_string(), "3");
        let e = "sometimes".parse::<Follow>().unwrap_err().to_string();
        assert!(e.contains("on, off or a node id"), "{e}");
        assert!(parse_on_off("LOCAL", "maybe").is_err());
        assert!(parse_on_off("LOCAL", "On").unwrap());
    }
}
