//! Consumer groups of streams over the node's HTTP API (`/v1/streams/{key}/groups…`, see
//! docs/api.md): create and destroy a group, read as a consumer, ack, pending, info, and a
//! consumer's event stream. [`GroupClient`] shares [`LogClient`]'s transport and causality
//! token, so a client reads its own acks and deliveries on any node.

use std::io::{BufRead, BufReader, Read};

use base64::Engine;
use bytes::Bytes;
use firn_model::{CommitTs, LogSeq};
use serde_json::{Value as Json, json};

use crate::log::{Call, answer_of, list, parsed, segment};
use crate::{ClientError, LogClient, RESPONSE_TIMEOUT, Result};

/// An event stream that sends nothing, not even a keep-alive, this long is taken as gone.
pub const EVENTS_SILENCE_MAX: std::time::Duration = std::time::Duration::from_secs(60);

/// How a group is made (`POST …/groups`); `Default` is `$` (new entries only), Redis's
/// delivery.
#[derive(Clone, Debug)]
pub struct GroupCreate {
    /// `$`, `0`, or an entry id: the group's first entry is the one after it.
    pub start: String,
    pub mkstream: bool,
    /// `first`, `roundrobin` or `hrw` (`None`: first).
    pub policy: Option<String>,
    pub key_field: Option<String>,
    pub key_tag: bool,
    pub ack_wait_ms: Option<u64>,
    /// With `dead_letter`: deliveries before an entry moves there.
    pub max_deliver: Option<u64>,
    pub dead_letter: Option<String>,
    pub liveness_ms: Option<u64>,
}

impl Default for GroupCreate {
    fn default() -> Self {
        GroupCreate {
            start: "$".into(),
            mkstream: false,
            policy: None,
            key_field: None,
            key_tag: false,
            ack_wait_ms: None,
            max_deliver: None,
            dead_letter: None,
            liveness_ms: None,
        }
    }
}

/// How a consumer reads (`POST …/read`).
#[derive(Clone, Debug, Default)]
pub struct GroupReadOptions {
    /// Most entries (1 to 10,000; `None`: 100).
    pub count: Option<u64>,
    /// When nothing is new, wait up to this long (1 ms to 3,600,000).
    pub block_ms: Option<u64>,
    pub noack: bool,
    /// `None`: new entries (`>`); an id: the consumer's own pending entries after it.
    pub id: Option<LogSeq>,
}

/// Which pending entries to list (`GET …/pending` entry by entry).
#[derive(Clone, Debug, Default)]
pub struct PendingQuery {
    pub start: Option<LogSeq>,
    pub end: Option<LogSeq>,
    pub count: Option<u64>,
    pub consumer: Option<String>,
    pub min_idle_ms: Option<u64>,
}

/// An entry a group handed out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamEntry {
    pub id: LogSeq,
    /// Its fields in order (none for a deleted entry or a record that is not a field list).
    pub fields: Vec<(Bytes, Bytes)>,
    /// A record that is not a field list (appended with `FIRN.LOG APPEND`): its payload.
    pub value: Option<Bytes>,
    /// Deleted from the stream since it was delivered.
    pub deleted: bool,
}

/// The pending list in sum.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingSummary {
    pub count: u64,
    pub first: Option<LogSeq>,
    pub last: Option<LogSeq>,
    /// Each consumer with pending entries, and how many.
    pub consumers: Vec<(String, u64)>,
}

/// One pending entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingEntry {
    pub id: LogSeq,
    pub consumer: String,
    pub idle_ms: u64,
    pub deliveries: u64,
}

/// One group of a stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupSummary {
    pub name: String,
    pub consumers: u64,
    pub pending: u64,
    pub last_delivered: LogSeq,
    pub entries_read: Option<u64>,
    pub lag: Option<u64>,
}

/// One consumer of a group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerSummary {
    pub name: String,
    pub pending: u64,
    pub idle_ms: u64,
    pub inactive_ms: Option<u64>,
}

/// A client of one node's group endpoints; cheap to clone.
#[derive(Clone)]
pub struct GroupClient {
    http: LogClient,
}

impl GroupClient {
    /// A client of the node whose HTTP address is `http_addr`, e.g. `127.0.0.1:7380`.
    pub fn new(http_addr: &str) -> Self {
        GroupClient {
            http: LogClient::new(http_addr),
        }
    }

    /// A client that shares `log`'s node and causality token.
    pub fn sharing(log: &LogClient) -> Self {
        GroupClient { http: log.clone() }
    }

    pub fn token(&self) -> Option<CommitTs> {
        self.http.token()
    }

    pub async fn create(&self, stream: &str, group: &str, how: &GroupCreate) -> Result<()> {
        let mut body = json!({
            "group": group,
            "start": how.start,
            "mkstream": how.mkstream,
            "key_tag": how.key_tag,
        });
        let optional = [
            ("policy", how.policy.clone().map(Json::from)),
            ("key_field", how.key_field.clone().map(Json::from)),
            ("ack_wait_ms", how.ack_wait_ms.map(Json::from)),
            ("max_deliver", how.max_deliver.map(Json::from)),
            ("dead_letter", how.dead_letter.clone().map(Json::from)),
            ("liveness_ms", how.liveness_ms.map(Json::from)),
        ];
        for (name, value) in optional {
            if let Some(v) = value {
                body[name] = v;
            }
        }
        let mut call = Call::new("POST", groups_path(stream));
        call.body = Some(body);
        self.http.call(call).await.map(|_| ())
    }

    /// Destroys the group; `false` when there was none.
    pub async fn destroy(&self, stream: &str, group: &str) -> Result<bool> {
        let call = Call::new("DELETE", group_path(stream, group, ""));
        match self.http.call(call).await {
            Ok(_) => Ok(true),
            Err(ClientError::Server { code, .. }) if code == "NOGROUP" => Ok(false),
            Err(e) => Err(e),
        }
    }

    pub async fn read(
        &self,
        stream: &str,
        group: &str,
        consumer: &str,
        opts: &GroupReadOptions,
    ) -> Result<Vec<StreamEntry>> {
        let mut body = json!({
            "consumer": consumer,
            "noack": opts.noack,
            "id": opts.id.map_or(">".to_string(), |id| id.to_string()),
        });
        if let Some(n) = opts.count {
            body["count"] = json!(n);
        }
        if let Some(ms) = opts.block_ms {
            body["block_ms"] = json!(ms);
        }
        let mut call = Call::new("POST", group_path(stream, group, "/read"));
        call.body = Some(body);
        call.wait = std::time::Duration::from_millis(opts.block_ms.unwrap_or(0));
        entries(&self.http.call(call).await?)
    }

    /// Acks entries; how many were pending.
    pub async fn ack(&self, stream: &str, group: &str, ids: &[impl ToString]) -> Result<u64> {
        let ids: Vec<String> = ids.iter().map(ToString::to_string).collect();
        let mut call = Call::new("POST", group_path(stream, group, "/ack"));
        call.body = Some(json!({ "ids": ids }));
        let answer = self.http.call(call).await?;
        number(&answer, "acked")
    }

    pub async fn pending_summary(&self, stream: &str, group: &str) -> Result<PendingSummary> {
        let call = Call::new("GET", group_path(stream, group, "/pending"));
        let a = self.http.call(call).await?;
        let seq = |field: &str| match &a[field] {
            Json::Null => Ok(None),
            _ => parsed(&a, field).map(Some),
        };
        Ok(PendingSummary {
            count: number(&a, "count")?,
            first: seq("first")?,
            last: seq("last")?,
            consumers: list(&a, "consumers")?
                .iter()
                .map(|c| Ok((text(c, "name")?, number(c, "pending")?)))
                .collect::<Result<_>>()?,
        })
    }

    pub async fn pending(
        &self,
        stream: &str,
        group: &str,
        q: &PendingQuery,
    ) -> Result<Vec<PendingEntry>> {
        let call = Call::new("GET", group_path(stream, group, "/pending"))
            .param("start", Some(q.start.map_or("-".into(), |s| s.to_string())))
            .param("end", Some(q.end.map_or("+".into(), |s| s.to_string())))
            .param("count", q.count)
            .param("consumer", q.consumer.clone())
            .param("min_idle_ms", q.min_idle_ms);
        let a = self.http.call(call).await?;
        list(&a, "pending")?
            .iter()
            .map(|p| {
                Ok(PendingEntry {
                    id: parsed(p, "id")?,
                    consumer: text(p, "consumer")?,
                    idle_ms: number(p, "idle_ms")?,
                    deliveries: number(p, "deliveries")?,
                })
            })
            .collect()
    }

    /// The stream's groups.
    pub async fn groups(&self, stream: &str) -> Result<Vec<GroupSummary>> {
        let a = self
            .http
            .call(Call::new("GET", groups_path(stream)))
            .await?;
        list(&a, "groups")?
            .iter()
            .map(|g| {
                Ok(GroupSummary {
                    name: text(g, "name")?,
                    consumers: number(g, "consumers")?,
                    pending: number(g, "pending")?,
                    last_delivered: parsed(g, "last_delivered")?,
                    entries_read: g["entries_read"].as_u64(),
                    lag: g["lag"].as_u64(),
                })
            })
            .collect()
    }

    /// The group's consumers.
    pub async fn consumers(&self, stream: &str, group: &str) -> Result<Vec<ConsumerSummary>> {
        let call = Call::new("GET", group_path(stream, group, "/consumers"));
        let a = self.http.call(call).await?;
        list(&a, "consumers")?
            .iter()
            .map(|c| {
                Ok(ConsumerSummary {
                    name: text(c, "name")?,
                    pending: number(c, "pending")?,
                    idle_ms: number(c, "idle_ms")?,
                    inactive_ms: c["inactive_ms"].as_u64(),
                })
            })
            .collect()
    }

    /// Opens the consumer's event stream: its pending entries (unless `noack`), then new
    /// ones as they come, `count` in all (`None`: no end). Read it with
    /// [`GroupEvents::next_entry`], which blocks.
    pub async fn events(
        &self,
        stream: &str,
        group: &str,
        consumer: &str,
        count: Option<u64>,
        noack: bool,
    ) -> Result<GroupEvents> {
        let path = group_path(
            stream,
            group,
            &format!("/consumers/{}/events", segment(consumer)),
        );
        let url = format!("{}{path}", self.http.base);
        let after = self.http.token();
        let (token, reader) = tokio::task::spawn_blocking(move || {
            // No overall timeout: the stream is open as long as it delivers. The server sends
            // a keep-alive comment every 15 s, so a stream silent for a minute is gone.
            let agent = ureq::AgentBuilder::new()
                .timeout_connect(RESPONSE_TIMEOUT)
                .timeout_read(EVENTS_SILENCE_MAX)
                .build();
            let mut request = agent
                .get(&url)
                .query("noack", if noack { "true" } else { "false" });
            if let Some(n) = count {
                request = request.query("count", &n.to_string());
            }
            if let Some(t) = after {
                request = request.set("Firn-After", &t.to_string());
            }
            let response = match request.call() {
                Ok(r) => r,
                Err(ureq::Error::Status(status, r)) => {
                    let text = r.into_string().unwrap_or_default();
                    let body = serde_json::from_str::<Json>(&text);
                    return Err(answer_of(status, body, text).err().unwrap_or_else(|| {
                        ClientError::Protocol(format!("HTTP {status} with a body"))
                    }));
                }
                Err(e) => return Err(ClientError::Connection(e.to_string())),
            };
            let token = response
                .header("firn-token")
                .and_then(|t| t.parse::<CommitTs>().ok());
            Ok((token, response.into_reader()))
        })
        .await
        .map_err(|e| ClientError::Connection(format!("the call stopped: {e}")))??;
        self.http.saw(token);
        Ok(GroupEvents {
            lines: BufReader::new(reader),
        })
    }
}

/// A consumer's open event stream.
pub struct GroupEvents {
    lines: BufReader<Box<dyn Read + Send + Sync + 'static>>,
}

impl GroupEvents {
    /// The next entry delivered (blocks until one comes); `None` when the server ended the
    /// stream (its count sent, or the node stopping). An `error` event is an error.
    pub fn next_entry(&mut self) -> Result<Option<StreamEntry>> {
        let (mut event, mut data) = (String::new(), String::new());
        loop {
            let mut line = String::new();
            let read = self
                .lines
                .read_line(&mut line)
                .map_err(|e| ClientError::Connection(e.to_string()))?;
            if read == 0 {
                return Ok(None);
            }
            let line = line.trim_end_matches(['\r', '\n']);
            if let Some(e) = line.strip_prefix("event:") {
                event = e.trim().to_string();
            } else if let Some(d) = line.strip_prefix("data:") {
                data.push_str(d.strip_prefix(' ').unwrap_or(d));
            } else if line.is_empty() && !data.is_empty() {
                let j: Json = serde_json::from_str(&data)
                    .map_err(|e| ClientError::Protocol(format!("{e}: {data}")))?;
                if event == "error" {
                    return Err(ClientError::Server {
                        code: j["error"].as_str().unwrap_or("ERR").to_string(),
                        message: j["message"].as_str().unwrap_or_default().to_string(),
                    });
                }
                return entry(&j).map(Some);
            }
        }
    }
}

fn groups_path(stream: &str) -> String {
    format!("/v1/streams/{}/groups", segment(stream))
}

fn group_path(stream: &str, group: &str, rest: &str) -> String {
    format!("{}/{}{rest}", groups_path(stream), segment(group))
}

fn number(j: &Json, field: &str) -> Result<u64> {
    j[field]
        .as_u64()
        .ok_or_else(|| ClientError::Protocol(format!("no {field} in {j}")))
}

fn text(j: &Json, field: &str) -> Result<String> {
    j[field]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| ClientError::Protocol(format!("no {field} in {j}")))
}

fn entries(answer: &Json) -> Result<Vec<StreamEntry>> {
    list(answer, "entries")?.iter().map(entry).collect()
}

fn base64_of(j: &Json) -> Result<Bytes> {
    base64::engine::general_purpose::STANDARD
        .decode(j.as_str().unwrap_or_default())
        .map(Bytes::from)
        .map_err(|e| ClientError::Protocol(format!("base64: {e}")))
}

/// An entry as the server renders it: `fields` (text), `fields_base64` (pairs), `value` or
/// `value_base64` (not a field list), or `deleted`.
fn entry(j: &Json) -> Result<StreamEntry> {
    let mut e = StreamEntry {
        id: parsed(j, "id")?,
        fields: Vec::new(),
        value: None,
        deleted: j["deleted"].as_bool().unwrap_or(false),
    };
    if let Some(fields) = j["fields"].as_object() {
        e.fields = fields
            .iter()
            .map(|(n, v)| {
                let v = v.as_str().unwrap_or_default();
                (Bytes::from(n.clone()), Bytes::from(v.to_string()))
            })
            .collect();
    } else if let Some(pairs) = j["fields_base64"].as_array() {
        e.fields = pairs
            .iter()
            .map(|p| Ok((base64_of(&p[0])?, base64_of(&p[1])?)))
            .collect::<Result<_>>()?;
    } else if let Some(v) = j["value"].as_str() {
        e.value = Some(Bytes::from(v.to_string()));
    } else if !j["value_base64"].is_null() {
        e.value = Some(base64_of(&j["value_base64"])?);
    }
    Ok(e)
}
