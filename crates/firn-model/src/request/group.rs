//! Consumer groups of Redis Streams: reads of group state ([`GroupRead`]) and changes to it
//! ([`GroupWrite`]). A stream's groups live in the stream's shard; every change, delivery
//! included, is an entry of that shard's log (see docs/architecture.md, "Consumer groups").

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::error::FirnError;
use crate::key::Key;
use crate::log::{LogRecord, LogSeq};
use crate::slot::slot_of;

/// Where a group starts, or is set to: after an id, or after the stream's last entry (`$`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum GroupStart {
    Id(LogSeq),
    Last,
}

/// How a group deals its stream's entries to its consumers (`XGROUP CREATE … POLICY`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum DeliveryPolicy {
    /// Redis's: whoever asks first gets the next entries.
    #[default]
    First,
    /// Entries are dealt to the live consumers in turn.
    RoundRobin,
    /// Entries with the same key go to one live consumer, chosen by highest random weight.
    Hrw(GroupKey),
}

/// What an `hrw` group takes as an entry's key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum GroupKey {
    /// The value of this field (an entry without it is keyed by its id).
    Field(Bytes),
    /// The entry's first tag other than the stream itself (`FIRN.LOG APPEND` records).
    Tag,
}

/// `MAXDELIVER n DEADLETTER stream`: an entry delivered `n` times and not acked moves to
/// `dead_letter` (which must hash to the stream's slot).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MaxDeliver {
    pub deliveries: u64,
    pub dead_letter: Key,
}

/// A group's delivery options, beyond Redis's (see docs/architecture.md, "Delivery
/// policies"). The default is Redis's behaviour.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupOptions {
    pub policy: DeliveryPolicy,
    /// `ACKWAIT ms`: an entry not acked this long after its delivery is delivered again.
    pub ack_wait_ms: Option<u64>,
    pub max_deliver: Option<MaxDeliver>,
    /// `LIVENESS ms`: a consumer not heard from this long leaves the live set.
    pub liveness_ms: u64,
}

/// A consumer not heard from for this long is no longer live, unless a group says otherwise.
pub const GROUP_LIVENESS_MS_DEFAULT: u64 = 30_000;

impl Default for GroupOptions {
    fn default() -> Self {
        GroupOptions {
            policy: DeliveryPolicy::First,
            ack_wait_ms: None,
            max_deliver: None,
            liveness_ms: GROUP_LIVENESS_MS_DEFAULT,
        }
    }
}

/// The longest `ACKWAIT` and `LIVENESS`, in milliseconds: one day.
pub const GROUP_OPTION_MS_MAX: u64 = 86_400_000;
/// The most deliveries `MAXDELIVER` may allow.
pub const GROUP_MAX_DELIVER_MAX: u64 = 1_000_000;
/// The longest `KEYFIELD` name, in bytes.
pub const GROUP_KEY_FIELD_BYTES_MAX: usize = 1_024;

impl GroupOptions {
    /// Whether these options may be set on a group of `stream`: times within 1 ms ..
    /// [`GROUP_OPTION_MS_MAX`], `MAXDELIVER` within 1 .. [`GROUP_MAX_DELIVER_MAX`], a dead-letter
    /// stream other than `stream` and in its slot (else `CROSSSLOT`).
    pub fn check(&self, stream: &Key) -> Result<(), FirnError> {
        let ms = |what: &str, v: u64| {
            if v == 0 || v > GROUP_OPTION_MS_MAX {
                return Err(FirnError::BadArgument(format!(
                    "{what} is {v} ms; it must be 1 to {GROUP_OPTION_MS_MAX}"
                )));
            }
            Ok(())
        };
        if let Some(w) = self.ack_wait_ms {
            ms("ACKWAIT", w)?;
        }
        ms("LIVENESS", self.liveness_ms)?;
        if let DeliveryPolicy::Hrw(GroupKey::Field(f)) = &self.policy
            && (f.is_empty() || f.len() > GROUP_KEY_FIELD_BYTES_MAX)
        {
            return Err(FirnError::BadArgument(format!(
                "KEYFIELD is {} bytes; it must be 1 to {GROUP_KEY_FIELD_BYTES_MAX}",
                f.len()
            )));
        }
        if let Some(m) = &self.max_deliver {
            if m.deliveries == 0 || m.deliveries > GROUP_MAX_DELIVER_MAX {
                return Err(FirnError::BadArgument(format!(
                    "MAXDELIVER is {}; it must be 1 to {GROUP_MAX_DELIVER_MAX}",
                    m.deliveries
                )));
            }
            if m.dead_letter == *stream {
                return Err(FirnError::BadArgument(
                    "DEADLETTER must name a stream other than the group's own".into(),
                ));
            }
            if slot_of(m.dead_letter.as_bytes()) != slot_of(stream.as_bytes()) {
                return Err(FirnError::CrossSlot);
            }
        }
        Ok(())
    }
}

/// XCLAIM's options (XAUTOCLAIM takes none of them).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimOptions {
    /// IDLE ms: the claimed entries' idle time afterwards.
    pub idle_ms: Option<u64>,
    /// TIME ms: their delivery time afterwards (milliseconds since the epoch).
    pub time_ms: Option<u64>,
    /// RETRYCOUNT n: their delivery count afterwards.
    pub retry_count: Option<u64>,
    /// FORCE: add ids that are in no pending list (if the stream holds them).
    pub force: bool,
    /// JUSTID: answer ids only, and leave delivery counts as they are.
    pub just_id: bool,
}

/// One change to one stream's group: the payload of a group entry in the stream's shard.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum GroupChange {
    /// XGROUP CREATE (answers `Done`; `BUSYGROUP` if it exists). `entries_read` is
    /// ENTRIESREAD (`None`: unknown, Redis's -1 or no ENTRIESREAD).
    Create {
        start: GroupStart,
        mkstream: bool,
        options: GroupOptions,
        entries_read: Option<u64>,
    },
    /// `XGROUP CONFIGURE key group options…` (Firn's): a group's delivery options replaced
    /// (answers `Done`).
    Configure { options: GroupOptions },
    /// XGROUP DESTROY (answers `Count`: 1 or 0).
    Destroy,
    /// XGROUP SETID (answers `Done`), with ENTRIESREAD as CREATE takes it.
    SetId {
        start: GroupStart,
        entries_read: Option<u64>,
    },
    /// XGROUP CREATECONSUMER (answers `Count`: 1 if made).
    CreateConsumer { consumer: Bytes },
    /// XGROUP DELCONSUMER (answers `Count`: the pending entries it had).
    DelConsumer { consumer: Bytes },
    /// XREADGROUP `>`: entries after the last delivered, now the consumer's (answers
    /// `GroupEntries`).
    Deliver {
        consumer: Bytes,
        count: usize,
        noack: bool,
    },
    /// XREADGROUP with an id: the consumer's own pending entries after `after` (answers
    /// `GroupEntries`; a deleted entry has no record).
    Pending {
        consumer: Bytes,
        after: LogSeq,
        count: usize,
    },
    /// XACK (answers `Count`).
    Ack { ids: Vec<LogSeq> },
    /// XCLAIM (answers `GroupEntries`, or `Ids` with JUSTID).
    Claim {
        consumer: Bytes,
        min_idle_ms: u64,
        ids: Vec<LogSeq>,
        options: ClaimOptions,
    },
    /// XAUTOCLAIM (answers `AutoClaimed`).
    AutoClaim {
        consumer: Bytes,
        min_idle_ms: u64,
        start: LogSeq,
        count: usize,
        just_id: bool,
    },
}

impl GroupChange {
    pub fn name(&self) -> &'static str {
        match self {
            GroupChange::Create { .. } => "group_create",
            GroupChange::Configure { .. } => "group_configure",
            GroupChange::Destroy => "group_destroy",
            GroupChange::SetId { .. } => "group_setid",
            GroupChange::CreateConsumer { .. } => "group_create_consumer",
            GroupChange::DelConsumer { .. } => "group_del_consumer",
            GroupChange::Deliver { .. } => "group_deliver",
            GroupChange::Pending { .. } => "group_pending_read",
            GroupChange::Ack { .. } => "group_ack",
            GroupChange::Claim { .. } => "group_claim",
            GroupChange::AutoClaim { .. } => "group_autoclaim",
        }
    }
}

/// A change to group state; every one is a log entry of a stream's shard.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum GroupWrite {
    /// One change to one stream's group.
    Change {
        key: Key,
        group: Bytes,
        change: GroupChange,
    },
    /// XREADGROUP over several streams (`None`: `>`), blocking up to `block_ms` (0: without
    /// end) while `>` delivers nothing. Answers `GroupStreams`.
    ReadGroup {
        group: Bytes,
        consumer: Bytes,
        streams: Vec<(Key, Option<LogSeq>)>,
        count: usize,
        noack: bool,
        block_ms: Option<u64>,
    },
}

impl GroupWrite {
    pub fn name(&self) -> &'static str {
        match self {
            GroupWrite::Change { change, .. } => change.name(),
            GroupWrite::ReadGroup { .. } => "group_read",
        }
    }
}

/// A read of group state; never changes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum GroupRead {
    /// XPENDING key group: answers `PendingSummary`.
    PendingSummary { key: Key, group: Bytes },
    /// XPENDING key group [IDLE ms] start end count [consumer]: answers `PendingEntries`.
    Pending {
        key: Key,
        group: Bytes,
        min_idle_ms: Option<u64>,
        start: LogSeq,
        end: LogSeq,
        count: usize,
        consumer: Option<Bytes>,
    },
    /// XINFO GROUPS key: answers `Groups`.
    Groups { key: Key },
    /// XINFO CONSUMERS key group: answers `Consumers`.
    Consumers { key: Key, group: Bytes },
    /// XINFO STREAM key FULL [COUNT n]: answers `StreamFull`, with at most `count` (1 to
    /// 10,000) entries, pending entries of each group and of each consumer.
    StreamFull { key: Key, count: usize },
}

impl GroupRead {
    pub fn name(&self) -> &'static str {
        match self {
            GroupRead::PendingSummary { .. } => "group_pending_summary",
            GroupRead::Pending { .. } => "group_pending",
            GroupRead::Groups { .. } => "group_info",
            GroupRead::Consumers { .. } => "group_consumers",
            GroupRead::StreamFull { .. } => "stream_full",
        }
    }

    /// The stream the read is of (its shard serves it).
    pub fn key(&self) -> &Key {
        match self {
            GroupRead::PendingSummary { key, .. }
            | GroupRead::Pending { key, .. }
            | GroupRead::Groups { key }
            | GroupRead::Consumers { key, .. }
            | GroupRead::StreamFull { key, .. } => key,
        }
    }
}

/// A request of the consumer-group subsystem.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum GroupRequest {
    Read(GroupRead),
    Write(GroupWrite),
}

/// One entry of a group read: its id, and the entry unless it was deleted since delivery.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupEntry {
    pub seq: LogSeq,
    pub record: Option<LogRecord>,
}

/// One pending entry as XPENDING shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingInfo {
    pub seq: LogSeq,
    pub consumer: Bytes,
    /// Milliseconds since its last delivery.
    pub idle_ms: u64,
    pub deliveries: u64,
}

/// XPENDING's summary.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingSummary {
    pub count: u64,
    pub first: Option<LogSeq>,
    pub last: Option<LogSeq>,
    /// Each consumer with pending entries, and how many.
    pub consumers: Vec<(Bytes, u64)>,
}

/// One group as XINFO GROUPS shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupInfo {
    pub name: Bytes,
    pub consumers: u64,
    pub pending: u64,
    pub last_delivered: LogSeq,
    /// Entries the group has read (Redis's `entries-read`), when known.
    pub entries_read: Option<u64>,
    /// Entries after the last delivered (Redis's `lag`), when known.
    pub lag: Option<u64>,
    /// Its delivery options (Firn's).
    pub options: GroupOptions,
    /// When its earliest delivered entry falls due under `ACKWAIT` (ms of the stamp clock),
    /// among the pending entries a deal looks at.
    pub next_due_ms: Option<u64>,
    /// Consumers with entries dealt to them and not yet handed over, and how many.
    pub waiting: Vec<(Bytes, u64)>,
}

/// A stream as XINFO STREAM … FULL shows it: what it holds, its first entries, and each
/// group with its pending entries and its consumers with theirs, read at one point of the
/// stream's shard.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamFull {
    pub info: crate::TagInfo,
    pub entries: Vec<crate::LogRecord>,
    pub groups: Vec<GroupFull>,
}

/// One group of a [`StreamFull`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupFull {
    pub info: GroupInfo,
    pub pending: Vec<PendingInfo>,
    pub consumers: Vec<(ConsumerInfo, Vec<PendingInfo>)>,
}

/// One consumer as XINFO CONSUMERS shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerInfo {
    pub name: Bytes,
    pub pending: u64,
    /// Milliseconds since it last tried to read or claim.
    pub idle_ms: u64,
    /// Milliseconds since it last read or claimed something (`None`: never).
    pub inactive_ms: Option<u64>,
}
