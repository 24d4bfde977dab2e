//! Applying a shard's part of a transaction across shards, and the anchor's decision.

use firn_model::{FirnError, Key, KeyRange, KvWrite, Response, TxnId, TxnOutcome, TxnStep};

use super::{
    DECIDED, DECIDED_CURSOR, HeldChange, Holds, PARTS, RECORD_KEPT_US, RECORDS,
    RECORDS_DROPPED_PER_DECISION, Record, StoredPart, decided_row, record_tags, row,
};
use crate::backend::Table;
use crate::command::{LogOp, Op, TxnOp, TxnPart};
use crate::record::encode;
use crate::store::apply::Txn;

impl Txn<'_> {
    pub(in crate::store) fn txn(&mut self, op: &TxnOp) -> Result<Response, FirnError> {
        match op {
            TxnOp::Prepare { txn, part } => self.prepare(*txn, part),
            TxnOp::Decide {
                txn,
                decision,
                answer,
            } => self.decide(*txn, *decision, answer.clone()),
            TxnOp::Resolve { txn, outcome } => {
                self.resolve(*txn, *outcome)?;
                Ok(Response::Done)
            }
        }
    }

    /// Refuses a command that would change a key a transaction being committed holds
    /// (`TRYAGAIN`: the node that took it sends it again). A transaction's own steps run
    /// through [`Txn::kv`], not here.
    pub(in crate::store) fn check_unheld(&self, op: &Op) -> Result<(), FirnError> {
        let held = self.store.held.read().unwrap_or_else(|p| p.into_inner());
        if held.is_empty() {
            return Ok(());
        }
        let refuse = |holds: Holds<'_>| match held.holder(holds) {
            Some(txn) => Err(FirnError::TryAgain(format!(
                "{} is held by transaction {txn}, being committed; retry",
                describe(holds)
            ))),
            None => Ok(()),
        };
        let busy = || {
            Err(FirnError::TryAgain(
                "transactions are being committed on this shard; retry".into(),
            ))
        };
        match op {
            // Whole ranges: refused while anything is held (a transaction lasts
            // milliseconds, these are rare).
            Op::Kv(KvWrite::FlushAll)
            | Op::Kv(KvWrite::Truncate {
                target: KeyRange::Prefix(_),
                ..
            }) => busy(),
            // A log's records and trims, by their tags (a stream's are its key's, below).
            Op::Log(LogOp::Append {
                log,
                records,
                stream: None,
                ..
            }) => records.iter().flat_map(|r| &r.tags).try_for_each(|tag| {
                refuse(Holds::Tag {
                    log: log.as_bytes(),
                    tag: tag.as_bytes(),
                })
            }),
            Op::Log(LogOp::Trim {
                log,
                tag: Some(tag),
                ..
            }) => refuse(Holds::Tag {
                log: log.as_bytes(),
                tag: tag.as_bytes(),
            }),
            Op::Log(LogOp::Trim { log, tag: None, .. }) if held.holds_tags_of(log.as_bytes()) => {
                busy()
            }
            // A transaction in this shard alone: its keys, and its records' tags.
            Op::Kv(
                write @ KvWrite::Atomic {
                    steps, otherwise, ..
                },
            ) => write
                .keys()
                .map(|k| Holds::Key(k.as_bytes()))
                .chain(record_tags(steps.iter().chain(otherwise.iter().flatten())))
                .try_for_each(refuse),
            // An idempotent write's own op is checked when it runs.
            op => op
                .named_keys()
                .try_for_each(|k| refuse(Holds::Key(k.as_bytes()))),
        }
    }

    fn prepare(&mut self, txn: TxnId, part: &TxnPart) -> Result<Response, FirnError> {
        let TxnPart {
            anchor,
            is_anchor,
            deadline_us,
            compares,
            steps,
            otherwise,
        } = part;
        let (anchor, is_anchor, deadline_us) = (*anchor, *is_anchor, *deadline_us);
        let otherwise = otherwise.as_deref();
        let mut keys: Vec<Key> = steps
            .iter()
            .chain(otherwise.into_iter().flatten())
            .flat_map(TxnStep::keys)
            .chain(compares.iter().map(|c| &c.key))
            .cloned()
            .collect();
        keys.sort();
        keys.dedup();
        for key in &keys {
            self.store.in_lane(key.as_bytes())?;
        }
        {
            let held = self.store.held.read().unwrap_or_else(|p| p.into_inner());
            let tags = record_tags(steps.iter().chain(otherwise.into_iter().flatten()));
            for holds in keys.iter().map(|k| Holds::Key(k.as_bytes())).chain(tags) {
                if let Some(other) = held.holder(holds) {
                    return Err(FirnError::TxnConflict(format!(
                        "{} is held by transaction {other}",
                        describe(holds)
                    )));
                }
            }
        }
        if self.store.txn_part(txn)?.is_some() {
            return Err(FirnError::TxnConflict(format!(
                "transaction {txn} is prepared here already"
            )));
        }
        if is_anchor && self.txn_record(txn)?.is_some() {
            return Err(FirnError::TxnConflict(format!(
                "transaction {txn} was decided already"
            )));
        }
        // Expiries due are written down first (the steps find those keys absent); the
        // soonest still to come goes back to the coordinator, which commits only before it.
        let mut ends: Option<firn_model::CommitTs> = None;
        for key in &keys {
            self.write_down(key)?;
            ends = match (ends, self.meta(key.as_bytes())?.expires) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        let compared = self.compares_hold(compares)?;
        if !compared && otherwise.is_none() {
            return Ok(Response::Prepared {
                at: self.ts,
                compared,
                steps: Vec::new(),
                otherwise: None,
                ends,
            });
        }
        let answers = self.dry_run(|txn| txn.run_steps(steps))?;
        let otherwise_answers = match otherwise {
            Some(o) => Some(self.dry_run(|txn| txn.run_steps(o))?),
            None => None,
        };
        let part = StoredPart {
            anchor,
            deadline_us,
            prepared: self.ts,
            steps: with_ids_answered(steps, &answers),
            otherwise: otherwise
                .map(|o| with_ids_answered(o, otherwise_answers.as_deref().unwrap_or(&[]))),
            keys,
        };
        self.batch
            .put(Table::System, row(PARTS, txn), encode(&part));
        self.held_changes.push(part.held(txn));
        if is_anchor {
            self.system_put(row(RECORDS, txn), encode(&Record::Pending));
        }
        Ok(Response::Prepared {
            at: self.ts,
            compared,
            steps: answers,
            otherwise: otherwise_answers,
            ends,
        })
    }

    fn decide(
        &mut self,
        txn: TxnId,
        decision: TxnOutcome,
        answer: Option<Box<Response>>,
    ) -> Result<Response, FirnError> {
        let outcome = match self.txn_record(txn)? {
            Some(Record::Decided { outcome, .. }) => {
                // The part is resolved already (a decision resolves the anchor's own).
                self.resolve(txn, outcome)?;
                return Ok(Response::Decided {
                    txn,
                    outcome,
                    answer: None,
                });
            }
            Some(Record::Pending) => decision,
            // Never prepared here (or decided so long ago that the record is gone): it
            // cannot have committed. The record keeps a late prepare from holding keys.
            None => TxnOutcome::Aborted,
        };
        let at_us = self.ts.wall_us;
        self.system_put(
            row(RECORDS, txn),
            encode(&Record::Decided { outcome, at_us }),
        );
        self.system_put(decided_row(at_us, txn), Vec::new());
        self.forget_old_records(at_us)?;
        self.resolve(txn, outcome)?;
        // An aborted decision carries no answer: an idempotency key does not remember it
        // (see `store/once.rs`), so the transaction sent again may commit.
        Ok(Response::Decided {
            txn,
            outcome,
            answer: answer.filter(|_| outcome != TxnOutcome::Aborted),
        })
    }

    /// The record of `txn` as this batch leaves it.
    fn txn_record(&self, txn: TxnId) -> Result<Option<Record>, FirnError> {
        self.system_get(&row(RECORDS, txn))?
            .map(|v| crate::record::decode(&v))
            .transpose()
    }

    /// Drops a few records decided more than [`RECORD_KEPT_US`] before `now_us`.
    fn forget_old_records(&mut self, now_us: u64) -> Result<(), FirnError> {
        let before = now_us.saturating_sub(RECORD_KEPT_US);
        // Rows are in age order: the first ones are the oldest.
        for k in self.rows_after_cursor(DECIDED, DECIDED_CURSOR, RECORDS_DROPPED_PER_DECISION)? {
            let at = k.get(DECIDED.len()..DECIDED.len() + 8);
            let at_us = at.and_then(|a| a.try_into().ok()).map(u64::from_be_bytes);
            if at_us.is_none_or(|at_us| at_us >= before) {
                break;
            }
            let id: [u8; 16] = k[DECIDED.len() + 8..]
                .try_into()
                .map_err(|_| FirnError::Internal("corrupt transaction record row".into()))?;
            self.system_remove(row(RECORDS, TxnId(u128::from_be_bytes(id))));
            self.system_remove(k.clone());
            self.system_put(DECIDED_CURSOR.to_vec(), k);
        }
        Ok(())
    }

    /// Ends this shard's part of `txn`, if it holds one: committed, its steps run again at
    /// the commit stamp, where they find what they found at the prepare (their keys were
    /// held since); aborted, nothing is written. Later entries are stamped above the
    /// commit stamp, so versions of a key still grow with their stamps.
    fn resolve(&mut self, txn: TxnId, outcome: TxnOutcome) -> Result<(), FirnError> {
        let Some(part) = self.store.txn_part(txn)? else {
            return Ok(());
        };
        self.batch.remove(Table::System, row(PARTS, txn));
        self.held_changes.push(HeldChange::Resolved(txn));
        if let TxnOutcome::Committed { at, otherwise } = outcome {
            let steps = match (otherwise, &part.otherwise) {
                (false, _) => &part.steps,
                (true, Some(o)) => o,
                (true, None) => {
                    return Err(FirnError::Internal(format!(
                        "transaction {txn} committed its otherwise steps, and this part has none"
                    )));
                }
            };
            let entry_ts = self.ts;
            self.ts = at;
            let ran = self.run_steps(steps);
            // Above the commit stamp, and above the stamps its records took after it.
            self.ts = entry_ts.max(self.ts);
            ran?;
        }
        Ok(())
    }
}

/// What a part holds, as its refusals name it.
fn describe(holds: Holds<'_>) -> String {
    match holds {
        Holds::Key(key) => format!("key '{}'", String::from_utf8_lossy(key)),
        Holds::Tag { log, tag } => format!(
            "tag '{}' of log '{}'",
            String::from_utf8_lossy(tag),
            String::from_utf8_lossy(log)
        ),
    }
}

/// `steps` as the resolution runs them again: a stream entry whose id the stream chose
/// (`*`, `ms-*`, from the stamp and the stream's last id) takes the id its dry run answered,
/// so the entry resolved at the commit stamp is the one the client was told of.
fn with_ids_answered(steps: &[TxnStep], answers: &[Result<Response, FirnError>]) -> Vec<TxnStep> {
    steps
        .iter()
        .zip(answers.iter().map(Some).chain(std::iter::repeat(None)))
        .map(|(step, answer)| match (step, answer) {
            (
                TxnStep::Log(firn_model::LogWrite::StreamAdd {
                    key,
                    id: firn_model::StreamId::Auto | firn_model::StreamId::Ms(_),
                    payload,
                    trim,
                    no_create,
                }),
                Some(Ok(Response::Appended(appended))),
            ) if appended.len() == 1 => TxnStep::Log(firn_model::LogWrite::StreamAdd {
                key: key.clone(),
                id: firn_model::StreamId::Exact(appended[0].seq),
                payload: payload.clone(),
                trim: *trim,
                no_create: *no_create,
            }),
            (step, _) => step.clone(),
        })
        .collect()
}
