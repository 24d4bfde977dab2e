//! The one typed request both front ends (RESP, HTTP) parse into, and its answer.
//! The router executes a [`Request`] with a [`CallContext`] beside it; nothing here knows
//! which protocol it came from.
//!
//! Requests are grouped by subsystem: [`kv`] (reads and writes of keys), [`log`] (the tagged
//! shared log and Redis Streams), [`admin`] (keyspace definitions, decided in the meta group). Whether a request writes is its type:
//! a [`KvWrite`] goes through a shard's log, a [`KvRead`] never does.

pub mod access;
pub mod admin;
pub mod context;
pub mod function;
pub mod group;
pub mod kv;
pub mod log;
pub mod twin;
pub mod txn;

pub use access::{Access, Permission, Scope};
pub use admin::{AdminRequest, LocalRegionInfo};
pub use context::{Answer, CallContext, IdemKey, Staleness};
pub use function::{
    DelayedEntry, EntrySource, FunctionInfo, FunctionRequest, TimerRequest, TimerSpec, TriggerFrom,
    TriggerInfo, TriggerRequest, TriggerSpec,
};
pub use group::{
    ClaimOptions, ConsumerInfo, DeliveryPolicy, GROUP_LIVENESS_MS_DEFAULT, GroupChange, GroupEntry,
    GroupFull, GroupInfo, GroupKey, GroupOptions, GroupRead, GroupRequest, GroupStart, GroupWrite,
    MaxDeliver, PendingInfo, PendingSummary, StreamFull,
};
pub use kv::{
    ExpireIf, Expiry, KeyChange, KeyExpiry, KvRead, KvWrite, SnapshotOf, TxnStep, redis_integer,
};
pub use log::{LogQuery, LogRead, LogRequest, LogWrite};
pub use twin::{TwinName, TwinRequest, TwinSide, TwinState};
pub use txn::{Compare, CompareOp, CompareTarget, Compared, TxnId, TxnOutcome};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::hlc::CommitTs;
use crate::key::{Key, Version};
use crate::keyspace::{KeyspaceDef, KeyspaceSpec};
use crate::log::{Appended, LogRecord, LogSeq, TagInfo, TagListing};

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
    /// Bitemporal: the version with the greatest event time ≤ `event_us` among those
    /// committed at or before `as_of` — the value at event time e as Firn knew it at time t
    /// (`EVENTTIME e ASOF t`), so a late write after t does not change the answer.
    EventTimeAsOf {
        event_us: u64,
        as_of: CommitTs,
    },
    /// The value at event time `event_us` once it is final (`EVENTTIME e COMPLETE`): the
    /// read waits until the key's keyspace watermark has reached e, then reads as of the
    /// first stamp at which it had, so later corrections never change the answer. The
    /// node resolves it into [`ReadAt::EventTimeAsOf`] before any shard reads.
    EventTimeComplete(u64),
}

impl ReadAt {
    /// This read with another option given after it: `ASOF t` with `EVENTTIME e` (in
    /// either order) is the bitemporal read; any other second option is refused.
    pub fn and(self, next: ReadAt) -> Result<ReadAt, crate::FirnError> {
        match (self, next) {
            (ReadAt::Latest, next) => Ok(next),
            (ReadAt::AsOf(as_of), ReadAt::EventTime(event_us))
            | (ReadAt::EventTime(event_us), ReadAt::AsOf(as_of)) => {
                Ok(ReadAt::EventTimeAsOf { event_us, as_of })
            }
            (ReadAt::EventTime(event_us), ReadAt::EventTimeComplete(_)) => {
                Ok(ReadAt::EventTimeComplete(event_us))
            }
            _ => Err(crate::FirnError::BadArgument(
                "give at most one of VERSION, ASOF, EVENTTIME — or EVENTTIME with ASOF: the value at that event time as it was known at that time".into(),
            )),
        }
    }

    /// The commit time the read is at, when it is at one: it is answered once that time is
    /// closed, alike on every replica.
    pub fn as_of(&self) -> Option<CommitTs> {
        match self {
            ReadAt::AsOf(t) | ReadAt::EventTimeAsOf { as_of: t, .. } => Some(*t),
            _ => None,
        }
    }

    /// Whether it reads by event time (the index, not a point read of a version).
    pub fn by_event_time(&self) -> bool {
        matches!(
            self,
            ReadAt::EventTime(_) | ReadAt::EventTimeAsOf { .. } | ReadAt::EventTimeComplete(_)
        )
    }
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
    /// How long the value lives (`SET … EX|PX|EXAT|PXAT|KEEPTTL|LEASE`).
    pub life: Lifetime,
}

impl PutRequest {
    pub fn new(key: Key, value: Bytes) -> Self {
        PutRequest {
            key,
            value,
            condition: WriteCondition::Always,
            event_time_us: None,
            return_previous: false,
            life: Lifetime::Default,
        }
    }
}

/// How long a written value lives: until its key's expiry (a version's, see
/// docs/architecture.md, "Keys that expire") or as long as a lease.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Lifetime {
    /// The keyspace's default TTL, if it has one; else for ever (a plain `SET`).
    #[default]
    Default,
    /// Until this many milliseconds after the write's stamp (`EX`, `PX`).
    For { ms: u64 },
    /// Until a moment, in milliseconds since the Unix epoch (`EXAT`, `PXAT`); one at or
    /// before the write's stamp makes the write a deletion, as Redis's.
    Until { unix_ms: u64 },
    /// As long as the value it replaces had left (`KEEPTTL`; a new key: as `Default`).
    Kept,
    /// Until the lease ends (`LEASE id`).
    Lease(crate::LeaseId),
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
    Kv(KvRequest),
    Log(LogRequest),
    Admin(AdminRequest),
    /// Consumer groups of streams.
    Group(GroupRequest),
    /// Functions next to the data: modules, calls, triggers and timers.
    Function(FunctionRequest),
    /// Device twins: a desired and a reported JSON document, and their delta.
    Twin(TwinRequest),
}

/// A request of the key-value subsystem: a read, or a write that goes through the log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum KvRequest {
    Read(KvRead),
    Write(KvWrite),
}

impl From<KvRead> for Request {
    fn from(r: KvRead) -> Self {
        Request::Kv(KvRequest::Read(r))
    }
}

impl From<KvWrite> for Request {
    fn from(w: KvWrite) -> Self {
        Request::Kv(KvRequest::Write(w))
    }
}

impl From<LogRead> for Request {
    fn from(r: LogRead) -> Self {
        Request::Log(LogRequest::Read(r))
    }
}

impl From<LogWrite> for Request {
    fn from(w: LogWrite) -> Self {
        Request::Log(LogRequest::Write(w))
    }
}

impl From<GroupRead> for Request {
    fn from(r: GroupRead) -> Self {
        Request::Group(GroupRequest::Read(r))
    }
}

impl From<GroupWrite> for Request {
    fn from(w: GroupWrite) -> Self {
        Request::Group(GroupRequest::Write(w))
    }
}

impl From<FunctionRequest> for Request {
    fn from(f: FunctionRequest) -> Self {
        Request::Function(f)
    }
}

impl From<TwinRequest> for Request {
    fn from(t: TwinRequest) -> Self {
        Request::Twin(t)
    }
}

impl From<AdminRequest> for Request {
    fn from(a: AdminRequest) -> Self {
        Request::Admin(a)
    }
}

impl Request {
    /// Whether this request changes state. Decided by its type: kv writes go through a
    /// shard's log, admin requests through the meta group's.
    pub fn is_write(&self) -> bool {
        match self {
            Request::Function(f) => f.is_write(),
            Request::Twin(t) => t.is_write(),
            _ => !matches!(
                self,
                Request::Kv(KvRequest::Read(_))
                    | Request::Log(LogRequest::Read(_))
                    | Request::Group(GroupRequest::Read(_))
            ),
        }
    }

    /// Whether the node its client reached sends this request again, whole, when it is
    /// refused for now (`TRYAGAIN`: nothing applied). Every write but XREADGROUP: it is one
    /// change per stream, and a refusal of a later stream's comes after earlier streams'
    /// deliveries applied — sent again whole, it would deliver those streams' next entries
    /// and drop the answer holding the first ones. It sends each stream's change again
    /// itself.
    pub fn resent_when_refused(&self) -> bool {
        self.is_write()
            && !matches!(
                self,
                Request::Group(GroupRequest::Write(GroupWrite::ReadGroup { .. }))
            )
    }

    /// How a front end that pipelines runs this request among the ones sent with it.
    pub fn pipelining(&self) -> Pipelining {
        match self {
            Request::Kv(KvRequest::Read(_)) => Pipelining::Batched,
            Request::Log(LogRequest::Read(LogRead::Query(q))) if q.block_ms.is_some() => {
                Pipelining::Blocking
            }
            Request::Log(LogRequest::Read(LogRead::Streams {
                block_ms: Some(_), ..
            }))
            | Request::Group(GroupRequest::Write(GroupWrite::ReadGroup {
                block_ms: Some(_),
                ..
            })) => Pipelining::Blocking,
            Request::Log(LogRequest::Read(_)) => Pipelining::AfterWrites,
            _ => Pipelining::InOrder,
        }
    }

    /// This request as `user` makes it: a function's call, trigger or timer then acts with
    /// the user's rights ([`FunctionRequest::As`]); other requests are checked where they
    /// arrive and carry no user.
    pub fn acting_as(self, user: Option<&str>) -> Request {
        match (self, user) {
            (Request::Function(f), Some(user)) => Request::Function(FunctionRequest::As {
                user: user.to_owned(),
                request: Box::new(f),
            }),
            (request, _) => request,
        }
    }

    /// A short name for metrics and logs.
    pub fn name(&self) -> &'static str {
        match self {
            Request::Kv(KvRequest::Read(r)) => r.name(),
            Request::Kv(KvRequest::Write(w)) => w.name(),
            Request::Log(LogRequest::Read(r)) => r.name(),
            Request::Log(LogRequest::Write(w)) => w.name(),
            Request::Admin(a) => a.name(),
            Request::Group(GroupRequest::Read(r)) => r.name(),
            Request::Group(GroupRequest::Write(w)) => w.name(),
            Request::Function(f) => f.name(),
            Request::Twin(t) => t.name(),
        }
    }
}

/// How a request runs among the ones a client pipelined with it ([`Request::pipelining`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pipelining {
    /// A kv read: gathered with the reads next to it and served behind one barrier, after
    /// the writes sent before it have started.
    Batched,
    /// A read of the log: once the writes sent before it have answered.
    AfterWrites,
    /// A read that may wait for what it reads (`BLOCK`): after every answer before it, alone,
    /// and given up if its client goes away.
    Blocking,
    /// Anything else: started in order (a write proposed before the next request starts),
    /// its answer awaited in order.
    InOrder,
}

impl Response {
    /// The newest commit stamp this answer shows its client (part of the causality token
    /// it carries).
    pub fn newest_stamp(&self) -> Option<CommitTs> {
        match self {
            Response::Written(w) => w.iter().map(|w| w.commit_ts).max(),
            Response::Changed { written, .. } => Some(written.commit_ts),
            Response::Value(v) => v.as_ref().map(|i| i.commit_ts),
            Response::Values(vs) => vs.iter().flatten().map(|i| i.commit_ts).max(),
            Response::History(h) => h.iter().map(|i| i.commit_ts).max(),
            Response::Scan { keys, .. } => keys.iter().map(|(_, i)| i.commit_ts).max(),
            Response::Snapshot { at, read } => read.newest_stamp().max(Some(*at)),
            Response::Appended(a) => a.iter().map(|a| a.commit_ts).max(),
            Response::Noted { at } => Some(*at),
            Response::Records(r) => r.iter().map(|r| r.commit_ts).max(),
            Response::Streams(s) => s
                .iter()
                .flat_map(|(_, r)| r.iter().map(|r| r.commit_ts))
                .max(),
            Response::GroupEntries { at, .. } | Response::AutoClaimed { at, .. } => Some(*at),
            Response::GroupStreams { at, .. } => *at,
            _ => None,
        }
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
    /// The value; `None` for a tombstone or a keyspace that stores no values, and for a
    /// large value until it is read from its blob.
    pub value: Option<Bytes>,
    /// A large value's manifest: the value is in a blob beside the log.
    pub blob: Option<crate::BlobRef>,
    /// The key's type at this version (a stream's version holds no value: its content is
    /// its entries).
    pub kind: crate::KeyKind,
}

impl VersionInfo {
    /// This version as a GET reads it: `WRONGTYPE` when the key held no string then.
    pub fn as_string(self) -> Result<Self, crate::FirnError> {
        match self.kind {
            crate::KeyKind::String => Ok(self),
            _ => Err(crate::FirnError::WrongType),
        }
    }

    pub fn size(&self) -> u64 {
        match &self.blob {
            Some(blob) => blob.size,
            None => self.value.as_ref().map_or(0, |v| v.len() as u64),
        }
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
    /// How durable the write was when it was acknowledged: its keyspace's durability.
    #[serde(default)]
    pub durability: crate::Durability,
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
    /// A shard's keyspace rules.
    Keyspaces(Vec<KeyspaceSpec>),
    /// The cluster's keyspace definitions, with placement (FIRN.KEYSPACE LIST).
    KeyspaceDefs(Vec<KeyspaceDef>),
    /// This node's shared-memory region (FIRN.LOCAL).
    LocalRegion(admin::LocalRegionInfo),
    /// A snapshot's answer: the time it was read at, and what its read (MGET or SCAN) gave.
    Snapshot {
        at: CommitTs,
        read: Box<Response>,
    },
    Done,
    /// Appended records' seqs, in the order given (an XADD with NOMKSTREAM to a missing
    /// stream: none).
    Appended(Vec<Appended>),
    /// Log records, in the order read.
    Records(Vec<LogRecord>),
    /// Streams with the entries read from each (XREAD).
    Streams(Vec<(Key, Vec<LogRecord>)>),
    /// What one tag holds; `None`: no such stream.
    TagInfo(Option<TagInfo>),
    /// A page of the tags of every log (or of one shard's, between nodes), in listing
    /// order; `next_cursor` is where the next page starts (`None`: the listing is done).
    LogTags {
        tags: Vec<TagListing>,
        next_cursor: Option<Bytes>,
    },
    /// One shard's page of a tag (between nodes; the router merges pages).
    LogPage(LogPage),
    /// A note made in a shard's log at this stamp (a log's directory entry).
    Noted {
        at: CommitTs,
    },
    /// Entries a group change handed a consumer (XREADGROUP, XCLAIM), in order; `at` is the
    /// change's commit stamp and `last_delivered` the group's last delivered id after it.
    GroupEntries {
        entries: Vec<GroupEntry>,
        at: CommitTs,
        last_delivered: LogSeq,
    },
    /// XREADGROUP over several streams: the streams with entries (with `>`) or every
    /// stream named (with an id), and the newest commit stamp among their changes.
    GroupStreams {
        streams: Vec<(Key, Vec<GroupEntry>)>,
        at: Option<CommitTs>,
    },
    /// Ids only (XCLAIM JUSTID).
    Ids(Vec<LogSeq>),
    /// XAUTOCLAIM: where the next call starts (`0-0`: the scan is done), what was claimed
    /// (JUSTID: entries without records), and the ids found deleted (dropped from the list).
    AutoClaimed {
        next: LogSeq,
        entries: Vec<GroupEntry>,
        deleted: Vec<LogSeq>,
        just_id: bool,
        at: CommitTs,
    },
    PendingSummary(PendingSummary),
    PendingEntries(Vec<PendingInfo>),
    Groups(Vec<GroupInfo>),
    Consumers(Vec<ConsumerInfo>),
    /// XINFO STREAM … FULL (`None`: no such stream).
    StreamFull(Option<Box<StreamFull>>),
    /// A [`KvWrite::Atomic`]: each step's answer in order, or `None` when a watched key
    /// had changed and no step ran.
    Steps(Option<Vec<Result<Response, crate::FirnError>>>),
    /// A transaction with `otherwise` steps: whether its compares held (its steps ran) or
    /// not (the `otherwise` steps ran), and the answers of those that ran.
    Branch {
        succeeded: bool,
        steps: Vec<Result<Response, crate::FirnError>>,
    },
    /// A shard's part of a transaction across shards, prepared at `at` (its keys held
    /// until the transaction is decided): whether its compares held, and the answers each
    /// branch would give (`otherwise`: none without `otherwise` steps). A part whose
    /// compares failed with no `otherwise` steps holds nothing.
    Prepared {
        at: CommitTs,
        compared: bool,
        steps: Vec<Result<Response, crate::FirnError>>,
        otherwise: Option<Vec<Result<Response, crate::FirnError>>>,
        /// The soonest expiry of a key the part names: the transaction commits before it
        /// or not at all (its steps' answers hold only until then).
        ends: Option<CommitTs>,
    },
    /// A transaction's decision, as its anchor's record holds it; with the answer the
    /// coordinator gave its client, when it was decided under an idempotency key (a
    /// transaction sent again gets that answer: see `Op::Once`).
    Decided {
        txn: TxnId,
        outcome: TxnOutcome,
        answer: Option<Box<Response>>,
    },
    /// A [`KvWrite::Change`]: the version written (its `previous`, the value it replaced,
    /// for GETDEL) and the key's value now (`None` after GETDEL).
    Changed {
        written: Written,
        value: Option<Bytes>,
    },
    /// A [`KvWrite::Expire`]: whether the expiry was set (or, `PERSIST`, removed).
    ExpirySet(bool),
    /// A [`KvRead::Expiry`].
    Expiry(KeyExpiry),
    /// Functions, as `FIRN.FUNCTION LOAD`, `LIST` and `INFO` answer them.
    Functions(Vec<FunctionInfo>),
    /// What a function's run answered (`FCALL`): its `reply`, if it set one.
    Called(Option<Bytes>),
    /// Triggers, as `FIRN.TRIGGER INFO` and `LIST` answer them.
    Triggers(Vec<TriggerInfo>),
    /// Timers waiting to fire (`FIRN.TIMER LIST`).
    Timers(Vec<TimerSpec>),
    /// A [`KvRead::Lease`]: the lease while it is live.
    Lease(Option<crate::LeaseInfo>),
    /// The keys attached to a lease and their newest versions (a [`KvRead::LeaseKeys`]).
    LeaseKeys(Vec<(Key, crate::Version)>),
    /// A keyspace's event-time watermark (`FIRN.WATERMARK`), or one shard's part of it.
    Watermark(crate::WatermarkInfo),
    /// A device twin's two documents at one time, and their delta (`FIRN.TWIN GET`).
    Twin(Box<TwinState>),
}

/// One shard's part of a log read: its records of the tag in the query's range and what it
/// knows of the tag.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogPage {
    pub records: Vec<LogRecord>,
    /// The shard's account of the tag (absent: it holds nothing of it).
    pub info: Option<TagInfo>,
    /// The other shards that hold records of the tag (the tag's directory, kept by the
    /// shard that owns the tag's slot).
    pub homes: Vec<u32>,
    /// Whether the log exists here (the shard that owns the log name's slot knows).
    pub log_known: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refused write is sent again whole, except XREADGROUP (its streams before the refused
    /// one have delivered); reads are never writes to send again.
    #[test]
    fn every_write_but_xreadgroup_is_sent_again_whole_when_refused() {
        let key = Key::new("s").unwrap();
        let ack: Request = GroupWrite::Change {
            key: key.clone(),
            group: Bytes::from_static(b"g"),
            change: GroupChange::Ack { ids: Vec::new() },
        }
        .into();
        assert!(ack.resent_when_refused());
        let read_group: Request = GroupWrite::ReadGroup {
            group: Bytes::from_static(b"g"),
            consumer: Bytes::from_static(b"c"),
            streams: vec![(key.clone(), None)],
            count: 1,
            noack: false,
            block_ms: None,
        }
        .into();
        assert!(read_group.is_write());
        assert!(!read_group.resent_when_refused());
        let pending: Request = Request::Group(GroupRequest::Read(GroupRead::PendingSummary {
            key,
            group: Bytes::from_static(b"g"),
        }));
        assert!(!pending.resent_when_refused());
    }
}
