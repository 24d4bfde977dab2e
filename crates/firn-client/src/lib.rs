//! A Rust client for Firn. It speaks the Redis protocol (Firn's `FIRN.*` commands) through
//! the `redis` crate, and turns answers back into Firn's typed versions; the tagged shared
//! log is reached over HTTP ([`LogClient`]), and so are consumer groups ([`GroupClient`]).
//! Functions next to the data — modules, `FCALL` and triggers — are in [`functions`].
//!
//! Leases, and what is built on them as in etcd's `concurrency` package: a [`Lease`] kept
//! alive by a task of its own, a [`Lock`] whose fencing token grows with every holder, and
//! an [`Election`]. A lock held by a process that dies is taken over once its lease's TTL
//! has run out:
//!
//! ```no_run
//! # async fn demo(client: &firn_client::Client) -> firn_client::Result<()> {
//! use std::time::Duration;
//! use firn_client::Lock;
//! let lock = Lock::acquire(client, b"locks/report", Duration::from_secs(10)).await?;
//! // Pass the token along with every write to what the lock guards: a store that keeps the
//! // greatest token it has seen refuses a holder that lost the lock without knowing it.
//! println!("holding with fencing token {}", lock.token());
//! lock.release().await?;
//! # Ok(()) }
//! ```

pub mod backup_file;
mod election;
pub mod functions;
mod group;
mod lease;
mod local;
mod lock;
mod log;
mod once;
mod tls;
pub mod txn;
mod watch;

pub use election::{Election, Leader, Leadership};
pub use group::{
    ConsumerSummary, GroupClient, GroupCreate, GroupEvents, GroupReadOptions, GroupSummary,
    PendingEntry, PendingQuery, PendingSummary, StreamEntry,
};
pub use lease::{LEASE_TTL_MAX, LEASE_TTL_MIN, Lease, LeaseLoss};
pub use local::{LocalClient, LocalGet, ReadBound, open_region};
pub use lock::Lock;
pub use log::{LogClient, LogReadOptions, LogTagInfo};
pub use tls::{TlsCa, tls_connection};
pub use watch::{WatchEvent, Watcher};

use bytes::Bytes;
pub use firn_model::LeaseId;
use firn_model::{
    CommitTs, Durability, Follow, KeyspaceDef, KeyspaceSpec, LocalRegionInfo, LogSeq, ReadAt,
    ReadConsistency, SnapshotOf, Version, VersionInfo,
};
use redis::Value;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server refused the request; `code` is the RESP error code (ERR, CONFLICT, …).
    #[error("{code}: {message}")]
    Server { code: String, message: String },
    #[error("connection: {0}")]
    Connection(String),
    #[error("unexpected answer: {0}")]
    Protocol(String),
    /// A log read below its tag's trim point: read from `first_kept` on.
    #[error("TRIMMED: records below {first_kept} were trimmed; the first kept seq is {first_kept}")]
    Trimmed { first_kept: LogSeq },
    /// The request cannot be sent as given (nothing was sent).
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The node does not know the lease: it expired, was revoked, or was never granted
    /// (its keys are gone). Grant a new one.
    #[error("lease {lease} not found: it expired, was revoked, or was never granted")]
    LeaseNotFound { lease: LeaseId },
}

impl ClientError {
    /// The server refused for now and applied nothing (`TRYAGAIN`: a leader change, a busy
    /// peer; `CLUSTERDOWN`: no leader or quorum for the moment): the same request may be sent
    /// again. `UNCERTAIN` (a write that may or may not be applied) is not transient.
    pub fn is_transient(&self) -> bool {
        matches!(self, ClientError::Server { code, .. } if code == "TRYAGAIN" || code == "CLUSTERDOWN")
    }
}

/// Longest [`retry_transient`] keeps sending a request: longer than an election takes.
pub const TRANSIENT_RETRY_FOR: std::time::Duration = std::time::Duration::from_secs(20);

/// Runs `op` again, 50 ms apart, while it fails with a transient error (`TRYAGAIN`,
/// `CLUSTERDOWN`: nothing was applied), for at most [`TRANSIENT_RETRY_FOR`] — what a client
/// does across a leader change or a moment without a quorum. Any other outcome is returned
/// as it is.
pub async fn retry_transient<T, F, Fut>(mut op: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let deadline = tokio::time::Instant::now() + TRANSIENT_RETRY_FOR;
    loop {
        match op().await {
            Err(e) if e.is_transient() && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            r => return r,
        }
    }
}

impl From<redis::RedisError> for ClientError {
    fn from(e: redis::RedisError) -> Self {
        match (e.code(), e.detail()) {
            (Some(code), detail) => ClientError::Server {
                code: code.to_string(),
                message: detail.unwrap_or_default().to_string(),
            },
            _ => ClientError::Connection(e.to_string()),
        }
    }
}

pub type Result<T> = std::result::Result<T, ClientError>;

/// How long the client waits for an answer before reporting a connection error.
pub const RESPONSE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// What a write answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteAck {
    pub version: Version,
    pub commit_ts: CommitTs,
}

#[derive(Clone, Debug, Default)]
pub struct PutOptions {
    /// Only if the key's version is this (0: absent, never written or deleted), else a
    /// `CONFLICT` error and nothing written.
    pub if_version: Option<Version>,
    pub event_time_us: Option<u64>,
}

#[derive(Clone)]
pub struct Client {
    /// How to reach the node again (a watch takes a connection of its own).
    client: redis::Client,
    conn: redis::aio::MultiplexedConnection,
    /// The address dialled and the TLS it took, for a watch's own connection.
    addr: String,
    tls: Option<TlsCa>,
    /// Whose idempotency keys this client's writes carry (see `once.rs`).
    producer: std::sync::Arc<once::Producer>,
    /// How long a write is sent again with its key while it may be.
    resend_for: std::time::Duration,
}

fn protocol(what: impl std::fmt::Debug) -> ClientError {
    ClientError::Protocol(format!("{what:?}"))
}

/// An answer read off a raw connection: an error reply becomes [`ClientError::Server`].
fn server_answer(v: Value) -> Result<Value> {
    match v {
        Value::ServerError(e) => Err(ClientError::Server {
            code: e.code().to_string(),
            message: e.details().unwrap_or_default().to_string(),
        }),
        v => Ok(v),
    }
}

fn as_u64(v: &Value) -> Result<u64> {
    match v {
        Value::Int(i) => u64::try_from(*i).map_err(|_| protocol(v)),
        _ => Err(protocol(v)),
    }
}

fn as_bytes(v: &Value) -> Option<Bytes> {
    match v {
        Value::BulkString(b) => Some(Bytes::copy_from_slice(b)),
        Value::SimpleString(s) => Some(Bytes::copy_from_slice(s.as_bytes())),
        _ => None,
    }
}

fn as_text(v: &Value) -> Result<String> {
    as_bytes(v)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .ok_or_else(|| protocol(v))
}

/// Key/value pairs of a map reply (RESP3 map, or RESP2 flat array).
fn pairs(v: &Value) -> Result<Vec<(String, Value)>> {
    match v {
        Value::Map(m) => m
            .iter()
            .map(|(k, v)| Ok((as_text(k)?, v.clone())))
            .collect(),
        Value::Array(items) if items.len() % 2 == 0 => items
            .chunks(2)
            .map(|kv| Ok((as_text(&kv[0])?, kv[1].clone())))
            .collect(),
        _ => Err(protocol(v)),
    }
}

fn version_info(v: &Value) -> Result<VersionInfo> {
    let mut info = VersionInfo {
        version: 0,
        commit_ts: CommitTs::ZERO,
        event_time_us: None,
        deleted: false,
        value: None,
        blob: None,
        kind: firn_model::KeyKind::String,
    };
    for (k, v) in pairs(v)? {
        match k.as_str() {
            "version" => info.version = as_u64(&v)?,
            "commit_ts" => info.commit_ts = as_text(&v)?.parse().map_err(protocol)?,
            "event_time" => {
                info.event_time_us = if v == Value::Nil {
                    None
                } else {
                    Some(as_u64(&v)?)
                }
            }
            "deleted" => info.deleted = as_u64(&v)? == 1,
            "value" => info.value = as_bytes(&v),
            "type" if as_bytes(&v).as_deref() == Some(b"stream") => {
                info.kind = firn_model::KeyKind::Stream
            }
            _ => {}
        }
    }
    Ok(info)
}

fn write_ack(v: &Value) -> Result<WriteAck> {
    match v {
        Value::Array(items) if items.len() == 2 => Ok(WriteAck {
            version: as_u64(&items[0])?,
            commit_ts: as_text(&items[1])?.parse().map_err(protocol)?,
        }),
        _ => Err(protocol(v)),
    }
}

fn read_args(cmd: &mut redis::Cmd, at: ReadAt, consistency: ReadConsistency) {
    match at {
        ReadAt::Latest => {}
        ReadAt::Version(v) => {
            cmd.arg("VERSION").arg(v);
        }
        ReadAt::AsOf(t) => {
            cmd.arg("ASOF").arg(t.to_string());
        }
        ReadAt::EventTime(t) => {
            cmd.arg("EVENTTIME").arg(t);
        }
        ReadAt::EventTimeAsOf { event_us, as_of } => {
            cmd.arg("EVENTTIME").arg(event_us);
            cmd.arg("ASOF").arg(as_of.to_string());
        }
        ReadAt::EventTimeComplete(t) => {
            cmd.arg("EVENTTIME").arg(t).arg("COMPLETE");
        }
    }
    match consistency {
        ReadConsistency::Linearizable => {}
        ReadConsistency::Lease => {
            cmd.arg("CONSISTENCY").arg("lease");
        }
        ReadConsistency::Local => {
            cmd.arg("CONSISTENCY").arg("local");
        }
    }
}

impl Client {
    /// Connects to a node's RESP address, e.g. `127.0.0.1:7379` (on a node with users,
    /// `user:password@127.0.0.1:7379`).
    pub async fn connect(addr: &str) -> Result<Self> {
        Self::connect_with(addr, None).await
    }

    /// Connects over TLS when `tls` gives the CA that signs the node's certificate.
    pub async fn connect_with(addr: &str, tls: Option<&TlsCa>) -> Result<Self> {
        let client = match tls {
            None => redis::Client::open(format!("redis://{addr}/")),
            Some(ca) => redis::Client::build_with_tls(
                format!("rediss://{addr}/"),
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(ca.pem().to_vec()),
                },
            ),
        }
        .map_err(|e| ClientError::Connection(e.to_string()))?;
        // A write waits for a quorum's fsync and may wait out a leader change (the server
        // answers within ~20 s at worst); the redis crate's default 500 ms would give up first.
        let config =
            redis::AsyncConnectionConfig::new().set_response_timeout(Some(RESPONSE_TIMEOUT));
        let conn = match tls {
            None => client
                .get_multiplexed_async_connection_with_config(&config)
                .await
                .map_err(|e| ClientError::Connection(e.to_string()))?,
            Some(ca) => tls::tls_connection(addr, ca, config).await?,
        };
        Ok(Client {
            client,
            conn,
            addr: addr.to_string(),
            tls: tls.cloned(),
            producer: std::sync::Arc::new(once::Producer::random()),
            resend_for: TRANSIENT_RETRY_FOR,
        })
    }

    async fn run(&self, cmd: &redis::Cmd) -> Result<Value> {
        let mut conn = self.conn.clone();
        Ok(cmd.query_async(&mut conn).await?)
    }

    pub async fn put(&self, key: &[u8], value: &[u8], opts: PutOptions) -> Result<WriteAck> {
        self.put_under(key, value, &opts, None).await
    }

    /// A put, attached to `lease` if given.
    pub(crate) async fn put_under(
        &self,
        key: &[u8],
        value: &[u8],
        opts: &PutOptions,
        lease: Option<LeaseId>,
    ) -> Result<WriteAck> {
        let mut cmd = self.write_cmd("FIRN.PUT");
        cmd.arg(key).arg(value);
        if let Some(v) = opts.if_version {
            cmd.arg("IFVERSION").arg(v);
        }
        if let Some(t) = opts.event_time_us {
            cmd.arg("EVENTTIME").arg(t);
        }
        if let Some(id) = lease {
            cmd.arg("LEASE").arg(id);
        }
        match self.run_write(&cmd).await {
            Ok(v) => write_ack(&v),
            Err(e) => Err(match lease {
                Some(id) => e.about_lease(id),
                None => e,
            }),
        }
    }

    pub async fn get(
        &self,
        key: &[u8],
        at: ReadAt,
        consistency: ReadConsistency,
    ) -> Result<Option<VersionInfo>> {
        let mut cmd = redis::cmd("FIRN.GET");
        cmd.arg(key);
        read_args(&mut cmd, at, consistency);
        match self.run(&cmd).await? {
            Value::Nil => Ok(None),
            v => version_info(&v).map(Some),
        }
    }

    /// Several keys; with `ReadAt::AsOf`, each as of that time.
    pub async fn mget(&self, keys: &[&[u8]], at: ReadAt) -> Result<Vec<Option<VersionInfo>>> {
        let mut cmd = redis::cmd("FIRN.MGET");
        read_args(&mut cmd, at, ReadConsistency::Linearizable);
        for k in keys {
            cmd.arg(*k);
        }
        match self.run(&cmd).await? {
            Value::Array(items) => items
                .iter()
                .map(|v| {
                    if *v == Value::Nil {
                        Ok(None)
                    } else {
                        version_info(v).map(Some)
                    }
                })
                .collect(),
            v => Err(protocol(v)),
        }
    }

    /// The connection's causality token: the newest stamp it has been shown (by writes and
    /// reads) or given. The server keeps it per connection, so a session on one `Client`
    /// reads its own writes and never reads backwards, on any replica.
    pub async fn token(&self) -> Result<CommitTs> {
        as_text(&self.run(&redis::cmd("FIRN.TOKEN")).await?)?
            .parse()
            .map_err(protocol)
    }

    /// Carries a token from elsewhere (another `Client`, another process) into this
    /// session: later reads see at least what it covers, later writes are stamped above it.
    pub async fn after(&self, token: CommitTs) -> Result<()> {
        self.run(redis::cmd("FIRN.AFTER").arg(token.to_string()))
            .await
            .map(|_| ())
    }

    /// Keys or a prefix read as of one time across every shard (`at`, or the newest time
    /// every shard involved has closed): the time read at, and each key found with its
    /// version (keys: in the order asked, `None` where absent; a prefix: in key order).
    pub async fn snapshot(
        &self,
        of: &SnapshotOf,
        at: Option<CommitTs>,
    ) -> Result<(CommitTs, Vec<(Bytes, Option<VersionInfo>)>)> {
        let mut cmd = redis::cmd("FIRN.SNAPSHOT");
        if let Some(t) = at {
            cmd.arg("AT").arg(t.to_string());
        }
        match of {
            SnapshotOf::Keys(keys) => {
                cmd.arg("KEYS");
                for k in keys {
                    cmd.arg(k.as_bytes());
                }
            }
            SnapshotOf::Prefix {
                prefix,
                cursor,
                limit,
            } => {
                cmd.arg("PREFIX")
                    .arg(prefix.as_ref())
                    .arg("COUNT")
                    .arg(*limit);
                if let Some(c) = cursor {
                    cmd.arg("CURSOR").arg(c.as_ref());
                }
            }
        }
        let reply = self.run(&cmd).await?;
        let mut at = None;
        let mut items = Vec::new();
        for (field, v) in pairs(&reply)? {
            match (field.as_str(), v) {
                ("at", v) => at = Some(as_text(&v)?.parse().map_err(protocol)?),
                ("values", Value::Array(vs)) => {
                    let SnapshotOf::Keys(keys) = of else {
                        return Err(protocol(&reply));
                    };
                    for (k, v) in keys.iter().zip(vs) {
                        let found = if v == Value::Nil {
                            None
                        } else {
                            Some(version_info(&v)?)
                        };
                        items.push((k.bytes().clone(), found));
                    }
                }
                ("keys", Value::Array(vs)) => {
                    for v in vs {
                        let key = pairs(&v)?
                            .into_iter()
                            .find(|(f, _)| f == "key")
                            .and_then(|(_, k)| as_bytes(&k))
                            .ok_or_else(|| protocol(&v))?;
                        items.push((key, Some(version_info(&v)?)));
                    }
                }
                _ => {}
            }
        }
        Ok((at.ok_or_else(|| protocol(&reply))?, items))
    }

    /// Writes a tombstone; `None` if the key did not exist.
    pub async fn delete(&self, key: &[u8]) -> Result<Option<WriteAck>> {
        match self.run_write(self.write_cmd("FIRN.DEL").arg(key)).await? {
            Value::Nil => Ok(None),
            v => write_ack(&v).map(Some),
        }
    }

    /// Versions `from..=to` of a key, oldest first; with `as_of`, only those committed at
    /// or before that time.
    pub async fn history(
        &self,
        key: &[u8],
        from: Version,
        to: Option<Version>,
        limit: usize,
        as_of: Option<CommitTs>,
    ) -> Result<Vec<VersionInfo>> {
        let mut cmd = redis::cmd("FIRN.HISTORY");
        cmd.arg(key).arg("FROM").arg(from).arg("LIMIT").arg(limit);
        if let Some(to) = to {
            cmd.arg("TO").arg(to);
        }
        if let Some(t) = as_of {
            cmd.arg("ASOF").arg(t.to_string());
        }
        match self.run(&cmd).await? {
            Value::Array(items) => items.iter().map(version_info).collect(),
            v => Err(protocol(v)),
        }
    }

    /// One page of live keys under `prefix`; the cursor continues it (`None`: done).
    pub async fn scan(
        &self,
        prefix: &[u8],
        cursor: Option<&[u8]>,
        limit: usize,
        as_of: Option<CommitTs>,
    ) -> Result<(Vec<Bytes>, Option<Bytes>)> {
        let mut cmd = redis::cmd("FIRN.SCAN");
        cmd.arg(prefix).arg("COUNT").arg(limit);
        if let Some(c) = cursor {
            cmd.arg("CURSOR").arg(c);
        }
        if let Some(t) = as_of {
            cmd.arg("ASOF").arg(t.to_string());
        }
        match self.run(&cmd).await? {
            Value::Array(parts) if parts.len() == 2 => {
                let next = as_bytes(&parts[0]).filter(|c| !c.is_empty());
                let Value::Array(keys) = &parts[1] else {
                    return Err(protocol(&parts[1]));
                };
                Ok((keys.iter().filter_map(as_bytes).collect(), next))
            }
            v => Err(protocol(v)),
        }
    }

    /// Defines a keyspace (or replaces its definition): its rules and its placement.
    pub async fn keyspace_create(&self, def: &KeyspaceDef) -> Result<()> {
        let KeyspaceDef { spec, placement } = def;
        let mut cmd = redis::cmd("FIRN.KEYSPACE");
        cmd.arg("CREATE")
            .arg(&spec.prefix)
            .arg("MODE")
            .arg(spec.mode.to_string());
        if let Some(n) = spec.max_versions {
            cmd.arg("MAXVERSIONS").arg(n);
        }
        if let Some(us) = spec.max_age_us {
            cmd.arg("MAXAGE").arg(format!("{}us", us));
        }
        if let Some(ms) = spec.ttl_ms {
            cmd.arg("TTL").arg(format!("{}ms", ms));
        }
        if spec.durability != Durability::Disk {
            cmd.arg("DURABILITY").arg(spec.durability.as_str());
        }
        if placement.local {
            cmd.arg("LOCAL").arg("on");
        }
        if placement.follow != Follow::Off {
            cmd.arg("FOLLOW").arg(placement.follow.to_string());
        }
        self.run(&cmd).await?;
        Ok(())
    }

    pub async fn keyspace_list(&self) -> Result<Vec<KeyspaceDef>> {
        let parsed = |v: &Value| -> Result<String> { as_text(v) };
        let bad = |e: firn_model::FirnError| ClientError::Protocol(e.to_string());
        match self.run(redis::cmd("FIRN.KEYSPACE").arg("LIST")).await? {
            Value::Array(items) => items
                .iter()
                .map(|item| {
                    let mut def = KeyspaceDef::new(KeyspaceSpec::default_keyspace());
                    for (k, v) in pairs(item)? {
                        match k.as_str() {
                            "prefix" => def.spec.prefix = parsed(&v)?,
                            "mode" => def.spec.mode = parsed(&v)?.parse().map_err(bad)?,
                            "max_versions" => def.spec.max_versions = as_u64(&v).ok(),
                            "max_age_us" => def.spec.max_age_us = as_u64(&v).ok(),
                            "ttl_ms" => def.spec.ttl_ms = as_u64(&v).ok(),
                            "durability" => {
                                def.spec.durability = parsed(&v)?.parse().map_err(bad)?
                            }
                            "local" => def.placement.local = parsed(&v)? == "on",
                            "follow" => def.placement.follow = parsed(&v)?.parse().map_err(bad)?,
                            _ => {}
                        }
                    }
                    Ok(def)
                })
                .collect(),
            v => Err(protocol(v)),
        }
    }

    /// Where the node's shared-memory region is (`FIRN.LOCAL`), for [`LocalClient`].
    pub async fn local_region(&self) -> Result<LocalRegionInfo> {
        let mut info = LocalRegionInfo::default();
        let item = self.run(&redis::cmd("FIRN.LOCAL")).await?;
        for (k, v) in pairs(&item)? {
            match k.as_str() {
                "path" => info.path = as_text(&v)?,
                "cluster_id" => info.cluster_id = as_text(&v)?,
                "node_id" => info.node_id = as_u64(&v)?,
                "incarnation" => info.incarnation = as_u64(&v)?,
                "entries" => info.entries = as_u64(&v)?,
                "key_bytes_max" => info.key_bytes_max = as_u64(&v)?,
                "value_bytes_max" => info.value_bytes_max = as_u64(&v)?,
                _ => {}
            }
        }
        Ok(info)
    }

    pub async fn keyspace_drop(&self, prefix: &str) -> Result<()> {
        self.run(redis::cmd("FIRN.KEYSPACE").arg("DROP").arg(prefix))
            .await?;
        Ok(())
    }

    /// Runs any command; for what the typed calls do not cover.
    pub async fn raw(&self, cmd: &redis::Cmd) -> Result<Value> {
        self.run(cmd).await
    }

    /// Sends `pipe`'s commands in one round trip, in order (the node applies a
    /// connection's writes in the order sent); their answers in that order, or the first
    /// error reply as an `Err` (the others may have been applied).
    pub async fn raw_pipeline(&self, pipe: &redis::Pipeline) -> Result<Vec<Value>> {
        let mut conn = self.conn.clone();
        let answers: Vec<Value> = pipe.query_async(&mut conn).await?;
        answers.into_iter().map(server_answer).collect()
    }
}
