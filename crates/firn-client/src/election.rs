//! Leader election — etcd's `concurrency.Election`, on one key: the leader is whoever wrote
//! the key when it was absent, under a lease of its own; its value is what the leader
//! proclaims. A leader that resigns, or stops keeping its lease alive (it died), leaves the
//! key deleted, and a waiting candidate takes it. This module owns the election's key; the
//! waiting is [`crate::lock`]'s, the lease [`crate::Lease`]'s.

use std::time::Duration;

use bytes::Bytes;
use firn_model::{CommitTs, ReadAt, ReadConsistency, Version};

use crate::lock::take;
use crate::{Client, Lease, LeaseLoss, PutOptions, Result};

/// An election: candidates for the key `name`, each under a lease of `ttl`.
#[derive(Clone)]
pub struct Election {
    client: Client,
    name: Bytes,
    ttl: Duration,
}

/// Who leads an election, as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leader {
    /// What the leader proclaimed last.
    pub value: Bytes,
    /// The key's version that holds it; greater with each proclamation and each leader.
    pub version: Version,
    pub commit_ts: CommitTs,
}

impl Election {
    /// An election on the key `name`; a candidate's leadership lasts `ttl` (1 s to a year,
    /// whole seconds) past the last keepalive it sent.
    pub fn new(client: &Client, name: &[u8], ttl: Duration) -> Election {
        Election {
            client: client.clone(),
            name: Bytes::copy_from_slice(name),
            ttl,
        }
    }

    pub fn name(&self) -> &[u8] {
        &self.name
    }

    /// Waits until this candidate leads, proclaiming `value`. While another leads, the key
    /// is looked at again after a pause that grows to 250 ms. Dropping the call frees
    /// whatever it took within the TTL.
    pub async fn campaign(&self, value: &[u8]) -> Result<Leadership> {
        let lease = Lease::grant(&self.client, self.ttl).await?;
        let ack = take(&self.client, &self.name, value, &lease).await?;
        Ok(Leadership {
            client: self.client.clone(),
            name: self.name.clone(),
            term: ack.version,
            version: ack.version,
            lease,
        })
    }

    /// Who leads now (a linearizable read), or `None` while nobody does.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        let now = self
            .client
            .get(&self.name, ReadAt::Latest, ReadConsistency::Linearizable)
            .await?;
        Ok(now.filter(|v| !v.deleted).map(|v| Leader {
            value: v.value.unwrap_or_default(),
            version: v.version,
            commit_ts: v.commit_ts,
        }))
    }
}

/// This candidate leads: it holds the election's key under its lease, until it resigns or
/// the lease is lost ([`Leadership::lost`]). Dropping it without resigning stops the
/// keepalives: another candidate leads once the TTL has run out.
pub struct Leadership {
    client: Client,
    name: Bytes,
    term: Version,
    version: Version,
    lease: Lease,
}

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.name)
            .field("ttl", &self.ttl)
            .finish()
    }
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("name", &self.name)
            .field("term", &self.term)
            .field("version", &self.version)
            .field("lease", &self.lease)
            .finish()
    }
}

impl Leadership {
    /// The key's version that made this candidate leader: a fencing token, greater than
    /// any earlier leader's (and any of their proclamations').
    pub fn term(&self) -> Version {
        self.term
    }

    /// The key's version of this leader's last proclamation.
    pub fn version(&self) -> Version {
        self.version
    }

    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Proclaims `value` as leader, without another election: written only over this
    /// leader's own last version. A `CONFLICT` error says this candidate leads no more (its
    /// lease ended and someone else took the key); nothing is then written.
    pub async fn proclaim(&mut self, value: &[u8]) -> Result<()> {
        let over_mine = PutOptions {
            if_version: Some(self.version),
            ..PutOptions::default()
        };
        let ack = self
            .client
            .put_with_lease(&self.name, value, over_mine, self.lease.id())
            .await?;
        self.version = ack.version;
        Ok(())
    }

    /// Waits until leadership is lost (the lease was not kept alive, or was revoked by
    /// someone else), and says why.
    pub async fn lost(&self) -> LeaseLoss {
        self.lease.lost().await
    }

    /// Steps down: revokes the lease, which deletes the key, so a waiting candidate leads
    /// next. `Ok` also when leadership had been lost already.
    pub async fn resign(self) -> Result<()> {
        self.lease.revoke().await
    }
}
