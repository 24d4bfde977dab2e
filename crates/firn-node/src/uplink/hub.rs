//! The hub, as a site's uplink runner speaks to it: a RESP connection, the cursor the hub
//! keeps for one site shard's keys (or its records of a log, or a stream's entries), and
//! one batch of them sent with that cursor in a single `FIRN.TXN` — applied with it, or not
//! at all if the cursor is not what the runner thinks.

use std::time::Duration;

use bytes::Bytes;
use redis::Value;
use redis::aio::MultiplexedConnection;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// How long a call to the hub may take before the connection is given up (the link is then
/// taken to be down; the batch is sent again on a new one).
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A site shard's cursor as the hub keeps it (JSON): the last position applied there (a
/// [`ChangePosition`](firn_store::ChangePosition) for keys, a seq for a log's records or a stream's entries), when the
/// site sent it and how long the oldest version of that batch had waited.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HubCursor {
    /// The position (postcard, hex).
    pub at: String,
    pub sent_unix_ms: u64,
    pub lag_ms: u64,
}

impl HubCursor {
    pub fn new<P: Serialize>(at: &P, sent_unix_ms: u64, lag_ms: u64) -> HubCursor {
        let bytes = postcard::to_stdvec(at).unwrap_or_default();
        HubCursor {
            at: bytes.iter().map(|b| format!("{b:02x}")).collect(),
            sent_unix_ms,
            lag_ms,
        }
    }

    pub fn position<P: DeserializeOwned>(&self) -> Result<P, String> {
        let bytes = (0..self.at.len())
            .step_by(2)
            .map(|i| {
                self.at
                    .get(i..i + 2)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
            })
            .collect::<Option<Vec<u8>>>()
            .ok_or("the hub's cursor is not hex")?;
        postcard::from_bytes(&bytes).map_err(|e| format!("the hub's cursor: {e}"))
    }

    pub fn encode(&self) -> Bytes {
        Bytes::from(serde_json::to_vec(self).unwrap_or_default())
    }
}

/// One thing going up, a step of the batch's transaction at the hub.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HubStep {
    /// A key's version: `FIRN.PUT key value EVENTTIME e`.
    Put {
        key: Vec<u8>,
        value: Bytes,
        event_time_us: u64,
    },
    /// A key's deletion: `DEL key`.
    Delete { key: Vec<u8> },
    /// A log record: `FIRN.LOG APPEND log TAGS n tag… payload`.
    Append {
        log: Vec<u8>,
        tags: Vec<Bytes>,
        payload: Bytes,
    },
    /// A stream entry under its id: `XADD key id field value…`.
    StreamAdd {
        key: Vec<u8>,
        id: String,
        fields: Vec<(Bytes, Bytes)>,
    },
}

impl HubStep {
    /// The step as `FIRN.TXN` takes it: `THEN n word…`.
    fn push_to(&self, cmd: &mut redis::Cmd) {
        match self {
            HubStep::Put {
                key,
                value,
                event_time_us,
            } => cmd
                .arg("THEN")
                .arg(5)
                .arg("FIRN.PUT")
                .arg(key)
                .arg(value.as_ref())
                .arg("EVENTTIME")
                .arg(*event_time_us),
            HubStep::Delete { key } => cmd.arg("THEN").arg(2).arg("DEL").arg(key),
            HubStep::Append { log, tags, payload } => {
                cmd.arg("THEN")
                    .arg(6 + tags.len())
                    .arg("FIRN.LOG")
                    .arg("APPEND")
                    .arg(log)
                    .arg("TAGS")
                    .arg(tags.len());
                for tag in tags {
                    cmd.arg(tag.as_ref());
                }
                cmd.arg(payload.as_ref())
            }
            HubStep::StreamAdd { key, id, fields } => {
                cmd.arg("THEN")
                    .arg(3 + 2 * fields.len())
                    .arg("XADD")
                    .arg(key)
                    .arg(id);
                for (field, value) in fields {
                    cmd.arg(field.as_ref()).arg(value.as_ref());
                }
                cmd
            }
        };
    }
}

/// How a batch fared at the hub.
pub enum Sent {
    /// Applied with the cursor; `refused` of its versions were refused by the hub (a
    /// write its keyspace does not take: late, wrong type), the others applied.
    Applied { refused: usize },
    /// The hub's cursor is not the one sent against: nothing applied; read it again.
    CursorMoved,
}

pub struct Hub {
    connection: MultiplexedConnection,
}

impl Hub {
    /// Connects to the hub the site names: over TLS for `rediss://`, its certificate
    /// checked against `--hub-ca` as Firn's clients check a node's.
    pub async fn connect(config: &super::UplinkConfig) -> Result<Hub, String> {
        let url = &config.hub;
        let connecting = async {
            match (&config.hub_ca, url.strip_prefix("rediss://")) {
                (Some(pem), Some(addr)) => {
                    let ca =
                        firn_client::TlsCa::from_pem(pem.clone()).map_err(|e| e.to_string())?;
                    let settings = redis::AsyncConnectionConfig::new();
                    firn_client::tls_connection(addr.trim_end_matches('/'), &ca, settings)
                        .await
                        .map_err(|e| e.to_string())
                }
                (None, Some(_)) => Err("a hub over TLS needs --hub-ca".to_string()),
                _ => {
                    let client = redis::Client::open(url.as_str()).map_err(|e| e.to_string())?;
                    client
                        .get_multiplexed_async_connection()
                        .await
                        .map_err(|e| e.to_string())
                }
            }
        };
        let connection = tokio::time::timeout(CONNECT_TIMEOUT, connecting)
            .await
            .map_err(|_| format!("no connection to the hub within {CONNECT_TIMEOUT:?}"))?
            .map_err(|e| format!("connecting to the hub: {e}"))?;
        Ok(Hub { connection })
    }

    async fn call(&mut self, cmd: &redis::Cmd) -> Result<Value, String> {
        tokio::time::timeout(CALL_TIMEOUT, cmd.query_async(&mut self.connection))
            .await
            .map_err(|_| format!("the hub did not answer within {CALL_TIMEOUT:?}"))?
            .map_err(|e| format!("the hub answered: {e}"))
    }

    /// The hub's cluster id (`CLUSTER INFO`'s `firn_cluster_id`).
    pub async fn cluster_id(&mut self) -> Result<String, String> {
        let info: String =
            redis::from_redis_value(self.call(redis::cmd("CLUSTER").arg("INFO")).await?)
                .map_err(|e| format!("CLUSTER INFO answered: {e}"))?;
        info.lines()
            .find_map(|l| l.trim().strip_prefix("firn_cluster_id:"))
            .filter(|id| !id.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| {
                "the hub did not say its cluster id (not a Firn node, or one still joining)".into()
            })
    }

    /// The cursor the hub keeps at `key`: its raw value and what it says (`None`: none yet).
    pub async fn cursor(&mut self, key: &[u8]) -> Result<Option<(Bytes, HubCursor)>, String> {
        let shown = String::from_utf8_lossy(key);
        match self.call(redis::cmd("GET").arg(key)).await? {
            Value::Nil => Ok(None),
            Value::BulkString(raw) => {
                let cursor: HubCursor = serde_json::from_slice(&raw)
                    .map_err(|e| format!("the hub's cursor at {shown}: {e}"))?;
                Ok(Some((Bytes::from(raw), cursor)))
            }
            other => Err(format!("the hub's cursor at {shown}: {other:?}")),
        }
    }

    /// The hub's keys under `prefix` and their values, at most `max` keys (a page of keys
    /// read, then their values; a key deleted in between is left out).
    pub async fn values_under(
        &mut self,
        prefix: &[u8],
        max: usize,
    ) -> Result<Vec<(Vec<u8>, Bytes)>, String> {
        let mut out = Vec::new();
        let mut cursor: Vec<u8> = Vec::new();
        loop {
            let mut scan = redis::cmd("FIRN.SCAN");
            scan.arg(prefix);
            if !cursor.is_empty() {
                scan.arg("CURSOR").arg(&cursor);
            }
            scan.arg("COUNT").arg(1_000);
            let (next, keys): (Vec<u8>, Vec<Vec<u8>>) =
                redis::from_redis_value(self.call(&scan).await?)
                    .map_err(|e| format!("FIRN.SCAN answered: {e}"))?;
            if !keys.is_empty() {
                let mut mget = redis::cmd("MGET");
                for k in &keys {
                    mget.arg(k);
                }
                let values: Vec<Option<Vec<u8>>> = redis::from_redis_value(self.call(&mget).await?)
                    .map_err(|e| format!("MGET answered: {e}"))?;
                for (k, v) in keys.into_iter().zip(values) {
                    if let Some(v) = v {
                        out.push((k, Bytes::from(v)));
                    }
                }
            }
            if next.is_empty() || out.len() >= max {
                out.truncate(max);
                return Ok(out);
            }
            cursor = next;
        }
    }

    /// Sends `steps` and the new cursor `next` in one transaction, applied only if the
    /// cursor at `key` is still `expected` (`None`: there is none yet).
    pub async fn send(
        &mut self,
        key: &[u8],
        expected: Option<&Bytes>,
        steps: &[HubStep],
        next: &Bytes,
    ) -> Result<Sent, String> {
        let answer = self.call(&transaction(key, expected, steps, next)).await?;
        let Value::Array(parts) = answer else {
            return Err(format!("FIRN.TXN answered {answer:?}"));
        };
        match parts.as_slice() {
            [Value::Int(1), Value::Array(replies)] => Ok(Sent::Applied {
                refused: replies
                    .iter()
                    .filter(|r| matches!(r, Value::ServerError(_)))
                    .count(),
            }),
            [Value::Int(0), _] => Ok(Sent::CursorMoved),
            other => Err(format!("FIRN.TXN answered {other:?}")),
        }
    }
}

/// The batch's `FIRN.TXN`: `IF key VALUE = expected` (or `EXISTS = 0`), then each step, then
/// `SET key next`.
fn transaction(
    key: &[u8],
    expected: Option<&Bytes>,
    steps: &[HubStep],
    next: &Bytes,
) -> redis::Cmd {
    let mut cmd = redis::cmd("FIRN.TXN");
    cmd.arg("IF").arg(key);
    match expected {
        Some(v) => cmd.arg("VALUE").arg("=").arg(v.as_ref()),
        None => cmd.arg("EXISTS").arg("=").arg(0),
    };
    for step in steps {
        step.push_to(&mut cmd);
    }
    cmd.arg("THEN")
        .arg(3)
        .arg("SET")
        .arg(key)
        .arg(next.as_ref());
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;
    use firn_model::{CommitTs, LogSeq};
    use firn_store::ChangePosition;

    /// The words of a command, as text.
    fn words(cmd: &redis::Cmd) -> Vec<String> {
        cmd.args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
                _ => "<cursor>".into(),
            })
            .collect()
    }

    #[test]
    fn a_batch_is_one_transaction_whose_step_counts_match_their_words() {
        let steps = [
            HubStep::Put {
                key: b"sites/s/k".to_vec(),
                value: Bytes::from("v"),
                event_time_us: 7,
            },
            HubStep::Delete {
                key: b"sites/s/gone".to_vec(),
            },
            HubStep::Append {
                log: b"sites/s/events".to_vec(),
                tags: vec![Bytes::from("a"), Bytes::from("b")],
                payload: Bytes::from("THEN"),
            },
            HubStep::StreamAdd {
                key: b"sites/s/alarms".to_vec(),
                id: "5-1".into(),
                fields: vec![(Bytes::from("f"), Bytes::from("x"))],
            },
        ];
        let cmd = transaction(b"firn.uplink/s/0", None, &steps, &Bytes::from("{}"));
        let sent = words(&cmd);
        assert_eq!(
            &sent[..6],
            ["FIRN.TXN", "IF", "firn.uplink/s/0", "EXISTS", "=", "0"]
        );
        // Each THEN's count is the words that follow it, up to the next THEN.
        let mut i = 6;
        let mut commands = Vec::new();
        while i < sent.len() {
            assert_eq!(sent[i], "THEN");
            let n: usize = sent[i + 1].parse().unwrap();
            commands.push(sent[i + 2..i + 2 + n].join(" "));
            i += 2 + n;
        }
        assert_eq!(
            commands,
            [
                "FIRN.PUT sites/s/k v EVENTTIME 7",
                "DEL sites/s/gone",
                "FIRN.LOG APPEND sites/s/events TAGS 2 a b THEN",
                "XADD sites/s/alarms 5-1 f x",
                "SET firn.uplink/s/0 {}",
            ]
        );
        let again = transaction(b"c", Some(&Bytes::from("old")), &[], &Bytes::from("new"));
        assert_eq!(
            words(&again),
            [
                "FIRN.TXN", "IF", "c", "VALUE", "=", "old", "THEN", "3", "SET", "c", "new"
            ]
        );
    }

    #[test]
    fn a_cursor_of_a_seq_reads_back() {
        let at = LogSeq::new(1_700_000_000_000, 42);
        let cursor = HubCursor::new(&at, 5, 6);
        assert_eq!(cursor.position::<LogSeq>().unwrap(), at);
    }

    #[test]
    fn a_cursor_reads_back_its_position() {
        let at = ChangePosition {
            commit_ts: CommitTs::new(1_700_000_000_000_000, 3),
            key: b"sensor/7".to_vec(),
            version: 12,
        };
        let cursor = HubCursor::new(&at, 5, 6);
        let back: HubCursor = serde_json::from_slice(&cursor.encode()).unwrap();
        assert_eq!(back.position::<ChangePosition>().unwrap(), at);
        let bad = HubCursor {
            at: "zz".into(),
            ..cursor
        };
        assert!(bad.position::<ChangePosition>().is_err());
    }
}
