//! Leases (docs/architecture.md, "Leases"): granted and kept alive on the shard of their
//! record; a key attaches to one in a transaction that checks it is live; a lease's end —
//! revoked, or run out and found by its shard's leader ([`sweeper`]) — deletes the record
//! and every key attached to it in one transaction across their shards.

pub mod sweeper;

use std::hash::{BuildHasher, Hasher};

use firn_model::{
    CallContext, Compare, CompareOp, CompareTarget, FirnError, KvRead, KvRequest, KvWrite,
    LeaseChange, LeaseId, LeaseWrite, Lifetime, Response, TxnStep, lease_key,
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

/// A lease id that the node picks when a `GRANT` names none (0): with an idempotency key,
/// one derived from it (a grant sent again names the same lease, and reaches the shard that
/// remembers its answer); otherwise a random one.
fn with_lease_id(request: KvRequest, ctx: &CallContext) -> KvRequest {
    match request {
        KvRequest::Write(KvWrite::Lease(LeaseWrite {
            id: 0,
            change: change @ LeaseChange::Grant { .. },
            ..
        })) => {
            let id = match &ctx.once {
                Some(key) => {
                    let named = [&key.producer[..], b"\0", &key.id[..]].concat();
                    (xxhash_rust::xxh3::xxh3_64(&named) >> 1).max(1)
                }
                None => new_lease_id(),
            };
            KvRequest::Write(KvWrite::Lease(LeaseWrite::new(id, change)))
        }
        other => other,
    }
}

/// A request the kernel runs as a lease's flow rather than as planned: a put attached to a
/// lease (checked live in the same transaction) or a lease's end.
enum LeaseFlow {
    Attach {
        id: LeaseId,
        write: KvWrite,
    },
    End(LeaseId),
    /// Any other request, planned as usual.
    None(KvRequest),
}

impl LeaseFlow {
    /// The flow `request` needs.
    fn of(request: KvRequest) -> LeaseFlow {
        match request {
            KvRequest::Write(KvWrite::Put(put)) if matches!(put.life, Lifetime::Lease(_)) => {
                let Lifetime::Lease(id) = put.life else {
                    unreachable!("matched above")
                };
                LeaseFlow::Attach {
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
                }
            }
            KvRequest::Write(KvWrite::Lease(LeaseWrite {
                id,
                change: LeaseChange::End,
                ..
            })) => LeaseFlow::End(id),
            other => LeaseFlow::None(other),
        }
    }
}

impl Kernel {
    /// Runs `request` as a lease's flow if it needs one (a grant gets its id here), with
    /// the answer the plain request would have (a put's `Written`, an end's `Done`) or
    /// `LeaseNotFound`; else gives it back, to be planned as usual.
    pub(crate) async fn lease_flow(
        &self,
        ctx: &CallContext,
        request: KvRequest,
    ) -> Result<Pending, Box<KvRequest>> {
        let result = match LeaseFlow::of(with_lease_id(request, ctx)) {
            LeaseFlow::None(request) => return Err(Box::new(request)),
            LeaseFlow::Attach { id, write } => self.attach(ctx, id, write).await,
            LeaseFlow::End(id) => self.end_lease(ctx, id, true).await,
        };
        Ok(ready(result))
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

    /// Ends lease `id`: first its record (so no key attaches any more; with the request's
    /// idempotency key, so a `REVOKE` sent again answers as the first did), then every key
    /// attached to it, in one transaction across their shards (several only past
    /// [`END_KEYS_PER_TXN`] keys, or for a key written meanwhile). With `live_only`
    /// (`REVOKE`), a lease that is not live is `LeaseNotFound`; the sweep ends those that ran
    /// out.
    pub(crate) async fn end_lease(
        &self,
        ctx: &CallContext,
        id: LeaseId,
        live_only: bool,
    ) -> Result<firn_model::Answer, FirnError> {
        let end = KvWrite::Atomic {
            compares: Vec::new(),
            steps: vec![TxnStep::Write(KvWrite::Lease(LeaseWrite::new(
                id,
                LeaseChange::End,
            )))],
            otherwise: None,
        };
        let ended = match self.run_kv(ctx, KvRequest::Write(end)).await?.response {
            Response::Steps(Some(mut answers)) if answers.len() == 1 => answers.remove(0),
            other => {
                return Err(FirnError::Internal(format!(
                    "a lease's end answered {other:?}"
                )));
            }
        };
        match ended {
            Err(e @ FirnError::LeaseNotFound(_)) if live_only => return Err(e),
            // Ended already (by a revoke, or the sweep of another leader): its keys, if any
            // are left, go all the same.
            Ok(_) | Err(FirnError::LeaseNotFound(_)) => {}
            Err(e) => return Err(e),
        }
        let ctx = CallContext {
            once: None,
            ..ctx.clone()
        };
        // Each round lists the keys attached and, in one transaction, deletes each while it
        // is still the version listed (a key written since is listed again).
        for _ in 0..END_ROUNDS_MAX {
            let listed = KvRead::LeaseKeys {
                id,
                limit: END_KEYS_PER_TXN,
            };
            let keys = match self.run_kv(&ctx, KvRequest::Read(listed)).await?.response {
                Response::LeaseKeys(keys) => keys,
                other => {
                    return Err(FirnError::Internal(format!(
                        "a lease's keys answered {other:?}"
                    )));
                }
            };
            if keys.is_empty() {
                return Ok(firn_model::Answer::new(Response::Done));
            }
            let compares = keys
                .iter()
                .map(|(key, version)| Compare {
                    key: key.clone(),
                    target: CompareTarget::Version(*version),
                    op: CompareOp::Eq,
                })
                .collect();
            let keys = keys.into_iter().map(|(key, _)| key).collect();
            let delete = KvWrite::Atomic {
                compares,
                steps: vec![TxnStep::Write(KvWrite::Delete { keys })],
                otherwise: Some(Vec::new()),
            };
            self.run_kv(&ctx, KvRequest::Write(delete)).await?;
        }
        // Only a key changed while still attached (`INCR` keeps its lease) fails a round:
        // a write without the lease detaches it.
        Err(FirnError::Refused(format!(
            "lease {id} ended, and some of its keys kept changing while they were deleted; \
             they remain: delete them, or write them without the lease"
        )))
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
