//! What a kv request must be before anything is proposed or waited for: every stated limit
//! checked ([`Kernel::validate`]), and the node's own limits written into the writes that
//! apply them in their shard ([`Kernel::with_limits`]).

use super::*;

impl Kernel {
    /// The node's limits written into a write that applies them in its shard: an APPEND's
    /// longest value is this node's `--max-value-bytes` (the front ends leave it unset).
    pub(super) fn with_limits(&self, request: KvRequest) -> KvRequest {
        match request {
            KvRequest::Write(write) => KvRequest::Write(self.write_with_limits(write)),
            read => read,
        }
    }

    fn write_with_limits(&self, write: KvWrite) -> KvWrite {
        match write {
            KvWrite::Change {
                key,
                change: firn_model::KeyChange::Append { suffix, .. },
            } => KvWrite::Change {
                key,
                change: firn_model::KeyChange::Append {
                    suffix,
                    max_len: self.limits.value_bytes_max as u64,
                },
            },
            KvWrite::Atomic {
                compares,
                steps,
                otherwise,
            } => {
                let limited = |steps: Vec<firn_model::TxnStep>| {
                    steps
                        .into_iter()
                        .map(|step| match step {
                            firn_model::TxnStep::Write(w) => {
                                firn_model::TxnStep::Write(self.write_with_limits(w))
                            }
                            read => read,
                        })
                        .collect()
                };
                KvWrite::Atomic {
                    compares,
                    steps: limited(steps),
                    otherwise: otherwise.map(limited),
                }
            }
            other => other,
        }
    }

    /// Checks a kv request against every stated limit before anything is proposed or
    /// waited for.
    pub fn validate(&self, request: &KvRequest) -> Result<(), FirnError> {
        match request {
            KvRequest::Read(r) => validate_read(r),
            KvRequest::Write(w) => self.validate_write(w),
        }
    }

    fn validate_write(&self, write: &KvWrite) -> Result<(), FirnError> {
        match write {
            KvWrite::Put(p) => self.limits.check_value(p.value.len()),
            KvWrite::MSet { items } => {
                check_key_count(items.len())?;
                match items
                    .iter()
                    .find(|(_, v)| v.len() > self.limits.value_bytes_max)
                {
                    Some((key, v)) => Err(FirnError::BadArgument(format!(
                        "MSET carries values of at most {} bytes; '{key}' has {} (write a large value alone, with SET or HTTP PUT)",
                        self.limits.value_bytes_max,
                        v.len()
                    ))),
                    None => Ok(()),
                }
            }
            KvWrite::Delete { keys } => check_key_count(keys.len()),
            KvWrite::Change {
                change: firn_model::KeyChange::Append { suffix, .. },
                ..
            } => self.limits.check_value(suffix.len()),
            KvWrite::Change { .. } | KvWrite::Expire { .. } => Ok(()),
            KvWrite::Lease(firn_model::LeaseWrite {
                change: firn_model::LeaseChange::Grant { ttl_s },
                ..
            }) => check_lease_ttl(*ttl_s),
            KvWrite::Lease(_) => Ok(()),
            KvWrite::Atomic {
                compares,
                steps,
                otherwise,
            } => {
                use firn_model::limits::{TXN_BYTES_MAX, TXN_STEPS_MAX};
                let keys = write.keys().count();
                let steps: Vec<&firn_model::TxnStep> =
                    steps.iter().chain(otherwise.iter().flatten()).collect();
                if steps.len() > TXN_STEPS_MAX || keys > TXN_STEPS_MAX {
                    return Err(FirnError::BadArgument(format!(
                        "a transaction of {} commands naming {keys} keys; the limit is \
                         {TXN_STEPS_MAX} of each",
                        steps.len()
                    )));
                }
                compares.iter().try_for_each(firn_model::Compare::check)?;
                check_leased_steps(compares, &steps)?;
                let compared: usize = compares
                    .iter()
                    .map(|c| match &c.target {
                        firn_model::CompareTarget::Value(v) => v.len(),
                        _ => 0,
                    })
                    .sum();
                let bytes: usize = compared + steps.iter().map(|s| step_bytes(s)).sum::<usize>();
                if bytes > TXN_BYTES_MAX {
                    return Err(FirnError::BadArgument(format!(
                        "a transaction writing {bytes} bytes of values; the limit is \
                         {TXN_BYTES_MAX} (it is one log entry)"
                    )));
                }
                steps.iter().try_for_each(|step| {
                    // A lease's end, and a put attached to a lease, are steps of the
                    // transactions `crate::lease` makes; no front end queues them
                    // (`TxnStep::check` refuses them; `check_leased_steps` checks the put).
                    let made_by_leases = matches!(
                        step,
                        firn_model::TxnStep::Write(
                            KvWrite::Lease(firn_model::LeaseWrite {
                                change: firn_model::LeaseChange::End,
                                ..
                            }) | KvWrite::Put(firn_model::PutRequest {
                                life: firn_model::Lifetime::Lease(_),
                                ..
                            })
                        )
                    );
                    if !made_by_leases {
                        step.check()?;
                    }
                    match step {
                        firn_model::TxnStep::Read(read) => validate_read(read),
                        firn_model::TxnStep::Write(write) => self.validate_write(write),
                        firn_model::TxnStep::Log(firn_model::LogWrite::StreamAdd {
                            payload,
                            ..
                        }) => self.limits.check_value(payload.len()),
                        firn_model::TxnStep::Log(firn_model::LogWrite::Append {
                            records, ..
                        }) => self.limits.check_records(records),
                        // Refused by `check` above: the node makes these.
                        firn_model::TxnStep::Log(_) | firn_model::TxnStep::Records { .. } => Ok(()),
                    }
                })
            }
            KvWrite::Truncate {
                target: KeyRange::Prefix(p),
                ..
            } => check_prefix(p),
            KvWrite::Truncate { .. } => Ok(()),
            KvWrite::FlushAll if !self.allow_flushall => Err(FirnError::Refused(
                "FLUSHALL is disabled on this node; start it with --allow-flushall to enable it"
                    .into(),
            )),
            KvWrite::FlushAll => Ok(()),
            KvWrite::PutBlob { put, .. } if matches!(put.life, firn_model::Lifetime::Lease(_)) => {
                Err(FirnError::BadArgument(
                    "a large value cannot be attached to a lease; give it a TTL instead".into(),
                ))
            }
            KvWrite::PutBlob { put, blob } => self.check_manifest(put, blob),
        }
    }

    /// Checks a manifest before it is proposed: whole, within the limit, empty inline value,
    /// and uploaded to the key's shard.
    fn check_manifest(&self, put: &PutRequest, blob: &BlobRef) -> Result<(), FirnError> {
        if !blob.is_consistent() || !put.value.is_empty() || blob.size == 0 {
            return Err(FirnError::BadArgument("a malformed blob manifest".into()));
        }
        if blob.size > BLOB_BYTES_MAX {
            return Err(FirnError::ValueTooLarge {
                len: blob.size as usize,
                max: BLOB_BYTES_MAX as usize,
            });
        }
        let shard = self.routable_layout()?.shard_of_key(put.key.as_bytes());
        if shard != blob.shard {
            return Err(FirnError::TryAgain(format!(
                "the value was uploaded to shard {}, but the key is now in shard {shard}",
                blob.shard
            )));
        }
        Ok(())
    }
}

pub fn check_key_count(n: usize) -> Result<(), FirnError> {
    if n == 0 {
        return Err(FirnError::BadArgument(
            "at least one key is required".into(),
        ));
    }
    if n > KEYS_PER_REQUEST_MAX {
        return Err(FirnError::BadArgument(format!(
            "{n} keys in one request; the limit is {KEYS_PER_REQUEST_MAX}"
        )));
    }
    Ok(())
}

pub fn check_page(n: usize) -> Result<(), FirnError> {
    if n == 0 || n > PAGE_ITEMS_MAX {
        return Err(FirnError::BadArgument(format!(
            "limit {n} is out of range 1..={PAGE_ITEMS_MAX}"
        )));
    }
    Ok(())
}

/// A prefix is at most as long as a key: no longer one could match anything.
pub fn check_prefix(prefix: &[u8]) -> Result<(), FirnError> {
    if prefix.len() > KEY_BYTES_MAX {
        return Err(FirnError::BadArgument(format!(
            "prefix is {} bytes; the limit is {KEY_BYTES_MAX}",
            prefix.len()
        )));
    }
    Ok(())
}

/// The bytes of values a transaction step writes.
fn step_bytes(step: &firn_model::TxnStep) -> usize {
    match step {
        firn_model::TxnStep::Write(KvWrite::Put(p)) => p.value.len(),
        firn_model::TxnStep::Write(KvWrite::MSet { items }) => {
            items.iter().map(|(_, v)| v.len()).sum()
        }
        firn_model::TxnStep::Write(KvWrite::Change {
            change: firn_model::KeyChange::Append { suffix, .. },
            ..
        }) => suffix.len(),
        firn_model::TxnStep::Log(firn_model::LogWrite::StreamAdd { payload, .. }) => payload.len(),
        firn_model::TxnStep::Log(firn_model::LogWrite::Append { records, .. }) => {
            records.iter().map(|r| r.payload.len()).sum()
        }
        _ => 0,
    }
}

/// Checks a read against the stated limits: done before any barrier or wait, so a
/// malformed read is refused at once.
pub fn validate_read(read: &KvRead) -> Result<(), FirnError> {
    if let KvRead::MGet { at, .. } | KvRead::Scan { at, .. } = read
        && matches!(at, firn_model::ReadAt::EventTimeComplete(_))
    {
        return Err(FirnError::BadArgument(
            "COMPLETE reads one key (FIRN.GET, GET /v1/kv/{key}): it waits for that key's \
             keyspace watermark"
                .into(),
        ));
    }
    match read {
        KvRead::MGet { keys, .. } | KvRead::Exists { keys, .. } => check_key_count(keys.len()),
        KvRead::History { limit, .. } => check_page(*limit),
        KvRead::Scan { limit, prefix, .. } => {
            check_prefix(prefix)?;
            check_page(*limit)
        }
        KvRead::Snapshot { of, .. } => match of {
            SnapshotOf::Keys(keys) => check_key_count(keys.len()),
            SnapshotOf::Prefix { prefix, limit, .. } => {
                check_prefix(prefix)?;
                check_page(*limit)
            }
        },
        KvRead::LeaseKeys { limit, .. } => check_page(*limit),
        KvRead::Get { .. }
        | KvRead::Type { .. }
        | KvRead::DbSize
        | KvRead::Expiry { .. }
        | KvRead::Lease { .. } => Ok(()),
    }
}

/// A put attached to a lease inside a transaction must come with the compare that checks
/// the lease is live (as `SET … LEASE` alone makes it); a transaction of the user's own does
/// not attach keys to leases.
fn check_leased_steps(
    compares: &[firn_model::Compare],
    steps: &[&firn_model::TxnStep],
) -> Result<(), FirnError> {
    for step in steps {
        if let firn_model::TxnStep::Write(KvWrite::Put(firn_model::PutRequest {
            life: firn_model::Lifetime::Lease(id),
            ..
        })) = step
            && !compares
                .iter()
                .any(|c| c.target == firn_model::CompareTarget::Lease(*id))
        {
            return Err(FirnError::BadArgument(
                "LEASE cannot be given inside a transaction; attach the key with SET … LEASE \
                 on its own"
                    .into(),
            ));
        }
    }
    Ok(())
}

/// A lease's TTL within [`LEASE_TTL_S_MIN`](firn_model::limits::LEASE_TTL_S_MIN) ..=
/// [`LEASE_TTL_S_MAX`](firn_model::limits::LEASE_TTL_S_MAX) seconds.
pub fn check_lease_ttl(ttl_s: u64) -> Result<(), FirnError> {
    use firn_model::limits::{LEASE_TTL_S_MAX, LEASE_TTL_S_MIN};
    if (LEASE_TTL_S_MIN..=LEASE_TTL_S_MAX).contains(&ttl_s) {
        return Ok(());
    }
    Err(FirnError::BadArgument(format!(
        "invalid lease TTL {ttl_s}: a lease lives {LEASE_TTL_S_MIN} to {LEASE_TTL_S_MAX} seconds"
    )))
}
