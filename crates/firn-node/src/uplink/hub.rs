//! The hub, as a site's uplink runner speaks to it: a RESP connection, the cursor the hub
//! keeps for one site shard, and one batch of versions sent with that cursor in a single
//! `FIRN.TXN` — applied with it, or not at all if the cursor is not what the runner thinks.

use std::time::Duration;

use bytes::Bytes;
use firn_store::ChangePosition;
use redis::Value;
use redis::aio::MultiplexedConnection;
use serde::{Deserialize, Serialize};

/// How long a call to the hub may take before the connection is given up (the link is then
/// taken to be down; the batch is sent again on a new one).
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A site shard's cursor as the hub keeps it (JSON): the last position applied there, when
/// the site sent it and how long the oldest version of that batch had waited.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HubCursor {
    /// The position (postcard, hex).
    pub at: String,
    pub sent_unix_ms: u64,
    pub lag_ms: u64,
}

impl HubCursor {
    pub fn new(at: &ChangePosition, sent_unix_ms: u64, lag_ms: u64) -> HubCursor {
        let bytes = postcard::to_stdvec(at).unwrap_or_default();
        HubCursor {
            at: bytes.iter().map(|b| format!("{b:02x}")).collect(),
            sent_unix_ms,
            lag_ms,
        }
    }

    pub fn position(&self) -> Result<ChangePosition, String> {
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

/// One version going up: put (with its event time) or delete.
pub struct Change {
    pub hub_key: Vec<u8>,
    /// `None`: a delete.
    pub value: Option<Bytes>,
    pub event_time_us: u64,
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
    pub async fn connect(url: &str) -> Result<Hub, String> {
        let client = redis::Client::open(url).map_err(|e| e.to_string())?;
        let connection =
            tokio::time::timeout(CONNECT_TIMEOUT, client.get_multiplexed_async_connection())
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
    pub async fn cursor(&mut self, key: &str) -> Result<Option<(Bytes, HubCursor)>, String> {
        match self.call(redis::cmd("GET").arg(key)).await? {
            Value::Nil => Ok(None),
            Value::BulkString(raw) => {
                let cursor: HubCursor = serde_json::from_slice(&raw)
                    .map_err(|e| format!("the hub's cursor at {key}: {e}"))?;
                Ok(Some((Bytes::from(raw), cursor)))
            }
            other => Err(format!("the hub's cursor at {key}: {other:?}")),
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

    /// Sends `changes` and the new cursor `next` in one transaction, applied only if the
    /// cursor at `key` is still `expected` (`None`: there is none yet).
    pub async fn send(
        &mut self,
        key: &str,
        expected: Option<&Bytes>,
        changes: &[Change],
        next: &Bytes,
    ) -> Result<Sent, String> {
        let mut cmd = redis::cmd("FIRN.TXN");
        cmd.arg("IF").arg(key);
        match expected {
            Some(v) => cmd.arg("VALUE").arg("=").arg(v.as_ref()),
            None => cmd.arg("EXISTS").arg("=").arg(0),
        };
        for change in changes {
            match &change.value {
                Some(v) => cmd
                    .arg("THEN")
                    .arg(5)
                    .arg("FIRN.PUT")
                    .arg(&change.hub_key)
                    .arg(v.as_ref())
                    .arg("EVENTTIME")
                    .arg(change.event_time_us),
                None => cmd.arg("THEN").arg(2).arg("DEL").arg(&change.hub_key),
            };
        }
        cmd.arg("THEN")
            .arg(3)
            .arg("SET")
            .arg(key)
            .arg(next.as_ref());
        let answer = self.call(&cmd).await?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use firn_model::CommitTs;

    #[test]
    fn a_cursor_reads_back_its_position() {
        let at = ChangePosition {
            commit_ts: CommitTs::new(1_700_000_000_000_000, 3),
            key: b"sensor/7".to_vec(),
            version: 12,
        };
        let cursor = HubCursor::new(&at, 5, 6);
        let back: HubCursor = serde_json::from_slice(&cursor.encode()).unwrap();
        assert_eq!(back.position().unwrap(), at);
        let bad = HubCursor {
            at: "zz".into(),
            ..cursor
        };
        assert!(bad.position().is_err());
    }
}
