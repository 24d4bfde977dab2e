//! Device twins (docs/architecture.md, "Device twins"): twin `N` is the keys `N/desired` and
//! `N/reported`, each holding a JSON object. [`Twins::run`] reads both in one snapshot and
//! answers their delta, or applies a JSON merge patch to one of them with `IFVERSION` its
//! version, reading it again when another patch came first.

mod document;

use std::sync::Arc;

use firn_model::{
    Answer, CallContext, CommitTs, FirnError, KvRead, KvWrite, PutRequest, ReadAt, ReadConsistency,
    Response, SnapshotOf, TwinName, TwinRequest, TwinSide, TwinState, VersionInfo, WriteCondition,
};

pub use self::document::{Document, delta};
use crate::exec::Kernel;

/// How many times a patch reads its document again after another write came first.
pub const PATCH_TRIES_MAX: usize = 16;

/// The twin subsystem: requests composed of the key-value subsystem's.
pub struct Twins {
    kernel: Arc<Kernel>,
}

impl Twins {
    pub fn new(kernel: Arc<Kernel>) -> Self {
        Twins { kernel }
    }

    pub async fn run(&self, ctx: &CallContext, request: TwinRequest) -> Result<Answer, FirnError> {
        match request {
            TwinRequest::Get { twin, at } => self.get(ctx, &twin, at).await,
            TwinRequest::Patch { twin, side, patch } => {
                let patch = Document::patch(&patch)?;
                self.patch(ctx, &twin, side, &patch).await
            }
        }
    }

    async fn get(
        &self,
        ctx: &CallContext,
        twin: &TwinName,
        at: Option<CommitTs>,
    ) -> Result<Answer, FirnError> {
        let keys = vec![twin.key(TwinSide::Desired), twin.key(TwinSide::Reported)];
        // Without a time: now (or the caller's token, if later), so that the read sees every
        // write acknowledged before it began — a snapshot's own choice, the newest closed
        // time, may be a close interval older.
        let at = at.unwrap_or_else(|| {
            CommitTs::new(firn_model::hlc::system_wall_us(), 0)
                .max(ctx.after.unwrap_or(CommitTs::ZERO))
        });
        let read = KvRead::Snapshot {
            of: SnapshotOf::Keys(keys),
            at: Some(at),
        };
        let answer = self.kernel.execute(ctx, read.into()).await?;
        let Response::Snapshot { at, read } = answer.response else {
            return Err(unexpected(&answer.response));
        };
        let Response::Values(values) = *read else {
            return Err(unexpected(&read));
        };
        let [desired, reported]: [Option<VersionInfo>; 2] = values
            .try_into()
            .map_err(|_| FirnError::Internal("a twin read answered other than two keys".into()))?;
        let desired_doc = Document::of_version(twin, TwinSide::Desired, desired.as_ref())?;
        let reported_doc = Document::of_version(twin, TwinSide::Reported, reported.as_ref())?;
        // A tombstone is no document: shown as none.
        let live = |v: Option<VersionInfo>| v.filter(|v| !v.deleted);
        let state = TwinState {
            at,
            delta: delta(&desired_doc, &reported_doc).to_bytes(),
            desired: live(desired),
            reported: live(reported),
        };
        Ok(Answer {
            response: Response::Twin(Box::new(state)),
            observed: answer.observed,
            staleness: answer.staleness,
        })
    }

    /// Reads the document's newest version, merges `patch` into it and writes the result
    /// over that version; another write between the two: again, at most
    /// [`PATCH_TRIES_MAX`] times.
    async fn patch(
        &self,
        ctx: &CallContext,
        twin: &TwinName,
        side: TwinSide,
        patch: &Document,
    ) -> Result<Answer, FirnError> {
        let key = twin.key(side);
        let mut ctx = ctx.clone();
        for _ in 0..PATCH_TRIES_MAX {
            let read = KvRead::Get {
                key: key.clone(),
                at: ReadAt::Latest,
                consistency: ReadConsistency::Linearizable,
            };
            let answer = self.kernel.execute(&ctx, read.into()).await?;
            ctx.after = ctx.after.max(answer.observed);
            let Response::Value(current) = answer.response else {
                return Err(unexpected(&answer.response));
            };
            let mut document = Document::of_version(twin, side, current.as_ref())?;
            document.merge(patch);
            let value = document.to_bytes();
            let max = self.kernel.limits().value_bytes_max;
            if value.len() > max {
                return Err(FirnError::ValueTooLarge {
                    len: value.len(),
                    max,
                });
            }
            let mut put = PutRequest::new(key.clone(), value);
            // Over the version read; none (or a tombstone): only while there is none.
            put.condition =
                WriteCondition::IfVersion(current.filter(|v| !v.deleted).map_or(0, |v| v.version));
            match self.kernel.execute(&ctx, KvWrite::Put(put).into()).await {
                Err(FirnError::Conflict { .. }) => continue,
                written => return written,
            }
        }
        Err(FirnError::TryAgain(format!(
            "twin document '{}' changed under each of {PATCH_TRIES_MAX} tries of the patch; \
             send it again",
            String::from_utf8_lossy(key.bytes())
        )))
    }
}

fn unexpected(response: &Response) -> FirnError {
    FirnError::Internal(format!("a twin's read answered {response:?}"))
}
