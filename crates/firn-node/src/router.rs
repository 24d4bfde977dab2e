//! The router: the one place that knows every subsystem. It builds the execution kernel
//! ([`crate::exec`]) and the subsystems on top of it — the shared log, consumer groups,
//! services, pub/sub, watches, large values and admin — and sends each request to the
//! subsystem it belongs to. The front ends reach a subsystem through its accessor here; a
//! peer's call reaches it through `inbound`. Nothing else lives here: a subsystem plans and
//! runs its own requests on the kernel.

use std::sync::{Arc, Weak};
use std::time::Instant;

use bytes::Bytes;
use firn_model::{
    Answer, CallContext, CommitTs, FirnError, Key, KvRead, KvRequest, KvWrite, ReadAt,
    ReadConsistency, Request, Response, TxnStep, VersionInfo,
};
use firn_raft::ShardReplica;
use futures::future::BoxFuture;

use crate::admin::Admin;
use crate::blob::files::BlobFiles;
use crate::blob::{BlobConfig, Blobs};
use crate::cluster::layout::ClusterLayout;
use crate::cursors::ScanCursors;
use crate::exec::{Kernel, KernelParts, Pending, Subsystems, ready, resend_while_refused};
use crate::functions::Functions;
use crate::groups::Groups;
use crate::large::LargeValues;
use crate::log::Log;
use crate::log::index::Forget;
use crate::pubsub::Publisher;
use crate::rpc::ShardPart;
use crate::services::Services;
use crate::twin::Twins;
use crate::watch::Watches;

pub struct Router {
    kernel: Arc<Kernel>,
    log: Arc<Log>,
    groups: Arc<Groups>,
    services: Services,
    publisher: Publisher,
    watches: Watches,
    large: LargeValues,
    admin: Admin,
    functions: Arc<Functions>,
    twins: Twins,
    cursors: ScanCursors,
}

/// What a router is built from: the kernel's parts and the subsystems' own.
pub struct RouterParts {
    pub kernel: KernelParts,
    /// The local log index's bound (0: off).
    pub log_index_bytes: usize,
    pub blobs: BlobConfig,
    /// The node's blob files (shared with the replicas' repair sinks).
    pub blob_files: Arc<BlobFiles>,
}

impl Router {
    /// The kernel and every subsystem on it; the kernel reaches back through [`Subsystems`].
    pub fn new(parts: RouterParts) -> Arc<Self> {
        let k = &parts.kernel;
        let blobs = Arc::new(Blobs::new(
            parts.blobs,
            parts.blob_files,
            k.peers.clone(),
            k.layout.clone(),
            (k.replicas.node_id(), k.replicas.clone()),
            k.disk.clone(),
        ));
        let kernel = Arc::new(Kernel::new(parts.kernel));
        let log = Arc::new(Log::new(kernel.clone(), parts.log_index_bytes));
        let groups = Arc::new(Groups::new(kernel.clone(), log.clone()));
        let publisher = Publisher::new(kernel.clone());
        let functions = Functions::new(kernel.clone(), blobs.clone(), publisher.clone())
            .expect("the function sandbox starts");
        Arc::new_cyclic(|me: &Weak<Router>| {
            let subsystems: Weak<dyn Subsystems> = me.clone();
            kernel.set_subsystems(subsystems);
            Router {
                services: Services::new(kernel.clone(), log.clone()),
                publisher,
                functions,
                watches: Watches::new(kernel.clone()),
                large: LargeValues::new(kernel.clone(), blobs),
                admin: Admin::new(kernel.clone()),
                cursors: ScanCursors::new(kernel.clone()),
                twins: Twins::new(kernel.clone()),
                kernel,
                log,
                groups,
            }
        })
    }

    /// The execution kernel: the replicas, the layout, and the running of parts on shards.
    pub fn kernel(&self) -> &Arc<Kernel> {
        &self.kernel
    }

    /// The shared log (and its local index).
    pub fn log(&self) -> &Log {
        &self.log
    }

    /// Request/response services.
    pub fn services(&self) -> &Services {
        &self.services
    }

    /// Publish/subscribe.
    pub fn publisher(&self) -> &Publisher {
        &self.publisher
    }

    /// Watches of a key or a prefix.
    pub fn watches(&self) -> &Watches {
        &self.watches
    }

    /// Large values beside the log.
    pub fn large(&self) -> &LargeValues {
        &self.large
    }

    /// Redis SCAN cursors, valid on every node.
    pub fn cursors(&self) -> &ScanCursors {
        &self.cursors
    }

    /// Functions next to the data: modules, calls, triggers and timers.
    pub fn functions(&self) -> &Arc<Functions> {
        &self.functions
    }

    /// Starts a request after `ctx` in the subsystem it belongs to. A write this node
    /// proposes is proposed before this returns, so requests submitted one after another
    /// apply in that order (a forwarded write is awaited here for the same reason); a read
    /// is executed at once.
    pub async fn submit(&self, ctx: &CallContext, request: Request) -> Pending {
        match request {
            // A value above the inline limit goes beside the log; the upload is over (and
            // the manifest proposed) before this returns, keeping a connection's order.
            Request::Kv(KvRequest::Write(KvWrite::Put(put)))
                if put.value.len() > self.kernel.limits().value_bytes_max =>
            {
                ready(self.large.put_whole(ctx, put).await)
            }
            Request::Kv(KvRequest::Write(KvWrite::FlushAll)) => self.flush_all(ctx).await,
            Request::Kv(kv) => self.kernel.submit_kv(ctx, kv).await,
            Request::Log(log) => self.log.submit(ctx, log).await,
            Request::Admin(admin) => ready(self.admin.run(admin).await),
            Request::Group(group) => self.groups.submit(ctx, group).await,
            Request::Function(f) => ready(self.functions.run(ctx, f).await),
            Request::Twin(t) => ready(self.twins.run(ctx, t).await),
        }
    }

    /// FLUSHALL drops every log too: once it is over, every node's log index forgets them
    /// (whatever its outcome: a FLUSHALL that failed on some shards applied on others).
    async fn flush_all(&self, ctx: &CallContext) -> Pending {
        let flush = KvRequest::Write(KvWrite::FlushAll);
        if self.kernel.validate(&flush).is_err() {
            return self.kernel.submit_kv(ctx, flush).await;
        }
        let forgetting = self.log.forget_everywhere(Forget::Everything);
        let outcome = self.kernel.submit_kv(ctx, flush).await;
        Box::pin(async move {
            let result = outcome.await;
            forgetting.await;
            result
        })
    }

    /// Runs a request after `ctx` to its answer; a write refused for now is sent again
    /// (`again_while_refused`: nothing else of the caller's was submitted after it).
    pub async fn execute(&self, ctx: &CallContext, request: Request) -> Result<Answer, FirnError> {
        let since = Instant::now();
        let again = request.resent_when_refused().then(|| request.clone());
        let result = self.submit(ctx, request).await.await;
        match again {
            Some(write) => self.again_while_refused(ctx, write, since, result).await,
            None => result,
        }
    }

    /// The newest version of each live key under `prefix`, at most `max_keys` of them, read
    /// page by page at `consistency`: Firn's own reads of its bookkeeping prefixes (MQTT
    /// sessions, a hub's site cursors, a site's downlink keys), on no client's behalf.
    pub async fn latest_under(
        &self,
        prefix: Bytes,
        max_keys: usize,
        consistency: ReadConsistency,
    ) -> Result<Vec<(Key, VersionInfo)>, FirnError> {
        const PAGE: usize = 1_000;
        let mut all = Vec::new();
        let mut cursor = None;
        while all.len() < max_keys {
            let scan = KvRead::Scan {
                prefix: prefix.clone(),
                cursor,
                limit: PAGE.min(max_keys - all.len()),
                pattern: None,
                at: ReadAt::Latest,
                consistency,
            };
            let answer = self.execute(&CallContext::default(), scan.into()).await?;
            let Response::Scan { keys, next_cursor } = answer.response else {
                break;
            };
            all.extend(keys);
            match next_cursor {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        Ok(all)
    }

    /// A write answered `TRYAGAIN` (nothing applied: say a leader here stepped down before it
    /// appended the write) is submitted again every `LEADER_CHANGE_PAUSE` until
    /// `LEADER_WAIT` after `since`, when it was first submitted. Only for a caller that
    /// submitted nothing after the write: a second try would overtake a later write. A write
    /// spanning shards is `TRYAGAIN` only when no part of it applied (`merge::write_parts`).
    pub async fn again_while_refused(
        &self,
        ctx: &CallContext,
        write: Request,
        since: Instant,
        result: Result<Answer, FirnError>,
    ) -> Result<Answer, FirnError> {
        resend_while_refused(
            since,
            result,
            || true,
            || async { self.submit(ctx, write.clone()).await.await },
        )
        .await
    }

    pub async fn shutdown(&self) {
        self.kernel.shutdown().await;
    }
}

impl Subsystems for Router {
    fn serve_here<'a>(
        &'a self,
        replica: &'a Arc<ShardReplica>,
        part: ShardPart,
        ctx: &'a CallContext,
    ) -> Result<BoxFuture<'a, Result<Answer, FirnError>>, Box<ShardPart>> {
        match part {
            ShardPart::LogRead(read) => self.log.page_here(replica, read, ctx),
            ShardPart::LogTags(read) => Ok(Box::pin(self.log.tags_here(replica, read))),
            ShardPart::GroupRead(read) => Ok(Box::pin(self.groups.read_here(replica, read))),
            part => Err(Box::new(part)),
        }
    }

    fn execute<'a>(
        &'a self,
        ctx: &'a CallContext,
        request: Request,
    ) -> BoxFuture<'a, Result<Answer, FirnError>> {
        Box::pin(Router::execute(self, ctx, request))
    }

    fn note_transaction_appends<'a>(
        &'a self,
        layout: &'a ClusterLayout,
        steps: Vec<&'a TxnStep>,
    ) -> BoxFuture<'a, Result<Option<CommitTs>, FirnError>> {
        Box::pin(self.log.note_transaction_appends(layout, steps))
    }
}
