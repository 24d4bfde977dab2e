//! The one place a request is executed, whichever front end parsed it.
//!
//! The router validates a [`Request`] against the stated limits, maps its keys to shards
//! (slot → shard), and runs each part where it can be served: a write is proposed by this
//! node if it leads the shard, else forwarded to the leader over the peer connection; a
//! linearizable read is served by any replica here (a follower first gets the read index
//! from the leader and waits until it has applied it), else forwarded. Requests touching
//! several shards fan out and their answers are merged.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use firn_model::limits::{KEY_BYTES_MAX, KEYS_PER_REQUEST_MAX, PAGE_ITEMS_MAX};
use firn_model::{
    CommitTs, FirnError, Key, KeyRange, KeyspaceSpec, Limits, ReadAt, ReadConsistency, Request,
    Response, SnapshotOf, VersionInfo, WatchFrom, WatchRequest, Written,
};
use firn_raft::peer::{AppHandler, PeerError, PeerPool, PeerRequest, PeerResponse};
use firn_raft::{NodeId, ShardId, ShardReplica, ShardStatus};
use firn_store::Op;

use crate::cluster::{
    ClusterLayout, ClusterView, NodeRpc, NodeRpcReply, NodeView, ReplicaView, ShardView,
};
use crate::meta::Meta;
use crate::replicas::ReplicaFactory;
use crate::watch::WatchStream;

/// A request's outcome, possibly still in flight (a proposed write).
pub type Pending = Pin<Box<dyn Future<Output = Result<Response, FirnError>> + Send>>;

/// How long a request waits for a shard to have a leader before it is refused.
const LEADER_WAIT: Duration = Duration::from_secs(5);
/// How long a forwarded request or read-index call may take. A healthy leader answers in
/// milliseconds; past this the leader is probably gone, and the client hears UNCERTAIN (a
/// write) or CLUSTERDOWN (a read) rather than waiting longer.
const PEER_CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a follower waits to apply up to a read index.
const CATCH_UP_WAIT: Duration = Duration::from_secs(10);
/// How long a node waits for a peer to describe itself.
const DESCRIBE_TIMEOUT: Duration = Duration::from_millis(500);
/// How long a read waits before asking again after the leader it asked stepped down.
const LEADER_CHANGE_PAUSE: Duration = Duration::from_millis(50);
/// How long a remote watch's poll waits for a new version before answering empty.
const WATCH_POLL_WAIT: Duration = Duration::from_secs(1);
/// Forwarding stops after this many hops (a leader change in flight): the client retries.
const FORWARD_HOPS_MAX: u8 = 2;
/// Longest a read at a time (`ASOF t`) waits for its replica to close that time; a time
/// further ahead than this is refused at once.
const CLOSED_WAIT: Duration = Duration::from_secs(2);

pub struct Router {
    /// Where clients reach this node: (RESP, HTTP).
    client_addrs: (String, String),
    node_id: NodeId,
    /// The layout this node last applied (empty until it knows one).
    layout: RwLock<Arc<ClusterLayout>>,
    /// The shard replicas held here, as the layout says.
    local: RwLock<HashMap<ShardId, Arc<ShardReplica>>>,
    /// Serialises layout changes (replicas opened and closed).
    applying: tokio::sync::Mutex<()>,
    factory: ReplicaFactory,
    meta: Meta,
    /// This router, for tasks that outlive a call (remote watch feeds).
    me: std::sync::OnceLock<std::sync::Weak<Router>>,
    limits: Limits,
    allow_flushall: bool,
}

fn ready(result: Result<Response, FirnError>) -> Pending {
    Box::pin(std::future::ready(result))
}

/// Which shards a request touches and how its parts are combined.
enum Plan {
    One(ShardId, Request),
    /// Per-shard parts, with the original positions of each part's keys.
    Split(Vec<(ShardId, Request, Vec<usize>)>, usize),
    All,
}

impl Router {
    pub fn new(
        factory: ReplicaFactory,
        meta: Meta,
        limits: Limits,
        allow_flushall: bool,
        client_addrs: (String, String),
    ) -> Self {
        Router {
            client_addrs,
            node_id: factory.node_id,
            layout: RwLock::new(Arc::new(ClusterLayout::empty())),
            local: RwLock::default(),
            applying: tokio::sync::Mutex::new(()),
            factory,
            meta,
            me: std::sync::OnceLock::new(),
            limits,
            allow_flushall,
        }
    }

    /// Gives the router a handle on itself (for background tasks it starts).
    pub fn set_self(self: &Arc<Self>) {
        let _ = self.me.set(Arc::downgrade(self));
    }

    pub fn node_id(&self) -> NodeId {
        self.node_id
    }

    pub fn meta(&self) -> &Meta {
        &self.meta
    }

    pub(crate) fn pool(&self) -> &Arc<PeerPool> {
        &self.factory.pool
    }

    /// The layout this node follows.
    pub fn layout(&self) -> Arc<ClusterLayout> {
        self.layout
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The layout, or why requests cannot be routed yet.
    fn routable_layout(&self) -> Result<Arc<ClusterLayout>, FirnError> {
        let layout = self.layout();
        if layout.shards.is_empty() {
            return Err(FirnError::Unavailable(
                "this node does not know the cluster's layout yet (joining?)".into(),
            ));
        }
        Ok(layout)
    }

    fn replica(&self, shard: ShardId) -> Option<Arc<ShardReplica>> {
        self.local
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&shard)
            .cloned()
    }

    /// The leader of `shard` as this node's replica knows it, without waiting.
    pub fn known_leader(&self, shard: ShardId) -> Option<NodeId> {
        self.replica(shard).and_then(|r| r.leader())
    }

    fn replicas(&self) -> Vec<Arc<ShardReplica>> {
        self.local
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Follows a new layout: peer addresses, then the replicas this node should hold —
    /// opening the ones added here, closing the ones moved away.
    pub async fn apply_layout(&self, layout: ClusterLayout) -> Result<(), FirnError> {
        let _one_at_a_time = self.applying.lock().await;
        for (id, addr) in &layout.nodes {
            self.factory.pool.set_addr(*id, addr);
        }
        let me = self.node_id;
        let held: Vec<ShardId> = self
            .local
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .copied()
            .collect();
        let mut result = Ok(());
        for shard in layout.shards.iter().filter(|s| layout.holds(s, me)) {
            if held.contains(&shard.id) {
                continue;
            }
            let members: BTreeMap<NodeId, String> = shard
                .replicas
                .iter()
                .filter_map(|n| layout.nodes.get(n).map(|a| (*n, a.clone())))
                .collect();
            let form = shard.formed_by == Some(me);
            match self.factory.open(shard.id, &members, form).await {
                Ok(replica) => {
                    tracing::info!(shard = shard.id, form, "opened a replica");
                    self.local
                        .write()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(shard.id, replica);
                }
                Err(e) => result = Err(e),
            }
        }
        for id in held {
            if layout
                .shards
                .iter()
                .any(|s| s.id == id && layout.holds(s, me))
            {
                continue;
            }
            let replica = self
                .local
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
            if let Some(r) = replica {
                self.factory.close(id, &r).await;
                tracing::info!(shard = id, "closed a replica moved elsewhere");
            }
        }
        *self.layout.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(layout);
        result
    }

    /// How stale a `local` read of `key` here may be: the stamp through which this node's
    /// replica of the key's shard has applied every write (taken before the read, the answer
    /// reflects at least everything stamped up to it, so it is at most `now − stamp` behind),
    /// with that bound in microseconds. `None` when no replica is here (the read goes to the
    /// leader).
    pub fn local_staleness(&self, key: &[u8]) -> Option<(firn_model::CommitTs, u64)> {
        let layout = self.layout();
        if layout.shards.is_empty() {
            return None;
        }
        let stamp = self
            .replica(layout.shard_of_key(key))?
            .store()
            .last_commit_ts();
        let now = firn_model::hlc::system_wall_us();
        Some((stamp, now.saturating_sub(stamp.wall_us)))
    }

    /// The replicas this node holds.
    pub fn status(&self) -> Vec<ShardStatus> {
        let mut s: Vec<ShardStatus> = self.replicas().iter().map(|r| r.status()).collect();
        s.sort_by_key(|s| s.shard_id);
        s
    }

    /// Live keys in the replicas this node holds (INFO's view; DBSIZE asks every shard).
    pub fn live_keys(&self) -> u64 {
        self.replicas().iter().map(|r| r.store().live_keys()).sum()
    }

    /// Checks a request against every stated limit before anything is proposed.
    pub fn validate(&self, request: &Request) -> Result<(), FirnError> {
        let too_many = |n: usize| {
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
        };
        let page = |n: usize| {
            if n == 0 || n > PAGE_ITEMS_MAX {
                return Err(FirnError::BadArgument(format!(
                    "limit {n} is out of range 1..={PAGE_ITEMS_MAX}"
                )));
            }
            Ok(())
        };
        match request {
            Request::Put(p) => self.limits.check_value(p.value.len()),
            Request::MSet { items } => {
                too_many(items.len())?;
                items
                    .iter()
                    .try_for_each(|(_, v)| self.limits.check_value(v.len()))
            }
            Request::Delete { keys }
            | Request::MGet { keys, .. }
            | Request::Exists { keys, .. } => too_many(keys.len()),
            Request::History { limit, .. } => page(*limit),
            Request::Scan { limit, prefix, .. } => {
                check_prefix(prefix)?;
                page(*limit)
            }
            Request::Truncate {
                target: KeyRange::Prefix(p),
                ..
            } => check_prefix(p),
            Request::KeyspaceCreate(spec) => spec.validate(),
            Request::FlushAll if !self.allow_flushall => Err(FirnError::Refused(
                "FLUSHALL is disabled on this node; start it with --allow-flushall to enable it"
                    .into(),
            )),
            _ => Ok(()),
        }
    }

    fn plan(layout: &ClusterLayout, request: Request) -> Plan {
        let shard = |k: &Key| layout.shard_of_key(k.as_bytes());
        /// Groups keys by shard, remembering each key's position.
        fn split<T>(
            items: Vec<T>,
            shard_of: impl Fn(&T) -> ShardId,
        ) -> BTreeMap<ShardId, (Vec<T>, Vec<usize>)> {
            let mut by: BTreeMap<ShardId, (Vec<T>, Vec<usize>)> = BTreeMap::new();
            for (i, item) in items.into_iter().enumerate() {
                let e = by.entry(shard_of(&item)).or_default();
                e.0.push(item);
                e.1.push(i);
            }
            by
        }
        match request {
            Request::Put(ref p) => Plan::One(shard(&p.key), request),
            Request::Get { ref key, .. } | Request::History { ref key, .. } => {
                Plan::One(shard(key), request)
            }
            Request::Truncate {
                target: KeyRange::Key(ref k),
                ..
            } => Plan::One(shard(k), request),
            Request::Delete { keys } => {
                let n = keys.len();
                let parts = split(keys, |k| shard(k))
                    .into_iter()
                    .map(|(s, (keys, pos))| (s, Request::Delete { keys }, pos))
                    .collect();
                Plan::Split(parts, n)
            }
            Request::MGet {
                keys,
                at,
                consistency,
            } => {
                let n = keys.len();
                let parts = split(keys, |k| shard(k))
                    .into_iter()
                    .map(|(s, (keys, pos))| {
                        (
                            s,
                            Request::MGet {
                                keys,
                                at,
                                consistency,
                            },
                            pos,
                        )
                    })
                    .collect();
                Plan::Split(parts, n)
            }
            Request::Exists { keys, consistency } => {
                let n = keys.len();
                let parts = split(keys, |k| shard(k))
                    .into_iter()
                    .map(|(s, (keys, pos))| (s, Request::Exists { keys, consistency }, pos))
                    .collect();
                Plan::Split(parts, n)
            }
            Request::MSet { items } => {
                let n = items.len();
                let parts = split(items, |(k, _)| shard(k))
                    .into_iter()
                    .map(|(s, (items, pos))| (s, Request::MSet { items }, pos))
                    .collect();
                Plan::Split(parts, n)
            }
            _ if layout.shards.len() == 1 => Plan::One(layout.shards[0].id, request),
            _ => Plan::All,
        }
    }

    /// Validates and starts a request. A read's answer comes as [`Response::Observed`] (take
    /// it apart with [`Response::unobserved`]). A write this node proposes is proposed before this
    /// returns, so requests submitted one after another apply in that order (a forwarded
    /// write is awaited here for the same reason); a read is executed at once.
    pub async fn submit(&self, request: Request) -> Pending {
        let (after, request) = request.split_after();
        let Request::Snapshot { of, at } = request else {
            return self.submit_one(request, after).await;
        };
        // One time for every shard: the reads of each shard wait until it has closed it
        // (never before a causality token the client brought).
        let at = at.unwrap_or_else(|| self.closed_now(&of).max(after.unwrap_or(CommitTs::ZERO)));
        let read = self.submit_one(of.read_at(at), None).await;
        Box::pin(async move {
            // The read was at `at`: that is all it observed.
            read.await.map(|read| Response::Snapshot {
                at,
                read: Box::new(read.unobserved().0),
            })
        })
    }

    /// The newest time that every shard `of` involves has closed, as far as this node knows:
    /// a replica held here has closed through its newest applied stamp; for a shard held
    /// elsewhere it is now (its leader closes it within the close interval).
    fn closed_now(&self, of: &SnapshotOf) -> CommitTs {
        let layout = self.layout();
        let shards: BTreeSet<ShardId> = match of {
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
                self.replica(s)
                    .map_or(now, |r| r.store().last_commit_ts().min(now))
            })
            .min()
            .unwrap_or(now)
    }

    /// Plans a request (never a snapshot) over the shards and starts each part, each part
    /// carrying the causality token `after`, if any.
    async fn submit_one(&self, request: Request, after: Option<CommitTs>) -> Pending {
        let name = request.name();
        let started = Instant::now();
        metrics::counter!("firn_requests_total", "op" => name).increment(1);
        let layout = match self
            .validate(&request)
            .and_then(|()| self.routable_layout())
        {
            Ok(l) => l,
            Err(e) => {
                metrics::counter!("firn_request_errors_total", "op" => name).increment(1);
                return ready(Err(e));
            }
        };
        // Keyspace definitions are decided in the meta group, then applied by every shard
        // (the steward finishes a fan-out that fails part-way).
        let definition = match &request {
            Request::KeyspaceCreate(spec) => Some((spec.clone(), false)),
            Request::KeyspaceDrop { prefix } => Some((
                KeyspaceSpec {
                    prefix: prefix.clone(),
                    ..KeyspaceSpec::default_keyspace()
                },
                true,
            )),
            _ => None,
        };
        if let Some((spec, drop)) = definition
            && let Err(e) = self.on_meta_leader(NodeRpc::Keyspace { spec, drop }).await
        {
            metrics::counter!("firn_request_errors_total", "op" => name).increment(1);
            return ready(Err(e));
        }
        let outcome = match Self::plan(&layout, request.clone()) {
            Plan::One(shard, request) => self.on_shard(shard, request.after(after), 0).await,
            Plan::Split(parts, n) => {
                let mut pendings = Vec::with_capacity(parts.len());
                for (shard, part, positions) in parts {
                    pendings.push((self.on_shard(shard, part.after(after), 0).await, positions));
                }
                Box::pin(merge_split(request, pendings, n))
            }
            Plan::All => {
                let mut pendings = Vec::new();
                for shard in layout.shard_ids() {
                    pendings.push(self.on_shard(shard, request.clone().after(after), 0).await);
                }
                Box::pin(merge_all(request, pendings))
            }
        };
        Box::pin(async move {
            let result = outcome.await;
            metrics::histogram!("firn_request_seconds", "op" => name)
                .record(started.elapsed().as_secs_f64());
            if result.is_err() {
                metrics::counter!("firn_request_errors_total", "op" => name).increment(1);
            }
            result
        })
    }

    /// Runs a request outside any session: the answer as a client sees it.
    pub async fn execute(&self, request: Request) -> Result<Response, FirnError> {
        Ok(self.submit(request).await.await?.unobserved().0)
    }

    /// Runs a request in a session: after the session's causality token, which then rises
    /// to everything the answer showed (for a read, the newest version it looked at,
    /// tombstones included).
    pub async fn execute_in_session(
        &self,
        request: Request,
        token: &mut Option<CommitTs>,
    ) -> Result<Response, FirnError> {
        Ok(self
            .submit(request.after(*token))
            .await
            .await?
            .seen_by(token))
    }

    /// Runs a request on one shard (the steward's repairs and checks).
    pub(crate) async fn execute_on(
        &self,
        shard: ShardId,
        request: Request,
    ) -> Result<Response, FirnError> {
        Ok(self.on_shard(shard, request, 0).await.await?.unobserved().0)
    }

    /// Executes reads that arrived together. Where they all fall in one shard held here,
    /// one barrier serves them all (each began before the barrier did).
    pub async fn execute_reads(&self, requests: Vec<Request>) -> Vec<Result<Response, FirnError>> {
        let layout = self.layout();
        let single_local = match layout.shards.as_slice() {
            [only] => self.replica(only.id),
            _ => None,
        };
        let snapshot = requests
            .iter()
            .any(|r| matches!(r.peeled(), Request::Snapshot { .. }));
        let (Some(replica), false) = (single_local, snapshot) else {
            let mut out = Vec::with_capacity(requests.len());
            for r in requests {
                out.push(self.submit(r).await.await);
            }
            return out;
        };
        let started = Instant::now();
        // What each read waits for on this replica (its client's token, its time), then one
        // barrier, decided by the strongest level the others asked for.
        let (afters, requests): (Vec<Option<CommitTs>>, Vec<Request>) =
            requests.into_iter().map(Request::split_after).unzip();
        let mut local = Vec::with_capacity(requests.len());
        for (after, r) in afters.into_iter().zip(&requests) {
            local.push(wait_local(&replica, after, r).await);
        }
        let consistencies: Vec<ReadConsistency> = requests
            .iter()
            .filter(|r| r.as_of().is_none())
            .map(|r| r.consistency())
            .collect();
        let barrier = if consistencies.contains(&ReadConsistency::Linearizable) {
            self.barrier(replica.shard_id(), false).await
        } else if consistencies.contains(&ReadConsistency::Lease) {
            self.barrier(replica.shard_id(), true).await
        } else {
            Ok(())
        };
        requests
            .into_iter()
            .zip(local)
            .map(|(request, local)| {
                let name = request.name();
                metrics::counter!("firn_requests_total", "op" => name).increment(1);
                let at_a_time = request.as_of().is_some();
                let result = match (&barrier, request.consistency(), local) {
                    (_, _, Err(e)) => Err(e),
                    (Err(e), ReadConsistency::Linearizable | ReadConsistency::Lease, _)
                        if !at_a_time =>
                    {
                        Err(e.clone())
                    }
                    _ => self
                        .validate(&request)
                        .and_then(|()| read_unfenced(&replica, request)),
                };
                metrics::histogram!("firn_request_seconds", "op" => name)
                    .record(started.elapsed().as_secs_f64());
                if result.is_err() {
                    metrics::counter!("firn_request_errors_total", "op" => name).increment(1);
                }
                result
            })
            .collect()
    }

    /// The leader of `shard`, as this node knows it.
    pub(crate) async fn leader_of(&self, shard: ShardId) -> Result<NodeId, FirnError> {
        match self.replica(shard) {
            Some(replica) => match replica.leader() {
                Some(l) => Ok(l),
                None => replica.wait_for_leader(LEADER_WAIT).await,
            },
            // Not held here: its first replica is the likeliest leader; it forwards if not.
            None => self
                .layout()
                .shards
                .iter()
                .find(|s| s.id == shard)
                .and_then(|s| s.replicas.first().copied())
                .ok_or_else(|| FirnError::Unavailable(format!("shard {shard} is unknown here"))),
        }
    }

    /// Runs a single-shard request where it can be served. The outer future finishes once
    /// the request is started (a write proposed in order); the `Pending` it yields finishes
    /// with the answer. That split is what lets a connection pipeline writes.
    #[allow(clippy::async_yields_async)]
    fn on_shard<'a>(
        &'a self,
        shard: ShardId,
        request: Request,
        hops: u8,
    ) -> Pin<Box<dyn Future<Output = Pending> + Send + 'a>> {
        Box::pin(async move {
            let local = self.replica(shard);
            if request.is_write() {
                let leader = match self.leader_of(shard).await {
                    Ok(l) => l,
                    Err(e) => return ready(Err(e)),
                };
                if let (Some(replica), true) = (&local, leader == self.node_id) {
                    // A write after a token is stamped above it.
                    let (after, request) = request.split_after();
                    if let Some(t) = after {
                        replica.observe(t);
                    }
                    let op = Op::from_request(request).expect("a write has a log operation");
                    return match replica.propose(op).await {
                        Ok(p) => p,
                        Err(e) => ready(Err(e)),
                    };
                }
                return ready(self.forward(leader, shard, request, hops).await);
            }
            match local {
                Some(replica) => {
                    let (after, request) = request.split_after();
                    if let Err(e) = wait_local(&replica, after, &request).await {
                        return ready(Err(e));
                    }
                    // A read at a time needs no barrier: its time is closed here.
                    if request.as_of().is_none()
                        && let Err(e) = self.barrier_for(shard, request.consistency()).await
                    {
                        return ready(Err(e));
                    }
                    ready(read_unfenced(&replica, request))
                }
                None => {
                    let target = match self.leader_of(shard).await {
                        Ok(l) => l,
                        Err(e) => return ready(Err(e)),
                    };
                    ready(self.forward(target, shard, request, hops).await)
                }
            }
        })
    }

    async fn forward(
        &self,
        target: NodeId,
        shard: ShardId,
        request: Request,
        hops: u8,
    ) -> Result<Response, FirnError> {
        if hops >= FORWARD_HOPS_MAX || target == self.node_id {
            return Err(FirnError::TryAgain(format!(
                "shard {shard} is changing leader; retry"
            )));
        }
        metrics::counter!("firn_forwarded_total", "to" => target.to_string()).increment(1);
        match self
            .call(
                target,
                NodeRpc::Execute {
                    shard,
                    request,
                    hops: hops + 1,
                },
            )
            .await?
        {
            NodeRpcReply::Executed(r) => r,
            other => Err(FirnError::Internal(format!(
                "node {target} answered {other:?}"
            ))),
        }
    }

    /// Asks node `target` (this node answers itself directly).
    pub(crate) async fn call(
        &self,
        target: NodeId,
        rpc: NodeRpc,
    ) -> Result<NodeRpcReply, FirnError> {
        if target == self.node_id {
            return Ok(Box::pin(self.handle_rpc(rpc)).await);
        }
        let payload = postcard::to_stdvec(&rpc).map_err(|e| FirnError::Internal(e.to_string()))?;
        match self
            .factory
            .pool
            .call(target, PeerRequest::App(payload), PEER_CALL_TIMEOUT)
            .await
        {
            Ok(PeerResponse::App(bytes)) => postcard::from_bytes(&bytes)
                .map_err(|e| FirnError::Internal(format!("node {target} answered garbage: {e}"))),
            Ok(other) => Err(FirnError::Internal(format!(
                "node {target} answered {other:?}"
            ))),
            // Never sent: nothing happened.
            Err(e @ PeerError::Unreachable(..)) => Err(FirnError::TryAgain(format!("{e}"))),
            // Sent, but no answer: a write may have been applied.
            Err(e) => Err(FirnError::Indeterminate(format!(
                "{e}; the request may or may not have been applied"
            ))),
        }
    }

    async fn barrier_for(
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
    async fn barrier(&self, shard: ShardId, lease: bool) -> Result<(), FirnError> {
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
        let replica = self
            .replica(shard)
            .ok_or_else(|| FirnError::TryAgain(format!("no replica of shard {shard} here")))?;
        let leader = self.leader_of(shard).await?;
        if leader == self.node_id {
            return replica.linearizable_barrier(lease).await;
        }
        // A read changes nothing: an unanswered call only means this replica cannot serve now.
        let index = match self
            .call(leader, NodeRpc::ReadIndex { shard, lease })
            .await
            .map_err(|e| match e {
                FirnError::Indeterminate(m) => {
                    FirnError::Unavailable(format!("cannot reach the leader of shard {shard}: {m}"))
                }
                other => other,
            })? {
            NodeRpcReply::ReadIndex(r) => r?,
            other => {
                return Err(FirnError::Internal(format!(
                    "node {leader} answered {other:?}"
                )));
            }
        };
        replica.wait_applied(index, CATCH_UP_WAIT).await
    }

    /// This node's own view of itself.
    pub fn describe(&self) -> NodeView {
        NodeView {
            node_id: self.node_id,
            resp_addr: self.client_addrs.0.clone(),
            http_addr: self.client_addrs.1.clone(),
            up: true,
            meta: self.meta.replica().status().state,
            replicas: self
                .status()
                .into_iter()
                .map(|s| ReplicaView {
                    shard_id: s.shard_id,
                    state: s.state,
                    leader: s.leader,
                    term: s.term,
                    last_applied_index: s.last_applied_index,
                })
                .collect(),
        }
    }

    /// The whole cluster: every node asked for its own view (briefly; a node that does not
    /// answer is shown down), and each shard's leader and replica lag from those views.
    pub async fn cluster_view(&self) -> ClusterView {
        let layout = self.layout();
        let mut nodes = Vec::new();
        for (&id, _) in layout.nodes.iter() {
            let view = if id == self.node_id {
                Some(self.describe())
            } else {
                let payload = postcard::to_stdvec(&NodeRpc::Describe).unwrap_or_default();
                match self
                    .factory
                    .pool
                    .call(id, PeerRequest::App(payload), DESCRIBE_TIMEOUT)
                    .await
                {
                    Ok(PeerResponse::App(b)) => match postcard::from_bytes::<NodeRpcReply>(&b) {
                        Ok(NodeRpcReply::Described(v)) => Some(v),
                        _ => None,
                    },
                    _ => None,
                }
            };
            nodes.push(view.unwrap_or(NodeView {
                node_id: id,
                resp_addr: String::new(),
                http_addr: String::new(),
                up: false,
                meta: String::new(),
                replicas: Vec::new(),
            }));
        }
        let shards = layout
            .shards
            .iter()
            .map(|s| {
                let reports: Vec<(NodeId, &ReplicaView)> = nodes
                    .iter()
                    .flat_map(|n| {
                        n.replicas
                            .iter()
                            .filter(|r| r.shard_id == s.id)
                            .map(move |r| (n.node_id, r))
                    })
                    .collect();
                // The leader as reported by a replica of the newest term.
                let leader = reports
                    .iter()
                    .filter(|(_, r)| r.leader.is_some())
                    .max_by_key(|(_, r)| r.term)
                    .and_then(|(_, r)| r.leader);
                let newest = reports
                    .iter()
                    .filter_map(|(_, r)| r.last_applied_index)
                    .max()
                    .unwrap_or(0);
                let replica_lag = reports
                    .iter()
                    .map(|(id, r)| (*id, newest - r.last_applied_index.unwrap_or(0)))
                    .collect();
                ShardView {
                    shard_id: s.id,
                    slots: (s.slots.start, s.slots.end - 1),
                    replicas: s.replicas.clone(),
                    leader,
                    replica_lag,
                    moving: s.moving,
                }
            })
            .collect();
        ClusterView {
            nodes,
            leaving: layout.leaving.iter().copied().collect(),
            shards,
        }
    }

    /// Answers a peer's request.
    pub async fn handle_rpc(&self, rpc: NodeRpc) -> NodeRpcReply {
        match rpc {
            NodeRpc::Execute {
                shard,
                request,
                hops,
            } => NodeRpcReply::Executed(self.on_shard(shard, request, hops).await.await),
            NodeRpc::Describe => NodeRpcReply::Described(self.describe()),
            NodeRpc::ReadIndex { shard, lease } => {
                NodeRpcReply::ReadIndex(match self.replica(shard) {
                    Some(r) => r.read_index(lease).await,
                    None => Err(FirnError::TryAgain(format!(
                        "no replica of shard {shard} on node {}",
                        self.node_id
                    ))),
                })
            }
            NodeRpc::Join { .. } | NodeRpc::Remove { .. } | NodeRpc::Keyspace { .. } => {
                NodeRpcReply::Done(self.on_meta_leader(rpc).await)
            }
            NodeRpc::SetReplicas { shard, voters } => {
                NodeRpcReply::Done(self.set_replicas(shard, voters).await)
            }
            NodeRpc::WatchPoll {
                shard,
                target,
                from,
            } => NodeRpcReply::Events(self.watch_poll(shard, target, from).await),
            NodeRpc::TransferLeader { shard, to } => {
                NodeRpcReply::Done(match self.replica(shard) {
                    Some(r) if r.leader() == Some(self.node_id) => r.transfer_leader(to).await,
                    _ => Err(FirnError::TryAgain(format!(
                        "node {} does not lead shard {shard}",
                        self.node_id
                    ))),
                })
            }
        }
    }

    /// Runs a membership request on the meta leader: here if this node leads the meta
    /// group, else there (one hop).
    async fn on_meta_leader(&self, rpc: NodeRpc) -> Result<(), FirnError> {
        let leader = self.meta.leader().ok_or_else(|| {
            FirnError::Unavailable(
                "the meta group has no leader (no quorum, or not joined yet)".into(),
            )
        })?;
        if leader != self.node_id {
            return match self.call(leader, rpc).await? {
                NodeRpcReply::Done(r) => r,
                other => Err(FirnError::Internal(format!(
                    "node {leader} answered {other:?}"
                ))),
            };
        }
        match rpc {
            NodeRpc::Join { node, addr } => {
                tracing::info!(node, %addr, "node joins");
                self.meta.join(node, addr).await
            }
            NodeRpc::Remove { node } => {
                tracing::info!(node, "node removal starts");
                self.meta.remove(node).await
            }
            NodeRpc::Keyspace { spec, drop } => self.meta.define_keyspace(spec, drop).await,
            other => Err(FirnError::Internal(format!(
                "{other:?} is not a meta request"
            ))),
        }
    }

    /// Starts removing `node` from the cluster (its replicas move first).
    pub async fn remove_node(&self, node: NodeId) -> Result<(), FirnError> {
        self.on_meta_leader(NodeRpc::Remove { node }).await
    }

    /// As the leader of `shard`: makes `voters` its voters, new ones caught up first.
    async fn set_replicas(
        &self,
        shard: ShardId,
        voters: BTreeMap<NodeId, String>,
    ) -> Result<(), FirnError> {
        let replica = self.replica(shard).ok_or_else(|| {
            FirnError::TryAgain(format!(
                "no replica of shard {shard} on node {}",
                self.node_id
            ))
        })?;
        if replica.leader() != Some(self.node_id) {
            return Err(FirnError::TryAgain(format!(
                "node {} does not lead shard {shard} (leader: {:?})",
                self.node_id,
                replica.leader()
            )));
        }
        let (current, _) = replica.members();
        for (id, addr) in voters.iter().filter(|(id, _)| !current.contains(id)) {
            replica.add_learner(*id, addr, true).await?;
        }
        replica
            .set_voters(voters.into_keys().collect(), false)
            .await
    }

    /// Starts a watch: replay from the requested start, then every new version, in commit
    /// order per key. Shards held here are followed directly; any other is followed through
    /// a node that holds it (a long-poll feed that moves to the new leader on failover).
    pub async fn watch(&self, request: WatchRequest) -> Result<WatchStream, FirnError> {
        metrics::counter!("firn_requests_total", "op" => "watch").increment(1);
        if let KeyRange::Prefix(p) = &request.target {
            check_prefix(p)?;
        }
        let layout = self.routable_layout()?;
        let shards: Vec<ShardId> = match &request.target {
            KeyRange::Key(k) => vec![layout.shard_of_key(k.as_bytes())],
            KeyRange::Prefix(_) => layout.shard_ids().collect(),
        };
        let (held, remote): (Vec<ShardId>, Vec<ShardId>) =
            shards.into_iter().partition(|s| self.replica(*s).is_some());
        let replicas: Vec<Arc<ShardReplica>> =
            held.iter().filter_map(|s| self.replica(*s)).collect();
        // Subscribe before replaying, so nothing committed in between is missed.
        let mut live: Vec<_> = replicas.iter().map(|r| r.store().subscribe()).collect();
        let mut replay = Vec::new();
        for (s, r) in held.iter().zip(&replicas) {
            self.barrier(*s, false).await?;
            replay.extend(r.store().replay(&request.target, request.from)?);
        }
        for shard in remote {
            live.push(self.remote_feed(shard, &request).await?);
        }
        replay.sort_by(|a, b| {
            a.info
                .commit_ts
                .cmp(&b.info.commit_ts)
                .then(a.key.cmp(&b.key))
        });
        Ok(WatchStream::new(request, replay, live))
    }

    /// Follows `shard` (held elsewhere) for a watch: a task long-polls the shard's leader
    /// and passes what it gets on, until the watch is dropped. The first poll runs here, so
    /// a bad start (a truncated version) fails the watch at once.
    async fn remote_feed(
        &self,
        shard: ShardId,
        request: &WatchRequest,
    ) -> Result<tokio::sync::broadcast::Receiver<firn_model::WatchEvent>, FirnError> {
        let router = self
            .me
            .get()
            .and_then(|w| w.upgrade())
            .ok_or_else(|| FirnError::Unavailable("node is starting".into()))?;
        let (tx, rx) = tokio::sync::broadcast::channel(firn_model::limits::WATCH_BUFFER_EVENTS);
        let target = request.target.clone();
        let (events, mut cursor) = self.poll_shard(shard, &target, request.from).await?;
        for e in events {
            let _ = tx.send(e);
        }
        tokio::spawn(async move {
            loop {
                if tx.receiver_count() == 0 {
                    return; // the watch ended
                }
                let from = WatchFrom::Time(cursor.successor());
                match router.poll_shard(shard, &target, from).await {
                    Ok((events, c)) => {
                        cursor = cursor.max(c);
                        for e in events {
                            if tx.send(e).is_err() {
                                return;
                            }
                        }
                    }
                    Err(e) => {
                        tracing::debug!(shard, "remote watch feed: {e}; retrying");
                        tokio::time::sleep(LEADER_CHANGE_PAUSE * 4).await;
                    }
                }
            }
        });
        Ok(rx)
    }

    /// One long poll of `shard`'s leader for a remote watch.
    async fn poll_shard(
        &self,
        shard: ShardId,
        target: &KeyRange,
        from: WatchFrom,
    ) -> Result<(Vec<firn_model::WatchEvent>, firn_model::CommitTs), FirnError> {
        let leader = self.leader_of(shard).await?;
        let rpc = NodeRpc::WatchPoll {
            shard,
            target: target.clone(),
            from,
        };
        match self.call(leader, rpc).await? {
            NodeRpcReply::Events(r) => r,
            other => Err(FirnError::Internal(format!(
                "node {leader} answered {other:?}"
            ))),
        }
    }

    /// Answers a remote watch's poll from this node's replica: the versions from `from` on,
    /// or — when there are none — whatever arrives within `WATCH_POLL_WAIT`.
    async fn watch_poll(
        &self,
        shard: ShardId,
        target: KeyRange,
        from: WatchFrom,
    ) -> Result<(Vec<firn_model::WatchEvent>, firn_model::CommitTs), FirnError> {
        let replica = self.replica(shard).ok_or_else(|| {
            FirnError::TryAgain(format!(
                "no replica of shard {shard} on node {}",
                self.node_id
            ))
        })?;
        let store = replica.store();
        if from == WatchFrom::Now {
            // The start: everything committed from here on.
            return Ok((Vec::new(), store.last_commit_ts()));
        }
        let mut sub = store.subscribe();
        let mut waited = false;
        loop {
            let cursor = store.last_commit_ts();
            let mut events = store.replay(&target, from)?;
            if !events.is_empty() || waited {
                events.sort_by_key(|e| e.info.commit_ts);
                return Ok((events, cursor));
            }
            let _ = tokio::time::timeout(WATCH_POLL_WAIT, async {
                loop {
                    match sub.recv().await {
                        Ok(e) if !target.contains(e.key.as_bytes()) => continue,
                        _ => return,
                    }
                }
            })
            .await;
            waited = true;
        }
    }

    /// Proposes age-based retention on the shards this node leads, if a keyspace has a max
    /// age.
    pub async fn expire_by_age(&self) -> Result<(), FirnError> {
        for replica in self.replicas() {
            if replica.leader() == Some(self.node_id)
                && replica
                    .store()
                    .keyspaces()
                    .iter()
                    .any(|k| k.max_age_us.is_some())
            {
                replica.write(Op::ExpireByAge).await?;
            }
        }
        Ok(())
    }

    pub async fn shutdown(&self) {
        for r in self.replicas() {
            r.shutdown().await;
        }
        self.meta.replica().shutdown().await;
    }
}

/// A prefix is at most as long as a key: no longer one could match anything.
fn check_prefix(prefix: &[u8]) -> Result<(), FirnError> {
    if prefix.len() > KEY_BYTES_MAX {
        return Err(FirnError::BadArgument(format!(
            "prefix is {} bytes; the limit is {KEY_BYTES_MAX}",
            prefix.len()
        )));
    }
    Ok(())
}

/// What a read waits for on the replica itself, before any barrier: a local read, until the
/// replica has closed its client's causality token (it then holds everything the client saw;
/// a linearizable read sees that and more anyway); a read at a time, until the replica has
/// closed that time (then every replica answers it alike, and no leader is asked).
async fn wait_local(
    replica: &ShardReplica,
    after: Option<CommitTs>,
    request: &Request,
) -> Result<(), FirnError> {
    if let Some(t) = after
        && request.consistency() == ReadConsistency::Local
    {
        wait_closed(replica, t).await?;
    }
    match request.as_of() {
        Some(t) => wait_closed(replica, t).await,
        None => Ok(()),
    }
}

/// Waits until `replica` has closed time `t` (at most `CLOSED_WAIT`); refuses a `t` further
/// ahead of this node's clock than that.
async fn wait_closed(replica: &ShardReplica, t: CommitTs) -> Result<(), FirnError> {
    let now = firn_model::hlc::system_wall_us();
    let ahead = t.wall_us.saturating_sub(now);
    if ahead > CLOSED_WAIT.as_micros() as u64 {
        return Err(FirnError::BadArgument(format!(
            "time {t} is {} ms in the future; a read at a time waits at most {} ms for it",
            ahead / 1_000,
            CLOSED_WAIT.as_millis()
        )));
    }
    replica.store().wait_closed(t, CLOSED_WAIT).await
}

/// A read against a replica's applied state, without a barrier. Its answer is observed
/// through the newest version it looked at, tombstones included: a reader that found a key
/// deleted has seen the delete, though the answer shows no version of it.
fn read_unfenced(replica: &ShardReplica, request: Request) -> Result<Response, FirnError> {
    let (answer, seen) = read_replica(replica, request)?;
    Ok(observed_through(answer, seen))
}

fn read_replica(
    replica: &ShardReplica,
    request: Request,
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
    match request {
        Request::Get { key, at, .. } => {
            let (value, stamp) = seen(&key, at)?;
            Ok((Response::Value(value), stamp))
        }
        Request::MGet { keys, at, .. } => {
            let (mut values, mut through) = (Vec::with_capacity(keys.len()), None);
            for k in &keys {
                let (value, stamp) = seen(k, at)?;
                values.push(value);
                through = through.max(stamp);
            }
            Ok((Response::Values(values), through))
        }
        Request::Exists { keys, .. } => {
            let (mut n, mut through) = (0, None);
            for k in &keys {
                if let Some(meta) = store.meta(k.as_bytes())? {
                    n += meta.is_live() as u64;
                    through = through.max((meta.latest > 0).then_some(meta.latest_ts));
                }
            }
            Ok((Response::Count(n), through))
        }
        Request::History {
            key,
            from,
            to,
            limit,
            as_of,
            ..
        } => Ok((
            Response::History(store.history(key.as_bytes(), from, to, limit, as_of)?),
            None,
        )),
        Request::Scan {
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
        Request::KeyspaceList => Ok((Response::Keyspaces(store.keyspaces()), None)),
        Request::DbSize => Ok((Response::Count(store.live_keys()), None)),
        write => Err(FirnError::Internal(format!(
            "{} is a write, not a read",
            write.name()
        ))),
    }
}

/// Puts per-shard answers of a split request back in the order of its keys.
async fn merge_split(
    request: Request,
    parts: Vec<(Pending, Vec<usize>)>,
    n: usize,
) -> Result<Response, FirnError> {
    let mut values = vec![None; n];
    let mut written: Vec<Option<Written>> = vec![None; n];
    let mut count = 0u64;
    let mut through = None;
    for (pending, positions) in parts {
        let (answer, seen) = pending.await?.unobserved();
        through = through.max(seen);
        match answer {
            Response::Values(vs) => {
                for (v, i) in vs.into_iter().zip(positions) {
                    values[i] = v;
                }
            }
            Response::Written(ws) => {
                for (w, i) in ws.into_iter().zip(positions) {
                    written[i] = Some(w);
                }
            }
            Response::Count(c) => count += c,
            other => {
                return Err(FirnError::Internal(format!(
                    "unexpected part answer {other:?}"
                )));
            }
        }
    }
    let merged = match request {
        Request::MGet { .. } => Response::Values(values),
        Request::Exists { .. } => Response::Count(count),
        _ => Response::Written(written.into_iter().flatten().collect()),
    };
    Ok(observed_through(merged, through))
}

/// `response`, observed through `through` if the parts said.
fn observed_through(response: Response, through: Option<CommitTs>) -> Response {
    match through {
        Some(t) => response.observed(t),
        None => response,
    }
}

/// Combines the answers of a request every shard ran.
async fn merge_all(request: Request, parts: Vec<Pending>) -> Result<Response, FirnError> {
    let mut answers = Vec::with_capacity(parts.len());
    let mut through = None;
    for p in parts {
        let (answer, seen) = p.await?.unobserved();
        through = through.max(seen);
        answers.push(answer);
    }
    merge_answers(request, answers).map(|merged| observed_through(merged, through))
}

fn merge_answers(request: Request, answers: Vec<Response>) -> Result<Response, FirnError> {
    match request {
        Request::Scan { .. } => {
            // Each shard returned a page after the same cursor. Keys up to the smallest
            // cursor a shard stopped at are complete; later ones are returned next time.
            let mut keys = Vec::new();
            let mut stop: Option<Bytes> = None;
            for a in answers {
                if let Response::Scan {
                    keys: k,
                    next_cursor,
                } = a
                {
                    keys.extend(k);
                    if let Some(c) = next_cursor {
                        stop = Some(stop.map_or(c.clone(), |s| s.min(c)));
                    }
                }
            }
            keys.sort_by(|a, b| a.0.cmp(&b.0));
            if let Some(s) = &stop {
                keys.retain(|(k, _)| k.as_bytes() <= &s[..]);
            }
            Ok(Response::Scan {
                keys,
                next_cursor: stop,
            })
        }
        Request::DbSize => Ok(Response::Count(
            answers
                .iter()
                .map(|a| if let Response::Count(c) = a { *c } else { 0 })
                .sum(),
        )),
        Request::Truncate { .. } => Ok(Response::Truncated {
            versions_removed: answers
                .iter()
                .map(|a| {
                    if let Response::Truncated { versions_removed } = a {
                        *versions_removed
                    } else {
                        0
                    }
                })
                .sum(),
        }),
        // Keyspace definitions are kept by every shard; any one answers the list.
        _ => answers
            .into_iter()
            .next()
            .ok_or_else(|| FirnError::Internal("no shards".into())),
    }
}

/// Peer requests for this node's router.
pub struct RouterRpc(pub std::sync::OnceLock<Arc<Router>>);

impl AppHandler for RouterRpc {
    fn handle(&self, payload: Vec<u8>) -> Pin<Box<dyn Future<Output = Vec<u8>> + Send>> {
        let router = self.0.get().cloned();
        Box::pin(async move {
            let reply = match (router, postcard::from_bytes::<NodeRpc>(&payload)) {
                (Some(router), Ok(rpc)) => router.handle_rpc(rpc).await,
                (None, Ok(NodeRpc::Describe)) => {
                    NodeRpcReply::Done(Err(FirnError::TryAgain("node is starting".into())))
                }
                (
                    None,
                    Ok(
                        NodeRpc::Join { .. }
                        | NodeRpc::Remove { .. }
                        | NodeRpc::Keyspace { .. }
                        | NodeRpc::SetReplicas { .. }
                        | NodeRpc::TransferLeader { .. },
                    ),
                ) => NodeRpcReply::Done(Err(FirnError::TryAgain("node is starting".into()))),
                (None, Ok(NodeRpc::WatchPoll { .. })) => {
                    NodeRpcReply::Events(Err(FirnError::TryAgain("node is starting".into())))
                }
                (None, Ok(NodeRpc::ReadIndex { .. })) => {
                    NodeRpcReply::ReadIndex(Err(FirnError::TryAgain("node is starting".into())))
                }
                (None, Ok(_)) => {
                    NodeRpcReply::Executed(Err(FirnError::TryAgain("node is starting".into())))
                }
                (_, Err(e)) => NodeRpcReply::Executed(Err(FirnError::Internal(format!(
                    "undecodable peer request: {e}"
                )))),
            };
            postcard::to_stdvec(&reply).unwrap_or_default()
        })
    }
}
