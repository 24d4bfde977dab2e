//! Consumer groups through the router: every request goes to its stream's shard (the shard
//! of the key's slot), where the groups live. Changes — deliveries included — are proposed
//! on that shard's leader as `Op::Group` entries; reads (XPENDING, XINFO) run after the
//! usual barrier. XREADGROUP over several streams runs one change per stream, and with
//! `BLOCK` proposes again only once a stream it waits on has an entry past the group's
//! last delivered id, an entry was dealt to the consumer, an entry falls due under ACKWAIT,
//! or (under `roundrobin`/`hrw`) a third of the group's liveness has passed, so that a
//! waiting consumer stays live — never in a loop of empty deliveries.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use firn_model::limits::KEYS_PER_REQUEST_MAX;
use firn_model::log::LOG_READ_RECORDS_MAX;
use firn_model::{
    Answer, CallContext, CommitTs, DeliveryPolicy, FirnError, GroupChange, GroupEntry, GroupInfo,
    GroupRead, GroupRequest, GroupWrite, Key, LogQuery, LogSeq, Response,
};
use firn_store::Op;
use firn_store::store::group::GroupWake;

use crate::exec::{Kernel, Pending, ready, request_metrics, resend_while_refused};
use crate::log::{Log, check_block, deadline, wait_for_more};
use crate::rpc::ShardPart;

/// Longest group or consumer name, in bytes (names are stored behind a 16-bit length).
pub const GROUP_NAME_BYTES_MAX: usize = 1_024;

fn check_name(what: &str, name: &[u8]) -> Result<(), FirnError> {
    if name.len() > GROUP_NAME_BYTES_MAX {
        return Err(FirnError::BadArgument(format!(
            "{what} name is {} bytes; the limit is {GROUP_NAME_BYTES_MAX}",
            name.len()
        )));
    }
    Ok(())
}

fn check_count(what: &str, n: usize) -> Result<(), FirnError> {
    if n > LOG_READ_RECORDS_MAX {
        return Err(FirnError::BadArgument(format!(
            "{what} {n} is more than the limit, {LOG_READ_RECORDS_MAX}"
        )));
    }
    Ok(())
}

/// What a change asks of the store, checked before it is proposed.
fn check_change(change: &GroupChange) -> Result<(), FirnError> {
    match change {
        GroupChange::CreateConsumer { consumer } | GroupChange::DelConsumer { consumer } => {
            check_name("consumer", consumer)
        }
        GroupChange::Deliver {
            consumer, count, ..
        }
        | GroupChange::Pending {
            consumer, count, ..
        } => {
            check_name("consumer", consumer)?;
            check_count("COUNT", *count)
        }
        GroupChange::Ack { ids } => check_count("ids", ids.len()),
        GroupChange::Claim { consumer, ids, .. } => {
            check_name("consumer", consumer)?;
            check_count("ids", ids.len())
        }
        GroupChange::AutoClaim {
            consumer, count, ..
        } => {
            check_name("consumer", consumer)?;
            check_count("COUNT", *count)
        }
        GroupChange::Destroy | GroupChange::SetId { .. } => Ok(()),
        // Options are checked against the stream in the change itself (`check_options`).
        GroupChange::Create { .. } | GroupChange::Configure { .. } => Ok(()),
    }
}

/// Options must fit the stream they are for (the store checks them again when it applies).
fn check_options(key: &Key, change: &GroupChange) -> Result<(), FirnError> {
    match change {
        GroupChange::Create { options, .. } | GroupChange::Configure { options } => {
            options.check(key)
        }
        _ => Ok(()),
    }
}

/// A blocked XREADGROUP re-proposes at least this often for a consumer it cannot see a
/// reason to wake for, where the group wants it noted as live (a third of its liveness).
/// What a blocked XREADGROUP hears when its stream was deleted, flushed or replaced by a
/// key of another type while it waited (Redis's words).
fn stream_gone() -> FirnError {
    FirnError::Unblocked("the stream key no longer exists".into())
}

/// Why a blocked XREADGROUP stopped waiting.
enum Woke {
    /// Something to read may have come: read again (the due times already proposed for).
    Again(Vec<u64>),
    /// Its BLOCK time is over.
    TimedOut,
    /// The group of this stream (or the stream) is gone.
    Gone(Key),
}

fn renote_after(group: &GroupWake) -> Option<Duration> {
    (group.options.policy != DeliveryPolicy::First)
        .then(|| Duration::from_millis((group.options.liveness_ms / 3).max(1)))
}

/// A wall-clock time in ms (the stamp clock) as an instant of this node.
fn instant_at(ms: u64) -> Instant {
    Instant::now() + Duration::from_millis(ms.saturating_sub(now_ms()))
}

/// What an XREADGROUP asks, beside its streams.
struct GroupReading {
    group: Bytes,
    consumer: Bytes,
    count: usize,
    noack: bool,
    /// `None`: no `BLOCK`; `Some(None)`: `BLOCK 0`, for ever; else until then.
    deadline: Option<Option<Instant>>,
}

impl GroupReading {
    /// Whether the read answers now with what it has: without `BLOCK`, at once.
    fn timed_out(&self) -> bool {
        self.deadline
            .is_none_or(|d| d.is_some_and(|d| Instant::now() >= d))
    }
}

/// One pass of an XREADGROUP over its streams.
#[derive(Default)]
struct GroupRound {
    found: Vec<(Key, Vec<GroupEntry>)>,
    /// The newest stamp a stream's change was applied at.
    newest: Option<CommitTs>,
    /// Streams that delivered nothing, with their group's last delivered id.
    waiting: Vec<(Key, LogSeq)>,
}

impl GroupRound {
    fn answer(self) -> Answer {
        Answer::new(Response::GroupStreams {
            streams: self.found,
            at: self.newest,
        })
    }
}

/// Why a blocked XREADGROUP should propose again, from its group's state: an entry dealt to
/// it, or the instant its group's earliest entry falls due (`tried`: dues already proposed
/// for, which the leader's clock has not reached yet — retried after a short pause).
fn wake_for(group: &GroupWake, consumer: &[u8], tried: &[u64]) -> (bool, Option<Instant>) {
    let dealt = group.waiting.iter().any(|(c, _)| c == consumer);
    let due = group.next_due_ms.map(|d| {
        if tried.contains(&d) {
            Instant::now() + DUE_RETRY
        } else {
            instant_at(d)
        }
    });
    (dealt, due)
}

/// How long a blocked read waits before trying again a due time the leader did not reach.
const DUE_RETRY: Duration = Duration::from_millis(100);

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Consumer groups of streams: their changes (deliveries included) proposed on the stream's
/// shard, their reads, and XREADGROUP's waits.
pub struct Groups {
    kernel: Arc<Kernel>,
    /// The streams the groups read.
    log: Arc<Log>,
}

impl Groups {
    pub fn new(kernel: Arc<Kernel>, log: Arc<Log>) -> Self {
        Groups { kernel, log }
    }

    pub async fn submit(&self, ctx: &CallContext, request: GroupRequest) -> Pending {
        let name = match &request {
            GroupRequest::Read(r) => r.name(),
            GroupRequest::Write(w) => w.name(),
        };
        let metered = request_metrics::request(name);
        metered.around(self.start_group(ctx, request).await)
    }

    async fn start_group(&self, ctx: &CallContext, request: GroupRequest) -> Pending {
        let layout = match self.kernel.routable_layout() {
            Ok(l) => l,
            Err(e) => return ready(Err(e)),
        };
        match request {
            GroupRequest::Write(GroupWrite::Change { key, group, change }) => {
                if let Err(e) = check_name("group", &group)
                    .and_then(|()| check_change(&change))
                    .and_then(|()| check_options(&key, &change))
                {
                    return ready(Err(e));
                }
                let shard = layout.shard_of_name(key.as_bytes());
                let op = Op::Group { key, group, change };
                self.kernel
                    .on_shard(shard, ShardPart::Write(op), ctx.clone(), 0)
                    .await
            }
            GroupRequest::Write(GroupWrite::ReadGroup {
                group,
                consumer,
                streams,
                count,
                noack,
                block_ms,
            }) => ready(
                self.read_group(ctx, group, consumer, streams, count, noack, block_ms)
                    .await,
            ),
            GroupRequest::Read(read) => {
                let shard = layout.shard_of_name(read.key().as_bytes());
                self.kernel
                    .on_shard(shard, ShardPart::GroupRead(read), ctx.clone(), 0)
                    .await
            }
        }
    }

    /// One stream's change of an XREADGROUP, on its stream's shard, sent again while it is
    /// refused for now (nothing applied), as [`crate::router::Router::again_while_refused`] sends a whole
    /// write: XREADGROUP is not sent again whole (`Request::resent_when_refused`), since
    /// the streams before this one have delivered already.
    async fn change_one_stream(
        &self,
        ctx: &CallContext,
        key: &Key,
        op: Op,
    ) -> Result<Answer, FirnError> {
        let since = Instant::now();
        let send = || async {
            let shard = self.kernel.routable_layout()?.shard_of_name(key.as_bytes());
            self.kernel
                .on_shard(shard, ShardPart::Write(op.clone()), ctx.clone(), 0)
                .await
                .await
        };
        let first = send().await;
        resend_while_refused(since, first, || true, send).await
    }

    /// XREADGROUP: one change per stream, in order; with `BLOCK`, while `>` delivered
    /// nothing, waits for an entry past the group's last delivered id and proposes again.
    #[allow(clippy::too_many_arguments)]
    async fn read_group(
        &self,
        ctx: &CallContext,
        group: Bytes,
        consumer: Bytes,
        streams: Vec<(Key, Option<LogSeq>)>,
        count: usize,
        noack: bool,
        block_ms: Option<u64>,
    ) -> Result<Answer, FirnError> {
        check_name("group", &group)?;
        check_name("consumer", &consumer)?;
        check_count("COUNT", count)?;
        check_block(block_ms)?;
        if streams.is_empty() || streams.len() > KEYS_PER_REQUEST_MAX {
            return Err(FirnError::BadArgument(format!(
                "XREADGROUP reads 1 to {KEYS_PER_REQUEST_MAX} streams"
            )));
        }
        let read = GroupReading {
            group,
            consumer,
            count,
            noack,
            deadline: deadline(block_ms),
        };
        let layout = self.kernel.routable_layout()?;
        let mut ctx = ctx.clone();
        // Due times already proposed for (see `wake_for`).
        let mut tried: Vec<u64> = Vec::new();
        let mut waited = false;
        loop {
            let applied = self
                .kernel
                .first_local_applied(&layout, streams.iter().map(|(k, _)| k));
            let round = match self.read_group_round(&mut ctx, &read, &streams).await {
                // A stream replaced by a key of another type while the read waited.
                Err(FirnError::WrongType) if waited => return Err(stream_gone()),
                round => round?,
            };
            if !round.found.is_empty() || read.timed_out() {
                return Ok(round.answer());
            }
            match self
                .wait_to_read_again(&ctx, &read, &round.waiting, &tried, applied)
                .await
            {
                Ok(Woke::Again(due_seen)) => tried = due_seen,
                Ok(Woke::TimedOut) => return Ok(round.answer()),
                Ok(Woke::Gone(key)) => return Err(self.gone_while_blocked(&ctx, &key).await),
                Err(FirnError::WrongType) => return Err(stream_gone()),
                Err(e) => return Err(e),
            }
            waited = true;
        }
    }

    /// One change per stream, in order: what each delivered (or, for an id, the consumer's
    /// pending entries after it), and the streams that delivered nothing, with their
    /// group's last delivered id.
    async fn read_group_round(
        &self,
        ctx: &mut CallContext,
        read: &GroupReading,
        streams: &[(Key, Option<LogSeq>)],
    ) -> Result<GroupRound, FirnError> {
        let mut round = GroupRound::default();
        for (key, id) in streams {
            let change = match id {
                None => GroupChange::Deliver {
                    consumer: read.consumer.clone(),
                    count: read.count,
                    noack: read.noack,
                },
                Some(after) => GroupChange::Pending {
                    consumer: read.consumer.clone(),
                    after: *after,
                    count: read.count,
                },
            };
            let op = Op::Group {
                key: key.clone(),
                group: read.group.clone(),
                change,
            };
            let answer = self.change_one_stream(ctx, key, op).await?;
            let Response::GroupEntries {
                entries,
                at,
                last_delivered,
            } = answer.response
            else {
                return Err(FirnError::Internal(
                    "a group read answered no entries".into(),
                ));
            };
            round.newest = round.newest.max(Some(at));
            ctx.after = ctx.after.max(Some(at));
            if id.is_some() || !entries.is_empty() {
                round.found.push((key.clone(), entries));
            } else {
                round.waiting.push((key.clone(), last_delivered));
            }
        }
        Ok(round)
    }

    /// Waits for a reason to propose again — reads, never a proposal: an entry past a
    /// waiting stream's last delivered id, an entry dealt to the consumer, or a due time.
    /// Answers the due times it saw (to try again), or `None` once the read's time is up.
    async fn wait_to_read_again(
        &self,
        ctx: &CallContext,
        read: &GroupReading,
        waiting: &[(Key, LogSeq)],
        tried: &[u64],
        mut applied: Option<tokio::sync::watch::Receiver<CommitTs>>,
    ) -> Result<Woke, FirnError> {
        let proposed = Instant::now();
        // Streams whose group follows Redis alone (no policy, no ACKWAIT): nothing but a
        // new entry, or the group's end, wakes a read of them, so only whether the group is
        // still there is read again.
        let mut plain = vec![false; waiting.len()];
        let mut due_seen: Vec<u64> = Vec::new();
        'wait: loop {
            due_seen.clear();
            let mut wake = read.deadline.flatten();
            for (i, (key, last)) in waiting.iter().enumerate() {
                if let Some(from) = last.successor() {
                    let q = LogQuery::stream(key.clone(), from, LogSeq::MAX, 1, false);
                    if !self.log.query(ctx, &q).await?.is_empty() {
                        break 'wait;
                    }
                }
                let Some(info) = self.group_wake(ctx, key, &read.group).await? else {
                    // The group or its stream is gone (XGROUP DESTROY, FLUSHALL).
                    return Ok(Woke::Gone(key.clone()));
                };
                if plain[i] {
                    continue;
                }
                plain[i] = info.options.policy == DeliveryPolicy::First
                    && info.options.ack_wait_ms.is_none();
                let (dealt, due) = wake_for(&info, &read.consumer, tried);
                if dealt {
                    break 'wait;
                }
                if let Some(d) = info.next_due_ms {
                    due_seen.push(d);
                }
                let renote = renote_after(&info).map(|r| proposed + r);
                for at in [due, renote].into_iter().flatten() {
                    wake = Some(wake.map_or(at, |w| w.min(at)));
                }
            }
            if read.timed_out() {
                return Ok(Woke::TimedOut);
            }
            if wake.is_some_and(|w| Instant::now() >= w) {
                break 'wait;
            }
            wait_for_more(applied.as_mut(), wake).await;
            if wake.is_some_and(|w| Instant::now() >= w) && !read.timed_out() {
                break 'wait;
            }
        }
        Ok(Woke::Again(due_seen))
    }

    /// What a blocked read hears when its group went away while it waited, as Redis says
    /// it: its stream is gone (`UNBLOCKED`), or only its group (`NOGROUP`).
    async fn gone_while_blocked(&self, ctx: &CallContext, key: &Key) -> FirnError {
        // A FLUSHALL drops a stream before its groups, so a group found gone with its stream
        // gone is a flushed stream.
        match self.log.stream_exists(ctx, key).await {
            Ok(true) => FirnError::NoGroup(
                "the consumer group this client was blocked on no longer exists".into(),
            ),
            Ok(false) | Err(FirnError::WrongType) => stream_gone(),
            Err(e) => e,
        }
    }

    /// What a blocked read watches of a group (`None`: no such group or stream): from this
    /// node's replica of the stream's shard when it has one (a hint — the proposal decides,
    /// and a lagging replica wakes the read when it catches up), else as XINFO GROUPS reads it.
    async fn group_wake(
        &self,
        ctx: &CallContext,
        key: &Key,
        group: &Bytes,
    ) -> Result<Option<GroupWake>, FirnError> {
        let layout = self.kernel.routable_layout()?;
        let shard = layout.shard_of_name(key.as_bytes());
        if let Some(replica) = self.kernel.replicas().get(shard) {
            let (key, group) = (key.clone(), group.clone());
            return tokio::task::spawn_blocking(move || replica.store().group_wake(&key, &group))
                .await
                .map_err(|e| FirnError::Internal(format!("a group read stopped: {e}")))?;
        }
        let read = GroupRead::Groups { key: key.clone() };
        let answer = match self
            .kernel
            .on_shard(shard, ShardPart::GroupRead(read), ctx.clone(), 0)
            .await
            .await
        {
            Ok(a) => a,
            // The stream went away: the next proposal answers for it.
            Err(FirnError::BadArgument(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        let Response::Groups(groups) = answer.response else {
            return Err(FirnError::Internal(
                "a group info read answered no groups".into(),
            ));
        };
        Ok(groups
            .into_iter()
            .find(|g| g.name == *group)
            .map(|g: GroupInfo| GroupWake {
                options: g.options,
                next_due_ms: g.next_due_ms,
                waiting: g.waiting,
            }))
    }

    /// A read of group state on this node's replica of the stream's shard, after the
    /// barrier; idle times are this node's clock's (a read changes nothing).
    pub(crate) async fn read_here(
        &self,
        replica: &Arc<firn_raft::ShardReplica>,
        read: GroupRead,
    ) -> Result<Answer, FirnError> {
        self.kernel.barrier(replica.shard_id(), false).await?;
        let replica = replica.clone();
        let response = tokio::task::spawn_blocking(move || {
            let store = replica.store();
            Ok::<_, FirnError>(match read {
                GroupRead::PendingSummary { key, group } => {
                    Response::PendingSummary(store.pending_summary(&key, &group)?)
                }
                GroupRead::Pending {
                    key,
                    group,
                    min_idle_ms,
                    start,
                    end,
                    count,
                    consumer,
                } => Response::PendingEntries(store.pending(
                    &key,
                    &group,
                    min_idle_ms,
                    start,
                    end,
                    count,
                    consumer.as_deref(),
                    now_ms(),
                )?),
                GroupRead::Groups { key } => Response::Groups(store.groups(&key)?),
                GroupRead::Consumers { key, group } => {
                    Response::Consumers(store.consumers(&key, &group, now_ms())?)
                }
                GroupRead::StreamFull { key, count } => {
                    Response::StreamFull(store.stream_full(&key, count, now_ms())?.map(Box::new))
                }
            })
        })
        .await
        .map_err(|e| FirnError::Internal(format!("a group read stopped: {e}")))??;
        Ok(Answer::new(response))
    }
}
