//! The tagged shared log, over the node's HTTP API (`/v1/log/…`, see docs/api.md): appends
//! with tags, reads by tag, trim and what a tag holds, as typed results. HTTP keeps no
//! session, so [`LogClient`] keeps the causality token between calls (`Firn-After` out,
//! `Firn-Token` back): a client reads its own appends on any node.
//!
//! The HTTP client is ureq, which blocks: each call runs on tokio's blocking pool, so a read
//! that blocks for a record holds a blocking thread, not an async worker.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use firn_model::{Appended, CommitTs, Key, LogRecord, LogSeq, NewRecord, ReadConsistency};
use serde_json::{Value as Json, json};

use crate::{ClientError, RESPONSE_TIMEOUT, Result};

/// How a log read reads.
#[derive(Clone, Debug, Default)]
pub struct LogReadOptions {
    /// When nothing matches yet, wait up to this long for a record (1 ms to
    /// `LOG_BLOCK_MS_MAX`); not with `at`, and not for `prev`.
    pub block_ms: Option<u64>,
    /// Read the log as it was at this time.
    pub at: Option<CommitTs>,
    pub consistency: ReadConsistency,
}

/// What a tag of a log holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogTagInfo {
    /// Records held.
    pub len: u64,
    /// The first and last records' seqs (`None`: none is held).
    pub first_seq: Option<LogSeq>,
    pub last_seq: Option<LogSeq>,
    /// Reads below this seq are refused as trimmed (`0-0`: never trimmed).
    pub first_kept: LogSeq,
    /// Records ever appended with the tag.
    pub added: u64,
}

/// A client of one node's log endpoints; cheap to clone (clones share the token).
#[derive(Clone)]
pub struct LogClient {
    pub(crate) base: String,
    agent: ureq::Agent,
    token: Arc<Mutex<Option<CommitTs>>>,
    /// `Authorization: Bearer` on every call, for a node with users.
    bearer: Option<Arc<str>>,
}

/// One call's method, path (segments already escaped) and query.
pub(crate) struct Call {
    pub(crate) method: &'static str,
    pub(crate) path: String,
    pub(crate) query: Vec<(&'static str, String)>,
    pub(crate) body: Option<Json>,
    /// How long the server may wait on purpose (a blocking read), beyond the usual answer.
    pub(crate) wait: Duration,
}

impl Call {
    pub(crate) fn new(method: &'static str, path: String) -> Self {
        Call {
            method,
            path,
            query: Vec::new(),
            body: None,
            wait: Duration::ZERO,
        }
    }

    pub(crate) fn param(mut self, name: &'static str, value: Option<impl ToString>) -> Self {
        if let Some(v) = value {
            self.query.push((name, v.to_string()));
        }
        self
    }

    fn read_options(self, opts: &LogReadOptions) -> Self {
        let consistency = match opts.consistency {
            ReadConsistency::Linearizable => None,
            ReadConsistency::Lease => Some("lease"),
            ReadConsistency::Local => Some("local"),
        };
        let mut call = self
            .param("block_ms", opts.block_ms)
            .param("at", opts.at)
            .param("consistency", consistency);
        call.wait = Duration::from_millis(opts.block_ms.unwrap_or(0));
        call
    }
}

impl LogClient {
    /// A client of the node whose HTTP address is `http_addr`, e.g. `127.0.0.1:7380`.
    pub fn new(http_addr: &str) -> Self {
        LogClient {
            base: format!("http://{http_addr}"),
            agent: ureq::AgentBuilder::new().build(),
            token: Arc::new(Mutex::new(None)),
            bearer: None,
        }
    }

    /// Calls the node over HTTPS, its certificate checked against `tls` (none: plain HTTP).
    pub fn with_tls(mut self, tls: Option<&crate::TlsCa>) -> Self {
        if let Some(ca) = tls {
            self.base = self.base.replacen("http://", "https://", 1);
            self.agent = ureq::AgentBuilder::new()
                .tls_config(ca.http_config())
                .build();
        }
        self
    }

    /// Signs every call with a bearer token (a node with users; see `firn serve --users`).
    pub fn with_bearer(mut self, bearer: Option<String>) -> Self {
        self.bearer = bearer.map(Arc::from);
        self
    }

    /// The newest commit stamp this client has been shown or given.
    pub fn token(&self) -> Option<CommitTs> {
        *self.token.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes later calls come after `token` (from another client or process).
    pub fn after(&self, token: CommitTs) {
        self.saw(Some(token));
    }

    pub(crate) fn saw(&self, token: Option<CommitTs>) {
        let mut held = self.token.lock().unwrap_or_else(|p| p.into_inner());
        *held = (*held).max(token);
    }

    /// Appends records in one batch; their seqs and commit stamps, in the order given.
    pub async fn append(&self, log: &str, records: &[NewRecord]) -> Result<Vec<Appended>> {
        let records = records
            .iter()
            .map(|r| {
                let tags = r.tags.iter().map(tag_text).collect::<Result<Vec<_>>>()?;
                let mut j = json!({ "tags": tags });
                match std::str::from_utf8(&r.payload) {
                    Ok(text) => j["value"] = json!(text),
                    Err(_) => {
                        j["value_base64"] =
                            json!(base64::engine::general_purpose::STANDARD.encode(&r.payload))
                    }
                }
                Ok(j)
            })
            .collect::<Result<Vec<_>>>()?;
        let mut call = Call::new("POST", format!("/v1/log/{}", segment(log)));
        call.body = Some(json!({ "records": records }));
        let answer = self.call(call).await?;
        list(&answer, "appended")?
            .iter()
            .map(|a| {
                Ok(Appended {
                    seq: parsed(a, "seq")?,
                    commit_ts: parsed(a, "commit_ts")?,
                })
            })
            .collect()
    }

    /// Appends one record with `tags` (the first decides where it is stored).
    pub async fn append_one(&self, log: &str, tags: &[&str], value: &[u8]) -> Result<Appended> {
        let record = NewRecord {
            tags: tags.iter().map(|t| tag_key(t)).collect::<Result<_>>()?,
            payload: Bytes::copy_from_slice(value),
        };
        let mut appended = self.append(log, &[record]).await?;
        appended
            .pop()
            .ok_or_else(|| ClientError::Protocol("an append answered no seq".into()))
    }

    /// The first record with `tag` and `seq ≥ min`.
    pub async fn next(
        &self,
        log: &str,
        tag: &str,
        min: LogSeq,
        opts: &LogReadOptions,
    ) -> Result<Option<LogRecord>> {
        let call = Call::new("GET", tag_path(log, tag, "next")).param("min", Some(min));
        self.one(call.read_options(opts)).await
    }

    /// The last record with `tag` and `seq ≤ max`.
    pub async fn prev(
        &self,
        log: &str,
        tag: &str,
        max: LogSeq,
        opts: &LogReadOptions,
    ) -> Result<Option<LogRecord>> {
        let call = Call::new("GET", tag_path(log, tag, "prev")).param("max", Some(max));
        self.one(call.read_options(opts)).await
    }

    /// The newest record with `tag`.
    pub async fn tail(
        &self,
        log: &str,
        tag: &str,
        opts: &LogReadOptions,
    ) -> Result<Option<LogRecord>> {
        let call = Call::new("GET", tag_path(log, tag, "tail"));
        self.one(call.read_options(opts)).await
    }

    /// Records with `tag` and `from ≤ seq ≤ to`, oldest first, at most `limit`; without
    /// `from`, from the first record kept (a tag trimmed since answers TRIMMED to a `from`
    /// below its trim point).
    pub async fn range(
        &self,
        log: &str,
        tag: &str,
        from: Option<LogSeq>,
        to: LogSeq,
        limit: usize,
        opts: &LogReadOptions,
    ) -> Result<Vec<LogRecord>> {
        let call = Call::new("GET", tag_path(log, tag, "range"))
            .param("from", from)
            .param("to", Some(to))
            .param("limit", Some(limit));
        self.records(call.read_options(opts)).await
    }

    /// Drops the records of `tag` (or of every tag) with `seq < before`; how many went.
    pub async fn trim(&self, log: &str, tag: Option<&str>, before: LogSeq) -> Result<u64> {
        let call = Call::new("DELETE", format!("/v1/log/{}", segment(log)))
            .param("before", Some(before))
            .param("tag", tag);
        let answer = self.call(call).await?;
        answer["removed"]
            .as_u64()
            .ok_or_else(|| ClientError::Protocol(format!("no count in {answer}")))
    }

    /// What `tag` of `log` holds.
    pub async fn info(&self, log: &str, tag: &str) -> Result<LogTagInfo> {
        let path = format!("/v1/log/{}/{}", segment(log), segment(tag));
        let answer = self.call(Call::new("GET", path)).await?;
        let count = |field: &str| {
            answer[field]
                .as_u64()
                .ok_or_else(|| ClientError::Protocol(format!("no {field} in {answer}")))
        };
        let seq_or_none = |field: &str| match &answer[field] {
            Json::Null => Ok(None),
            _ => parsed(&answer, field).map(Some),
        };
        Ok(LogTagInfo {
            len: count("len")?,
            first_seq: seq_or_none("first_seq")?,
            last_seq: seq_or_none("last_seq")?,
            first_kept: parsed(&answer, "first_kept")?,
            added: count("added")?,
        })
    }

    async fn one(&self, call: Call) -> Result<Option<LogRecord>> {
        Ok(self.records(call).await?.into_iter().next())
    }

    async fn records(&self, call: Call) -> Result<Vec<LogRecord>> {
        let answer = self.call(call).await?;
        list(&answer, "records")?.iter().map(record).collect()
    }

    /// Runs a call on the blocking pool with the token, takes the token its answer carries,
    /// and turns an error answer into [`ClientError`].
    pub(crate) async fn call(&self, call: Call) -> Result<Json> {
        let agent = self.agent.clone();
        let url = format!("{}{}", self.base, call.path);
        let after = self.token();
        let bearer = self.bearer.clone();
        let (token, answer) = tokio::task::spawn_blocking(move || {
            let mut request = agent
                .request(call.method, &url)
                .timeout(RESPONSE_TIMEOUT + call.wait);
            for (name, value) in &call.query {
                request = request.query(name, value);
            }
            if let Some(t) = after {
                request = request.set("Firn-After", &t.to_string());
            }
            if let Some(b) = &bearer {
                request = request.set("Authorization", &format!("Bearer {b}"));
            }
            let result = match call.body {
                Some(body) => request.send_json(body),
                None => request.call(),
            };
            let (status, response) = match result {
                Ok(r) => (r.status(), r),
                Err(ureq::Error::Status(status, r)) => (status, r),
                Err(e) => return Err(ClientError::Connection(e.to_string())),
            };
            let token = response
                .header("firn-token")
                .and_then(|t| t.parse::<CommitTs>().ok());
            let text = response
                .into_string()
                .map_err(|e| ClientError::Connection(e.to_string()))?;
            let body = serde_json::from_str::<Json>(&text);
            Ok((token, answer_of(status, body, text)))
        })
        .await
        .map_err(|e| ClientError::Connection(format!("the call stopped: {e}")))??;
        self.saw(token);
        answer
    }
}

/// A success's JSON body, or the error it carries: `{"error": CODE, "message", …}`, or a
/// status without one (a route that does not exist).
pub(crate) fn answer_of(status: u16, body: serde_json::Result<Json>, text: String) -> Result<Json> {
    match (status, body) {
        (200..=299, Ok(body)) => Ok(body),
        (200..=299, Err(e)) => Err(ClientError::Protocol(format!("{e}: {text}"))),
        (_, Ok(body)) if body["error"].is_string() => {
            if body["error"] == "TRIMMED"
                && let Some(first_kept) = body["first_kept"].as_str().and_then(|s| s.parse().ok())
            {
                return Err(ClientError::Trimmed { first_kept });
            }
            Err(ClientError::Server {
                code: body["error"].as_str().unwrap_or_default().to_string(),
                message: body["message"].as_str().unwrap_or_default().to_string(),
            })
        }
        (status, _) => Err(ClientError::Server {
            code: format!("HTTP {status}"),
            message: text,
        }),
    }
}

pub(crate) fn list<'a>(answer: &'a Json, field: &str) -> Result<&'a Vec<Json>> {
    answer[field]
        .as_array()
        .ok_or_else(|| ClientError::Protocol(format!("no {field} in {answer}")))
}

/// A text field parsed into `T` (seqs, commit stamps).
pub(crate) fn parsed<T: std::str::FromStr>(j: &Json, field: &str) -> Result<T> {
    j[field]
        .as_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| ClientError::Protocol(format!("no {field} in {j}")))
}

fn record(j: &Json) -> Result<LogRecord> {
    let payload = match (j["value"].as_str(), j["value_base64"].as_str()) {
        (Some(text), _) => Bytes::copy_from_slice(text.as_bytes()),
        (None, Some(b64)) => base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map(Bytes::from)
            .map_err(|e| ClientError::Protocol(format!("value_base64: {e}")))?,
        (None, None) => return Err(ClientError::Protocol(format!("no value in {j}"))),
    };
    let tags = list(j, "tags")?
        .iter()
        .map(|t| tag_key(t.as_str().unwrap_or_default()))
        .collect::<Result<_>>()?;
    Ok(LogRecord {
        seq: parsed(j, "seq")?,
        tags,
        payload,
        commit_ts: parsed(j, "commit_ts")?,
    })
}

fn tag_key(tag: &str) -> Result<Key> {
    Key::new(Bytes::copy_from_slice(tag.as_bytes()))
        .map_err(|e| ClientError::Invalid(format!("tag '{tag}': {e}")))
}

/// Tags travel as JSON text, so a tag must be UTF-8.
fn tag_text(tag: &Key) -> Result<String> {
    std::str::from_utf8(tag.as_bytes())
        .map(str::to_string)
        .map_err(|_| {
            ClientError::Invalid(format!("tag {tag:?} is not UTF-8; HTTP takes text tags"))
        })
}

fn tag_path(log: &str, tag: &str, read: &str) -> String {
    format!("/v1/log/{}/{}/{read}", segment(log), segment(tag))
}

/// A log name or tag as one path segment: every byte but the unreserved ones escaped, `/`
/// included.
pub(crate) fn segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
