//! A transaction within one shard (`MULTI`/`EXEC`, `FIRN.TXN`): its compares are checked,
//! then its steps (or its `otherwise` steps) run in order in one apply, at one stamp, each
//! seeing those before it — a read step reads through what the steps before it queued in
//! the batch. Without `otherwise` steps, a compare that fails runs nothing.

use firn_model::{
    Compare, Compared, FirnError, Key, KeyKind, KvRead, ReadAt, Response, TxnStep, VersionInfo,
};

use super::apply::Txn;

impl Txn<'_> {
    pub(super) fn atomic(
        &mut self,
        compares: &[Compare],
        steps: &[TxnStep],
        otherwise: Option<&[TxnStep]>,
    ) -> Result<Response, FirnError> {
        let held = self.compares_hold(compares)?;
        match otherwise {
            None if !held => Ok(Response::Steps(None)),
            None => Ok(Response::Steps(Some(self.run_steps(steps)?))),
            Some(otherwise) => Ok(Response::Branch {
                succeeded: held,
                steps: self.run_steps(if held { steps } else { otherwise })?,
            }),
        }
    }

    /// Whether every compare holds of the keys as they are now.
    pub(super) fn compares_hold(&self, compares: &[Compare]) -> Result<bool, FirnError> {
        for compare in compares {
            if let firn_model::CompareTarget::Lease(id) = compare.target {
                let now = Compared {
                    lease_live: self.lease_live(id)?,
                    ..Compared::default()
                };
                if !compare.holds(&now) {
                    return Ok(false);
                }
                continue;
            }
            let meta = self.meta(compare.key.as_bytes())?;
            let newest = self.newest(&compare.key)?;
            let value = newest
                .as_ref()
                .filter(|v| v.kind == KeyKind::String)
                .and_then(|v| v.value.as_deref());
            let now = Compared {
                version: newest.as_ref().map_or(0, |v| v.version),
                value,
                exists: newest.is_some(),
                stamp: meta.latest_ts,
                lease_live: false,
            };
            if !compare.holds(&now) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Runs `steps` in order, each seeing what those before it wrote, to their answers.
    /// Every version is stamped with the stamp at the start; a log record takes a stamp
    /// of its own (its seq is its stamp), the logical ticks after it, and the stamp is
    /// raised past the last of them at the end, so later entries are stamped above.
    pub(super) fn run_steps(
        &mut self,
        steps: &[TxnStep],
    ) -> Result<Vec<Result<Response, FirnError>>, FirnError> {
        self.written = Some(Default::default());
        self.records_stamped = 0;
        let mut answers = Vec::with_capacity(steps.len());
        for step in steps {
            // A step refused (INCR of a word, say) changes nothing and the others run, as
            // a command failing inside Redis's EXEC.
            let mark = self.mark();
            let answer = match step {
                TxnStep::Write(write) => self.kv(write),
                TxnStep::Read(read) => self.read_step(read),
                TxnStep::Log(write) => self.stream_step(write),
                TxnStep::Records { log, home, records } => {
                    self.transaction_records(log, *home, records)
                }
            };
            match &answer {
                Err(FirnError::Internal(e)) => return Err(FirnError::Internal(e.clone())),
                Err(_) => self.back_to(mark),
                Ok(_) => {}
            }
            answers.push(answer);
        }
        self.written = None;
        if let Some(last) = self.records_stamped.checked_sub(1) {
            self.ts = self.ts.max(self.record_stamp_at(last)?);
        }
        self.records_stamped = 0;
        Ok(answers)
    }

    /// An `XADD` inside a transaction: the stream is the key's, on this shard.
    fn stream_step(&mut self, write: &firn_model::LogWrite) -> Result<Response, FirnError> {
        match write {
            firn_model::LogWrite::StreamAdd {
                key,
                id,
                payload,
                trim,
                no_create,
            } => {
                // A stream's seqs come from its ids, never from `home`.
                let op = crate::command::LogOp::stream_add(
                    key.clone(),
                    0,
                    *id,
                    payload.clone(),
                    *trim,
                    *no_create,
                );
                self.log(&op)
            }
            // A log's append runs placed on its records' home (`TxnStep::Records`).
            other => Err(TxnStep::refused(other.name())),
        }
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
