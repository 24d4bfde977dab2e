//! What the state machine keeps per key and per version, and how table keys are encoded.

use bytes::Bytes;
use firn_model::{BlobRef, CommitTs, FirnError, KeyKind, Version, VersionInfo};
use serde::{Deserialize, Serialize};

/// Per-key bookkeeping, kept even when every value is truncated so that versions are never
/// reused.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyMeta {
    /// The newest version (0: never written).
    pub latest: Version,
    pub latest_ts: CommitTs,
    /// Whether the newest version is a tombstone.
    pub latest_deleted: bool,
    /// The oldest version still stored; versions below it were truncated. `latest + 1` when
    /// nothing is stored (a `notify` keyspace).
    pub oldest: Version,
    /// The type of the newest version (meaningful while the key is live).
    pub kind: KeyKind,
}

impl KeyMeta {
    /// Live: written and the newest version is not a tombstone.
    pub fn is_live(&self) -> bool {
        self.latest > 0 && !self.latest_deleted
    }

    /// The key's type while it is live; `None` when it is absent or deleted.
    pub fn live_kind(&self) -> Option<KeyKind> {
        self.is_live().then_some(self.kind)
    }
}

/// One stored version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionRecord {
    pub commit_ts: CommitTs,
    pub event_time_us: Option<u64>,
    pub value: Stored,
}

/// What a version holds. Its encoding is that of the `Option<Bytes>` records held before
/// blobs existed (postcard writes variant 0 as `None`'s byte and variant 1 as `Some`'s), so
/// stored data and logs written then still read; a new variant goes at the end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Stored {
    Tombstone,
    Inline(Bytes),
    /// A large value, in a blob beside the log.
    Blob(BlobRef),
    /// The key became a stream: its content is the stream's entries, on the shared log.
    Stream,
}

impl Stored {
    pub fn is_tombstone(&self) -> bool {
        matches!(self, Stored::Tombstone)
    }

    /// The key's type at this version (a tombstone's: a string's, as nothing reads it).
    pub fn kind(&self) -> KeyKind {
        match self {
            Stored::Stream => KeyKind::Stream,
            _ => KeyKind::String,
        }
    }
}

impl VersionRecord {
    pub fn into_info(self, version: Version) -> VersionInfo {
        let deleted = self.value.is_tombstone();
        let kind = self.value.kind();
        let (value, blob) = match self.value {
            Stored::Tombstone | Stored::Stream => (None, None),
            Stored::Inline(v) => (Some(v), None),
            Stored::Blob(b) => (None, Some(b)),
        };
        VersionInfo {
            version,
            commit_ts: self.commit_ts,
            event_time_us: self.event_time_us,
            deleted,
            value,
            blob,
            kind,
        }
    }

    /// The blob this version's value is in, if it is a large value.
    pub fn blob(&self) -> Option<&BlobRef> {
        match &self.value {
            Stored::Blob(b) => Some(b),
            _ => None,
        }
    }
}

/// Versions-table key: big-endian key length, the key, big-endian version. The length prefix
/// keeps one key's versions contiguous (no other key can sort between them), and big-endian
/// versions sort numerically.
pub fn version_key(key: &[u8], version: Version) -> Vec<u8> {
    let mut out = version_prefix(key);
    out.extend_from_slice(&version.to_be_bytes());
    out
}

/// The prefix shared by every version of `key`.
pub fn version_prefix(key: &[u8]) -> Vec<u8> {
    // Keys are at most 8 KiB (validated before they reach the log), so the length fits u16.
    debug_assert!(key.len() <= u16::MAX as usize);
    let mut out = Vec::with_capacity(2 + key.len() + 8);
    out.extend_from_slice(&(key.len() as u16).to_be_bytes());
    out.extend_from_slice(key);
    out
}

/// The version number at the end of a versions-table key.
pub fn version_of(table_key: &[u8]) -> Version {
    let tail = &table_key[table_key.len().saturating_sub(8)..];
    let mut buf = [0u8; 8];
    buf[8 - tail.len()..].copy_from_slice(tail);
    u64::from_be_bytes(buf)
}

pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    // Serialising our own plain structs into a Vec cannot fail.
    postcard::to_stdvec(value).expect("postcard encoding of a state-machine record")
}

pub fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, FirnError> {
    postcard::from_bytes(bytes).map_err(|e| FirnError::Internal(format!("corrupt record: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_keys_sort_by_key_then_version_number() {
        assert!(version_key(b"a", 2) < version_key(b"a", 10));
        assert!(version_key(b"a", u64::MAX) < version_key(b"b", 1));
        // "a" and "a\0…" must not interleave.
        assert!(version_key(b"a", u64::MAX) < version_key(b"a\0", 0));
        assert_eq!(version_of(&version_key(b"key", 77)), 77);
    }

    /// Records written before blobs existed held `value: Option<Bytes>`; they must read as
    /// the same versions, and new inline records must be written the same way.
    #[test]
    fn records_written_with_an_optional_value_still_read() {
        #[derive(Serialize)]
        struct Before {
            commit_ts: CommitTs,
            event_time_us: Option<u64>,
            value: Option<Bytes>,
        }
        let ts = CommitTs::new(7, 1);
        for (old, new) in [
            (None, Stored::Tombstone),
            (
                Some(Bytes::from_static(b"v")),
                Stored::Inline(Bytes::from_static(b"v")),
            ),
        ] {
            let bytes = encode(&Before {
                commit_ts: ts,
                event_time_us: Some(3),
                value: old,
            });
            let record = VersionRecord {
                commit_ts: ts,
                event_time_us: Some(3),
                value: new,
            };
            assert_eq!(decode::<VersionRecord>(&bytes).unwrap(), record);
            assert_eq!(encode(&record), bytes);
        }
    }
}
