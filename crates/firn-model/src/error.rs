//! The user-facing error: what went wrong and what is allowed, one variant per thing a user
//! can act on. Both front ends map it (RESP error prefix, HTTP status) in one place each.

use serde::{Deserialize, Serialize};

use crate::key::Version;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum FirnError {
    #[error("key is {len} bytes; the limit is {max}")]
    KeyTooLarge { len: usize, max: usize },
    #[error("value is {len} bytes; the limit is {max}")]
    ValueTooLarge { len: usize, max: usize },
    /// A conditional write found another version (0: the key does not exist).
    #[error("condition failed: the key's current version is {current}")]
    Conflict { current: Version },
    /// The requested start of a watch or read was truncated away.
    #[error("requested versions were truncated; the oldest available version is {oldest}")]
    Compacted { oldest: Version },
    #[error("{0}")]
    BadTime(String),
    #[error("{0}")]
    BadArgument(String),
    #[error("wrong number of arguments for '{0}' command")]
    WrongArity(String),
    /// A command the node does not serve; the text after "unknown command " is Redis's:
    /// `'NAME', with args beginning with: 'a' 'b' `.
    #[error("unknown command {0}")]
    UnknownCommand(String),
    #[error("no keyspace with prefix '{0}'")]
    KeyspaceNotFound(String),
    /// The operation is understood but refused by this node's configuration or this version.
    #[error("{0}")]
    Refused(String),
    /// A transient condition (leader change, catching up): the request was not applied,
    /// and retrying may succeed.
    #[error("{0}")]
    TryAgain(String),
    /// A write whose outcome is unknown (its leader failed, or the answer was lost): it may
    /// or may not be applied. Read before retrying a non-idempotent write.
    #[error("{0}")]
    Indeterminate(String),
    /// This node cannot serve the request (no leader, no quorum).
    #[error("{0}")]
    Unavailable(String),
    /// A write that adds data, refused because the data disk of the shard's leader (or of a
    /// node holding one of its replicas) has less free space than its reserve
    /// (`--disk-reserve-bytes`). Nothing was written; reads,
    /// deletes and truncations still run, and writes resume once space is freed.
    #[error("{0}")]
    NoSpace(String),
    #[error("internal error: {0}")]
    Internal(String),
    /// A log read below the trim point of its tag.
    #[error("records before {first_kept} were trimmed; the first kept seq is {first_kept}")]
    Trimmed { first_kept: crate::log::LogSeq },
    /// A log nothing was ever appended to.
    #[error("no log named '{0}'")]
    LogNotFound(String),
    /// A stream or consumer group that does not exist (Redis's `NOGROUP`); the text is
    /// Redis's, which names the command.
    #[error("{0}")]
    NoGroup(String),
    /// A blocked read whose stream went away while it waited (Redis's `UNBLOCKED`).
    #[error("{0}")]
    Unblocked(String),
    /// A command for one type of key on a key of another (Redis's `WRONGTYPE`).
    #[error("Operation against a key holding the wrong kind of value")]
    WrongType,
    /// XGROUP CREATE of a group that exists.
    #[error("Consumer Group name already exists")]
    BusyGroup,
    /// Keys of one request that must share a shard hash to different slots (Redis's
    /// `CROSSSLOT`; a group's dead-letter stream and its stream, say).
    #[error("Keys in request don't hash to the same slot")]
    CrossSlot,
    /// FIRN.REQUEST (or `POST /v1/services/…`) got no reply within its timeout. The request
    /// may still be served; its late reply is dropped.
    #[error("no reply from service '{service}' within {within_ms} ms")]
    NoReply { service: String, within_ms: u64 },
    /// Users are configured and the client has not authenticated (Redis's `NOAUTH`).
    #[error("Authentication required.")]
    NoAuth,
    /// A user name and password (or token) that do not match (Redis's `WRONGPASS`).
    #[error("invalid username-password pair or user is disabled.")]
    WrongPass,
    /// The user lacks a permission the request needs (Redis's `NOPERM`).
    #[error("User {user} has no {permission} permission on {scope}")]
    NoPerm {
        user: String,
        permission: String,
        scope: String,
    },
    /// A node (this one, or a peer the request needed) at one of its stated limits: nothing
    /// was applied; the client retries after a pause. RESP `TRYAGAIN` and HTTP 503, as
    /// [`FirnError::TryAgain`]; unlike it, never sent again by the node itself (that would add
    /// load where the limit asks for less).
    #[error("{0}")]
    Busy(String),
    /// A transaction's part refused because one of its keys is held by another transaction
    /// being committed: nothing was applied. The transaction's coordinator tries again;
    /// a client sees `TRYAGAIN` once it gives up.
    #[error("{0}")]
    TxnConflict(String),
    /// An HTTP request body over the most the endpoint reads (a JSON body: 16 MiB and a byte).
    #[error("the request body is over the {max} bytes a request body may be here")]
    BodyTooLarge { max: usize },
    /// A lease that was never granted, was revoked, or ran out (`FIRN.LEASE`, `SET … LEASE`).
    #[error("lease not found: {0}")]
    LeaseNotFound(crate::LeaseId),
    /// A function, trigger or timer of that name that was never loaded or created, or was
    /// deleted (`FCALL`, `FIRN.FUNCTION`, `FIRN.TRIGGER`, `FIRN.TIMER`).
    #[error("{kind} not found: {name}")]
    NotFound { kind: String, name: String },
    /// A function's run that ended without a result: it trapped, ran out of fuel or memory,
    /// returned non-zero, or went past a limit. Nothing it wrote was kept.
    #[error("function failed: {0}")]
    FunctionFailed(String),
    /// A write whose event time is at or below its keyspace's watermark, in a keyspace
    /// whose late policy refuses such writes: nothing was written.
    #[error(
        "event time {event_us} is at or below the watermark {watermark_us} of keyspace '{prefix}' (late writes are refused there)"
    )]
    Late {
        prefix: String,
        event_us: u64,
        watermark_us: u64,
    },
    /// A read that waits for a watermark (`COMPLETE`, `FIRN.WATERMARK … WAIT`) that did
    /// not reach its event time in time.
    #[error("{0}")]
    NotComplete(String),
    /// This node's clock is beyond `--max-clock-offset` from its peers': it stamps no
    /// writes and takes no leaderships or leases until it is back within bound.
    #[error("{0}")]
    ClockSkew(String),
}

impl FirnError {
    /// The RESP error code: the first word of the error line, which clients match on.
    pub fn resp_code(&self) -> &'static str {
        match self {
            FirnError::Conflict { .. } => "CONFLICT",
            FirnError::Compacted { .. } => "COMPACTED",
            FirnError::Trimmed { .. } => "TRIMMED",
            FirnError::LogNotFound(_) => "NOLOG",
            FirnError::NoGroup(_) => "NOGROUP",
            FirnError::Unblocked(_) => "UNBLOCKED",
            FirnError::BusyGroup => "BUSYGROUP",
            FirnError::WrongType => "WRONGTYPE",
            FirnError::CrossSlot => "CROSSSLOT",
            FirnError::NoReply { .. } => "TIMEOUT",
            FirnError::TryAgain(_) | FirnError::Busy(_) | FirnError::TxnConflict(_) => "TRYAGAIN",
            FirnError::Indeterminate(_) => "UNCERTAIN",
            FirnError::Unavailable(_) => "CLUSTERDOWN",
            FirnError::NoSpace(_) => "NOSPACE",
            FirnError::NoAuth => "NOAUTH",
            FirnError::WrongPass => "WRONGPASS",
            FirnError::NoPerm { .. } => "NOPERM",
            FirnError::Late { .. } => "LATE",
            FirnError::NotComplete(_) => "NOTCOMPLETE",
            FirnError::ClockSkew(_) => "CLOCKSKEW",
            FirnError::WrongArity(_) | FirnError::UnknownCommand(_) => "ERR",
            _ => "ERR",
        }
    }

    /// The HTTP status code for this error.
    pub fn http_status(&self) -> u16 {
        match self {
            FirnError::KeyTooLarge { .. }
            | FirnError::ValueTooLarge { .. }
            | FirnError::BodyTooLarge { .. } => 413,
            FirnError::Conflict { .. } | FirnError::Late { .. } => 409,
            FirnError::NotComplete(_) => 504,
            FirnError::ClockSkew(_) => 503,
            FirnError::Compacted { .. } => 410,
            FirnError::KeyspaceNotFound(_)
            | FirnError::LeaseNotFound(_)
            | FirnError::NotFound { .. }
            | FirnError::LogNotFound(_)
            | FirnError::NoGroup(_)
            | FirnError::Unblocked(_) => 404,
            FirnError::BusyGroup | FirnError::WrongType => 409,
            FirnError::Trimmed { .. } => 410,
            FirnError::Refused(_) | FirnError::NoPerm { .. } => 403,
            FirnError::NoAuth | FirnError::WrongPass => 401,
            FirnError::TryAgain(_)
            | FirnError::Busy(_)
            | FirnError::Unavailable(_)
            | FirnError::TxnConflict(_) => 503,
            FirnError::Indeterminate(_) | FirnError::NoReply { .. } => 504,
            FirnError::Internal(_) => 500,
            FirnError::FunctionFailed(_) => 422,
            FirnError::NoSpace(_) => 507,
            _ => 400,
        }
    }
}
