//! The one place a request is executed, whichever front end parsed it.
//!
//! The router validates a [`Request`] against the stated limits, sends writes through the
//! shard's Raft group and serves reads from the replica at the asked consistency. With one
//! shard per node today, every key routes to shard 0; the cluster work adds slot → shard
//! lookup and forwarding here, and nowhere else.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use firn_model::limits::{KEYS_PER_REQUEST_MAX, PAGE_ITEMS_MAX};
use firn_model::{FirnError, Limits, ReadConsistency, Request, Response, WatchRequest};
use firn_raft::{ShardReplica, ShardStatus};
use firn_store::Op;

use crate::watch::WatchStream;

/// A request's outcome, possibly still in flight (a proposed write).
pub type Pending = Pin<Box<dyn Future<Output = Result<Response, FirnError>> + Send>>;

pub struct Router {
    shard: Arc<ShardReplica>,
    limits: Limits,
    allow_flushall: bool,
}

fn ready(result: Result<Response, FirnError>) -> Pending {
    Box::pin(std::future::ready(result))
}

impl Router {
    pub fn new(shard: Arc<ShardReplica>, limits: Limits, allow_flushall: bool) -> Self {
        Router {
            shard,
            limits,
            allow_flushall,
        }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    pub fn status(&self) -> Vec<ShardStatus> {
        vec![self.shard.status()]
    }

    /// Number of live keys on this node.
    pub fn live_keys(&self) -> u64 {
        self.shard.store().live_keys()
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
            Request::History { limit, .. } | Request::Scan { limit, .. } => page(*limit),
            Request::KeyspaceCreate(spec) => spec.validate(),
            Request::FlushAll if !self.allow_flushall => Err(FirnError::Refused(
                "FLUSHALL is disabled on this node; start it with --allow-flushall to enable it"
                    .into(),
            )),
            _ => Ok(()),
        }
    }

    /// Validates and starts a request. A write is proposed before this returns, so requests
    /// submitted one after another are applied in that order; a read is executed at once.
    pub async fn submit(&self, request: Request) -> Pending {
        let name = request.name();
        let started = Instant::now();
        metrics::counter!("firn_requests_total", "op" => name).increment(1);
        if let Err(e) = self.validate(&request) {
            metrics::counter!("firn_request_errors_total", "op" => name).increment(1);
            return ready(Err(e));
        }
        let outcome: Pending = match Op::from_request(request.clone()) {
            Some(op) => match self.shard.propose(op).await {
                Ok(pending) => pending,
                Err(e) => ready(Err(e)),
            },
            None => ready(self.read(request).await),
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

    pub async fn execute(&self, request: Request) -> Result<Response, FirnError> {
        self.submit(request).await.await
    }

    async fn barrier(&self, consistency: ReadConsistency) -> Result<(), FirnError> {
        match consistency {
            ReadConsistency::Linearizable => self.shard.linearizable_barrier().await,
            ReadConsistency::Local => Ok(()),
        }
    }

    async fn read(&self, request: Request) -> Result<Response, FirnError> {
        self.barrier(request.consistency()).await?;
        self.read_unfenced(request)
    }

    /// Executes reads that arrived together: one read-index barrier serves every
    /// linearizable one (each began before the barrier did, so each sees every write
    /// acknowledged before it began). Answers in request order.
    pub async fn execute_reads(&self, requests: Vec<Request>) -> Vec<Result<Response, FirnError>> {
        let started = Instant::now();
        let needs_barrier = requests
            .iter()
            .any(|r| r.consistency() == ReadConsistency::Linearizable);
        let barrier = if needs_barrier {
            self.barrier(ReadConsistency::Linearizable).await
        } else {
            Ok(())
        };
        requests
            .into_iter()
            .map(|request| {
                let name = request.name();
                metrics::counter!("firn_requests_total", "op" => name).increment(1);
                let result = match (&barrier, request.consistency()) {
                    (Err(e), ReadConsistency::Linearizable) => Err(e.clone()),
                    _ => self
                        .validate(&request)
                        .and_then(|()| self.read_unfenced(request)),
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

    /// A read against this replica's applied state, without a barrier.
    fn read_unfenced(&self, request: Request) -> Result<Response, FirnError> {
        let store = self.shard.store();
        match request {
            Request::Get { key, at, .. } => {
                Ok(Response::Value(store.get_live(key.as_bytes(), at)?))
            }
            Request::MGet { keys, at, .. } => {
                let values = keys
                    .iter()
                    .map(|k| store.get_live(k.as_bytes(), at))
                    .collect::<Result<_, _>>()?;
                Ok(Response::Values(values))
            }
            Request::Exists { keys, .. } => {
                let mut n = 0;
                for k in &keys {
                    n += store.meta(k.as_bytes())?.is_some_and(|m| m.is_live()) as u64;
                }
                Ok(Response::Count(n))
            }
            Request::History {
                key,
                from,
                to,
                limit,
                ..
            } => Ok(Response::History(store.history(
                key.as_bytes(),
                from,
                to,
                limit,
            )?)),
            Request::Scan {
                prefix,
                cursor,
                limit,
                pattern,
                at,
                ..
            } => {
                let (keys, next_cursor) =
                    store.scan(&prefix, cursor.as_deref(), limit, pattern.as_deref(), at)?;
                Ok(Response::Scan { keys, next_cursor })
            }
            Request::KeyspaceList => Ok(Response::Keyspaces(store.keyspaces())),
            Request::DbSize => Ok(Response::Count(store.live_keys())),
            write => Err(FirnError::Internal(format!(
                "{} is a write, not a read",
                write.name()
            ))),
        }
    }

    /// Starts a watch: replay from the requested start, then every new version, in commit
    /// order.
    pub async fn watch(&self, request: WatchRequest) -> Result<WatchStream, FirnError> {
        metrics::counter!("firn_requests_total", "op" => "watch").increment(1);
        // Subscribe before replaying, so nothing committed in between is missed.
        let live = self.shard.store().subscribe();
        self.shard.linearizable_barrier().await?;
        let replay = self.shard.store().replay(&request.target, request.from)?;
        Ok(WatchStream::new(request, replay, live))
    }

    /// Proposes age-based retention if any keyspace has a max age.
    pub async fn expire_by_age(&self) -> Result<(), FirnError> {
        if self
            .shard
            .store()
            .keyspaces()
            .iter()
            .any(|k| k.max_age_us.is_some())
        {
            self.shard.write(Op::ExpireByAge).await?;
        }
        Ok(())
    }

    pub async fn shutdown(&self) {
        self.shard.shutdown().await;
    }
}
