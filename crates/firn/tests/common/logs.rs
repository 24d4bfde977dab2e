//! Reading logs, streams and groups back in tests: a tag's records over HTTP (from its
//! trim point, at a time or now), the listing of every log, and RESP helpers for streams and
//! their groups.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use base64::Engine;
use redis::Value;
use serde_json::Value as Json;

/// A record as one tag reads it: its seq, tags and payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rec {
    pub seq: String,
    pub tags: Vec<String>,
    pub payload: Vec<u8>,
}

pub fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(30))
        .build()
}

pub fn segment(name: &str) -> String {
    name.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Every record of `tag` (at `at`, or now), from its trim point on.
pub fn read_tag(addr: &str, log: &str, tag: &str, at: Option<&str>) -> Vec<Rec> {
    let (mut out, mut from) = (Vec::new(), "0-0".to_string());
    loop {
        let url = format!(
            "http://{addr}/v1/log/{}/{}/range",
            segment(log),
            segment(tag)
        );
        let mut request = agent()
            .get(&url)
            .query("from", &from)
            .query("limit", "1000");
        if let Some(t) = at {
            request = request.query("at", t);
        }
        let page: Json = match request.call() {
            Ok(r) => r.into_json().unwrap(),
            Err(ureq::Error::Status(410, r)) => {
                let body: Json = r.into_json().unwrap();
                from = body["first_kept"].as_str().unwrap().to_string();
                continue;
            }
            Err(e) => panic!("{log} {tag}: {e}"),
        };
        let records = page["records"].as_array().unwrap();
        for r in records {
            let payload = match r["value"].as_str() {
                Some(v) => v.as_bytes().to_vec(),
                None => base64::engine::general_purpose::STANDARD
                    .decode(r["value_base64"].as_str().unwrap())
                    .unwrap(),
            };
            out.push(Rec {
                seq: r["seq"].as_str().unwrap().to_string(),
                tags: r["tags"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| t.as_str().unwrap().to_string())
                    .collect(),
                payload,
            });
        }
        if records.len() < 1000 {
            return out;
        }
        let (ms, n) = out.last().unwrap().seq.split_once('-').unwrap();
        from = format!("{ms}-{}", n.parse::<u64>().unwrap() + 1);
    }
}

/// Every (log, tag) row of the listing, `limit` rows a page, with its `len`.
pub fn list_tags(addr: &str, limit: usize) -> BTreeMap<(String, String), u64> {
    let (mut rows, mut cursor) = (BTreeMap::new(), None::<String>);
    loop {
        let mut request = agent()
            .get(&format!("http://{addr}/v1/logs"))
            .query("limit", &limit.to_string());
        if let Some(c) = &cursor {
            request = request.query("cursor", c);
        }
        let page: Json = request.call().unwrap().into_json().unwrap();
        let tags = page["tags"].as_array().unwrap();
        assert!(tags.len() <= limit, "{page}");
        for t in tags {
            let key = (
                t["log"].as_str().unwrap().to_string(),
                t["tag"].as_str().unwrap().to_string(),
            );
            let len = t["len"].as_u64().unwrap();
            assert!(rows.insert(key, len).is_none(), "listed twice: {t}");
        }
        cursor = page["next_cursor"].as_str().map(str::to_string);
        if cursor.is_none() {
            return rows;
        }
    }
}

pub fn redis_at(addr: &str) -> redis::Connection {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut conn = redis::Client::open(format!("redis://{addr}/"))
        .unwrap()
        .get_connection()
        .unwrap();
    // A fresh cluster answers CLUSTERDOWN until its shards have leaders.
    while redis::cmd("FIRN.LOGS").query::<Value>(&mut conn).is_err() {
        assert!(std::time::Instant::now() < deadline, "no leaders at {addr}");
        std::thread::sleep(Duration::from_millis(50));
    }
    conn
}

pub fn run(conn: &mut redis::Connection, args: &[&[u8]]) -> Value {
    let mut cmd = redis::cmd(std::str::from_utf8(args[0]).unwrap());
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(conn)
        .unwrap_or_else(|e| panic!("{:?}: {e}", String::from_utf8_lossy(args[1])))
}

pub fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        Value::Nil => "nil".into(),
        other => format!("{other:?}"),
    }
}

pub fn items(v: Value) -> Vec<Value> {
    match v {
        Value::Array(items) => items,
        other => panic!("not an array: {other:?}"),
    }
}

/// XINFO GROUPS as (name → field → value), leaving out what a restore restarts (its
/// consumers' and pending counts are checked on their own; entries-read and lag start
/// unknown).
pub fn groups_of(
    conn: &mut redis::Connection,
    stream: &str,
) -> BTreeMap<String, Vec<(String, String)>> {
    let groups = items(run(conn, &[b"XINFO", b"GROUPS", stream.as_bytes()]));
    groups
        .into_iter()
        .map(|g| {
            let fields: Vec<(String, String)> = items(g)
                .chunks(2)
                .map(|kv| (text(&kv[0]), text(&kv[1])))
                .filter(|(k, _)| {
                    !["entries-read", "lag", "pending", "consumers"].contains(&k.as_str())
                })
                .collect();
            (fields[0].1.clone(), fields)
        })
        .collect()
}

/// A group's pending entries: id → (consumer, deliveries, idle ms).
pub fn pending_of(
    conn: &mut redis::Connection,
    stream: &str,
    group: &str,
) -> BTreeMap<String, (String, u64, u64)> {
    let args: [&[u8]; 6] = [
        b"XPENDING",
        stream.as_bytes(),
        group.as_bytes(),
        b"-",
        b"+",
        b"1000",
    ];
    items(run(conn, &args))
        .into_iter()
        .map(|e| {
            let e = items(e);
            let n = |v: &Value| text(v).parse::<u64>().unwrap();
            (text(&e[0]), (text(&e[1]), n(&e[3]), n(&e[2])))
        })
        .collect()
}

pub fn consumers_of(conn: &mut redis::Connection, stream: &str, group: &str) -> BTreeSet<String> {
    items(run(
        conn,
        &[b"XINFO", b"CONSUMERS", stream.as_bytes(), group.as_bytes()],
    ))
    .into_iter()
    .map(|c| text(&items(c)[1]))
    .collect()
}
