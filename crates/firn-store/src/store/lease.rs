//! Leases' records, kept by the shard of each lease's routing key ([`firn_model::lease_key`])
//! in its `System` table: `lease/r/<id>` (the TTL and when it runs out) and `lease/e/<when>
//! <id>` (the index by running-out time the leader's sweep walks). The keys attached to a
//! lease are listed on their own shards (`lease/k/`, [`super::expiry`]). A lease is live
//! while its running-out time is after the stamp that asks: granting, keeping alive and
//! attaching all check it in the entry that does them, so every replica agrees.

use firn_model::{CommitTs, FirnError, Key, LeaseChange, LeaseId, LeaseInfo, LeaseWrite, Response};
use serde::{Deserialize, Serialize};

use super::apply::Txn;
use super::expiry::{LEASE_KEYS, after_ms};
use super::{Bound, Table, VersionedStore, io_err};
use crate::record::{decode, encode};

const RECORDS: &[u8] = b"lease/r/";
const RUNS_OUT: &[u8] = b"lease/e/";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Record {
    ttl_s: u64,
    expires: CommitTs,
}

fn record_row(id: LeaseId) -> Vec<u8> {
    [RECORDS, &id.to_be_bytes()].concat()
}

fn runs_out_row(at: CommitTs, id: LeaseId) -> Vec<u8> {
    [
        RUNS_OUT,
        &at.wall_us.to_be_bytes(),
        &at.logical.to_be_bytes(),
        &id.to_be_bytes(),
    ]
    .concat()
}

impl VersionedStore {
    fn lease_record(&self, id: LeaseId) -> Result<Option<Record>, FirnError> {
        self.system_get(&record_row(id))?
            .map(|row| decode(&row))
            .transpose()
    }

    /// Lease `id` while it is live at `t`.
    pub fn lease_at(&self, id: LeaseId, t: CommitTs) -> Result<Option<LeaseInfo>, FirnError> {
        Ok(self
            .lease_record(id)?
            .filter(|r| r.expires > t)
            .map(|r| LeaseInfo {
                id,
                ttl_s: r.ttl_s,
                expires: r.expires,
            }))
    }

    /// The leases kept here that ran out by `t` and are not ended yet, soonest first, at
    /// most `n`: what a leader's sweep ends.
    pub fn leases_run_out(&self, t: CommitTs, n: usize) -> Result<Vec<LeaseId>, FirnError> {
        let end = runs_out_row(t, LeaseId::MAX);
        Ok(self
            .backend
            .range(
                Table::System,
                Bound::Included(RUNS_OUT),
                Bound::Included(end.as_slice()),
                false,
                n,
            )
            .map_err(io_err)?
            .into_iter()
            .map(|(row, _)| {
                LeaseId::from_be_bytes(row[row.len() - 8..].try_into().expect("8 bytes"))
            })
            .collect())
    }

    /// Keys of this shard attached to lease `id`, at most `limit`, with their newest
    /// versions.
    pub fn lease_keys(
        &self,
        id: LeaseId,
        limit: usize,
    ) -> Result<Vec<(Key, firn_model::Version)>, FirnError> {
        let prefix = [LEASE_KEYS, &id.to_be_bytes()].concat();
        let end = super::prefix_end(&prefix).expect("a prefix with an end");
        self.backend
            .range(
                Table::System,
                Bound::Included(prefix.as_slice()),
                Bound::Excluded(end.as_slice()),
                false,
                limit,
            )
            .map_err(io_err)?
            .into_iter()
            .map(|(row, _)| {
                let key = &row[prefix.len()..];
                let version = self.meta(key)?.map_or(0, |m| m.latest);
                Ok((Key::new(key.to_vec())?, version))
            })
            .collect()
    }
}

impl Txn<'_> {
    /// Whether lease `id` is live at the entry's stamp.
    pub(super) fn lease_live(&self, id: LeaseId) -> Result<bool, FirnError> {
        Ok(self.store.lease_at(id, self.ts)?.is_some())
    }

    pub(super) fn lease(&mut self, write: &LeaseWrite) -> Result<Response, FirnError> {
        let id = write.id;
        let record = self.store.lease_record(id)?;
        let next = match (write.change, record) {
            (LeaseChange::Grant { .. }, Some(_)) => {
                return Err(FirnError::Refused(format!(
                    "lease {id} exists already; grant another"
                )));
            }
            (LeaseChange::Grant { ttl_s }, None) => Record {
                ttl_s,
                expires: after_ms(self.ts, ttl_s.saturating_mul(1_000)),
            },
            (LeaseChange::KeepAlive, Some(r)) if r.expires > self.ts => Record {
                expires: after_ms(self.ts, r.ttl_s.saturating_mul(1_000)),
                ..r
            },
            (LeaseChange::End, Some(r)) => {
                self.batch.remove(Table::System, record_row(id));
                self.batch
                    .remove(Table::System, runs_out_row(r.expires, id));
                return Ok(Response::Done);
            }
            (LeaseChange::KeepAlive | LeaseChange::End, _) => {
                return Err(FirnError::LeaseNotFound(id));
            }
        };
        if let Some(r) = record {
            self.batch
                .remove(Table::System, runs_out_row(r.expires, id));
        }
        self.batch.put(Table::System, record_row(id), encode(&next));
        self.batch
            .put(Table::System, runs_out_row(next.expires, id), Vec::new());
        Ok(Response::Lease(Some(LeaseInfo {
            id,
            ttl_s: next.ttl_s,
            expires: next.expires,
        })))
    }
}
