//! Leases (`FIRN.LEASE`): a time to live that keys are attached to. A lease ends when it is
//! revoked, or when nobody keeps it alive for its TTL; every key written with it is then
//! deleted, all at one stamp. This module owns the lease commands and [`Lease`], a lease
//! kept alive by a task of its own — etcd's `concurrency.Session`. It never writes keys:
//! [`crate::Lock`] and [`crate::Election`] do, under a lease.

use std::time::Duration;

use redis::Value;
use tokio::sync::watch;
use tokio::time::Instant;

use firn_model::LeaseId;
use firn_model::limits::{LEASE_TTL_S_MAX, LEASE_TTL_S_MIN};

use crate::{Client, ClientError, PutOptions, Result, WriteAck, as_u64, protocol};

/// Shortest TTL a lease is granted for.
pub const LEASE_TTL_MIN: Duration = Duration::from_secs(LEASE_TTL_S_MIN);

/// Longest TTL a lease is granted for: a year.
pub const LEASE_TTL_MAX: Duration = Duration::from_secs(LEASE_TTL_S_MAX);

/// How long a [`Lease`] waits before asking again after a keepalive that got no answer
/// (a broken connection, a leader change); it keeps asking until its TTL has run out.
const KEEPALIVE_RETRY: Duration = Duration::from_millis(100);

/// `ttl` in whole seconds, a part of a second rounded up (the node counts TTLs in seconds);
/// refused outside [`LEASE_TTL_MIN`]..=[`LEASE_TTL_MAX`] before anything is sent.
pub(crate) fn ttl_seconds(ttl: Duration) -> Result<u64> {
    let s = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    if ttl < LEASE_TTL_MIN || s > LEASE_TTL_MAX.as_secs() {
        return Err(ClientError::Invalid(format!(
            "a lease TTL of {ttl:?}; it must be 1 s to {} s",
            LEASE_TTL_MAX.as_secs()
        )));
    }
    Ok(s)
}

impl ClientError {
    /// Whether the node said the lease it was asked about does not exist (any more).
    pub fn is_lease_not_found(&self) -> bool {
        matches!(self, ClientError::LeaseNotFound { .. })
    }

    /// `ERR lease not found …` about lease `id` as [`ClientError::LeaseNotFound`]; any
    /// other error as it is.
    pub(crate) fn about_lease(self, id: LeaseId) -> ClientError {
        match self {
            ClientError::Server { code, message }
                if code == "ERR" && message.starts_with("lease not found") =>
            {
                ClientError::LeaseNotFound { lease: id }
            }
            e => e,
        }
    }
}

fn lease_cmd(verb: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("FIRN.LEASE");
    cmd.arg(verb);
    cmd
}

impl Client {
    /// `FIRN.LEASE …` about lease `id`, sent again while the node refuses for now
    /// (`TRYAGAIN`, `CLUSTERDOWN`: nothing was applied).
    async fn run_lease(&self, id: Option<LeaseId>, cmd: &redis::Cmd) -> Result<Value> {
        let answer = crate::retry_transient(|| self.run(cmd)).await;
        answer.map_err(|e| match id {
            Some(id) => e.about_lease(id),
            None => e,
        })
    }

    /// Grants a lease of `ttl` (whole seconds, a part rounded up; 1 s to a year). It ends
    /// `ttl` from now unless kept alive ([`Client::lease_keepalive`], or [`Lease`], which
    /// does it for you).
    pub async fn lease_grant(&self, ttl: Duration) -> Result<LeaseId> {
        let s = ttl_seconds(ttl)?;
        let v = self.run_lease(None, lease_cmd("GRANT").arg(s)).await?;
        match as_u64(&v)? {
            0 => Err(protocol(v)),
            id => Ok(id),
        }
    }

    /// Grants lease `id` its TTL again from now; answers that TTL.
    /// [`ClientError::LeaseNotFound`] once it has ended.
    pub async fn lease_keepalive(&self, id: LeaseId) -> Result<Duration> {
        let v = self
            .run_lease(Some(id), lease_cmd("KEEPALIVE").arg(id))
            .await?;
        Ok(Duration::from_secs(as_u64(&v)?))
    }

    /// [`Client::put`], the key attached to `lease`: it is deleted when the lease ends
    /// (revoked, or not kept alive for its TTL). [`ClientError::LeaseNotFound`] when the
    /// lease has ended already (nothing written).
    pub async fn put_with_lease(
        &self,
        key: &[u8],
        value: &[u8],
        opts: PutOptions,
        lease: LeaseId,
    ) -> Result<WriteAck> {
        self.put_under(key, value, &opts, Some(lease)).await
    }

    /// Ends lease `id` now: every key attached to it is deleted, all at one stamp.
    /// [`ClientError::LeaseNotFound`] when it had already ended.
    pub async fn lease_revoke(&self, id: LeaseId) -> Result<()> {
        self.run_lease(Some(id), lease_cmd("REVOKE").arg(id))
            .await?;
        Ok(())
    }

    /// How long lease `id` has left unless kept alive (to the millisecond).
    pub async fn lease_ttl(&self, id: LeaseId) -> Result<Duration> {
        let v = self.run_lease(Some(id), lease_cmd("TTL").arg(id)).await?;
        Ok(Duration::from_millis(as_u64(&v)?))
    }
}

/// Why a [`Lease`] is lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseLoss {
    /// The node no longer knows it: it expired, or it was revoked by someone else.
    Ended,
    /// No keepalive was answered within its TTL: the node has ended it, or is about to.
    Unanswered,
}

/// A lease kept alive by a task of its own, a keepalive every third of its TTL, until it is
/// revoked or dropped. Dropping it stops the keepalives: the lease then ends within its TTL,
/// and its keys with it; [`Lease::revoke`] ends it at once.
///
/// A lease can be lost while its holder still runs (a pause longer than the TTL, a node out
/// of reach): [`Lease::lost`] says when, so that work done under it can stop. Work that
/// must not outlive the lease also carries a fencing token ([`crate::Lock::token`]).
pub struct Lease {
    client: Client,
    id: LeaseId,
    ttl: Duration,
    standing: watch::Receiver<Option<LeaseLoss>>,
    keeper: tokio::task::JoinHandle<()>,
}

impl Lease {
    /// Grants a lease of `ttl` (see [`Client::lease_grant`]) and starts keeping it alive.
    /// Needs a Tokio runtime with a timer.
    pub async fn grant(client: &Client, ttl: Duration) -> Result<Lease> {
        let asked = Instant::now();
        let id = client.lease_grant(ttl).await?;
        let ttl = Duration::from_secs(ttl_seconds(ttl)?);
        let (tell, standing) = watch::channel(None);
        let keeper = tokio::spawn(keep_alive(client.clone(), id, ttl, asked + ttl, tell));
        Ok(Lease {
            client: client.clone(),
            id,
            ttl,
            standing,
            keeper,
        })
    }

    pub fn id(&self) -> LeaseId {
        self.id
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Why the lease is lost, or `None` while it is kept alive.
    pub fn loss(&self) -> Option<LeaseLoss> {
        *self.standing.borrow()
    }

    /// Waits until the lease is lost, and says why.
    pub async fn lost(&self) -> LeaseLoss {
        let mut standing = self.standing.clone();
        match standing.wait_for(Option::is_some).await {
            Ok(loss) => loss.unwrap_or(LeaseLoss::Unanswered),
            // The keeper is gone without a word: nothing keeps the lease alive any more.
            Err(_) => LeaseLoss::Unanswered,
        }
    }

    /// Ends the lease now: every key attached to it is deleted, all at one stamp. A lease
    /// that had already ended answers `Ok` too (its keys are gone either way).
    pub async fn revoke(self) -> Result<()> {
        self.keeper.abort();
        match self.client.lease_revoke(self.id).await {
            Err(e) if e.is_lease_not_found() => Ok(()),
            r => r,
        }
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("id", &self.id)
            .field("ttl", &self.ttl)
            .field("loss", &self.loss())
            .finish()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.keeper.abort();
    }
}

/// Keeps lease `id` alive until it is lost, and then says why on `tell`. `expires` is the
/// soonest the node may end it: a TTL counted from when the last answered keepalive was
/// sent, since the node counts from when it took it, later.
async fn keep_alive(
    client: Client,
    id: LeaseId,
    ttl: Duration,
    mut expires: Instant,
    tell: watch::Sender<Option<LeaseLoss>>,
) {
    let every = ttl / 3;
    let loss = 'kept: loop {
        tokio::time::sleep(every).await;
        loop {
            let sent = Instant::now();
            if sent >= expires {
                break 'kept LeaseLoss::Unanswered;
            }
            match tokio::time::timeout(expires - sent, client.lease_keepalive(id)).await {
                Ok(Ok(granted)) => {
                    expires = sent + granted;
                    break;
                }
                Ok(Err(e)) if e.is_lease_not_found() => break 'kept LeaseLoss::Ended,
                Ok(Err(_)) => tokio::time::sleep(KEEPALIVE_RETRY).await,
                Err(_) => break 'kept LeaseLoss::Unanswered,
            }
        }
    };
    let _ = tell.send(Some(loss));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ttl_is_sent_in_whole_seconds_a_part_rounded_up() {
        assert_eq!(ttl_seconds(Duration::from_secs(1)).unwrap(), 1);
        assert_eq!(ttl_seconds(Duration::from_millis(1_500)).unwrap(), 2);
        assert_eq!(ttl_seconds(LEASE_TTL_MAX).unwrap(), 31_536_000);
    }

    #[test]
    fn a_ttl_under_a_second_or_over_a_year_is_refused_before_sending() {
        for ttl in [
            Duration::ZERO,
            Duration::from_millis(999),
            LEASE_TTL_MAX + Duration::from_millis(1),
        ] {
            let e = ttl_seconds(ttl).unwrap_err();
            assert!(
                matches!(&e, ClientError::Invalid(m) if m.contains("1 s to 31536000 s")),
                "{ttl:?}: {e}"
            );
        }
    }

    #[test]
    fn lease_not_found_from_the_node_names_the_lease() {
        let e = ClientError::Server {
            code: "ERR".into(),
            message: "lease not found: 42".into(),
        }
        .about_lease(42);
        assert!(e.is_lease_not_found());
        assert!(e.to_string().contains("42"), "{e}");
        let other = ClientError::Server {
            code: "ERR".into(),
            message: "invalid lease TTL 0".into(),
        }
        .about_lease(42);
        assert!(!other.is_lease_not_found());
    }

    /// A node that speaks just enough RESP: each command's words go to `answer`, which
    /// gives the raw reply, or `None` to leave it unanswered.
    async fn fake_node<F>(answer: F) -> String
    where
        F: Fn(&[String]) -> Option<String> + Send + Sync + 'static,
    {
        use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let answer = std::sync::Arc::new(answer);
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                let answer = answer.clone();
                tokio::spawn(async move {
                    let (read, mut write) = sock.into_split();
                    let mut read = BufReader::new(read);
                    let mut line = String::new();
                    loop {
                        line.clear();
                        if read.read_line(&mut line).await.unwrap_or(0) == 0 {
                            return;
                        }
                        let n: usize = line.trim_end()[1..].parse().unwrap();
                        let mut words = Vec::with_capacity(n);
                        for _ in 0..n {
                            line.clear();
                            read.read_line(&mut line).await.unwrap();
                            let len: usize = line.trim_end()[1..].parse().unwrap();
                            let mut word = vec![0; len + 2];
                            read.read_exact(&mut word).await.unwrap();
                            word.truncate(len);
                            words.push(String::from_utf8(word).unwrap());
                        }
                        if let Some(reply) = answer(&words) {
                            write.write_all(reply.as_bytes()).await.unwrap();
                        }
                    }
                });
            }
        });
        addr
    }

    /// A node that grants lease 7 for `ttl_s`, keeps it alive `keepalives` times, and then
    /// answers each keepalive with `after` (`None`: no answer at all).
    async fn node_ending_lease_7(keepalives: usize, after: Option<&'static str>) -> Client {
        let kept = std::sync::atomic::AtomicUsize::new(0);
        let addr = fake_node(move |words| {
            let verb = words.get(1).map(String::as_str);
            match (words[0].as_str(), verb) {
                ("FIRN.LEASE", Some("GRANT")) => Some(":7\r\n".into()),
                ("FIRN.LEASE", Some("KEEPALIVE")) => {
                    let n = kept.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    if n < keepalives {
                        Some(":1\r\n".into())
                    } else {
                        after.map(str::to_string)
                    }
                }
                _ => Some("+OK\r\n".into()),
            }
        })
        .await;
        Client::connect(&addr).await.unwrap()
    }

    #[tokio::test]
    async fn a_lease_is_kept_alive_until_the_node_no_longer_knows_it() {
        let client = node_ending_lease_7(4, Some("-ERR lease not found: 7\r\n")).await;
        let started = Instant::now();
        let lease = Lease::grant(&client, Duration::from_secs(1)).await.unwrap();
        assert_eq!(
            (lease.id(), lease.ttl(), lease.loss()),
            (7, Duration::from_secs(1), None)
        );
        let loss = tokio::time::timeout(Duration::from_secs(5), lease.lost())
            .await
            .expect("the lease is lost once the node says it is not found");
        assert_eq!(loss, LeaseLoss::Ended);
        assert_eq!(lease.loss(), Some(LeaseLoss::Ended));
        // Four keepalives answered, a third of the TTL apart: kept for over a second.
        assert!(
            started.elapsed() >= Duration::from_millis(1_300),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn a_lease_whose_keepalives_go_unanswered_is_lost_within_its_ttl() {
        let client = node_ending_lease_7(1, None).await;
        let lease = Lease::grant(&client, Duration::from_secs(1)).await.unwrap();
        let loss = tokio::time::timeout(Duration::from_secs(3), lease.lost())
            .await
            .expect("lost within the TTL after the last answered keepalive");
        assert_eq!(loss, LeaseLoss::Unanswered);
    }
}
