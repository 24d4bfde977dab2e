//! Keys and versions.

use std::fmt;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::error::FirnError;
use crate::limits::KEY_BYTES_MAX;

/// A per-key version number: 1, 2, 3, … Every put or delete makes a new one; 0 means
/// "the key has never been written" (so `if_version = 0` is "only if absent").
pub type Version = u64;

/// A validated key: 1 to [`KEY_BYTES_MAX`] bytes.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Key(Bytes);

impl Key {
    pub fn new(bytes: impl Into<Bytes>) -> Result<Self, FirnError> {
        let bytes = bytes.into();
        if bytes.is_empty() {
            return Err(FirnError::BadArgument(
                "key is empty; keys are 1 to 8192 bytes".into(),
            ));
        }
        if bytes.len() > KEY_BYTES_MAX {
            return Err(FirnError::KeyTooLarge {
                len: bytes.len(),
                max: KEY_BYTES_MAX,
            });
        }
        Ok(Key(bytes))
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn bytes(&self) -> &Bytes {
        &self.0
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({})", String::from_utf8_lossy(&self.0))
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_and_oversized_keys_are_refused_with_the_limit_named() {
        assert!(Key::new(Bytes::new()).is_err());
        let err = Key::new(vec![b'k'; KEY_BYTES_MAX + 1]).unwrap_err();
        assert_eq!(err.to_string(), "key is 8193 bytes; the limit is 8192");
        assert!(Key::new(vec![b'k'; KEY_BYTES_MAX]).is_ok());
    }
}

/// What a key holds: one type at a time, checked by every command (Redis's `WRONGTYPE`).
/// A change of type is a version of the key like any other.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum KeyKind {
    /// A value (small, or large beside the log).
    #[default]
    String,
    /// A Redis stream: entries and consumer groups, on the shared log.
    Stream,
}

impl KeyKind {
    /// The name `TYPE` answers and `SCAN … TYPE` takes.
    pub fn name(self) -> &'static str {
        match self {
            KeyKind::String => "string",
            KeyKind::Stream => "stream",
        }
    }
}
