//! The one read path: on a replica held here, a read first waits for what it must see on
//! the replica itself (its client's token for a `local` read, its time for a read at a
//! time), then — unless it reads at a closed time — a barrier (ReadIndex on the leader, the
//! leader's read index on a follower), then reads the replica's applied state.

use std::sync::Arc;
use std::time::{Duration, Instant};

use firn_model::{
    Answer, CallContext, CommitTs, FirnError, Key, KeyKind, KvRead, KvRequest, ReadAt,
    ReadConsistency, Response, Staleness, VersionInfo,
};
use firn_raft::{ShardId, ShardReplica};

use super::{Kernel, LEADER_CHANGE_PAUSE, validate_read};
use crate::replicas::LEADER_WAIT;
use crate::rpc::{ReadIndex, ShardPart};

/// How long a follower waits to apply up to a read index.
const CATCH_UP_WAIT: Duration = Duration::from_secs(10);
/// Longest a read at a time (`ASOF t`) waits for its replica to close that time; a time
/// further ahead than this is refused at once.
const CLOSED_WAIT: Duration = Duration::from_secs(2);
/// Longest a read waits for a transaction holding its keys to be resolved: past its
/// deadline a participant asks the anchor, which decides within a commit.
const HELD_READ_WAIT: Duration = Duration::from_millis(firn_model::limits::TXN_DEADLINE_MS + 2_000);

impl Kernel {
    /// What the first of `keys` whose shard is held here has applied, as it changes: what
    /// a blocked read waits on (the shards of the others are polled).
    pub(crate) fn first_local_applied<'a>(
        &self,
        layout: &crate::cluster::layout::ClusterLayout,
        mut keys: impl Iterator<Item = &'a Key>,
    ) -> Option<tokio::sync::watch::Receiver<CommitTs>> {
        keys.find_map(|k| self.replicas.get(layout.shard_of_name(k.as_bytes())))
            .map(|r| r.store().applied_watch())
    }

    /// Serves `read` on this node's `replica`.
    pub(crate) async fn read_here(
        &self,
        replica: &Arc<ShardReplica>,
        read: KvRead,
        ctx: &CallContext,
    ) -> Result<Answer, FirnError> {
        validate_read(&read)?;
        self.wait_local(replica, ctx.after, &read).await?;
        // A read at a time needs no barrier: its time is closed here.
        if read.as_of().is_none() {
            self.barrier_for(replica.shard_id(), read.consistency())
                .await?;
            if read.consistency() != ReadConsistency::Local {
                unheld(replica, &read).await?;
            }
        }
        read_off_worker(replica, read).await
    }

    /// Executes reads that arrived together after one context. Each is validated first, so
    /// a malformed one is refused at once. Where they all fall in one shard held here, one
    /// barrier serves them all (each began before the barrier did); otherwise they run
    /// concurrently.
    pub async fn execute_reads(
        &self,
        ctx: &CallContext,
        reads: Vec<KvRead>,
    ) -> Vec<Result<Answer, FirnError>> {
        let layout = self.layout();
        let single_local = match layout.shards.as_slice() {
            [only] => self.replicas.get(only.id),
            _ => None,
        };
        // A snapshot, and a read that waits for a watermark first, are planned as alone.
        let planned = reads.iter().any(|r| {
            matches!(
                r,
                KvRead::Snapshot { .. }
                    | KvRead::Get {
                        at: firn_model::ReadAt::EventTimeComplete(_),
                        ..
                    }
            )
        });
        let (Some(replica), false) = (single_local, planned) else {
            return futures::future::join_all(
                reads
                    .into_iter()
                    .map(|r| async move { self.submit_kv(ctx, KvRequest::Read(r)).await.await }),
            )
            .await;
        };
        let started = Instant::now();
        for read in &reads {
            self.origins.count_read(&layout, read);
        }
        let checked: Vec<Result<(), FirnError>> = reads.iter().map(validate_read).collect();
        // What each read waits for on this replica, then one barrier, decided by the
        // strongest level the others asked for.
        let mut local = Vec::with_capacity(reads.len());
        for (read, valid) in reads.iter().zip(&checked) {
            local.push(match valid {
                Ok(()) => self.wait_local(&replica, ctx.after, read).await,
                Err(e) => Err(e.clone()),
            });
        }
        let needs: Vec<ReadConsistency> = reads
            .iter()
            .zip(&local)
            .filter(|(r, ok)| r.as_of().is_none() && ok.is_ok())
            .map(|(r, _)| r.consistency())
            .collect();
        let barrier = if needs.contains(&ReadConsistency::Linearizable) {
            self.barrier(replica.shard_id(), false).await
        } else if needs.contains(&ReadConsistency::Lease) {
            self.barrier(replica.shard_id(), true).await
        } else {
            Ok(())
        };
        let mut results = Vec::with_capacity(reads.len());
        for (read, local) in reads.into_iter().zip(local) {
            let name = read.name();
            let metered = super::request_metrics::request_since(name, started);
            let fenced = read.as_of().is_none() && read.consistency() != ReadConsistency::Local;
            let result = match (&barrier, local) {
                (_, Err(e)) => Err(e),
                (Err(e), _) if fenced => Err(e.clone()),
                _ if fenced => match unheld(&replica, &read).await {
                    Ok(()) => read_off_worker(&replica, read).await,
                    Err(e) => Err(e),
                },
                _ => read_off_worker(&replica, read).await,
            };
            metered.finished(result.is_ok());
            results.push(result);
        }
        results
    }

    pub(crate) async fn barrier_for(
        &self,
        shard: ShardId,
        consistency: ReadConsistency,
    ) -> Result<(), FirnError> {
        match consistency {
            ReadConsistency::Linearizable => self.barrier(shard, false).await,
            ReadConsistency::Lease => self.barrier(shard, true).await,
            ReadConsistency::Local => Ok(()),
        }
    }

    /// Waits until this node's replica of `shard` has applied every write acknowledged
    /// before the call: ReadIndex on the leader, or the leader's read index on a follower.
    /// While leadership moves (the leader asked has stepped down, or the new one has not
    /// committed in its term yet) it asks again, for at most `LEADER_WAIT`: a read changes
    /// nothing, so asking twice is safe. With `lease`, the leader answers from its lease
    /// (no quorum round trip) while the lease holds.
    pub(crate) async fn barrier(&self, shard: ShardId, lease: bool) -> Result<(), FirnError> {
        let since = Instant::now();
        loop {
            match self.barrier_once(shard, lease).await {
                Err(FirnError::TryAgain(_)) if since.elapsed() < LEADER_WAIT => {
                    tokio::time::sleep(LEADER_CHANGE_PAUSE).await;
                }
                other => return other,
            }
        }
    }

    async fn barrier_once(&self, shard: ShardId, lease: bool) -> Result<(), FirnError> {
        let replica = self.replicas.require(shard)?;
        let leader = self.leader_of(shard).await?;
        if leader == self.node_id {
            return replica.linearizable_barrier(lease).await;
        }
        // A read changes nothing: an unanswered call only means this replica cannot serve now,
        // and one the leader's move cut short is asked again of the new leader.
        let asked = self.peers.call_read(leader, ReadIndex { shard, lease });
        let index = self
            .unless_leader_moves(shard, leader, asked)
            .await
            .map_err(|to| {
                FirnError::TryAgain(format!(
                    "shard {shard}'s leadership moved from node {leader} to node {to} while \
                     its read index was asked"
                ))
            })?
            .map_err(|e| match e {
                FirnError::Unavailable(m) => {
                    FirnError::Unavailable(format!("cannot reach the leader of shard {shard}: {m}"))
                }
                other => other,
            })??;
        replica.wait_applied(index, CATCH_UP_WAIT).await
    }

    /// Answers a peer's read-index call for a shard this node leads.
    pub(crate) async fn read_index(&self, call: ReadIndex) -> Result<u64, FirnError> {
        self.replicas
            .require(call.shard)?
            .read_index(call.lease)
            .await
    }

    /// What a read waits for on the replica itself, before any barrier: a local read, until
    /// the replica has closed its client's causality token (it then holds everything the
    /// client saw; a linearizable read sees that and more anyway); a read at a time, until the
    /// replica has closed that time (then every replica answers it alike, and no leader is
    /// asked).
    async fn wait_local(
        &self,
        replica: &ShardReplica,
        after: Option<CommitTs>,
        read: &KvRead,
    ) -> Result<(), FirnError> {
        if let Some(t) = after
            && read.consistency() == ReadConsistency::Local
        {
            self.wait_closed(replica, t).await?;
        }
        match read.as_of() {
            Some(t) => self.wait_closed(replica, t).await,
            None => Ok(()),
        }
    }

    /// Waits until `replica` has closed time `t` (at most `CLOSED_WAIT`); refuses a `t`
    /// further ahead of this node's clock than that. While it waits it asks the shard's leader
    /// to close `t` now (one ask an interval from this node, however many wait), so a shard
    /// whose closes have slowed for want of readers answers within a commit.
    pub(crate) async fn wait_closed(
        &self,
        replica: &ShardReplica,
        t: CommitTs,
    ) -> Result<(), FirnError> {
        let now = firn_model::hlc::system_wall_us();
        let ahead = t.wall_us.saturating_sub(now);
        if ahead > CLOSED_WAIT.as_micros() as u64 {
            return Err(FirnError::BadArgument(format!(
                "time {t} is {} ms in the future; a read at a time waits at most {} ms for it",
                ahead / 1_000,
                CLOSED_WAIT.as_millis()
            )));
        }
        let store = replica.store();
        if store.last_commit_ts() >= t {
            return Ok(());
        }
        let waited = store.wait_closed(t, CLOSED_WAIT);
        if !replica.may_ask_to_close() {
            return waited.await;
        }
        // The ask is for `t`, or now if `t` is ahead: a close stamps the leader's clock above
        // what it closes, and a time ahead (up to CLOSED_WAIT) is closed by the closer once it
        // has passed. The answer is the wait's: an ask that fails (no leader, a lost call)
        // leaves the time to the closer and the writes, and one still under way when the
        // time is closed is dropped.
        let through = t.min(CommitTs::new(now, 0));
        let shard = replica.shard_id();
        let ask = async {
            self.on_shard(shard, ShardPart::Close(through), CallContext::default(), 0)
                .await
                .await
        };
        tokio::pin!(waited);
        tokio::select! {
            closed = &mut waited => return closed,
            asked = ask => if let Err(e) = asked {
                tracing::debug!(shard, error = %e, "asking the leader to close time failed");
            },
        }
        waited.await
    }
}

/// Keys a read may touch and still run on the async worker: a handful of point reads
/// (microseconds each) cost less than handing them to another thread.
const POINT_READS_INLINE_MAX: usize = 16;

/// Whether `read` is a few point reads (each O(log versions) at most), cheap enough to run
/// on the async worker. Walks — a scan, a history, a read by event time (which walks a
/// key's history) — are not.
fn is_short(read: &KvRead) -> bool {
    match read {
        KvRead::Get { at, .. } => !at.by_event_time(),
        KvRead::MGet { keys, at, .. } => {
            keys.len() <= POINT_READS_INLINE_MAX && !at.by_event_time()
        }
        KvRead::Exists { keys, .. } => keys.len() <= POINT_READS_INLINE_MAX,
        KvRead::DbSize | KvRead::Type { .. } | KvRead::Expiry { .. } | KvRead::Lease { .. } => true,
        KvRead::History { .. }
        | KvRead::Scan { .. }
        | KvRead::Snapshot { .. }
        | KvRead::LeaseKeys { .. } => false,
    }
}

/// Reads `replica` without a barrier, a long read on the blocking pool, so that one long
/// walk never stalls the other connections an async worker serves.
async fn read_off_worker(replica: &Arc<ShardReplica>, read: KvRead) -> Result<Answer, FirnError> {
    if is_short(&read) {
        return read_unfenced(replica, read);
    }
    let replica = replica.clone();
    tokio::task::spawn_blocking(move || read_unfenced(&replica, read))
        .await
        .map_err(|e| FirnError::Internal(format!("a read stopped: {e}")))?
}

/// A read against a replica's applied state, without a barrier. Its answer is observed
/// through the newest version it looked at, tombstones included: a reader that found a key
/// deleted has seen the delete, though the answer shows no version of it. A `local` read
/// also says how stale it may be (measured before it reads).
fn read_unfenced(replica: &ShardReplica, read: KvRead) -> Result<Answer, FirnError> {
    let staleness =
        (read.consistency() == ReadConsistency::Local && read.as_of().is_none()).then(|| {
            let applied_through = replica.store().last_commit_ts();
            let now = firn_model::hlc::system_wall_us();
            Staleness {
                applied_through,
                at_most_us: now.saturating_sub(applied_through.wall_us),
            }
        });
    let (response, observed) = read_replica(replica, read)?;
    Ok(Answer {
        response,
        observed,
        staleness,
    })
}

fn read_replica(
    replica: &ShardReplica,
    read: KvRead,
) -> Result<(Response, Option<CommitTs>), FirnError> {
    let store = replica.store();
    // The live version a read at `at` sees, and the stamp of what it looked at (a
    // tombstone's too).
    let seen =
        |key: &Key, at: ReadAt| -> Result<(Option<VersionInfo>, Option<CommitTs>), FirnError> {
            let version = store.get(key.as_bytes(), at)?;
            let stamp = version.as_ref().map(|v| v.commit_ts);
            Ok((version.filter(|v| !v.deleted), stamp))
        };
    match read {
        KvRead::Get { key, at, .. } => {
            let (value, stamp) = seen(&key, at)?;
            let value = value.map(VersionInfo::as_string).transpose()?;
            Ok((Response::Value(value), stamp))
        }
        KvRead::Type { key, .. } => {
            let (value, stamp) = seen(&key, ReadAt::Latest)?;
            Ok((Response::Value(value), stamp))
        }
        KvRead::MGet { keys, at, .. } => {
            let (mut values, mut through) = (Vec::with_capacity(keys.len()), None);
            for k in &keys {
                let (value, stamp) = seen(k, at)?;
                // A key of another type reads as nil, as Redis's MGET answers it.
                values.push(value.filter(|v| v.kind == KeyKind::String));
                through = through.max(stamp);
            }
            Ok((Response::Values(values), through))
        }
        KvRead::Exists { keys, .. } => {
            let (mut n, mut through) = (0, None);
            let now = store.read_now();
            for k in &keys {
                if let Some(meta) = store.meta_at(k.as_bytes(), now)? {
                    n += meta.is_live() as u64;
                    through = through.max((meta.latest > 0).then_some(meta.latest_ts));
                }
            }
            Ok((Response::Count(n), through))
        }
        KvRead::History {
            key,
            from,
            to,
            limit,
            as_of,
            corrections,
            ..
        } => {
            let key = key.as_bytes();
            let versions = if corrections {
                store.corrections(key, from, to, limit, as_of)?
            } else {
                store.history(key, from, to, limit, as_of)?
            };
            Ok((Response::History(versions), None))
        }
        KvRead::Scan {
            prefix,
            cursor,
            limit,
            pattern,
            at,
            ..
        } => {
            let page = store.scan(&prefix, cursor.as_deref(), limit, pattern.as_deref(), at)?;
            Ok((
                Response::Scan {
                    keys: page.keys,
                    next_cursor: page.next_cursor,
                },
                page.seen_through,
            ))
        }
        KvRead::DbSize => Ok((Response::Count(store.live_keys()), None)),
        KvRead::Expiry { key, .. } => Ok((Response::Expiry(store.expiry(key.as_bytes())?), None)),
        KvRead::Lease { id, .. } => match store.lease_at(id, store.read_now())? {
            Some(lease) => Ok((Response::Lease(Some(lease)), None)),
            None => Err(FirnError::LeaseNotFound(id)),
        },
        KvRead::LeaseKeys { id, limit } => {
            Ok((Response::LeaseKeys(store.lease_keys(id, limit)?), None))
        }
        KvRead::Snapshot { .. } => Err(FirnError::Internal(
            "a snapshot is planned as the read at its time, never served as such".into(),
        )),
    }
}

/// Waits until no transaction being committed holds a key `read` reads the newest value
/// of (at most a transaction's deadline and a little more): the read then sees the
/// transaction whole or not at all, and — its client having been answered only after every
/// part was resolved — never an older value than a client already saw.
async fn unheld(replica: &ShardReplica, read: &KvRead) -> Result<(), FirnError> {
    let store = replica.store();
    let held = store.held_keys(read.keys());
    if held.is_empty() {
        return Ok(());
    }
    metrics::counter!("firn_txn_read_waits_total").increment(1);
    store.wait_unheld(&held, HELD_READ_WAIT).await
}
