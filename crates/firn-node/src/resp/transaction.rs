//! A connection's Redis transaction: MULTI queues the commands that follow (answering
//! `QUEUED`), EXEC sends them as one `KvWrite::Atomic` and shows each answer with its
//! command's own rendering, WATCH remembers the stamp of each key's newest version as a
//! linearizable read saw it. Redis's words for every misuse.

use std::collections::VecDeque;

use bytes::Bytes;
use firn_model::{
    Answer, CommitTs, Compare, CompareOp, CompareTarget, FirnError, Key, KvRead, KvRequest,
    KvWrite, LogRequest, ReadConsistency, Request, Response, TxnStep,
};

use super::Connection;
use super::Queued;
use super::cmd::firn_txn::FirnTxn;
use super::cmd::multi::TxnCommand;
use super::command::{Action, Render};
use super::reply::Reply;

/// Commands queued since MULTI, and whether one was refused (EXEC then aborts).
#[derive(Default)]
pub(super) struct Multi {
    queued: Vec<InTxn>,
    refused: bool,
}

/// One queued command: a step of the transaction, shown with its command's rendering, or a
/// command whose answer needs nothing (PING, ECHO), given back in its place.
enum InTxn {
    Step(TxnStep, Render),
    Fixed(Reply),
}

/// What a transaction step may be: a point read of newest values, a write of keys, or a
/// command answered without the store. `name`: the command's, for a refusal.
fn as_step(name: &str, action: Action) -> Result<InTxn, FirnError> {
    if let Action::Reply(reply) = action {
        return Ok(InTxn::Fixed(reply));
    }
    let (step, how) = as_store_step(name, action)?;
    Ok(InTxn::Step(step, how))
}

fn as_store_step(name: &str, action: Action) -> Result<(TxnStep, Render), FirnError> {
    let (step, how) = match action {
        Action::Execute(Request::Kv(KvRequest::Read(read)), how) => (TxnStep::Read(read), how),
        Action::Execute(Request::Kv(KvRequest::Write(write)), how) => (TxnStep::Write(write), how),
        Action::Execute(Request::Log(LogRequest::Write(write)), how) => (TxnStep::Log(write), how),
        _ => return Err(TxnStep::refused(name)),
    };
    step.check().map_err(|e| match e {
        // Said as the step says it: the command may be queued, without its option.
        e @ FirnError::BadArgument(_) if matches!(&step, TxnStep::Write(KvWrite::Put(_))) => e,
        _ => TxnStep::refused(name),
    })?;
    Ok((step, how))
}

impl Connection {
    /// While MULTI is open, a command other than EXEC, DISCARD, MULTI, WATCH, UNWATCH, QUIT
    /// or RESET is queued and answered here: `Ok(Some(QUEUED))`, or its error (the
    /// transaction then aborts at EXEC). Any other command, and every command outside a
    /// transaction, is handed back (`Err(items)`) to run as usual.
    pub(super) fn queue_in_multi(
        &mut self,
        name: &str,
        items: VecDeque<Bytes>,
    ) -> Result<Option<Reply>, VecDeque<Bytes>> {
        // `IDMP producer id EXEC` ends the transaction as EXEC does.
        let idmp_exec = name == "IDMP"
            && items
                .get(2)
                .is_some_and(|c| c.eq_ignore_ascii_case(b"EXEC"));
        if self.multi.is_none()
            || idmp_exec
            || matches!(
                name,
                "EXEC" | "DISCARD" | "MULTI" | "WATCH" | "UNWATCH" | "QUIT" | "RESET"
            )
        {
            return Err(items);
        }
        let full = self
            .multi
            .as_ref()
            .is_some_and(|m| m.queued.len() >= firn_model::limits::TXN_STEPS_MAX);
        let queued = if full {
            Err(FirnError::BadArgument(format!(
                "a transaction queues at most {} commands",
                firn_model::limits::TXN_STEPS_MAX
            )))
        } else {
            super::registry::dispatch(name, items)
                .and_then(|a| self.allowed(&a).map(|()| a))
                .and_then(|a| as_step(name, a))
        };
        let Some(multi) = self.multi.as_mut() else {
            return Ok(None);
        };
        Ok(Some(match queued {
            Ok(queued) => {
                multi.queued.push(queued);
                Reply::Simple("QUEUED".into())
            }
            Err(e) => {
                multi.refused = true;
                Reply::error(&e)
            }
        }))
    }

    /// MULTI, EXEC, DISCARD, WATCH, UNWATCH.
    pub(super) async fn transaction(&mut self, command: TxnCommand) -> std::io::Result<()> {
        let reply = match command {
            TxnCommand::Multi if self.multi.is_some() => {
                Reply::Error("ERR MULTI calls can not be nested".into())
            }
            TxnCommand::Multi => {
                self.multi = Some(Multi::default());
                Reply::Ok
            }
            TxnCommand::Discard => match self.multi.take() {
                None => Reply::Error("ERR DISCARD without MULTI".into()),
                Some(_) => {
                    self.watched.clear();
                    Reply::Ok
                }
            },
            TxnCommand::Watch(_) if self.multi.is_some() => {
                Reply::Error("ERR WATCH inside MULTI is not allowed".into())
            }
            TxnCommand::Watch(keys) => self.watch_keys(keys).await,
            TxnCommand::Unwatch => {
                self.watched.clear();
                Reply::Ok
            }
            TxnCommand::Firn(txn) => self.firn_txn(*txn).await,
            TxnCommand::Exec => match self.multi.take() {
                None => Reply::Error("ERR EXEC without MULTI".into()),
                Some(multi) => {
                    let watched = std::mem::take(&mut self.watched);
                    if multi.refused {
                        Reply::Error(
                            "EXECABORT Transaction discarded because of previous errors.".into(),
                        )
                    } else {
                        self.exec(multi, watched).await
                    }
                }
            },
        };
        self.queue.push_back(Queued::Ready(reply));
        Ok(())
    }

    /// WATCH: each key's newest version's stamp, as a linearizable read sees it (a key
    /// never written: 0); a key watched again keeps its first stamp.
    async fn watch_keys(&mut self, keys: Vec<Key>) -> Reply {
        self.drain().await;
        for key in keys {
            if self.watched.iter().any(|(k, _)| k == &key) {
                continue;
            }
            let read = KvRead::Type {
                key: key.clone(),
                consistency: ReadConsistency::Linearizable,
            };
            match self
                .client
                .session
                .run(&self.shared.router, read.into())
                .await
            {
                Ok(answer) => self
                    .watched
                    .push((key, answer.observed.unwrap_or(CommitTs::ZERO))),
                Err(e) => return Reply::error(&e),
            }
        }
        Reply::Ok
    }

    /// EXEC: the queued steps as one transaction, after every answer before it.
    async fn exec(&mut self, multi: Multi, watched: Vec<(Key, CommitTs)>) -> Reply {
        self.flush_reads().await;
        self.drain().await;
        let mut steps = Vec::new();
        let mut shown = Vec::new();
        for queued in multi.queued {
            match queued {
                InTxn::Step(step, how) => {
                    steps.push(step);
                    shown.push(Err(how));
                }
                InTxn::Fixed(reply) => shown.push(Ok(reply)),
            }
        }
        // WATCH is a compare: no version of the key newer than the one it saw.
        let compares = watched
            .into_iter()
            .map(|(key, seen)| Compare {
                key,
                target: CompareTarget::Stamp(seen),
                op: CompareOp::Le,
            })
            .collect();
        match self.run_atomic(compares, steps, None).await {
            Ok(Response::Steps(None)) => Reply::Nil,
            Ok(Response::Steps(Some(answers))) => {
                let mut answers = answers.into_iter();
                Reply::Array(
                    shown
                        .into_iter()
                        .map(|each| match each {
                            Ok(fixed) => fixed,
                            Err(how) => match answers.next() {
                                Some(answer) => how.show(answer.map(Answer::new)),
                                None => Reply::error(&FirnError::Internal(
                                    "EXEC answered fewer steps than it ran".into(),
                                )),
                            },
                        })
                        .collect(),
                )
            }
            Ok(other) => Reply::error(&FirnError::Internal(format!("EXEC answered {other:?}"))),
            // Refused before it ran (its keys span shards, a step over its limits): nothing
            // was applied, and clients read EXECABORT as that.
            Err(
                e @ (FirnError::BadArgument(_)
                | FirnError::KeyTooLarge { .. }
                | FirnError::ValueTooLarge { .. }),
            ) => Reply::Error(format!("EXECABORT Transaction discarded: {e}")),
            Err(e) => Reply::error(&e),
        }
    }

    /// FIRN.TXN: its commands checked as MULTI checks them (each allowed the user, each one
    /// a transaction may run), then one transaction; `[1|0, [reply…]]`.
    async fn firn_txn(&mut self, txn: FirnTxn) -> Reply {
        self.flush_reads().await;
        self.drain().await;
        let FirnTxn {
            compares,
            then,
            otherwise,
        } = txn;
        let (then, otherwise) = match (self.txn_branch(then), self.txn_branch(otherwise)) {
            (Ok(t), Ok(o)) => (t, o),
            (Err(e), _) | (_, Err(e)) => return Reply::error(&e),
        };
        let (steps, then_shown): (Vec<TxnStep>, Vec<Render>) = then.into_iter().unzip();
        let (other_steps, other_shown): (Vec<TxnStep>, Vec<Render>) = otherwise.into_iter().unzip();
        match self.run_atomic(compares, steps, Some(other_steps)).await {
            Ok(Response::Branch { succeeded, steps }) => {
                let shown = if succeeded { then_shown } else { other_shown };
                Reply::Array(vec![
                    Reply::Int(succeeded as i64),
                    Reply::Array(
                        shown
                            .into_iter()
                            .zip(steps)
                            .map(|(how, answer)| how.show(answer.map(Answer::new)))
                            .collect(),
                    ),
                ])
            }
            Ok(other) => Reply::error(&FirnError::Internal(format!("FIRN.TXN answered {other:?}"))),
            Err(e) => Reply::error(&e),
        }
    }

    /// Runs one transaction (`KvWrite::Atomic`) on this connection's session.
    async fn run_atomic(
        &mut self,
        compares: Vec<Compare>,
        steps: Vec<TxnStep>,
        otherwise: Option<Vec<TxnStep>>,
    ) -> Result<Response, FirnError> {
        let request = KvWrite::Atomic {
            compares,
            steps,
            otherwise,
        };
        self.client
            .session
            .run(&self.shared.router, request.into())
            .await
            .map(|answer| answer.response)
    }

    /// A FIRN.TXN branch's commands as transaction steps, each with its rendering.
    fn txn_branch(
        &self,
        commands: Vec<VecDeque<Bytes>>,
    ) -> Result<Vec<(TxnStep, Render)>, FirnError> {
        commands
            .into_iter()
            .map(|mut items| {
                let name = items.pop_front().unwrap_or_default();
                let name = String::from_utf8_lossy(&name).to_ascii_uppercase();
                let action = super::registry::dispatch(&name, items)?;
                self.allowed(&action)?;
                as_store_step(&name, action)
            })
            .collect()
    }
}
