//! What travels beside a request ([`CallContext`]) and beside its answer ([`Answer`]): the
//! causality token; and what a read observed and how stale it may be. Who asks is checked
//! where the request arrives (the session), before it runs, and does not travel. Neither is wrapped around the request or the response.

use serde::{Deserialize, Serialize};

use super::Response;
use crate::hlc::CommitTs;

/// The context of one call, carried next to the request (also when it is forwarded).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallContext {
    /// The causality token: the request comes after it. A write is stamped above it; a read
    /// of consistency `local` waits until its replica has closed it.
    pub after: Option<CommitTs>,
    /// The write's idempotency key: sent again with the same key, within the window, it
    /// applies nothing and answers what it answered the first time.
    #[serde(default)]
    pub once: Option<IdemKey>,
}

impl CallContext {
    /// A context after `token` (none, or the zero stamp, means no token).
    pub fn after(token: Option<CommitTs>) -> Self {
        CallContext {
            after: token.filter(|t| *t > CommitTs::ZERO),
            once: None,
        }
    }

    /// This context without its idempotency key: for the writes a request makes that are
    /// not the request itself (a transaction's prepares, decision and resolutions).
    pub fn without_once(&self) -> Self {
        CallContext {
            once: None,
            ..self.clone()
        }
    }
}

/// An idempotency key: the producer (a device, a function, a client process) and its own id
/// for one request. Each producer has its own window (docs/api.md, "Exactly once").
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct IdemKey {
    pub producer: bytes::Bytes,
    pub id: bytes::Bytes,
    /// A fingerprint of the request the key came with: the same key with another request is
    /// refused, not answered with the first request's answer.
    #[serde(default)]
    pub request: u64,
}

impl IdemKey {
    /// Refuses an empty producer or id, or one over [`crate::limits::IDEM_PART_BYTES_MAX`].
    pub fn new(producer: bytes::Bytes, id: bytes::Bytes) -> Result<Self, crate::FirnError> {
        let max = crate::limits::IDEM_PART_BYTES_MAX;
        for (what, part) in [("producer", &producer), ("id", &id)] {
            if part.is_empty() || part.len() > max {
                return Err(crate::FirnError::BadArgument(format!(
                    "an idempotency {what} is 1 to {max} bytes, got {}",
                    part.len()
                )));
            }
        }
        Ok(IdemKey {
            producer,
            id,
            request: 0,
        })
    }
}

/// How stale a `local` read may be: its replica had applied every write stamped up to
/// `applied_through` before it read, so the answer is at most `at_most_us` behind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Staleness {
    pub applied_through: CommitTs,
    pub at_most_us: u64,
}

/// A request's answer with what travels beside it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    pub response: Response,
    /// For a read: the newest version it looked at, tombstones included. A session's token
    /// rises to it, so a later read elsewhere shows no older state — also where the answer
    /// showed an absence, which carries no stamp of its own.
    pub observed: Option<CommitTs>,
    /// For a `local` read on one replica: how stale it may be.
    pub staleness: Option<Staleness>,
}

impl Answer {
    pub fn new(response: Response) -> Self {
        Answer {
            response,
            observed: None,
            staleness: None,
        }
    }

    /// This answer, having observed versions up to `through` too.
    pub fn observed(mut self, through: Option<CommitTs>) -> Self {
        self.observed = self.observed.max(through);
        self
    }

    /// The newest stamp the answer shows its client: what a session's token rises to.
    pub fn newest_stamp(&self) -> Option<CommitTs> {
        self.response.newest_stamp().max(self.observed)
    }
}

impl From<Response> for Answer {
    fn from(response: Response) -> Self {
        Answer::new(response)
    }
}
