//! A transaction within one shard (`MULTI`/`EXEC`): its steps run in order in one apply, at
//! one stamp, each seeing those before it — a read step reads through what the steps
//! before it queued in the batch — and none runs when a watched key changed.

use firn_model::{
    CommitTs, FirnError, Key, KeyKind, KvRead, ReadAt, Response, TxnStep, VersionInfo,
};

use super::apply::Txn;

impl Txn<'_> {
    pub(super) fn atomic(
        &mut self,
        steps: &[TxnStep],
        watched: &[(Key, CommitTs)],
    ) -> Result<Response, FirnError> {
        for (key, seen) in watched {
            if self.meta(key.as_bytes())?.latest_ts > *seen {
                return Ok(Response::Steps(None));
            }
        }
        Ok(Response::Steps(Some(self.run_steps(steps)?)))
    }

    /// Runs `steps` in order, each seeing what those before it wrote, to their answers.
    pub(super) fn run_steps(
        &mut self,
        steps: &[TxnStep],
    ) -> Result<Vec<Result<Response, FirnError>>, FirnError> {
        self.written = Some(Default::default());
        let mut answers = Vec::with_capacity(steps.len());
        for step in steps {
            // A step refused (INCR of a word, say) changes nothing and the others run, as
            // a command failing inside Redis's EXEC.
            let mark = (self.batch.len(), self.events.len(), self.live_delta);
            let answer = match step {
                TxnStep::Write(write) => self.kv(write),
                TxnStep::Read(read) => self.read_step(read),
            };
            match &answer {
                Err(FirnError::Internal(e)) => return Err(FirnError::Internal(e.clone())),
                Err(_) => {
                    self.batch.truncate(mark.0);
                    self.events.truncate(mark.1);
                    self.live_delta = mark.2;
                }
                Ok(_) => {}
            }
            answers.push(answer);
        }
        self.written = None;
        Ok(answers)
    }

    /// A point read of newest versions, as the steps before it left them.
    fn read_step(&self, read: &KvRead) -> Result<Response, FirnError> {
        match read {
            KvRead::Get {
                key,
                at: ReadAt::Latest,
                ..
            } => {
                let value = self.newest(key)?.map(VersionInfo::as_string).transpose()?;
                Ok(Response::Value(value))
            }
            KvRead::Type { key, .. } => Ok(Response::Value(self.newest(key)?)),
            KvRead::MGet {
                keys,
                at: ReadAt::Latest,
                ..
            } => Ok(Response::Values(
                keys.iter()
                    .map(|k| Ok(self.newest(k)?.filter(|v| v.kind == KeyKind::String)))
                    .collect::<Result<_, FirnError>>()?,
            )),
            KvRead::Exists { keys, .. } => {
                let mut n = 0;
                for k in keys {
                    n += self.meta(k.as_bytes())?.is_live() as u64;
                }
                Ok(Response::Count(n))
            }
            other => Err(FirnError::BadArgument(format!(
                "{} cannot run inside a transaction",
                other.name()
            ))),
        }
    }

    /// The newest live version of `key`, the batch's own writes first.
    fn newest(&self, key: &Key) -> Result<Option<VersionInfo>, FirnError> {
        let k = key.as_bytes();
        let meta = self.meta(k)?;
        if !meta.is_live() {
            return Ok(None);
        }
        Ok(self
            .record(k, meta.latest)?
            .map(|r| r.into_info(meta.latest)))
    }
}
