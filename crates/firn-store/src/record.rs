//! What the state machine keeps per key and per version, and how table keys are encoded.

use bytes::Bytes;
use firn_model::{
    BlobRef, CommitTs, Durability, FirnError, KeyKind, KeyspaceMode, KeyspaceSpec, LeaseId,
    Version, VersionInfo,
};
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
    /// When the newest version's value ends (`SET … EX`, `EXPIRE`): from then on every read
    /// sees the key deleted, before the deletion is written down (`store/expiry.rs`).
    pub expires: Option<CommitTs>,
    /// The lease the newest version's value ends with (`SET … LEASE`).
    pub lease: Option<LeaseId>,
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

    /// Whether the newest version's value has ended by `t` (it is live, and its expiry is at
    /// or before `t`).
    pub fn expired_at(&self, t: CommitTs) -> bool {
        self.is_live() && self.expires.is_some_and(|e| e <= t)
    }

    /// The key as a read at `t` sees its metadata: past its expiry, as it will be once the
    /// deletion is written down (a tombstone, the next version, stamped at the expiry).
    pub fn as_read_at(mut self, t: CommitTs) -> KeyMeta {
        if let Some(ends) = self.expires.filter(|_| self.expired_at(t)) {
            self.latest += 1;
            self.latest_ts = ends;
            self.latest_deleted = true;
            self.expires = None;
            self.lease = None;
        }
        self
    }
}

impl KeyMeta {
    /// Reads a stored `KeyMeta`, also one written before keys expired (`firn-data 4`, as a
    /// restored backup of then holds: without `expires` and `lease`).
    pub fn decode(bytes: &[u8]) -> Result<KeyMeta, FirnError> {
        #[derive(Deserialize)]
        struct Before {
            latest: Version,
            latest_ts: CommitTs,
            latest_deleted: bool,
            oldest: Version,
            kind: KeyKind,
        }
        match postcard::from_bytes(bytes) {
            Ok(meta) => Ok(meta),
            Err(_) => {
                let b: Before = decode(bytes)?;
                Ok(KeyMeta {
                    latest: b.latest,
                    latest_ts: b.latest_ts,
                    latest_deleted: b.latest_deleted,
                    oldest: b.oldest,
                    kind: b.kind,
                    expires: None,
                    lease: None,
                })
            }
        }
    }
}

/// Reads a stored keyspace definition, also one written before keyspaces had a default TTL
/// (`firn-data 4`).
pub fn decode_keyspace(bytes: &[u8]) -> Result<KeyspaceSpec, FirnError> {
    #[derive(Deserialize)]
    struct Before {
        prefix: String,
        mode: KeyspaceMode,
        max_versions: Option<u64>,
        max_age_us: Option<u64>,
        durability: Durability,
    }
    match postcard::from_bytes(bytes) {
        Ok(spec) => Ok(spec),
        Err(_) => {
            let b: Before = decode(bytes)?;
            Ok(KeyspaceSpec {
                prefix: b.prefix,
                mode: b.mode,
                max_versions: b.max_versions,
                max_age_us: b.max_age_us,
                durability: b.durability,
                ttl_ms: None,
            })
        }
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
