//! A lock with a fencing token — etcd's `concurrency.Mutex`: a key written only when absent
//! (`IFVERSION 0`) and attached to a lease, so that it is deleted when its holder revokes
//! the lease or stops keeping it alive (a process that dies). The version the write answers
//! is the fencing token: a key's versions only grow, across deletes too, so each holder's
//! is greater than every earlier holder's. This module owns taking such a key and waiting
//! for it; the lease is [`crate::Lease`]'s.

use std::time::Duration;

use bytes::Bytes;
use firn_model::{ReadAt, ReadConsistency, Version};

use crate::{Client, ClientError, Lease, LeaseLoss, PutOptions, Result, WriteAck};

/// First pause between looks at a taken key; each look doubles it, up to [`POLL_MAX`].
const POLL_FIRST: Duration = Duration::from_millis(20);

/// Longest pause between looks at a taken key: how late after a key's deletion a waiter
/// may notice it, at worst.
const POLL_MAX: Duration = Duration::from_millis(250);

fn is_conflict(e: &ClientError) -> bool {
    matches!(e, ClientError::Server { code, .. } if code == "CONFLICT")
}

/// Writes `key = value` under `lease` if the key is absent; `None` if someone holds it.
pub(crate) async fn try_take(
    client: &Client,
    key: &[u8],
    value: &[u8],
    lease: &Lease,
) -> Result<Option<WriteAck>> {
    let absent = PutOptions {
        if_version: Some(0),
        ..PutOptions::default()
    };
    match client.put_with_lease(key, value, absent, lease.id()).await {
        Ok(ack) => Ok(Some(ack)),
        Err(e) if is_conflict(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes `key = value` under `lease` once the key is absent, looking at it again after a
/// pause that grows to [`POLL_MAX`] while someone holds it. Fails when `lease` is lost
/// meanwhile (the write would be refused: the lease has ended).
pub(crate) async fn take(
    client: &Client,
    key: &[u8],
    value: &[u8],
    lease: &Lease,
) -> Result<WriteAck> {
    let mut pause = POLL_FIRST;
    loop {
        if let Some(ack) = try_take(client, key, value, lease).await? {
            return Ok(ack);
        }
        loop {
            tokio::select! {
                loss = lease.lost() => return Err(lost_while_waiting(lease, loss)),
                () = tokio::time::sleep(pause) => {}
            }
            pause = (pause * 2).min(POLL_MAX);
            let now = client
                .get(key, ReadAt::Latest, ReadConsistency::Linearizable)
                .await?;
            if now.is_none_or(|v| v.deleted) {
                break;
            }
        }
    }
}

fn lost_while_waiting(lease: &Lease, loss: LeaseLoss) -> ClientError {
    match loss {
        LeaseLoss::Ended => ClientError::LeaseNotFound { lease: lease.id() },
        LeaseLoss::Unanswered => ClientError::Connection(format!(
            "lease {} was not kept alive within its TTL of {:?} while waiting",
            lease.id(),
            lease.ttl()
        )),
    }
}

/// A held lock: the key `name`, written when absent and attached to a lease of its own.
///
/// It is held until [`Lock::release`], or until its lease is lost ([`Lock::lost`]): the
/// holder stopped keeping it alive for its TTL (it died, it paused, it lost its node), and
/// the key was deleted. A holder can thus lose the lock without knowing it yet; pass
/// [`Lock::token`] to whatever the lock guards, which refuses a token smaller than the
/// greatest it has seen.
///
/// Dropping a `Lock` without releasing it stops its keepalives: the lock is free again
/// once its TTL has run out.
#[derive(Debug)]
pub struct Lock {
    name: Bytes,
    holder: String,
    token: Version,
    lease: Lease,
}

impl Lock {
    /// Waits until this client holds `name`, under a lease of `ttl` (1 s to a year, whole
    /// seconds). While another holds it, the key is looked at again after a pause that
    /// grows to 250 ms, so the lock is taken at most that long after it is freed.
    ///
    /// To wait a bounded time, wrap it in `tokio::time::timeout`: dropping the call frees
    /// whatever it took within `ttl`.
    pub async fn acquire(client: &Client, name: &[u8], ttl: Duration) -> Result<Lock> {
        let lease = Lease::grant(client, ttl).await?;
        let holder = holder_of(client, &lease);
        let ack = take(client, name, holder.as_bytes(), &lease).await?;
        Ok(Lock::held(name, holder, ack, lease))
    }

    /// Takes `name` if nobody holds it (`None` otherwise: the lease granted for it is
    /// revoked before answering).
    pub async fn try_acquire(client: &Client, name: &[u8], ttl: Duration) -> Result<Option<Lock>> {
        let lease = Lease::grant(client, ttl).await?;
        let holder = holder_of(client, &lease);
        match try_take(client, name, holder.as_bytes(), &lease).await {
            Ok(Some(ack)) => Ok(Some(Lock::held(name, holder, ack, lease))),
            Ok(None) => lease.revoke().await.map(|()| None),
            Err(e) => Err(e),
        }
    }

    fn held(name: &[u8], holder: String, ack: WriteAck, lease: Lease) -> Lock {
        Lock {
            name: Bytes::copy_from_slice(name),
            holder,
            token: ack.version,
            lease,
        }
    }

    /// The fencing token: the version this holder wrote the key at. Every later holder's is
    /// greater.
    pub fn token(&self) -> Version {
        self.token
    }

    pub fn name(&self) -> &[u8] {
        &self.name
    }

    /// What the key holds while this holder has it: the client's producer and the lease.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Waits until the lock is lost (its lease was not kept alive, or was revoked by
    /// someone else), and says why.
    pub async fn lost(&self) -> LeaseLoss {
        self.lease.lost().await
    }

    /// Frees the lock: revokes its lease, which deletes the key. `Ok` also when the lock
    /// had been lost already.
    pub async fn release(self) -> Result<()> {
        self.lease.revoke().await
    }
}

/// What a lock's key holds: whose it is, told apart by the lease.
fn holder_of(client: &Client, lease: &Lease) -> String {
    format!("{}/lease-{}", client.producer(), lease.id())
}
