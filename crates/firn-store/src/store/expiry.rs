//! Keys that expire (docs/architecture.md, "Keys that expire"). A key's expiry is in its
//! metadata ([`KeyMeta::expires`]), for its newest version only: every read compares it with
//! the read's time and sees the key deleted from then on — a tombstone, the next version,
//! stamped at the expiry — before that tombstone is written. It is written down, stamped at
//! the expiry, by the first write that touches the key after it (which then finds the key
//! absent) or by the shard's leader sweeping the index of expiries ([`SystemOp::ExpireDue`]),
//! so the history reads the same before and after. Only the newest version can have an
//! expiry not written down: any write after it writes it down first.
//!
//! `System` rows: `ttl/<expiry><key>` (the index the sweep walks, soonest first) and
//! `lease/k/<lease><key>` (the keys a lease's end deletes, see [`super::lease`]).

use firn_model::{
    CommitTs, ExpireIf, Expiry, FirnError, Key, KeyspaceSpec, LeaseId, Lifetime, Response,
    VersionInfo,
};

use super::apply::Txn;
use super::{Bound, Table, VersionedStore, io_err};
use crate::command::Op;
use crate::record::KeyMeta;

const EXPIRIES: &[u8] = b"ttl/";
pub(super) const LEASE_KEYS: &[u8] = b"lease/k/";

/// Most expiries one sweep writes down: a sweep is one entry, kept small; the next comes
/// at once while more are due.
pub const EXPIRE_DUE_MAX: usize = 512;

/// How a key's value ends: its expiry and its lease, as [`KeyMeta`] holds them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Ends {
    pub expires: Option<CommitTs>,
    pub lease: Option<LeaseId>,
}

impl Ends {
    fn of(meta: &KeyMeta) -> Ends {
        Ends {
            expires: meta.expires,
            lease: meta.lease,
        }
    }
}

fn stamp_bytes(t: CommitTs) -> [u8; 12] {
    let mut out = [0u8; 12];
    out[..8].copy_from_slice(&t.wall_us.to_be_bytes());
    out[8..].copy_from_slice(&t.logical.to_be_bytes());
    out
}

fn expiry_row(at: CommitTs, key: &[u8]) -> Vec<u8> {
    [EXPIRIES, &stamp_bytes(at), key].concat()
}

pub(super) fn lease_key_row(lease: LeaseId, key: &[u8]) -> Vec<u8> {
    [LEASE_KEYS, &lease.to_be_bytes(), key].concat()
}

/// The stamp `ms` milliseconds after `ts` (saturating), or at a Unix time in ms.
pub(super) fn after_ms(ts: CommitTs, ms: u64) -> CommitTs {
    CommitTs::new(ts.wall_us.saturating_add(ms.saturating_mul(1_000)), 0)
}

fn at_unix_ms(unix_ms: u64) -> CommitTs {
    CommitTs::new(unix_ms.saturating_mul(1_000), 0)
}

impl VersionedStore {
    /// The time a read of the newest values compares expiries with: the host's clock, or
    /// the newest stamp applied if that is ahead of it.
    pub fn read_now(&self) -> CommitTs {
        CommitTs::new(firn_model::hlc::system_wall_us(), 0).max(self.last_commit_ts())
    }

    /// `key`'s metadata as a read at `t` sees it ([`KeyMeta::as_read_at`]).
    pub fn meta_at(&self, key: &[u8], t: CommitTs) -> Result<Option<KeyMeta>, FirnError> {
        Ok(self.meta(key)?.map(|m| m.as_read_at(t)))
    }

    /// The soonest expiry not yet written down, if any: what a leader's sweep waits for.
    pub fn next_expiry(&self) -> Result<Option<CommitTs>, FirnError> {
        let end = super::prefix_end(EXPIRIES).expect("a prefix with an end");
        let first = self
            .backend
            .range(
                Table::System,
                Bound::Included(EXPIRIES),
                Bound::Excluded(&end),
                false,
                1,
            )
            .map_err(io_err)?;
        Ok(first.first().map(|(row, _)| {
            let at = &row[EXPIRIES.len()..EXPIRIES.len() + 12];
            CommitTs::new(
                u64::from_be_bytes(at[..8].try_into().expect("8 bytes")),
                u32::from_be_bytes(at[8..].try_into().expect("4 bytes")),
            )
        }))
    }

    /// The tombstone a read past `meta`'s expiry sees: the version that writes it down.
    pub(super) fn expiry_tombstone(meta: &KeyMeta) -> VersionInfo {
        let ended = meta.clone().as_read_at(CommitTs::MAX);
        VersionInfo {
            version: ended.latest,
            commit_ts: ended.latest_ts,
            event_time_us: None,
            deleted: true,
            value: None,
            blob: None,
            kind: firn_model::KeyKind::String,
        }
    }

    /// When `key`'s value ends, as a read now sees it.
    pub fn expiry(&self, key: &[u8]) -> Result<firn_model::KeyExpiry, FirnError> {
        use firn_model::KeyExpiry;
        self.in_lane(key)?;
        let Some(meta) = self.meta_at(key, self.read_now())? else {
            return Ok(KeyExpiry::Absent);
        };
        Ok(match (meta.is_live(), meta.expires, meta.lease) {
            (false, _, _) => KeyExpiry::Absent,
            (true, Some(at), _) => KeyExpiry::At(at),
            (true, None, Some(lease)) => KeyExpiry::Lease(lease),
            (true, None, None) => KeyExpiry::Never,
        })
    }
}

impl Txn<'_> {
    /// How the value a write makes ends: from the write's lifetime, the keyspace's default
    /// TTL and what the key had (`meta`, for `KEEPTTL`). `None`: the write is a deletion
    /// (an `EXAT` at or before its stamp).
    pub(super) fn ends_of(
        &self,
        spec: &KeyspaceSpec,
        meta: &KeyMeta,
        life: Lifetime,
    ) -> Option<Ends> {
        let default = Ends {
            expires: spec.ttl_ms.map(|ms| after_ms(self.ts, ms)),
            lease: None,
        };
        match life {
            Lifetime::Default => Some(default),
            Lifetime::For { ms } => Some(Ends {
                expires: Some(after_ms(self.ts, ms)),
                lease: None,
            }),
            Lifetime::Until { unix_ms } => {
                let at = at_unix_ms(unix_ms);
                (at > self.ts).then_some(Ends {
                    expires: Some(at),
                    lease: None,
                })
            }
            Lifetime::Kept if meta.is_live() => Some(Ends::of(meta)),
            Lifetime::Kept => Some(default),
            Lifetime::Lease(lease) => Some(Ends {
                expires: None,
                lease: Some(lease),
            }),
        }
    }

    /// Keeps the expiry index and the lease's key list in step with a key whose ends go
    /// from `was` to `now`.
    pub(super) fn index_ends(&mut self, key: &[u8], was: Ends, now: Ends) {
        if was.expires != now.expires {
            if let Some(at) = was.expires {
                self.batch.remove(Table::System, expiry_row(at, key));
            }
            if let Some(at) = now.expires {
                self.batch
                    .put(Table::System, expiry_row(at, key), Vec::new());
            }
        }
        if was.lease != now.lease {
            if let Some(lease) = was.lease {
                self.batch.remove(Table::System, lease_key_row(lease, key));
            }
            if let Some(lease) = now.lease {
                self.batch
                    .put(Table::System, lease_key_row(lease, key), Vec::new());
            }
        }
    }

    /// Writes down `key`'s expiry if it is due by the entry's stamp: a tombstone stamped at
    /// the expiry. Returns whether it did.
    pub(super) fn write_down(&mut self, key: &Key) -> Result<bool, FirnError> {
        let meta = self.meta(key.as_bytes())?;
        let Some(at) = meta.expires.filter(|_| meta.expired_at(self.ts)) else {
            // Kept in view: the write that follows reads it from here, not from storage.
            self.cache_meta(key.as_bytes(), meta);
            return Ok(false);
        };
        let entry_ts = self.ts;
        self.ts = at;
        let written = self.write_tombstone(key);
        self.ts = entry_ts;
        written.map(|_| true)
    }

    /// Writes down the expiries of the keys `op` names that are due (before it runs, so it
    /// finds them absent).
    pub(super) fn write_down_named(&mut self, op: &Op) -> Result<(), FirnError> {
        let keys: Vec<Key> = op.named_keys().cloned().collect();
        for key in &keys {
            self.write_down(key)?;
        }
        Ok(())
    }

    /// [`SystemOp::ExpireDue`](crate::command::SystemOp::ExpireDue): writes down the
    /// soonest expiries due by the entry's stamp, at most [`EXPIRE_DUE_MAX`]; a key a
    /// transaction holds waits for its resolution, which writes it down.
    pub(super) fn expire_due(&mut self) -> Result<Response, FirnError> {
        // Every row stamped at or before the entry's stamp.
        let end = [EXPIRIES, &stamp_bytes(self.ts.successor())].concat();
        let due = self
            .store
            .backend
            .range(
                Table::System,
                Bound::Included(EXPIRIES),
                Bound::Excluded(end.as_slice()),
                false,
                EXPIRE_DUE_MAX,
            )
            .map_err(io_err)?;
        let mut removed = 0;
        for (row, _) in due {
            let key = Key::new(row[EXPIRIES.len() + 12..].to_vec())?;
            if self.store.held_keys(std::iter::once(&key)).is_empty() && self.write_down(&key)? {
                removed += 1;
            } else if self
                .meta(key.as_bytes())?
                .expires
                .is_none_or(|e| e > self.ts)
            {
                // A row its key no longer names (never expected; harmless to drop).
                self.batch.remove(Table::System, row);
            }
        }
        Ok(Response::Count(removed))
    }

    /// [`firn_model::KvWrite::Expire`]: the key's expiry changes (`EXPIRE` and kin,
    /// `PERSIST`); one at or before the entry's stamp deletes the key.
    pub(super) fn expire(
        &mut self,
        key: &Key,
        to: Expiry,
        only: ExpireIf,
    ) -> Result<Response, FirnError> {
        let k = key.as_bytes();
        let mut meta = self.meta(k)?;
        if !meta.is_live() {
            return Ok(Response::ExpirySet(false));
        }
        let at = match to {
            Expiry::In { ms } if ms <= 0 => Some(self.ts),
            Expiry::In { ms } => Some(after_ms(self.ts, ms as u64)),
            Expiry::At { unix_ms } => Some(at_unix_ms(unix_ms.max(0) as u64)),
            Expiry::Never => None,
        };
        if to == Expiry::Never {
            // PERSIST: 1 when it removed an expiry (or a lease).
            if meta.expires.is_none() && meta.lease.is_none() {
                return Ok(Response::ExpirySet(false));
            }
        } else {
            let current = meta.expires;
            // A key without an expiry expires never: later than any time.
            let allowed = match only {
                ExpireIf::Always => true,
                ExpireIf::NoExpiry => current.is_none(),
                ExpireIf::HasExpiry => current.is_some(),
                ExpireIf::Later => current.is_some_and(|c| at > Some(c)),
                ExpireIf::Sooner => current.is_none_or(|c| at < Some(c)),
            };
            if !allowed {
                return Ok(Response::ExpirySet(false));
            }
        }
        if at.is_some_and(|at| at <= self.ts) {
            self.write_tombstone(key)?;
            return Ok(Response::ExpirySet(true));
        }
        let was = Ends::of(&meta);
        meta.expires = at;
        meta.lease = None;
        self.index_ends(k, was, Ends::of(&meta));
        self.set_meta(k, meta);
        Ok(Response::ExpirySet(true))
    }
}
