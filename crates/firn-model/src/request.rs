//! The one typed request both front ends (RESP, HTTP) parse into, and its response.
//! The router executes a [`Request`]; nothing here knows which protocol it came from.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::hlc::CommitTs;
use crate::key::{Key, Version};
use crate::keyspace::KeyspaceSpec;

/// Which version of a key a read returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReadAt {
    Latest,
    /// Exactly this version.
    Version(Version),
    /// The newest version with `commit_ts ≤ T`.
    AsOf(CommitTs),
    /// The version with the greatest event time ≤ T (ties: the newest version).
    EventTime(u64),
}

/// How fresh a read must be.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReadConsistency {
    /// Sees every write acknowledged before the read began.
    #[default]
    Linearizable,
    /// Linearizable while the leader's lease holds: the leader confirms its leadership from
    /// the lease instead of a quorum round trip (assumes clocks advance at about the same
    /// rate; falls back to a quorum round trip when the lease has lapsed).
    Lease,
    /// The serving replica as it is; fastest, possibly stale.
    Local,
}

impl std::str::FromStr for ReadConsistency {
    type Err = crate::FirnError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "linearizable" => Ok(ReadConsistency::Linearizable),
            "lease" => Ok(ReadConsistency::Lease),
            "local" => Ok(ReadConsistency::Local),
            _ => Err(crate::FirnError::BadArgument(format!(
                "unknown consistency '{s}'; use linearizable, lease or local"
            ))),
        }
    }
}

/// The condition a write must meet to be applied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum WriteCondition {
    #[default]
    Always,
    /// The key's latest version is exactly this (0: the key does not exist or is deleted).
    IfVersion(Version),
    /// The key exists and is not deleted (Redis `SET … XX`).
    IfPresent,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PutRequest {
    pub key: Key,
    pub value: Bytes,
    pub condition: WriteCondition,
    /// The writer's own time for this value (sensor time), microseconds since the epoch.
    pub event_time_us: Option<u64>,
    /// Return the version this write replaced (Redis `SET … GET`).
    pub return_previous: bool,
}

impl PutRequest {
    pub fn new(key: Key, value: Bytes) -> Self {
        PutRequest {
            key,
            value,
            condition: WriteCondition::Always,
            event_time_us: None,
            return_previous: false,
        }
    }
}

/// A key, or every key under a prefix.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum KeyRange {
    Key(Key),
    Prefix(Bytes),
}

impl KeyRange {
    pub fn contains(&self, key: &[u8]) -> bool {
        match self {
            KeyRange::Key(k) => k.as_bytes() == key,
            KeyRange::Prefix(p) => key.starts_with(p),
        }
    }
}

/// Where truncation stops: versions strictly before this are dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TruncateBefore {
    Version(Version),
    Time(CommitTs),
}

/// Where a watch starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WatchFrom {
    /// Only versions committed after the watch starts.
    Now,
    /// Replay from this version of the key (for a prefix: of each key).
    Version(Version),
    /// Replay versions with `commit_ts ≥ T`.
    Time(CommitTs),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchRequest {
    pub target: KeyRange,
    pub from: WatchFrom,
}

/// Everything a client can ask of Firn, except watch (a stream, see [`WatchRequest`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    Put(PutRequest),
    /// Tombstone each key; the response says which existed.
    Delete {
        keys: Vec<Key>,
    },
    /// Several puts applied atomically in one log entry.
    MSet {
        items: Vec<(Key, Bytes)>,
    },
    Get {
        key: Key,
        at: ReadAt,
        consistency: ReadConsistency,
    },
    MGet {
        keys: Vec<Key>,
        at: ReadAt,
        consistency: ReadConsistency,
    },
    Exists {
        keys: Vec<Key>,
        consistency: ReadConsistency,
    },
    /// Versions `from..=to` of a key, oldest first, at most `limit`; with `as_of`, only the
    /// versions committed at or before that time (the history as a read at T sees it).
    History {
        key: Key,
        from: Version,
        to: Option<Version>,
        limit: usize,
        as_of: Option<CommitTs>,
        consistency: ReadConsistency,
    },
    /// Live keys under `prefix` after `cursor`, in key order, at most `limit`.
    Scan {
        prefix: Bytes,
        cursor: Option<Bytes>,
        limit: usize,
        pattern: Option<Bytes>,
        at: ReadAt,
        consistency: ReadConsistency,
    },
    Truncate {
        target: KeyRange,
        before: TruncateBefore,
    },
    /// Keys or a prefix read as of one time T across every shard involved: one consistent
    /// cut, the same at every replica. Without `at`, T is the newest time every shard
    /// involved has closed.
    Snapshot {
        of: SnapshotOf,
        at: Option<CommitTs>,
    },
    /// A request that must come after a causality token: a write is stamped above it, a
    /// read waits until its replica has closed it (so it sees everything its client saw).
    After {
        after: CommitTs,
        request: Box<Request>,
    },
    KeyspaceCreate(KeyspaceSpec),
    KeyspaceList,
    KeyspaceDrop {
        prefix: String,
    },
    /// Number of live keys.
    DbSize,
    /// Drop every key and version (refused unless the node allows it).
    FlushAll,
}

/// What a snapshot reads.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SnapshotOf {
    Keys(Vec<Key>),
    /// Live keys under `prefix` after `cursor`, in key order, at most `limit`.
    Prefix {
        prefix: Bytes,
        cursor: Option<Bytes>,
        limit: usize,
    },
}

impl Response {
    /// The newest commit stamp this answer shows its client (the causality token it carries).
    pub fn newest_stamp(&self) -> Option<CommitTs> {
        match self {
            Response::Written(w) => w.iter().map(|w| w.commit_ts).max(),
            Response::Value(v) => v.as_ref().map(|i| i.commit_ts),
            Response::Values(vs) => vs.iter().flatten().map(|i| i.commit_ts).max(),
            Response::History(h) => h.iter().map(|i| i.commit_ts).max(),
            Response::Scan { keys, .. } => keys.iter().map(|(_, i)| i.commit_ts).max(),
            Response::Snapshot { at, read } => read.newest_stamp().max(Some(*at)),
            Response::Observed { through, response } => response.newest_stamp().max(Some(*through)),
            _ => None,
        }
    }

    /// This answer, of a read that looked at versions up to `through`.
    pub fn observed(self, through: CommitTs) -> Response {
        Response::Observed {
            through,
            response: Box::new(self),
        }
    }

    /// The answer itself, and the newest version its read looked at (if it says).
    pub fn unobserved(self) -> (Response, Option<CommitTs>) {
        match self {
            Response::Observed { through, response } => {
                let (response, inner) = response.unobserved();
                (response, inner.max(Some(through)))
            }
            other => (other, None),
        }
    }

    /// Raises a session's causality token to what this answer showed (for a read, the
    /// newest version it looked at, tombstones included); the answer as the client sees it.
    pub fn seen_by(self, token: &mut Option<CommitTs>) -> Response {
        *token = (*token).max(self.newest_stamp());
        self.unobserved().0
    }
}

impl SnapshotOf {
    /// The read of these keys as of `at`, served by any replica once it has closed `at`.
    pub fn read_at(self, at: CommitTs) -> Request {
        let (at, consistency) = (ReadAt::AsOf(at), ReadConsistency::Local);
        match self {
            SnapshotOf::Keys(keys) => Request::MGet {
                keys,
                at,
                consistency,
            },
            SnapshotOf::Prefix {
                prefix,
                cursor,
                limit,
            } => Request::Scan {
                prefix,
                cursor,
                limit,
                pattern: None,
                at,
                consistency,
            },
        }
    }
}

impl Request {
    /// Whether this request changes state (and so goes through the log).
    pub fn is_write(&self) -> bool {
        if let Request::After { request, .. } = self {
            return request.is_write();
        }
        matches!(
            self,
            Request::Put(_)
                | Request::Delete { .. }
                | Request::MSet { .. }
                | Request::Truncate { .. }
                | Request::KeyspaceCreate(_)
                | Request::KeyspaceDrop { .. }
                | Request::FlushAll
        )
    }
}

/// One version of a key as a reader sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionInfo {
    pub version: Version,
    pub commit_ts: CommitTs,
    pub event_time_us: Option<u64>,
    /// A tombstone: the key was deleted at this version.
    pub deleted: bool,
    /// The value; `None` for a tombstone or a keyspace that stores no values.
    pub value: Option<Bytes>,
}

impl VersionInfo {
    pub fn size(&self) -> usize {
        self.value.as_ref().map_or(0, |v| v.len())
    }
}

/// What one write did to one key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Written {
    pub key: Key,
    pub version: Version,
    pub commit_ts: CommitTs,
    /// Whether the key existed (live, not deleted) before this write.
    pub existed: bool,
    /// The replaced version, when the request asked for it.
    pub previous: Option<VersionInfo>,
}

/// A committed version as a watcher receives it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchEvent {
    pub key: Key,
    pub info: VersionInfo,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    Written(Vec<Written>),
    Value(Option<VersionInfo>),
    Values(Vec<Option<VersionInfo>>),
    Count(u64),
    History(Vec<VersionInfo>),
    Scan {
        keys: Vec<(Key, VersionInfo)>,
        next_cursor: Option<Bytes>,
    },
    Truncated {
        versions_removed: u64,
    },
    Keyspaces(Vec<KeyspaceSpec>),
    /// A snapshot's answer: the time it was read at, and what its read (MGET or SCAN) gave.
    Snapshot {
        at: CommitTs,
        read: Box<Response>,
    },
    Done,
    /// A read's answer with the newest version it looked at (`through`), tombstones
    /// included. The reader's session token rises to it, so a later read elsewhere shows no
    /// older state — also where the answer showed an absence, which carries no stamp of its
    /// own. The router's callers take it apart with [`Response::unobserved`]; clients never
    /// see it.
    Observed {
        through: CommitTs,
        response: Box<Response>,
    },
}

impl Request {
    /// How fresh a read must be; writes and bookkeeping reads are linearizable.
    pub fn consistency(&self) -> ReadConsistency {
        match self {
            Request::After { request, .. } => request.consistency(),
            Request::Get { consistency, .. }
            | Request::MGet { consistency, .. }
            | Request::Exists { consistency, .. }
            | Request::History { consistency, .. }
            | Request::Scan { consistency, .. } => *consistency,
            _ => ReadConsistency::Linearizable,
        }
    }

    /// This request, to come after `token` (unchanged without one).
    pub fn after(self, token: Option<CommitTs>) -> Request {
        match token {
            Some(after) if after > CommitTs::ZERO => Request::After {
                after,
                request: Box::new(self),
            },
            _ => self,
        }
    }

    /// The request under any causality tokens.
    pub fn peeled(&self) -> &Request {
        match self {
            Request::After { request, .. } => request.peeled(),
            other => other,
        }
    }

    /// The causality token a request carries, and the request itself.
    pub fn split_after(self) -> (Option<CommitTs>, Request) {
        match self {
            Request::After { after, request } => {
                let (inner, request) = request.split_after();
                (Some(inner.map_or(after, |i| i.max(after))), request)
            }
            other => (None, other),
        }
    }

    /// The time a read is at, for reads as of a commit time (`ASOF t`).
    pub fn as_of(&self) -> Option<CommitTs> {
        match self {
            Request::After { request, .. } => request.as_of(),
            Request::Get {
                at: ReadAt::AsOf(t),
                ..
            }
            | Request::MGet {
                at: ReadAt::AsOf(t),
                ..
            }
            | Request::Scan {
                at: ReadAt::AsOf(t),
                ..
            }
            | Request::History { as_of: Some(t), .. } => Some(*t),
            _ => None,
        }
    }

    /// A short name for metrics and logs.
    pub fn name(&self) -> &'static str {
        match self {
            Request::Put(_) => "put",
            Request::Delete { .. } => "delete",
            Request::MSet { .. } => "mset",
            Request::Get { .. } => "get",
            Request::MGet { .. } => "mget",
            Request::Exists { .. } => "exists",
            Request::History { .. } => "history",
            Request::Scan { .. } => "scan",
            Request::Snapshot { .. } => "snapshot",
            Request::After { request, .. } => request.name(),
            Request::Truncate { .. } => "truncate",
            Request::KeyspaceCreate(_) => "keyspace_create",
            Request::KeyspaceList => "keyspace_list",
            Request::KeyspaceDrop { .. } => "keyspace_drop",
            Request::DbSize => "dbsize",
            Request::FlushAll => "flushall",
        }
    }
}
