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

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// The log entry is fsync'd (on a majority) before the write is acknowledged.
    Disk,
}

impl FromStr for Durability {
    type Err = FirnError;
    fn from_str(s: &str) -> Result<Self, FirnError> {
        match s.to_ascii_lowercase().as_str() {
            "disk" => Ok(Durability::Disk),
            "memory" => Err(FirnError::BadArgument(
                "durability 'memory' needs a replicated cluster and is not available yet; use disk"
                    .into(),
            )),
            _ => Err(FirnError::BadArgument(format!(
                "unknown durability '{s}'; use disk"
            ))),
        }
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
        Ok(())
    }
}
