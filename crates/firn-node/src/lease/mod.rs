//! Leases (docs/architecture.md, "Leases"): granted and kept alive on the shard of their
//! record; a key attaches to one in a transaction that checks it is live; a lease's end —
//! revoked, or run out and found by its shard's leader ([`sweeper`]) — deletes the record
//! and every key attached to it in one transaction across their shards.

pub mod sweeper;

use std::hash::{BuildHasher, Hasher};

use firn_model::{
    CallContext, Compare, CompareOp, CompareTarget, FirnError, KvRead, KvRequest, KvWrite,
    LeaseChange, LeaseId, LeaseWrite, Lifetime, ReadConsistency, Response, TxnStep, lease_key,
};

use crate::exec::{Kernel, Pending, ready};

/// Most keys one transaction of a lease's end deletes; a lease with more ends in several
/// (each all or nothing).
pub const END_KEYS_PER_TXN: usize = 4_000;

/// Most rounds of listing and deleting one end makes.
const END_ROUNDS_MAX: usize = 8;

/// A fresh lease id: random, positive as a signed 64-bit integer (RESP's), never 0.
pub fn new_lease_id() -> LeaseId {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    (h.finish() >> 1).max(1)
}

/// A request the kernel runs as a lease's flow rather than as planned: a put attached to a
/// lease (checked live in the same transaction) or a lease's end.
pub(crate) enum LeaseFlow {
    Attach { id: LeaseId, write: KvWrite },
    End(LeaseId),
}

impl LeaseFlow {
    /// The flow `request` needs, or the request back.
    pub(crate) fn of(request: KvRequest) -> Result<LeaseFlow, KvRequest> {
        match request {
            KvRequest::Write(KvWrite::Put(put)) if matches!(put.life, Lifetime::Lease(_)) => {
                let Lifetime::Lease(id) = put.life else {
                    unreachable!("matched above")
                };
                Ok(LeaseFlow::Attach {
                    id,
                    write: KvWrite::Atomic {
                        compares: vec![Compare {
                            key: lease_key(id),
                            target: CompareTarget::Lease(id),
                            op: CompareOp::Eq,
                        }],
                        steps: vec![TxnStep::Write(KvWrite::Put(put))],
                        otherwise: Some(Vec::new()),
                    },
                })
            }
            KvRequest::Write(KvWrite::Lease(LeaseWrite {
                id,
                change: LeaseChange::End,
                ..
            })) => Ok(LeaseFlow::End(id)),
            other => Err(other),
        }
    }
}

impl Kernel {
    /// Runs a lease's flow; answers as the plain request would (a put's `Written`, an end's
    /// `Done`), or `LeaseNotFound`.
    pub(crate) async fn run_lease_flow(&self, ctx: &CallContext, flow: LeaseFlow) -> Pending {
        let result = match flow {
            LeaseFlow::Attach { id, write } => self.attach(ctx, id, write).await,
            LeaseFlow::End(id) => self.end_lease(ctx, id, true).await,
        };
        ready(result)
    }

    async fn attach(
        &self,
        ctx: &CallContext,
        id: LeaseId,
        write: KvWrite,
    ) -> Result<firn_model::Answer, FirnError> {
        let mut answer = self.run_kv(ctx, KvRequest::Write(write)).await?;
        answer.response = match answer.response {
            Response::Branch {
                succeeded: true,
                mut steps,
            } if steps.len() == 1 => steps.pop().expect("one step")?,
            Response::Branch {
                succeeded: false, ..
            } => return Err(FirnError::LeaseNotFound(id)),
            other => {
                return Err(FirnError::Internal(format!(
                    "a put attached to a lease answered {other:?}"
                )));
            }
        };
        Ok(answer)
    }

    /// Ends lease `id`: its record and the keys attached to it, in one transaction (several
    /// only past [`END_KEYS_PER_TXN`] keys, or for a key attached while it ended). With
    /// `live_only` (`REVOKE`), a lease that is not live is `LeaseNotFound`; the sweep ends
    /// those that ran out.
    pub(crate) async fn end_lease(
        &self,
        ctx: &CallContext,
        id: LeaseId,
        live_only: bool,
    ) -> Result<firn_model::Answer, FirnError> {
        if live_only {
            let read = KvRead::Lease {
                key: lease_key(id),
                id,
                consistency: ReadConsistency::Linearizable,
            };
            // Not live: `LeaseNotFound`.
            self.run_kv(ctx, KvRequest::Read(read)).await?;
        }
        // Each round lists the keys attached and, in one transaction, deletes each while
        // it is still the version listed (a key written since is listed again) and ends the
        // record; rounds go on until no key is left.
        let mut ended = false;
        for _ in 0..END_ROUNDS_MAX {
            let listed = KvRead::LeaseKeys {
                id,
                limit: END_KEYS_PER_TXN,
            };
            let keys = match self.run_kv(ctx, KvRequest::Read(listed)).await?.response {
                Response::LeaseKeys(keys) => keys,
                other => {
                    return Err(FirnError::Internal(format!(
                        "a lease's keys answered {other:?}"
                    )));
                }
            };
            if ended && keys.is_empty() {
                break;
            }
            let compares = keys
                .iter()
                .map(|(key, version)| Compare {
                    key: key.clone(),
                    target: CompareTarget::Version(*version),
                    op: CompareOp::Eq,
                })
                .collect();
            let mut steps = Vec::new();
            if !ended {
                steps.push(TxnStep::Write(KvWrite::Lease(LeaseWrite::new(
                    id,
                    LeaseChange::End,
                ))));
            }
            if !keys.is_empty() {
                let keys = keys.into_iter().map(|(key, _)| key).collect();
                steps.push(TxnStep::Write(KvWrite::Delete { keys }));
            }
            let end = KvWrite::Atomic {
                compares,
                steps,
                otherwise: Some(Vec::new()),
            };
            if let Response::Branch {
                succeeded: true, ..
            } = self.run_kv(ctx, KvRequest::Write(end)).await?.response
            {
                ended = true;
            }
        }
        if !ended {
            return Err(FirnError::TryAgain(format!(
                "lease {id}'s keys kept changing while it ended; it ends at the next sweep"
            )));
        }
        Ok(firn_model::Answer::new(Response::Done))
    }

    /// A kv request run through the kernel, to its answer.
    async fn run_kv(
        &self,
        ctx: &CallContext,
        request: KvRequest,
    ) -> Result<firn_model::Answer, FirnError> {
        Box::pin(self.submit_kv(ctx, request)).await.await
    }
}
