//! Random HTTP requests built from the node's own OpenAPI document: every operation it
//! names, with path segments, query parameters, headers and bodies drawn from what the
//! document says each takes — values in and out of range, of the wrong type, unknown
//! parameters, bodies that are not JSON or are too large. Each must be answered, with a
//! status the document lists for that operation and never 500, an error as the one JSON
//! shape (`{"error", "message"}`), and the node must still answer `/healthz` after it.
//!
//! A case is a list of numbers, each one choice (which operation, whether a parameter is
//! sent, which value); proptest shrinks a failing list toward zeros, and the first option of
//! every choice is the plainest, so a failure shrinks to the simplest request that still
//! fails. Seeded like the RESP fuzz: `FIRN_TEST_SEED` replays a run, `FIRN_FUZZ_COMMANDS`
//! sets how many requests it sends.

mod common;

use std::time::Duration;

use common::fuzz::{on_one_node, on_two_nodes, runner};
use proptest::test_runner::TestCaseError;
use serde_json::{Value as Json, json};

const OPENAPI: &str = include_str!("../src/http/openapi.json");

/// Path segments: plain, a nested key, escapes, a segment that is not UTF-8, one past the
/// key limit, numbers.
const SEGMENTS: &[&str] = &[
    "k",
    "room/1",
    "stream",
    "g",
    "x%20y",
    "%C3%A9t%C3%A9",
    "%FF%FE",
    "1",
    "-1",
    "18446744073709551616",
    "%00",
];
/// Integers in and out of every range the API states, and not integers at all.
const INTEGERS: &[&str] = &[
    "1",
    "0",
    "-1",
    "10",
    "100",
    "10001",
    "2147483648",
    "18446744073709551616",
    "1.5",
    "x",
    "",
];
/// How long to wait (a service's reply, a blocking log read): always sent, and never a wait
/// long enough to slow the run (an omitted `timeout_ms` waits 5 s), but out of range too.
const WAITS: &[&str] = &["1", "0", "-1", "3600001", "x", ""];
const WAIT_PARAMS: &[&str] = &["timeout_ms", "block_ms"];
/// Other text: words the API takes, times in each form it reads, entry ids, junk.
const TEXTS: &[&str] = &[
    "k",
    "",
    "room/",
    "*",
    "linearizable",
    "local",
    "lease",
    "true",
    "2026-01-01T00:00:00Z",
    "1700000000000000-0",
    "1700000000000000",
    "0-0",
    "0-1",
    "$",
    ">",
    "-",
    "+",
    "now",
    "%FF",
    "a%00b",
    "é",
    "yesterday",
];

/// One operation of the document.
#[derive(Debug)]
struct Operation {
    method: String,
    path: String,
    params: Vec<Param>,
    body: Body,
    /// The statuses the document lists for it.
    statuses: Vec<u16>,
}

#[derive(Debug)]
struct Param {
    name: String,
    within: Within,
    schema: Json,
}

#[derive(Debug, PartialEq)]
enum Within {
    Path,
    Query,
    Header,
}

#[derive(Debug)]
enum Body {
    None,
    Json(Json),
    Bytes,
}

/// The choices a case makes, in order; past its end every choice is the first option.
struct Choices<'a> {
    list: &'a [u32],
    next: usize,
}

impl Choices<'_> {
    fn pick(&mut self, n: usize) -> usize {
        let c = self.list.get(self.next).copied().unwrap_or(0);
        self.next += 1;
        c as usize % n.max(1)
    }

    fn one_of<'b, T>(&mut self, options: &'b [T]) -> &'b T {
        &options[self.pick(options.len())]
    }

    /// True one time in `n`.
    fn now_and_then(&mut self, n: usize) -> bool {
        self.pick(n) == n - 1
    }
}

/// What `value` points to, following a `$ref` into the document.
fn resolve<'a>(doc: &'a Json, value: &'a Json) -> &'a Json {
    match value["$ref"].as_str() {
        Some(r) => resolve(
            doc,
            doc.pointer(r.trim_start_matches('#'))
                .unwrap_or(&Json::Null),
        ),
        None => value,
    }
}

fn operations(doc: &Json) -> Vec<Operation> {
    let mut all = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        let shared = item["parameters"].as_array().cloned().unwrap_or_default();
        for (method, op) in item.as_object().unwrap() {
            if method == "parameters" {
                continue;
            }
            let params = shared
                .iter()
                .chain(op["parameters"].as_array().into_iter().flatten())
                .map(|p| resolve(doc, p))
                .filter_map(|p| {
                    let within = match p["in"].as_str()? {
                        "path" => Within::Path,
                        "query" => Within::Query,
                        "header" => Within::Header,
                        _ => return None,
                    };
                    Some(Param {
                        name: p["name"].as_str()?.to_string(),
                        within,
                        schema: resolve(doc, &p["schema"]).clone(),
                    })
                })
                .collect();
            let content = &resolve(doc, &op["requestBody"])["content"];
            let body = if let Some(schema) = content.get("application/json") {
                Body::Json(schema["schema"].clone())
            } else if content.is_object() {
                Body::Bytes
            } else {
                Body::None
            };
            let statuses = op["responses"]
                .as_object()
                .unwrap()
                .keys()
                .filter_map(|k| k.parse().ok())
                .collect();
            all.push(Operation {
                method: method.to_uppercase(),
                path: path.clone(),
                params,
                body,
                statuses,
            });
        }
    }
    all
}

/// A value for a parameter, as text.
fn text_for(schema: &Json, doc: &Json, c: &mut Choices) -> String {
    let schema = resolve(doc, schema);
    if let Some(values) = schema["enum"].as_array()
        && !c.now_and_then(4)
    {
        let v = c.one_of(values);
        return v.as_str().map_or_else(|| v.to_string(), str::to_string);
    }
    match schema["type"].as_str() {
        Some("integer" | "number") => c.one_of(INTEGERS).to_string(),
        Some("boolean") => c.one_of(&["true", "false", "1", "maybe"]).to_string(),
        _ => c.one_of(TEXTS).to_string(),
    }
}

/// A JSON value for `schema`: mostly of its shape, now and then of another.
fn json_for(schema: &Json, doc: &Json, c: &mut Choices, depth: usize) -> Json {
    let schema = resolve(doc, schema);
    if depth > 4 || c.now_and_then(12) {
        return c
            .one_of(&[
                json!(null),
                json!(-1),
                json!(1e300),
                json!("x"),
                json!([]),
                json!({}),
            ])
            .clone();
    }
    if let Some(values) = schema["enum"].as_array() {
        return c.one_of(values).clone();
    }
    if let Some(alternatives) = schema["oneOf"].as_array().or(schema["anyOf"].as_array()) {
        return json_for(c.one_of(alternatives), doc, c, depth + 1);
    }
    match schema["type"].as_str() {
        Some("object") => {
            let mut object = serde_json::Map::new();
            for (name, property) in schema["properties"].as_object().into_iter().flatten() {
                if !c.now_and_then(4) {
                    object.insert(name.clone(), json_for(property, doc, c, depth + 1));
                }
            }
            if c.now_and_then(10) {
                object.insert("unknown".into(), json!(1));
            }
            Json::Object(object)
        }
        Some("array") => (0..c.pick(4))
            .map(|_| json_for(&schema["items"], doc, c, depth + 1))
            .collect(),
        Some("integer" | "number") => c
            .one_of(&[
                json!(1),
                json!(0),
                json!(-1),
                json!(10001),
                json!(u64::MAX),
                json!(1.5),
            ])
            .clone(),
        Some("boolean") => json!(c.pick(2) == 0),
        _ => json!(c.one_of(TEXTS)),
    }
}

/// A request for `op`, made of `c`'s choices: its path and query, headers, body.
struct Request {
    method: String,
    url: String,
    headers: Vec<(String, String)>,
    body: Option<Vec<u8>>,
}

fn request(base: &str, op: &Operation, doc: &Json, c: &mut Choices) -> Request {
    let mut path = op.path.clone();
    let mut query = Vec::new();
    let mut headers = Vec::new();
    for p in &op.params {
        match p.within {
            Within::Path => {
                let segment = match p.schema["enum"].as_array() {
                    Some(_) if !c.now_and_then(4) => text_for(&p.schema, doc, c),
                    _ => c.one_of(SEGMENTS).to_string(),
                };
                // Only a key's path takes slashes (the rest of the path is the key); elsewhere
                // one would make the path another endpoint's.
                let takes_slashes = ["/v1/kv/", "/v1/history/"]
                    .iter()
                    .any(|p| op.path.starts_with(p));
                let segment = if takes_slashes {
                    segment
                } else {
                    segment.replace('/', "%2F")
                };
                path = path.replace(&format!("{{{}}}", p.name), &segment);
            }
            Within::Query if WAIT_PARAMS.contains(&p.name.as_str()) => {
                query.push(format!("{}={}", p.name, c.one_of(WAITS)));
            }
            Within::Query if !c.now_and_then(3) => {
                let repeats = if p.schema["type"] == "array" {
                    *c.one_of(&[1, 2, 0, 1001])
                } else {
                    1
                };
                let value = match p.schema["type"].as_str() {
                    Some("array") => text_for(&p.schema["items"], doc, c),
                    _ => text_for(&p.schema, doc, c),
                };
                for _ in 0..repeats {
                    query.push(format!("{}={}", p.name, value));
                }
            }
            Within::Header if c.now_and_then(4) => {
                // A header carries visible ASCII (the client sends nothing else).
                let value = text_for(&p.schema, doc, c);
                let value = if value.bytes().all(|b| b.is_ascii_graphic()) {
                    value
                } else {
                    "junk".into()
                };
                headers.push((p.name.clone(), value));
            }
            _ => {}
        }
    }
    if c.now_and_then(8) {
        query.push("unknown=1".into());
    }
    let body = match &op.body {
        Body::None => None,
        Body::Json(schema) => Some(match c.pick(8) {
            7 => c.one_of(&["{", "", "[]", "\u{0}"]).as_bytes().to_vec(),
            // Large, but not so large that a node answering before it reads the body (a
            // bad path segment) would close the connection on a body still being sent.
            6 => vec![b' '; 256 << 10],
            _ => serde_json::to_vec(&json_for(schema, doc, c, 0)).unwrap(),
        }),
        Body::Bytes => Some(vec![b'v'; *c.one_of(&[5, 0, 70_000])]),
    };
    // JSON says so, but now and then a small body does not (refused before it is read: a
    // large one would still be on its way when the node answers and closes).
    if matches!(op.body, Body::Json(_))
        && !(body.as_ref().is_some_and(|b| b.len() < 1024) && c.now_and_then(6))
    {
        headers.push(("Content-Type".into(), "application/json".into()));
    }
    let query = if query.is_empty() {
        String::new()
    } else {
        format!("?{}", query.join("&"))
    };
    Request {
        method: op.method.clone(),
        url: format!("{base}{path}{query}"),
        headers,
        body,
    }
}

/// Sends `r`: its status, and its body unless it is an event stream (a watch), which is
/// left unread. `None` for a large body the node refused before reading it (a bad header or
/// path): it answers and closes the connection, and the client, still sending, sees that
/// and not the answer.
fn send(agent: &ureq::Agent, r: &Request) -> Result<Option<(u16, Option<String>)>, String> {
    let mut req = agent.request(&r.method, &r.url);
    for (name, value) in &r.headers {
        req = req.set(name, value);
    }
    let result = match &r.body {
        Some(b) => req.send_bytes(b),
        None => req.call(),
    };
    let response = match result {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(ureq::Error::Transport(t))
            if t.kind() == ureq::ErrorKind::Io
                && r.body.as_ref().is_some_and(|b| b.len() > 64 << 10) =>
        {
            return Ok(None);
        }
        Err(e) => return Err(format!("no answer: {e}")),
    };
    let status = response.status();
    if response.content_type() == "text/event-stream" {
        return Ok(Some((status, None)));
    }
    let text = response
        .into_string()
        .map_err(|e| format!("the body of a {status} could not be read: {e}"))?;
    Ok(Some((status, Some(text))))
}

/// Whether an answer is what the document promises for `op`.
fn check(op: &Operation, status: u16, body: Option<&str>) -> Result<(), String> {
    if status >= 500 && !op.statuses.contains(&status) || status == 500 {
        return Err(format!("status {status}: {}", body.unwrap_or("")));
    }
    if !op.statuses.contains(&status) {
        return Err(format!(
            "status {status}, which the document does not list for {} {} ({:?}): {}",
            op.method,
            op.path,
            op.statuses,
            body.unwrap_or("")
        ));
    }
    if status >= 400 {
        let error: Json = serde_json::from_str(body.unwrap_or(""))
            .map_err(|e| format!("a {status} whose body is not JSON ({e}): {body:?}"))?;
        if !error["error"].is_string() || !error["message"].is_string() {
            return Err(format!("a {status} not in the error shape: {error}"));
        }
    }
    Ok(())
}

#[test]
fn random_requests_from_the_openapi_document_are_each_answered_as_it_says() {
    on_one_node("http fuzz (one node)", 400, fuzz);
}

/// The same on one node of two with four shards: requests for keys on the other node's
/// shards are forwarded, those over several shards split and merged.
#[test]
fn random_requests_across_shards_and_nodes_are_each_answered_as_it_says() {
    on_two_nodes("http fuzz (two nodes)", 200, fuzz);
}

/// Sends `cases` random requests to `node`, each of which must be answered as the document
/// says, the node's health answering after each.
fn fuzz(_rt: &tokio::runtime::Runtime, node: &firn_node::RunningNode, seed: u64, cases: u32) {
    let doc: Json = serde_json::from_str(OPENAPI).unwrap();
    let ops = operations(&doc);
    assert!(
        ops.len() > 30,
        "the document names {} operations",
        ops.len()
    );
    let base = format!("http://{}", node.http_addr);
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(30))
        .build();
    // Something for reads to find: a key, a stream with a group, a log record.
    for (method, path, body) in [
        ("PUT", "/v1/kv/k", &b"v"[..]),
        (
            "POST",
            "/v1/log/stream",
            b"{\"tags\":[\"t\"],\"data\":\"x\"}",
        ),
        (
            "POST",
            "/v1/streams/stream/groups",
            b"{\"group\":\"g\",\"from\":\"0\"}",
        ),
    ] {
        let r = Request {
            method: method.into(),
            url: format!("{base}{path}"),
            headers: Vec::new(),
            body: Some(body.to_vec()),
        };
        send(&agent, &r).unwrap().expect("answered");
    }
    // How many answers of each status (0: refused before the body was read).
    let statuses = std::sync::Mutex::new(std::collections::BTreeMap::<u16, u32>::new());
    let choices = proptest::collection::vec(proptest::num::u32::ANY, 0..40);
    let result = runner(seed, cases).run(&choices, |list| {
        let mut c = Choices {
            list: &list,
            next: 0,
        };
        let op = c.one_of(&ops);
        let r = request(&base, op, &doc, &mut c);
        let shown = format!(
            "{} {} (headers {:?}, a body of {} bytes)",
            r.method,
            r.url,
            r.headers,
            r.body.as_ref().map_or(0, Vec::len)
        );
        let answered =
            send(&agent, &r).map_err(|e| TestCaseError::fail(format!("{shown}: {e}")))?;
        if let Some((status, body)) = &answered {
            check(op, *status, body.as_deref())
                .map_err(|e| TestCaseError::fail(format!("{shown}: {e}")))?;
        }
        *statuses
            .lock()
            .unwrap()
            .entry(answered.map_or(0, |(s, _)| s))
            .or_insert(0) += 1;
        let health = agent.get(&format!("{base}/healthz")).call();
        if !matches!(&health, Ok(h) if h.status() == 200) {
            return Err(TestCaseError::fail(format!(
                "after {shown} the node's health answered {health:?}"
            )));
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e} (seed {seed})");
    }
    let statuses = statuses.into_inner().unwrap();
    eprintln!("http fuzz: {cases} requests, by status: {statuses:?}");
    // Both must be common, or the values miss what the endpoints take.
    let (ok, refused): (u32, u32) = statuses
        .iter()
        .fold((0, 0), |(ok, refused), (s, n)| match s {
            200..=299 => (ok + n, refused),
            400..=499 => (ok, refused + n),
            _ => (ok, refused),
        });
    assert!(ok > cases / 10, "only {ok} of {cases} succeeded");
    assert!(refused > cases / 10, "only {refused} of {cases} refused");
}

/// The check fails what the document does not promise: a 500, a status it does not list, an
/// error that is not JSON or not in the error shape.
#[test]
fn the_check_refuses_answers_the_document_does_not_promise() {
    let op = Operation {
        method: "GET".into(),
        path: "/v1/x".into(),
        params: Vec::new(),
        body: Body::None,
        statuses: vec![200, 400, 500],
    };
    let error = r#"{"error":"ERR","message":"no"}"#;
    assert_eq!(check(&op, 200, Some("{}")), Ok(()));
    assert_eq!(check(&op, 400, Some(error)), Ok(()));
    assert!(
        check(&op, 500, Some(error)).is_err(),
        "a 500, listed or not"
    );
    assert!(check(&op, 404, Some(error)).is_err(), "a status not listed");
    assert!(check(&op, 400, Some("")).is_err(), "an empty error");
    assert!(check(&op, 400, Some(r#"{"error":1}"#)).is_err());
}
