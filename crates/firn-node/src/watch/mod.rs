//! Starting a watch: replay from the requested start, then every new version, in commit
//! order per key. Shards held here are followed directly; any other is followed through a
//! node that holds it (a long-poll feed that moves to the new leader on failover).

use std::sync::Arc;
use std::time::Duration;

use firn_model::{CommitTs, FirnError, KeyRange, WatchEvent, WatchFrom, WatchRequest};
use firn_raft::{ShardId, ShardReplica};

mod stream;

pub use stream::WatchStream;

use crate::exec::{Kernel, LEADER_CHANGE_PAUSE, check_prefix};
use crate::rpc::WatchPoll;

/// How long a remote watch's poll waits for a new version before answering empty.
const WATCH_POLL_WAIT: Duration = Duration::from_secs(1);

/// Watches of a key or a prefix: replay, then every new version.
#[derive(Clone)]
pub struct Watches {
    kernel: Arc<Kernel>,
}

impl Watches {
    pub fn new(kernel: Arc<Kernel>) -> Self {
        Watches { kernel }
    }

    pub async fn watch(&self, request: WatchRequest) -> Result<WatchStream, FirnError> {
        metrics::counter!("firn_requests_total", "op" => "watch").increment(1);
        if let KeyRange::Prefix(p) = &request.target {
            check_prefix(p)?;
        }
        let layout = self.kernel.routable_layout()?;
        let shards: Vec<ShardId> = match &request.target {
            KeyRange::Key(k) => vec![layout.shard_of_key(k.as_bytes())],
            KeyRange::Prefix(_) => layout.shard_ids().collect(),
        };
        let (held, remote): (Vec<Arc<ShardReplica>>, Vec<ShardId>) = {
            let mut held = Vec::new();
            let mut remote = Vec::new();
            for s in shards {
                match self.kernel.replicas().get(s) {
                    Some(r) => held.push(r),
                    None => remote.push(s),
                }
            }
            (held, remote)
        };
        // Subscribe before replaying, so nothing committed in between is missed.
        let mut live: Vec<_> = held.iter().map(|r| r.store().subscribe()).collect();
        let mut replay = Vec::new();
        for (feed, r) in held.iter().enumerate() {
            self.kernel.barrier(r.shard_id(), false).await?;
            // A replay may walk many versions: off the async workers.
            let (store, target, from) = (r.store().clone(), request.target.clone(), request.from);
            let events = tokio::task::spawn_blocking(move || store.replay(&target, from))
                .await
                .map_err(|e| FirnError::Internal(format!("a replay stopped: {e}")))??;
            replay.extend(events.into_iter().map(|e| (feed, e)));
        }
        for shard in remote {
            live.push(self.remote_feed(shard, &request).await?);
        }
        Ok(WatchStream::new(request, replay, live))
    }

    /// Follows `shard` (held elsewhere) for a watch: a task long-polls the shard's leader
    /// and passes what it gets on, until the watch is dropped. The first poll runs here, so
    /// a bad start (a truncated version) fails the watch at once.
    async fn remote_feed(
        &self,
        shard: ShardId,
        request: &WatchRequest,
    ) -> Result<tokio::sync::broadcast::Receiver<WatchEvent>, FirnError> {
        let (tx, rx) = tokio::sync::broadcast::channel(firn_model::limits::WATCH_BUFFER_EVENTS);
        let target = request.target.clone();
        let (events, mut cursor) = self.poll_shard(shard, &target, request.from).await?;
        for e in events {
            let _ = tx.send(e);
        }
        let watches = self.clone();
        tokio::spawn(async move {
            loop {
                if tx.receiver_count() == 0 {
                    return; // the watch ended
                }
                let from = WatchFrom::Time(cursor.successor());
                match watches.poll_shard(shard, &target, from).await {
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
    ) -> Result<(Vec<WatchEvent>, CommitTs), FirnError> {
        let leader = self.kernel.leader_of(shard).await?;
        let call = WatchPoll {
            shard,
            target: target.clone(),
            from,
        };
        if leader == self.kernel.node_id() {
            return self.watch_poll(call).await;
        }
        let polled = self.kernel.peers().call_read(leader, call).await;
        if polled.is_err() && self.kernel.replicas().get(shard).is_none() {
            // The replica polled is gone or cut off: the next poll goes to the leader the
            // shard's other replicas name (see `remote`).
            self.kernel.find_remote_leader(shard).await;
        }
        polled?
    }

    /// Answers a remote watch's poll from this node's replica: the versions from `from` on,
    /// or — when there are none — whatever arrives within `WATCH_POLL_WAIT`.
    pub(crate) async fn watch_poll(
        &self,
        call: WatchPoll,
    ) -> Result<(Vec<WatchEvent>, CommitTs), FirnError> {
        let WatchPoll {
            shard,
            target,
            from,
        } = call;
        let replica = self.kernel.replicas().require(shard)?;
        let store = replica.store();
        if from == WatchFrom::Now {
            // The start: everything committed from here on.
            return Ok((Vec::new(), store.last_commit_ts()));
        }
        let mut sub = store.subscribe();
        let mut waited = false;
        loop {
            let cursor = store.last_commit_ts();
            let mut events = {
                let (store, target) = (store.clone(), target.clone());
                tokio::task::spawn_blocking(move || store.replay(&target, from))
                    .await
                    .map_err(|e| FirnError::Internal(format!("a replay stopped: {e}")))??
            };
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
}
