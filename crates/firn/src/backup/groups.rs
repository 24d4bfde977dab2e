//! Consumer groups in a backup, read and restored over RESP (binary-safe, and the only
//! front end with XCLAIM's options). Group state is not kept as versions, so a backup reads
//! it as it is when the backup gets there, just after the cut: a group (its delivery
//! options, last-delivered id, consumers) and its pending entries (consumer, delivery count,
//! last delivery). A restore makes the group with `XGROUP CREATE … id MKSTREAM` and its
//! options, its consumers with `XGROUP CREATECONSUMER`, and each pending entry with
//! `XCLAIM … 0 id FORCE RETRYCOUNT n TIME ms JUSTID` — which takes only entries the
//! restored stream holds.

use firn_client::{Client, retry_transient};
use firn_model::{DeliveryPolicy, GroupKey, GroupOptions, Key, LogSeq, MaxDeliver};
use indicatif::ProgressBar;
use redis::Value;

use super::file::{GroupLine, Line, PendingLine, Writer};
use super::logs::lossy;

/// Pending entries per XPENDING page, and XCLAIMs per round trip.
const PENDING_PAGE: usize = 1_000;
const CLAIM_BATCH: usize = 100;

fn bytes_of(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::BulkString(b) => Some(b.clone()),
        Value::SimpleString(s) => Some(s.as_bytes().to_vec()),
        Value::VerbatimString { text, .. } => Some(text.as_bytes().to_vec()),
        _ => None,
    }
}

fn text_of(v: &Value) -> Option<String> {
    bytes_of(v).map(|b| String::from_utf8_lossy(&b).into_owned())
}

fn int_of(v: &Value) -> Option<u64> {
    match v {
        Value::Int(i) => u64::try_from(*i).ok(),
        other => text_of(other).and_then(|t| t.parse().ok()),
    }
}

/// A map reply's pairs (a RESP3 map, or RESP2's flat array).
fn pairs(v: &Value) -> Result<Vec<(String, Value)>, String> {
    match v {
        Value::Map(m) => Ok(m
            .iter()
            .map(|(k, v)| (text_of(k).unwrap_or_default(), v.clone()))
            .collect()),
        Value::Array(items) if items.len() % 2 == 0 => Ok(items
            .chunks(2)
            .map(|kv| (text_of(&kv[0]).unwrap_or_default(), kv[1].clone()))
            .collect()),
        other => Err(format!("not a map: {other:?}")),
    }
}

fn items(v: Value) -> Result<Vec<Value>, String> {
    match v {
        Value::Array(items) => Ok(items),
        other => Err(format!("not an array: {other:?}")),
    }
}

/// A group as FIRN.GROUPS shows it: its name, last-delivered id and delivery options.
fn group_of(v: &Value, stream: &[u8]) -> Result<GroupLine, String> {
    let fields = pairs(v)?;
    let get = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .unwrap_or(Value::Nil)
    };
    let bad = |what: &str| format!("FIRN.GROUPS without its {what}: {v:?}");
    let key = get("key");
    let policy = match text_of(&get("policy")).as_deref() {
        Some("first") | None => DeliveryPolicy::First,
        Some("roundrobin") => DeliveryPolicy::RoundRobin,
        // FIRN.GROUPS shows KEYTAG as that word, a field by its name.
        Some("hrw") if text_of(&key).as_deref() == Some("KEYTAG") => {
            DeliveryPolicy::Hrw(GroupKey::Tag)
        }
        Some("hrw") => DeliveryPolicy::Hrw(GroupKey::Field(
            bytes_of(&key).ok_or_else(|| bad("key"))?.into(),
        )),
        Some(other) => return Err(format!("a group of an unknown policy '{other}'")),
    };
    let max_deliver = match int_of(&get("max-deliver")) {
        None => None,
        Some(deliveries) => Some(MaxDeliver {
            deliveries,
            dead_letter: Key::new(bytes_of(&get("dead-letter")).ok_or_else(|| bad("dead-letter"))?)
                .map_err(|e| e.to_string())?,
        }),
    };
    Ok(GroupLine {
        stream: stream.to_vec(),
        name: bytes_of(&get("name")).ok_or_else(|| bad("name"))?,
        last_delivered: text_of(&get("last-delivered-id"))
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| bad("last-delivered-id"))?,
        options: GroupOptions {
            policy,
            ack_wait_ms: int_of(&get("ack-wait-ms")),
            max_deliver,
            liveness_ms: int_of(&get("liveness-ms")).ok_or_else(|| bad("liveness-ms"))?,
        },
        consumers: Vec::new(),
    })
}

async fn run(client: &Client, cmd: &redis::Cmd) -> Result<Value, String> {
    retry_transient(|| client.raw(cmd))
        .await
        .map_err(|e| e.to_string())
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Writes the groups of `streams`, each followed by its pending entries.
pub(super) async fn write_groups(
    client: &Client,
    out: &mut Writer,
    streams: &[String],
    bar: &ProgressBar,
) -> Result<(), String> {
    let failed = |e: std::io::Error| e.to_string();
    for stream in streams {
        let key = stream.as_bytes();
        let listed = run(client, redis::cmd("FIRN.GROUPS").arg(key)).await;
        let groups = match listed {
            Ok(v) => items(v)?,
            // Emptied and gone since the listing: nothing to keep.
            Err(e) if e.contains("no such key") => continue,
            Err(e) => return Err(format!("stream {stream}: FIRN.GROUPS: {e}")),
        };
        for g in &groups {
            let mut group = group_of(g, key)?;
            let consumers = run(
                client,
                redis::cmd("XINFO")
                    .arg("CONSUMERS")
                    .arg(key)
                    .arg(&group.name),
            )
            .await?;
            for c in items(consumers)? {
                let name = pairs(&c)?
                    .into_iter()
                    .find(|(k, _)| k == "name")
                    .and_then(|(_, v)| bytes_of(&v))
                    .ok_or("XINFO CONSUMERS without a name")?;
                group.consumers.push(name);
            }
            let name = group.name.clone();
            out.line(&Line::Group(group)).map_err(failed)?;
            write_pending(client, out, key, &name).await?;
            bar.inc(1);
        }
    }
    Ok(())
}

/// The group's pending list, a page of XPENDING at a time.
async fn write_pending(
    client: &Client,
    out: &mut Writer,
    stream: &[u8],
    group: &[u8],
) -> Result<(), String> {
    let mut start = LogSeq::ZERO;
    loop {
        let page = run(
            client,
            redis::cmd("XPENDING")
                .arg(stream)
                .arg(group)
                .arg(start.to_string())
                .arg("+")
                .arg(PENDING_PAGE),
        )
        .await?;
        let now = now_ms();
        let entries = items(page)?;
        let full = entries.len() == PENDING_PAGE;
        for e in entries {
            let [id, consumer, idle, deliveries] = <[Value; 4]>::try_from(items(e)?)
                .map_err(|e| format!("an XPENDING entry of {} fields", e.len()))?;
            let id: LogSeq = text_of(&id)
                .and_then(|t| t.parse().ok())
                .ok_or("an XPENDING entry without its id")?;
            let line = PendingLine {
                id,
                consumer: bytes_of(&consumer).ok_or("an XPENDING entry without its consumer")?,
                deliveries: int_of(&deliveries).unwrap_or(0),
                delivered_ms: now.saturating_sub(int_of(&idle).unwrap_or(0)),
            };
            out.line(&Line::Pending(line)).map_err(|e| e.to_string())?;
            start = id.successor().unwrap_or(LogSeq::MAX);
        }
        if !full {
            return Ok(());
        }
    }
}

/// XGROUP CREATE's arguments after the id: MKSTREAM and the delivery options.
fn create_options(cmd: &mut redis::Cmd, o: &GroupOptions) {
    cmd.arg("MKSTREAM");
    match &o.policy {
        DeliveryPolicy::First => {}
        DeliveryPolicy::RoundRobin => {
            cmd.arg("POLICY").arg("roundrobin");
        }
        DeliveryPolicy::Hrw(GroupKey::Tag) => {
            cmd.arg("POLICY").arg("hrw").arg("KEYTAG");
        }
        DeliveryPolicy::Hrw(GroupKey::Field(f)) => {
            cmd.arg("POLICY").arg("hrw").arg("KEYFIELD").arg(f.as_ref());
        }
    }
    if let Some(ms) = o.ack_wait_ms {
        cmd.arg("ACKWAIT").arg(ms);
    }
    if let Some(m) = &o.max_deliver {
        cmd.arg("MAXDELIVER")
            .arg(m.deliveries)
            .arg("DEADLETTER")
            .arg(m.dead_letter.as_bytes());
    }
    cmd.arg("LIVENESS").arg(o.liveness_ms);
}

/// Makes a backup's groups in a cluster, in the file's order.
#[derive(Default)]
pub(super) struct GroupRestore {
    /// The group the pending lines belong to: (stream, group).
    current: Option<(Vec<u8>, Vec<u8>)>,
    claims: Option<(redis::Pipeline, usize)>,
    pub(super) groups: u64,
    /// Pending entries restored, and those left out (their entry is not in the stream).
    pub(super) pending: u64,
    pub(super) pending_left_out: u64,
}

impl GroupRestore {
    pub(super) async fn group(&mut self, client: &Client, g: &GroupLine) -> Result<(), String> {
        self.flush(client).await?;
        let what = format!("stream {} group {}", lossy(&g.stream), lossy(&g.name));
        let mut create = redis::cmd("XGROUP");
        create
            .arg("CREATE")
            .arg(&g.stream)
            .arg(&g.name)
            .arg(g.last_delivered.to_string());
        create_options(&mut create, &g.options);
        run(client, &create)
            .await
            .map_err(|e| format!("{what}: XGROUP CREATE: {e}"))?;
        for c in &g.consumers {
            let mut cmd = redis::cmd("XGROUP");
            cmd.arg("CREATECONSUMER").arg(&g.stream).arg(&g.name).arg(c);
            run(client, &cmd)
                .await
                .map_err(|e| format!("{what}: XGROUP CREATECONSUMER: {e}"))?;
        }
        self.current = Some((g.stream.clone(), g.name.clone()));
        self.groups += 1;
        Ok(())
    }

    pub(super) async fn pending(&mut self, client: &Client, p: &PendingLine) -> Result<(), String> {
        let (stream, group) = self
            .current
            .clone()
            .ok_or_else(|| format!("pending entry {} without its group", p.id))?;
        let (pipe, n) = self.claims.get_or_insert_with(|| (redis::pipe(), 0));
        pipe.cmd("XCLAIM")
            .arg(&stream)
            .arg(&group)
            .arg(&p.consumer)
            .arg(0)
            .arg(p.id.to_string())
            .arg("FORCE")
            .arg("RETRYCOUNT")
            .arg(p.deliveries)
            .arg("TIME")
            .arg(p.delivered_ms)
            .arg("JUSTID");
        *n += 1;
        if *n >= CLAIM_BATCH {
            self.flush(client).await?;
        }
        Ok(())
    }

    pub(super) async fn flush(&mut self, client: &Client) -> Result<(), String> {
        let Some((pipe, n)) = self.claims.take() else {
            return Ok(());
        };
        let answers = retry_transient(|| client.raw_pipeline(&pipe))
            .await
            .map_err(|e| format!("XCLAIM: {e}"))?;
        let claimed = answers
            .into_iter()
            .map(|a| items(a).map(|ids| ids.len() as u64))
            .sum::<Result<u64, String>>()?;
        self.pending += claimed;
        self.pending_left_out += n as u64 - claimed.min(n as u64);
        Ok(())
    }
}
