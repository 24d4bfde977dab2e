//! The execution kernel: where a part of a request runs. It checks a kv request against the
//! stated limits, plans it over the shards ([`plan`]), and runs each part where it can be
//! served: a write is proposed here if this node leads the shard, else forwarded to the
//! leader ([`write`]: waiting for a moving leadership to settle); a read is served by a
//! replica here ([`read`]: closed-time wait, then a barrier), else forwarded. Parts on
//! several shards run concurrently and their answers are merged ([`merge`]). The cluster
//! part reaches shards through the kernel as a [`crate::cluster::ShardHost`] ([`host`]).
//!
//! The kernel knows no subsystem above it (the log, consumer groups, services, pub/sub,
//! watches, large values, admin): each of those holds an `Arc<Kernel>` and plans its own
//! requests onto [`Kernel::on_shard`]; the few things the kernel needs from them (serving a
//! subsystem's read part on a replica here, running any request to its answer) it asks
//! through [`Subsystems`], which the router implements.

pub mod clock;
mod host;
pub mod merge;
mod origin;
pub(crate) mod plan;
mod read;
mod remote;
pub mod request_metrics;
mod validate;
pub use validate::check_lease_ttl;
mod write;

pub use write::resend_while_refused;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use firn_model::limits::BLOB_BYTES_MAX;
use firn_model::limits::{KEY_BYTES_MAX, KEYS_PER_REQUEST_MAX, PAGE_ITEMS_MAX};
use firn_model::{
    Answer, BlobRef, CallContext, CommitTs, FirnError, KeyRange, KvRead, KvRequest, KvWrite,
    Limits, PutRequest, Request, Response, SnapshotOf, TxnStep,
};
use firn_raft::{NodeId, ShardId, ShardReplica};
use futures::future::BoxFuture;
use tokio::sync::watch as channel;

use self::plan::Plan;
pub use self::validate::{check_key_count, check_page, check_prefix, validate_read};
use crate::cluster::layout::ClusterLayout;
use crate::cluster::meta::MetaClient;
use crate::disk::DiskSpace;
use crate::replicas::{LEADER_WAIT, Replicas};
use crate::rpc::{CallError, Execute, PEER_CALL_TIMEOUT, PeerClient, ShardPart, read_unanswered};

/// A request's outcome, possibly still in flight (a proposed write).
pub type Pending = Pin<Box<dyn Future<Output = Result<Answer, FirnError>> + Send>>;

/// Forwarding stops after this many hops (a leader change in flight): a write is tried again
/// by the node its client reached (`write.rs`), a read by the client.
const FORWARD_HOPS_MAX: u8 = 2;
/// How long a call forwarded to a shard's leader may still be answered once this node's
/// replica knows another leader: an answer already on its way (the old leader's, sent as it
/// stepped down) comes within it; past it, none is coming (the old leader is cut off or
/// gone), and the call is abandoned rather than left to its timeout ([`PEER_CALL_TIMEOUT`]).
const MOVED_ANSWER_GRACE: Duration = Duration::from_millis(500);
/// How long a read or write waits before asking again after the leader it asked stepped
/// down or could not be reached.
pub const LEADER_CHANGE_PAUSE: Duration = Duration::from_millis(50);

pub fn ready(result: Result<Answer, FirnError>) -> Pending {
    Box::pin(std::future::ready(result))
}

/// What the kernel asks of the subsystems above it; the router implements it.
pub trait Subsystems: Send + Sync {
    /// Serves a subsystem's part (a log page, a group's state, a log's tags) on this node's
    /// replica; `Err(part)` when the part must run on the shard's leader instead (boxed: a
    /// part is large beside a future).
    fn serve_here<'a>(
        &'a self,
        replica: &'a Arc<ShardReplica>,
        part: ShardPart,
        ctx: &'a CallContext,
    ) -> Result<BoxFuture<'a, Result<Answer, FirnError>>, Box<ShardPart>>;

    /// Runs any request after `ctx` to its answer, as a client's would be (a service's
    /// reads and acknowledgements are consumer-group requests; a large value's manifest is
    /// a kv write).
    fn execute<'a>(
        &'a self,
        ctx: &'a CallContext,
        request: Request,
    ) -> BoxFuture<'a, Result<Answer, FirnError>>;

    /// Makes the shared log's directory notes that the log appends among a transaction's
    /// `steps` need before the transaction is proposed (see `crate::log`); answers the
    /// newest stamp a note was made at, which the transaction must follow.
    fn note_transaction_appends<'a>(
        &'a self,
        layout: &'a ClusterLayout,
        steps: Vec<&'a TxnStep>,
    ) -> BoxFuture<'a, Result<Option<CommitTs>, FirnError>>;
}

pub struct Kernel {
    node_id: NodeId,
    /// Where clients reach this node: (RESP, HTTP).
    client_addrs: (String, String),
    replicas: Arc<Replicas>,
    peers: PeerClient,
    meta: Arc<MetaClient>,
    /// The layout this node follows, as the cluster part publishes it.
    layout: channel::Receiver<Arc<ClusterLayout>>,
    limits: Limits,
    allow_flushall: bool,
    /// Where this node's clients send requests, for leaders that follow them.
    origins: origin::OriginCounter,
    /// Users and their permissions; none: nothing is checked.
    users: Option<Arc<crate::auth::Users>>,
    /// This node's data disk: the shards it leads refuse writes that add data while it is
    /// low on space.
    disk: Arc<DiskSpace>,
    /// This node's clock against its peers'.
    clock: Arc<crate::clock::ClockBound>,
    /// Where requests for shards not held here go.
    remote: remote::RemoteShards,
    /// The subsystems above, once the router that holds them is built.
    subsystems: OnceLock<Weak<dyn Subsystems>>,
}

/// What a kernel is built from.
pub struct KernelParts {
    pub replicas: Arc<Replicas>,
    pub peers: PeerClient,
    pub meta: Arc<MetaClient>,
    pub layout: channel::Receiver<Arc<ClusterLayout>>,
    pub limits: Limits,
    pub allow_flushall: bool,
    pub client_addrs: (String, String),
    pub users: Option<Arc<crate::auth::Users>>,
    pub disk: Arc<DiskSpace>,
    pub clock: Arc<crate::clock::ClockBound>,
}

impl Kernel {
    pub fn new(parts: KernelParts) -> Self {
        Kernel {
            users: parts.users,
            disk: parts.disk,
            clock: parts.clock,
            node_id: parts.replicas.node_id(),
            client_addrs: parts.client_addrs,
            replicas: parts.replicas,
            peers: parts.peers,
            meta: parts.meta,
            layout: parts.layout,
            limits: parts.limits,
            allow_flushall: parts.allow_flushall,
            origins: origin::OriginCounter::default(),
            remote: remote::RemoteShards::default(),
            subsystems: OnceLock::new(),
        }
    }

    /// Hands the kernel the subsystems above it (once, as the router is built).
    pub fn set_subsystems(&self, subsystems: Weak<dyn Subsystems>) {
        let _ = self.subsystems.set(subsystems);
    }

    fn subsystems(&self) -> Result<Arc<dyn Subsystems>, FirnError> {
        self.subsystems
            .get()
            .and_then(Weak::upgrade)
            .ok_or_else(|| FirnError::Unavailable("this node is starting or stopping".into()))
    }

    /// Runs any request after `ctx` to its answer, through the subsystem it belongs to.
    pub async fn execute(&self, ctx: &CallContext, request: Request) -> Result<Answer, FirnError> {
        self.subsystems()?.execute(ctx, request).await
    }

    /// The users file's users; none: nothing is checked.
    pub fn users(&self) -> Option<&crate::auth::Users> {
        self.users.as_deref()
    }

    pub fn node_id(&self) -> NodeId {
        self.node_id
    }

    /// This node's clock against its peers'.
    pub fn clock_bound(&self) -> &Arc<crate::clock::ClockBound> {
        &self.clock
    }

    /// The time a read at now is taken at here (`HybridClock::read_now`): refused while
    /// this node's clock is beyond the bound, or stepped and not yet judged again.
    pub fn read_now(&self) -> Result<CommitTs, FirnError> {
        self.clock.clock().read_now()
    }

    /// This node's data disk, as far as its free space goes.
    pub fn disk(&self) -> &Arc<DiskSpace> {
        &self.disk
    }

    pub fn replicas(&self) -> &Arc<Replicas> {
        &self.replicas
    }

    pub fn meta(&self) -> &Arc<MetaClient> {
        &self.meta
    }

    /// The node's stated limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The peers, reached by typed calls.
    pub fn peers(&self) -> &PeerClient {
        &self.peers
    }

    /// The layout this node follows.
    pub fn layout(&self) -> Arc<ClusterLayout> {
        self.layout.borrow().clone()
    }

    /// The layout as it changes.
    pub fn layout_watch(&self) -> channel::Receiver<Arc<ClusterLayout>> {
        self.layout.clone()
    }

    /// Whether a write that adds data may be proposed to `shard` here: not while this
    /// node's disk, or that of a node holding (or being given) a replica of it, is low.
    pub fn disk_allows(&self, shard: ShardId) -> Result<(), FirnError> {
        if !self.disk.any_peer_low() {
            return self.disk.check();
        }
        let layout = self.layout.borrow();
        match layout.shards.get(shard as usize) {
            Some(s) => self
                .disk
                .check_replicas(&s.replicas, s.moving.and_then(|m| m.add)),
            None => self.disk.check(),
        }
    }

    /// The layout, or why requests cannot be routed: none known yet, or one that does not
    /// list this node (it was removed, or has not joined yet: it serves nothing then, so
    /// that a client still pointed at a removed node hears so rather than being served by
    /// a node that no longer belongs to the cluster).
    pub fn routable_layout(&self) -> Result<Arc<ClusterLayout>, FirnError> {
        let layout = self.layout();
        if !layout.is_routable() {
            return Err(FirnError::Unavailable(
                "this node does not know the cluster's layout yet (joining?)".into(),
            ));
        }
        if !self.is_member(&layout) {
            let nodes: Vec<String> = layout.nodes.keys().map(|n| n.to_string()).collect();
            return Err(FirnError::Unavailable(format!(
                "node {} is not in the cluster (its nodes are {}): it was removed, or has not \
                 joined yet, and serves no requests; use another node",
                self.node_id,
                nodes.join(", ")
            )));
        }
        Ok(layout)
    }

    /// Whether `layout` lists this node (a layout that lists none, from before nodes were
    /// listed, counts every node in).
    pub fn is_member(&self, layout: &ClusterLayout) -> bool {
        layout.nodes.is_empty() || layout.nodes.contains_key(&self.node_id)
    }

    /// The leader of `shard`, as this node knows it.
    pub(crate) async fn leader_of(&self, shard: ShardId) -> Result<NodeId, FirnError> {
        if let Some(leader) = self.replicas.leader_of(shard).await {
            return leader;
        }
        // Not held here: the leader last found, or a replica that forwards to it.
        self.layout()
            .shards
            .iter()
            .find(|s| s.id == shard)
            .and_then(|s| self.remote.target(s))
            .ok_or_else(|| FirnError::Unavailable(format!("shard {shard} is unknown here")))
    }

    /// A snapshot: one time T for every shard, then the read of each at T (each waits until
    /// its shard has closed T, never before a causality token the client brought).
    async fn snapshot(&self, ctx: &CallContext, of: SnapshotOf, at: Option<CommitTs>) -> Pending {
        let layout = match self.routable_layout() {
            Ok(l) => l,
            Err(e) => return ready(Err(e)),
        };
        let at = at.unwrap_or_else(|| {
            self.closed_now(&layout, &of)
                .max(ctx.after.unwrap_or(CommitTs::ZERO))
        });
        // The read is at `at`: the client's token matters only for choosing it.
        let read = self
            .plan_and_start(&CallContext::default(), KvRequest::Read(of.read_at(at)))
            .await;
        Box::pin(async move {
            let answer = read.await?;
            Ok(Answer::new(Response::Snapshot {
                at,
                read: Box::new(answer.response),
            }))
        })
    }

    /// The newest time that every shard `of` involves has closed, as far as this node knows:
    /// a replica held here has closed through its newest applied stamp; for a shard held
    /// elsewhere it is now (its leader closes it within the close interval). Never older
    /// than three close intervals (a shard closing every interval is at most two behind, and
    /// a commit): a shard whose closes have slowed (nobody wanted them, see
    /// `firn_raft::closer`) is asked to close that time when the read waits for it.
    fn closed_now(&self, layout: &ClusterLayout, of: &SnapshotOf) -> CommitTs {
        let shards: std::collections::BTreeSet<ShardId> = match of {
            SnapshotOf::Keys(keys) => keys
                .iter()
                .map(|k| layout.shard_of_key(k.as_bytes()))
                .collect(),
            SnapshotOf::Prefix { .. } => layout.shard_ids().collect(),
        };
        let now = CommitTs::new(firn_model::hlc::system_wall_us(), 0);
        shards
            .into_iter()
            .map(|s| {
                self.replicas.get(s).map_or(now, |r| {
                    let floor = r.close_every().map_or(CommitTs::ZERO, |every| {
                        CommitTs::new(now.wall_us.saturating_sub(3 * every.as_micros() as u64), 0)
                    });
                    r.store().last_commit_ts().max(floor).min(now)
                })
            })
            .min()
            .unwrap_or(now)
    }

    /// Starts a kv request after `ctx`: a snapshot reads every shard at one time; anything
    /// else is planned over the shards.
    pub async fn submit_kv(&self, ctx: &CallContext, request: KvRequest) -> Pending {
        match request {
            KvRequest::Read(KvRead::Snapshot { of, at }) => self.snapshot(ctx, of, at).await,
            request => self.plan_and_start(ctx, request).await,
        }
    }

    /// Plans a kv request over the shards and starts every part, concurrently.
    async fn plan_and_start(&self, ctx: &CallContext, request: KvRequest) -> Pending {
        let request = self.with_limits(request);
        let name = match &request {
            KvRequest::Read(r) => r.name(),
            KvRequest::Write(w) => w.name(),
        };
        let metered = request_metrics::request(name);
        let layout = match self
            .validate(&request)
            .and_then(|()| self.routable_layout())
        {
            Ok(l) => l,
            Err(e) => {
                metered.count_error();
                return ready(Err(e));
            }
        };
        self.origins.count(&layout, &request);
        let noted = match self.after_log_notes(ctx, &layout, &request).await {
            Ok(noted) => noted,
            Err(e) => {
                metered.count_error();
                return ready(Err(e));
            }
        };
        let ctx = noted.as_ref().unwrap_or(ctx);
        let request = match self.complete_read(request).await {
            Ok(request) => request,
            Err(e) => {
                metered.count_error();
                return ready(Err(e));
            }
        };
        let request = match self.lease_flow(ctx, request).await {
            Ok(pending) => return metered.around(pending),
            Err(request) => *request,
        };
        let request = match plan::across_shards(&layout, request) {
            Ok(txn) => {
                return metered.around(ready(self.transact_planned(ctx, &layout, txn).await));
            }
            Err(request) => request,
        };
        let outcome = match plan::plan(&layout, request) {
            Plan::One(shard, part) => self.on_shard(shard, part, ctx.clone(), 0).await,
            Plan::Split { parts, merge, keys } => {
                let started = futures::future::join_all(parts.into_iter().map(
                    |(shard, part, positions)| async move {
                        (self.on_shard(shard, part, ctx.clone(), 0).await, positions)
                    },
                ))
                .await;
                Box::pin(merge.split(started, keys))
            }
            Plan::All { part, merge } => {
                let started = futures::future::join_all(
                    layout
                        .shard_ids()
                        .map(|shard| self.on_shard(shard, part.clone(), ctx.clone(), 0)),
                )
                .await;
                Box::pin(merge.all(started))
            }
        };
        metered.around(outcome)
    }

    /// `ctx` to follow the log's directory notes that a transaction's log appends need,
    /// made first (`None`: `ctx` as it is, nothing to note).
    async fn after_log_notes(
        &self,
        ctx: &CallContext,
        layout: &ClusterLayout,
        request: &KvRequest,
    ) -> Result<Option<CallContext>, FirnError> {
        let KvRequest::Write(KvWrite::Atomic {
            steps, otherwise, ..
        }) = request
        else {
            return Ok(None);
        };
        let appends: Vec<&TxnStep> = steps
            .iter()
            .chain(otherwise.iter().flatten())
            .filter(|s| matches!(s, TxnStep::Log(firn_model::LogWrite::Append { .. })))
            .collect();
        if appends.is_empty() {
            return Ok(None);
        }
        let noted = self
            .subsystems()?
            .note_transaction_appends(layout, appends)
            .await?;
        Ok(noted.map(|at| CallContext {
            after: ctx.after.max(Some(at)),
            ..ctx.clone()
        }))
    }

    /// Runs one shard's part where it can be served. The outer future finishes once the
    /// part is started (a write proposed in order); the `Pending` it yields finishes with
    /// the answer. That split is what lets a connection pipeline writes.
    #[allow(clippy::async_yields_async)]
    pub(crate) fn on_shard(
        &self,
        shard: ShardId,
        part: ShardPart,
        ctx: CallContext,
        hops: u8,
    ) -> Pin<Box<dyn Future<Output = Pending> + Send + '_>> {
        Box::pin(async move {
            let local = self.replicas.get(shard);
            match (part, local) {
                (ShardPart::Write(op), _) => self.write(shard, op, ctx, hops).await,
                (ShardPart::Close(t), Some(replica)) if replica.leader() == Some(self.node_id) => {
                    ready(
                        replica
                            .close_through(t)
                            .await
                            .map(|()| Answer::new(Response::Done)),
                    )
                }
                (ShardPart::Read(read), Some(replica)) => {
                    ready(self.read_here(&replica, read, &ctx).await)
                }
                (
                    part
                    @ (ShardPart::LogRead(_) | ShardPart::GroupRead(_) | ShardPart::LogTags(_)),
                    Some(replica),
                ) => match self.serve_here(&replica, part, &ctx).await {
                    Ok(answer) => ready(answer),
                    Err(part) => ready(self.forward_to_leader(shard, part, ctx, hops).await),
                },
                (
                    ShardPart::Watermark {
                        prefix,
                        of_key,
                        reach,
                    },
                    Some(replica),
                ) => ready(self.barrier(shard, false).await.and_then(|()| {
                    let info = replica.store().watermark_info(&prefix, of_key, reach)?;
                    Ok(Answer::new(Response::Watermark(info)))
                })),
                (ShardPart::Keyspaces, Some(replica)) => ready(
                    self.barrier(shard, false)
                        .await
                        .map(|()| Answer::new(Response::Keyspaces(replica.store().keyspaces()))),
                ),
                // Not held here, or a part that must run on the leader.
                (part, _) => ready(self.forward_to_leader(shard, part, ctx, hops).await),
            }
        })
    }

    /// A subsystem's part served by `replica`, or the part back when it must run on the
    /// leader.
    async fn serve_here(
        &self,
        replica: &Arc<ShardReplica>,
        part: ShardPart,
        ctx: &CallContext,
    ) -> Result<Result<Answer, FirnError>, ShardPart> {
        let subsystems = match self.subsystems() {
            Ok(s) => s,
            Err(e) => return Ok(Err(e)),
        };
        match subsystems.serve_here(replica, part, ctx) {
            Ok(serving) => Ok(serving.await),
            Err(part) => Err(*part),
        }
    }

    /// Runs a part that is no write on the shard's leader (or a replica of a shard not held
    /// here). At the node its client reached (`hops` 0), one that could not be sent (no
    /// connection: nothing happened there) is sent again every [`LEADER_CHANGE_PAUSE`] for
    /// at most [`LEADER_WAIT`], to whichever node leads by then — as a write is (`write`).
    async fn forward_to_leader(
        &self,
        shard: ShardId,
        mut part: ShardPart,
        ctx: CallContext,
        hops: u8,
    ) -> Result<Answer, FirnError> {
        let since = Instant::now();
        loop {
            let target = self.leader_of(shard).await?;
            let again = (hops == 0).then(|| part.clone());
            match (
                self.forward(target, shard, part, ctx.clone(), hops).await,
                again,
            ) {
                (Err(CallError::NotSent(_)), Some(again)) if since.elapsed() < LEADER_WAIT => {
                    metrics::counter!("firn_forward_retries_total").increment(1);
                    tokio::time::sleep(LEADER_CHANGE_PAUSE).await;
                    part = again;
                }
                (answer, _) => return answer.unwrap_or_else(|e| Err(e.into())),
            }
        }
    }

    /// Sends a part to `target` to run there: its answer, or why there is none.
    async fn forward(
        &self,
        target: NodeId,
        shard: ShardId,
        part: ShardPart,
        ctx: CallContext,
        hops: u8,
    ) -> Result<Result<Answer, FirnError>, CallError> {
        if hops >= FORWARD_HOPS_MAX || target == self.node_id {
            return Ok(Err(FirnError::TryAgain(format!(
                "shard {shard} is changing leader; retry"
            ))));
        }
        metrics::counter!("firn_forwarded_total", "to" => target.to_string()).increment(1);
        let is_write = matches!(part, ShardPart::Write(_));
        let call = Execute {
            shard,
            part,
            ctx,
            hops: hops + 1,
        };
        let call = self.peers.try_call(target, call, PEER_CALL_TIMEOUT);
        let answer = match self.unless_leader_moves(shard, target, call).await {
            // A write's stays unanswered: UNCERTAIN, where its caller turns it into an error.
            Ok(Err(CallError::Unanswered(why))) if !is_write => {
                Err(CallError::Failed(read_unanswered(&why)))
            }
            Ok(answered) => answered,
            Err(to) => Err(CallError::Failed(moved_away(shard, target, to, is_write))),
        };
        if matches!(answer, Err(CallError::NotSent(_))) && self.replicas.get(shard).is_none() {
            // Not held here, and `target` could not be reached: the shard's replicas say who
            // leads, so that the write sent again (or the next request) goes there.
            self.find_remote_leader(shard).await;
        }
        answer
    }

    /// Runs `call`, a request about `shard` sent to its leader `target`, unless this node's
    /// replica of the shard learns of another leader first (without a replica here: unless
    /// `target` is silent and another replica names a leader, see [`remote`]): the call then
    /// has [`MOVED_ANSWER_GRACE`] more and is given up, `Err` with the new leader.
    async fn unless_leader_moves<T>(
        &self,
        shard: ShardId,
        target: NodeId,
        call: impl Future<Output = T>,
    ) -> Result<T, NodeId> {
        let replica = self.replicas.get(shard);
        let moved = async {
            let to = match &replica {
                Some(replica) => replica.leader_moved_from(target).await,
                None => self.silent_and_led_elsewhere(shard, target).await,
            };
            tokio::time::sleep(MOVED_ANSWER_GRACE).await;
            to
        };
        tokio::select! {
            biased;
            answer = call => Ok(answer),
            to = moved => {
                metrics::counter!("firn_leader_calls_abandoned_total").increment(1);
                Err(to)
            }
        }
    }

    /// Answers a peer's forwarded part.
    pub(crate) async fn execute_part(&self, call: Execute) -> Result<Answer, FirnError> {
        self.on_shard(call.shard, call.part, call.ctx, call.hops)
            .await
            .await
    }

    pub async fn shutdown(&self) {
        self.replicas.shutdown().await;
        self.meta.meta().replica().shutdown().await;
    }
}

/// What a forwarded call given up because its shard's leadership moved (or, for a shard not
/// held here, because the replica it went to fell silent) means for the client: a write may
/// have been applied by the old leader (and, committed with a follower just before it lost
/// its majority, survive in the new leader's log), so its outcome is unknown; a read changed
/// nothing and goes to the new leader when sent again.
fn moved_away(shard: ShardId, from: NodeId, to: NodeId, is_write: bool) -> FirnError {
    let why = format!(
        "shard {shard} is led by node {to} now, and node {from}, sent the request, did not \
         answer"
    );
    if is_write {
        FirnError::Indeterminate(format!("{why}; it may or may not be applied"))
    } else {
        FirnError::TryAgain(format!("{why}; retry"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A forwarded read given up when its shard's leadership moved changed nothing and is
    /// sent again (`TRYAGAIN`); a write's outcome is unknown (`UNCERTAIN`), never retried.
    #[test]
    fn a_read_cut_short_by_a_move_may_be_retried_and_a_write_is_uncertain() {
        assert!(matches!(moved_away(2, 3, 1, false), FirnError::TryAgain(_)));
        assert!(matches!(
            moved_away(2, 3, 1, true),
            FirnError::Indeterminate(_)
        ));
    }
}
