//! A run's reads — keys, prefixes and log tags — from the store through the kernel: at one stamp (a trigger's or a timer's:
//! the consistent cut, the same on every replica), or of the newest values (`FCALL`),
//! each remembered with the version it saw so the commit can check nothing changed since.
//! The sandbox calls these synchronously, on a blocking thread; each waits for the kernel's
//! answer on the node's runtime.

use std::sync::Arc;

use bytes::Bytes;
use firn_model::limits::KEY_BYTES_MAX;
use firn_model::log::decode_fields;
use firn_model::{
    CallContext, CommitTs, Compare, CompareOp, CompareTarget, FirnError, Key, KvRead, KvRequest,
    LogQuery, LogRead, LogRequest, LogSeq, ReadAt, ReadConsistency, Request, Response, Version,
    VersionInfo,
};
use tokio::runtime::Handle;

use super::abi::push_item;
use super::sandbox::{Host, ReadPoint};
use crate::exec::Kernel;

/// Which values a run's reads see.
#[derive(Clone, Copy, Debug)]
pub enum Cut {
    /// The newest committed values (linearizable); every key read is checked at the commit.
    Newest,
    /// The values at this stamp.
    At(CommitTs),
}

/// The store, as one run reads it.
pub struct StoreReads {
    kernel: Arc<Kernel>,
    runtime: Handle,
    ctx: CallContext,
    cut: Cut,
    rights: super::Rights,
    /// Each key read at the cut, with the version it had (0: none): what an `FCALL`'s
    /// commit compares.
    seen: Arc<std::sync::Mutex<Vec<(Key, Version)>>>,
}

/// What a run of [`Cut::Newest`] read: the commit's compares that each key read is still
/// the version the run saw.
#[derive(Clone, Default)]
pub struct Seen(Arc<std::sync::Mutex<Vec<(Key, Version)>>>);

impl Seen {
    pub fn unchanged(&self) -> Vec<Compare> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(key, version)| Compare {
                key: key.clone(),
                target: CompareTarget::Version(*version),
                op: CompareOp::Eq,
            })
            .collect()
    }
}

impl StoreReads {
    pub fn new(
        kernel: Arc<Kernel>,
        runtime: Handle,
        ctx: CallContext,
        cut: Cut,
        rights: super::Rights,
    ) -> Self {
        StoreReads {
            kernel,
            runtime,
            ctx,
            cut,
            rights,
            seen: Arc::default(),
        }
    }

    /// The keys this run reads, as its commit will check them.
    pub fn seen(&self) -> Seen {
        Seen(self.seen.clone())
    }

    fn at(&self, point: ReadPoint) -> ReadAt {
        match (point, self.cut) {
            (ReadPoint::Version(v), _) => ReadAt::Version(v),
            (ReadPoint::AtUs(us), _) => ReadAt::AsOf(CommitTs::new(us, u32::MAX)),
            (ReadPoint::Now, Cut::Newest) => ReadAt::Latest,
            (ReadPoint::Now, Cut::At(t)) => ReadAt::AsOf(t),
        }
    }

    fn read(&self, read: KvRead) -> Result<Response, FirnError> {
        fail::fail_point!("function-read", |_| Err(unanswered()));
        let request = Request::Kv(KvRequest::Read(read));
        let answer = self
            .runtime
            .block_on(self.kernel.execute(&self.ctx, request))?;
        Ok(answer.response)
    }
}

/// What the `function-read` fault point answers: a read the store could not answer.
fn unanswered() -> FirnError {
    FirnError::TryAgain("fault point function-read: the store did not answer".into())
}

fn key(bytes: &[u8]) -> Result<Key, FirnError> {
    if bytes.len() > KEY_BYTES_MAX {
        return Err(FirnError::KeyTooLarge {
            len: bytes.len(),
            max: KEY_BYTES_MAX,
        });
    }
    Key::new(bytes.to_vec())
}

/// A string value as a run sees it: a tombstone, a stream or other kind is no value.
fn string_value(info: Option<VersionInfo>) -> Option<Bytes> {
    info.filter(|i| !i.deleted && i.kind == firn_model::KeyKind::String)
        .and_then(|i| i.value)
}

impl Host for StoreReads {
    fn get(&mut self, bytes: &[u8], point: ReadPoint) -> Result<Option<Bytes>, FirnError> {
        let key = key(bytes)?;
        self.rights.check(&[firn_model::Access::read_key(&key)])?;
        let at = self.at(point);
        let response = self.read(KvRead::Get {
            key: key.clone(),
            at,
            consistency: ReadConsistency::Linearizable,
        });
        let info = match response {
            Ok(Response::Value(info)) => info,
            Ok(other) => {
                return Err(FirnError::Internal(format!(
                    "a function's read answered {other:?}"
                )));
            }
            Err(FirnError::Compacted { .. } | FirnError::WrongType) => None,
            Err(e) => return Err(e),
        };
        if point == ReadPoint::Now {
            let version = info
                .as_ref()
                .filter(|i| !i.deleted)
                .map_or(0, |i| i.version);
            self.seen
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((key, version));
        }
        if info
            .as_ref()
            .is_some_and(|i| i.blob.is_some() && i.value.is_none())
        {
            return Err(FirnError::Refused(
                "a function reads values up to the inline value limit; this one is a large value"
                    .into(),
            ));
        }
        Ok(string_value(info))
    }

    fn scan(&mut self, prefix: &[u8], after: &[u8], limit: usize) -> Result<Vec<Bytes>, FirnError> {
        let scope = firn_model::Scope::Prefix(Bytes::copy_from_slice(prefix));
        self.rights.check(&[firn_model::Access::read(scope)])?;
        let response = self.read(KvRead::Scan {
            prefix: Bytes::copy_from_slice(prefix),
            cursor: (!after.is_empty()).then(|| Bytes::copy_from_slice(after)),
            limit,
            pattern: None,
            at: self.at(ReadPoint::Now),
            consistency: ReadConsistency::Linearizable,
        })?;
        match response {
            Response::Scan { keys, .. } => {
                Ok(keys.into_iter().map(|(k, _)| k.bytes().clone()).collect())
            }
            other => Err(FirnError::Internal(format!(
                "a function's scan answered {other:?}"
            ))),
        }
    }

    fn log_read(
        &mut self,
        log: &[u8],
        tag: &[u8],
        after: Option<LogSeq>,
        limit: usize,
    ) -> Result<Vec<(LogSeq, Bytes)>, FirnError> {
        let (log, tag) = (key(log)?, key(tag)?);
        self.rights.check(&[firn_model::Access::read_key(&log)])?;
        let from = match after {
            None => LogSeq::ZERO,
            Some(seq) => match seq.successor() {
                Some(next) => next,
                None => return Ok(Vec::new()),
            },
        };
        let stream = log == tag;
        let query = LogQuery {
            log,
            tag,
            from,
            to: LogSeq::MAX,
            limit,
            reverse: false,
            block_ms: None,
            at: match self.cut {
                Cut::Newest => None,
                Cut::At(t) => Some(t),
            },
            consistency: ReadConsistency::Linearizable,
            stream: false,
            from_start: after.is_none(),
        };
        fail::fail_point!("function-read", |_| Err(unanswered()));
        let request = Request::Log(LogRequest::Read(LogRead::Query(query)));
        let answer = self
            .runtime
            .block_on(self.kernel.execute(&self.ctx, request))?;
        match answer.response {
            Response::Records(records) => Ok(records
                .into_iter()
                .map(|r| {
                    // A stream's entry: its fields and values as `xadd` takes them.
                    let payload = match decode_fields(&r.payload) {
                        Ok(fields) if stream => {
                            let mut items = Vec::new();
                            for (field, value) in &fields {
                                push_item(&mut items, field);
                                push_item(&mut items, value);
                            }
                            Bytes::from(items)
                        }
                        _ => r.payload,
                    };
                    (r.seq, payload)
                })
                .collect()),
            other => Err(FirnError::Internal(format!(
                "a function's log read answered {other:?}"
            ))),
        }
    }
}
