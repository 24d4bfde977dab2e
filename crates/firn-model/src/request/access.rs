//! What a request touches, as permissions check it: each request names the keys (or key
//! prefixes) it reads, writes or administers. Both front ends ask this one place, so a
//! command and its endpoint can never be judged differently.
//!
//! A log's records, a stream's entries and its consumer groups are under the log's name (the
//! stream's key); a publish/subscribe channel is under its own name. Tags are not keys.

use bytes::Bytes;

use super::{
    AdminRequest, GroupRequest, GroupWrite, KeyRange, KvRead, KvRequest, KvWrite, LogRead,
    LogRequest, LogWrite, Request, SnapshotOf, WatchRequest,
};
use crate::Key;

/// The kinds of permission a user is given by key prefix. None implies another: a user who
/// may write a prefix reads it only if also given `read` there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Permission {
    /// Read values, versions, records, group state; watch; subscribe.
    Read,
    /// Write, delete and truncate keys; append and trim logs; change groups (XREADGROUP
    /// included, which moves a group's cursor); publish.
    Write,
    /// Define and drop keyspaces under the prefix; with the empty prefix: FLUSHALL, removing
    /// a node, the local-read region.
    Admin,
}

impl Permission {
    pub fn as_str(self) -> &'static str {
        match self {
            Permission::Read => "read",
            Permission::Write => "write",
            Permission::Admin => "admin",
        }
    }
}

/// One key, or every key under a prefix (the empty prefix: every key there is).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    Key(Bytes),
    Prefix(Bytes),
}

impl Scope {
    pub fn everything() -> Self {
        Scope::Prefix(Bytes::new())
    }

    /// Whether every key in this scope is under `prefix`.
    pub fn within(&self, prefix: &[u8]) -> bool {
        match self {
            Scope::Key(k) | Scope::Prefix(k) => k.starts_with(prefix),
        }
    }

    /// The scope as an error names it.
    pub fn describe(&self) -> String {
        match self {
            Scope::Key(k) => format!("the key '{}'", String::from_utf8_lossy(k)),
            Scope::Prefix(p) if p.is_empty() => "every key".into(),
            Scope::Prefix(p) => format!("the prefix '{}'", String::from_utf8_lossy(p)),
        }
    }
}

/// One permission a request needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Access {
    pub permission: Permission,
    pub scope: Scope,
}

impl Access {
    pub fn read(scope: Scope) -> Self {
        Access {
            permission: Permission::Read,
            scope,
        }
    }

    pub fn write(scope: Scope) -> Self {
        Access {
            permission: Permission::Write,
            scope,
        }
    }

    pub fn admin(scope: Scope) -> Self {
        Access {
            permission: Permission::Admin,
            scope,
        }
    }

    pub fn read_key(key: &Key) -> Self {
        Self::read(Scope::Key(key.bytes().clone()))
    }

    pub fn write_key(key: &Key) -> Self {
        Self::write(Scope::Key(key.bytes().clone()))
    }
}

/// The literal start of a glob pattern (before its first `*`, `?`, `[` or `\`): every key
/// the pattern matches is under it.
pub fn glob_prefix(pattern: &[u8]) -> Bytes {
    let end = pattern
        .iter()
        .position(|b| matches!(b, b'*' | b'?' | b'[' | b'\\'))
        .unwrap_or(pattern.len());
    Bytes::copy_from_slice(&pattern[..end])
}

impl Request {
    /// Every permission the request needs (none: any user may make it).
    pub fn access(&self) -> Vec<Access> {
        match self {
            Request::Kv(KvRequest::Read(r)) => kv_read(r),
            Request::Kv(KvRequest::Write(w)) => kv_write(w),
            Request::Log(LogRequest::Read(r)) => log_read(r),
            Request::Log(LogRequest::Write(w)) => vec![Access::write_key(log_write_key(w))],
            Request::Group(GroupRequest::Read(r)) => vec![Access::read_key(r.key())],
            Request::Group(GroupRequest::Write(w)) => group_write(w),
            Request::Admin(a) => admin(a),
            Request::Function(f) => function(f),
            Request::Twin(t) => t.access(),
        }
    }
}

impl WatchRequest {
    pub fn access(&self) -> Vec<Access> {
        vec![Access::read(range_scope(&self.target))]
    }
}

fn range_scope(range: &KeyRange) -> Scope {
    match range {
        KeyRange::Key(k) => Scope::Key(k.bytes().clone()),
        KeyRange::Prefix(p) => Scope::Prefix(p.clone()),
    }
}

fn kv_read(read: &KvRead) -> Vec<Access> {
    match read {
        KvRead::Get { .. }
        | KvRead::History { .. }
        | KvRead::MGet { .. }
        | KvRead::Exists { .. }
        | KvRead::Type { .. }
        | KvRead::Expiry { .. }
        | KvRead::Snapshot {
            of: SnapshotOf::Keys(_),
            ..
        } => read.keys().map(Access::read_key).collect(),
        KvRead::Scan {
            prefix, pattern, ..
        } => {
            // A pattern's literal start narrows the scan when it is longer than the prefix.
            let narrowed = pattern
                .as_ref()
                .map(|p| glob_prefix(p))
                .filter(|p| p.starts_with(prefix));
            vec![Access::read(Scope::Prefix(
                narrowed.unwrap_or_else(|| prefix.clone()),
            ))]
        }
        KvRead::Snapshot {
            of: SnapshotOf::Prefix { prefix, .. },
            ..
        } => vec![Access::read(Scope::Prefix(prefix.clone()))],
        KvRead::DbSize | KvRead::LeaseKeys { .. } => vec![Access::read(Scope::everything())],
        // A lease's number is its capability: whoever knows it may read, keep alive or end
        // it (as etcd's); the keys attached to it were each written with write access.
        KvRead::Lease { .. } => Vec::new(),
    }
}

fn kv_write(write: &KvWrite) -> Vec<Access> {
    match write {
        KvWrite::Put(_)
        | KvWrite::PutBlob { .. }
        | KvWrite::Delete { .. }
        | KvWrite::MSet { .. } => write.keys().map(Access::write_key).collect(),
        // It answers the value it read (INCR's new count, GETDEL's old value): read and write.
        KvWrite::Change { key, .. } | KvWrite::Expire { key, .. } => {
            vec![Access::read_key(key), Access::write_key(key)]
        }
        KvWrite::Lease(_) => Vec::new(),
        // What each step of either branch needs, and reading the compared keys.
        KvWrite::Atomic {
            compares,
            steps,
            otherwise,
        } => steps
            .iter()
            .chain(otherwise.iter().flatten())
            .flat_map(|step| match step {
                crate::TxnStep::Read(r) => kv_read(r),
                crate::TxnStep::Write(w) => kv_write(w),
                crate::TxnStep::Log(w) => vec![Access::write_key(log_write_key(w))],
                crate::TxnStep::Records { log, .. } => vec![Access::write_key(log)],
            })
            .chain(
                compares
                    .iter()
                    .filter(|c| !matches!(c.target, crate::CompareTarget::Lease(_)))
                    .map(|c| Access::read_key(&c.key)),
            )
            .collect(),
        KvWrite::Truncate { target, .. } => vec![Access::write(range_scope(target))],
        KvWrite::FlushAll => vec![Access::admin(Scope::everything())],
    }
}

fn log_read(read: &LogRead) -> Vec<Access> {
    match read {
        LogRead::Query(q) => vec![Access::read_key(&q.log)],
        LogRead::Streams { after, .. } => after.iter().map(|(k, _)| Access::read_key(k)).collect(),
        LogRead::Info { log, .. } => vec![Access::read_key(log)],
        // It names every log there is.
        LogRead::Tags { .. } => vec![Access::read(Scope::everything())],
    }
}

fn log_write_key(write: &LogWrite) -> &Key {
    match write {
        LogWrite::Append { log, .. } | LogWrite::Trim { log, .. } => log,
        LogWrite::StreamAdd { key, .. }
        | LogWrite::StreamTrim { key, .. }
        | LogWrite::StreamDel { key, .. } => key,
    }
}

fn group_write(write: &GroupWrite) -> Vec<Access> {
    match write {
        GroupWrite::Change { key, .. } => vec![Access::write_key(key)],
        // XREADGROUP reads entries and moves the group: both, as Redis asks.
        GroupWrite::ReadGroup { streams, .. } => streams
            .iter()
            .flat_map(|(k, _)| [Access::read_key(k), Access::write_key(k)])
            .collect(),
    }
}

fn admin(request: &AdminRequest) -> Vec<Access> {
    match request {
        AdminRequest::KeyspaceCreate(def) => vec![Access::admin(Scope::Prefix(Bytes::from(
            def.spec.prefix.clone(),
        )))],
        AdminRequest::KeyspaceDrop { prefix } => {
            vec![Access::admin(Scope::Prefix(Bytes::from(prefix.clone())))]
        }
        AdminRequest::KeyspaceList => Vec::new(),
        // The region holds the newest values of every LOCAL keyspace, readable by whoever can
        // open the file: naming it takes reading everything.
        AdminRequest::LocalRegion => vec![Access::read(Scope::everything())],
        // A watermark is read by whoever reads the keyspace, advanced by whoever writes
        // it; its policy is the keyspace's definition, an administrator's.
        AdminRequest::Watermark(w) => {
            let scope = Scope::Prefix(Bytes::from(w.prefix().to_owned()));
            vec![match w {
                crate::WatermarkRequest::Get { .. } => Access::read(scope),
                crate::WatermarkRequest::Advance { .. } => Access::write(scope),
                crate::WatermarkRequest::Policy { .. } => Access::admin(scope),
            }]
        }
    }
}

/// Loading, deleting and arranging functions, triggers and timers is an administrator's;
/// listing them is a reader's of `_firn/`; `FCALL` writes the keys it names.
fn function(request: &super::FunctionRequest) -> Vec<Access> {
    use super::FunctionRequest as F;
    let own = |what: &str| Scope::Prefix(Bytes::from(format!("_firn/{what}/")));
    match request {
        F::As { request, .. } => function(request),
        F::Call { keys, .. } => keys.iter().map(Access::write_key).collect(),
        F::List | F::Info { .. } => vec![Access::read(own("fn"))],
        F::Trigger(super::TriggerRequest::List | super::TriggerRequest::Info(_)) => {
            vec![Access::read(own("trigger"))]
        }
        F::Timer(super::TimerRequest::List) => vec![Access::read(own("timer"))],
        F::Load { .. } | F::Delete { .. } => vec![Access::admin(own("fn"))],
        F::Trigger(_) => vec![Access::admin(own("trigger"))],
        F::Timer(_) => vec![Access::admin(own("timer"))],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PutRequest, ReadAt, ReadConsistency};

    fn key(k: &str) -> Key {
        Key::new(Bytes::from(k.to_string())).unwrap()
    }

    #[test]
    fn requests_name_what_they_touch() {
        let put = Request::from(KvWrite::Put(PutRequest::new(key("a/1"), Bytes::from("v"))));
        assert_eq!(put.access(), vec![Access::write(Scope::Key("a/1".into()))]);
        let scan = Request::from(KvRead::Scan {
            prefix: Bytes::from("a/"),
            cursor: None,
            limit: 10,
            pattern: Some(Bytes::from("a/x*")),
            at: ReadAt::Latest,
            consistency: ReadConsistency::Linearizable,
        });
        assert_eq!(
            scan.access(),
            vec![Access::read(Scope::Prefix("a/x".into()))]
        );
        let flush = Request::from(KvWrite::FlushAll);
        assert_eq!(flush.access(), vec![Access::admin(Scope::everything())]);
    }

    #[test]
    fn a_scope_is_within_a_prefix_only_when_all_of_it_is() {
        assert!(Scope::Key("a/1".into()).within(b"a/"));
        assert!(Scope::Prefix("a/b".into()).within(b"a/"));
        assert!(!Scope::Prefix("a".into()).within(b"a/"));
        assert!(Scope::everything().within(b""));
        assert!(!Scope::everything().within(b"a"));
        assert_eq!(glob_prefix(b"sensor/*"), Bytes::from("sensor/"));
        assert_eq!(glob_prefix(b"*"), Bytes::new());
    }
}
