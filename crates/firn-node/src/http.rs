//! The HTTP/JSON front end: parses into the same typed requests the RESP front end does and
//! calls the same router. Values travel as raw bytes, metadata in `Firn-*` headers.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;

use axum::Router as HttpRouter;
use axum::body::Bytes;
use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response as HttpResponse};
use axum::routing::{delete, get, post};
use base64::Engine;
use firn_model::limits::{PAGE_ITEMS_DEFAULT, VALUE_BYTES_MAX_CEILING};
use firn_model::time::{micros_to_rfc3339, parse_duration_us, parse_micros, parse_read_time};
use firn_model::{
    AdminRequest, Answer, CommitTs, FirnError, Key, KeyRange, KeyspaceSpec, KvRead, KvWrite,
    PutRequest, ReadAt, ReadConsistency, Request, Response, SnapshotOf, TruncateBefore,
    VersionInfo, WatchFrom, WatchRequest, WriteCondition, Written,
};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{Value as Json, json};

use crate::router::Router;
use crate::session::Session as ClientSession;

type Params = Query<HashMap<String, String>>;

/// How long a node's shutdown waits for HTTP answers in progress; open watch streams end at
/// once when it begins.
pub const SHUTDOWN_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The node is stopping: open watch streams end.
#[derive(Clone)]
struct Stopping(tokio::sync::watch::Receiver<bool>);

pub fn routes(router: Arc<Router>, stop: tokio::sync::watch::Receiver<bool>) -> HttpRouter {
    HttpRouter::new()
        .route("/v1/kv/{*key}", get(get_kv).put(put_kv).delete(delete_kv))
        .route("/v1/history/{*key}", get(history))
        .route("/v1/scan", get(scan))
        .route("/v1/mget", get(mget))
        .route("/v1/snapshot", get(snapshot))
        .route("/v1/watch", get(watch))
        .route("/v1/truncate", post(truncate))
        .route("/v1/keyspaces", get(list_keyspaces).post(create_keyspace))
        .route(
            "/v1/keyspaces/{*prefix}",
            axum::routing::delete(drop_keyspace),
        )
        .route("/v1/cluster", get(cluster))
        .route("/v1/cluster/nodes/{id}", delete(remove_node))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        // Bodies up to the ceiling reach the router, which states the configured limit.
        .layer(DefaultBodyLimit::max(VALUE_BYTES_MAX_CEILING + 1))
        .layer(axum::middleware::from_fn(sessions))
        .layer(axum::Extension(Stopping(stop)))
        .with_state(router)
}

/// The causality token a client sends back (`Firn-After`) and the one every answer carries
/// (`Firn-Token`): the same commit-stamp text RESP's `FIRN.TOKEN` and `FIRN.AFTER` use.
const AFTER_HEADER: &str = "firn-after";
const TOKEN_HEADER: &str = "firn-token";

/// One HTTP request's session: it comes after the client's token, and its answer carries
/// the newest stamp the client has now seen. HTTP has no connection state, so the client
/// keeps the token between requests.
#[derive(Clone)]
struct Session(Arc<std::sync::Mutex<ClientSession>>);

impl Session {
    /// Executes `request` after the client's token and raises the token to what it shows.
    async fn execute(&self, router: &Router, request: Request) -> Result<Answer, FirnError> {
        let ctx = self.lock().context();
        let result = router.execute(&ctx, request).await;
        self.lock().saw_result(result)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ClientSession> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Reads `Firn-After` into the request's [`Session`] and writes `Firn-Token` on its answer
/// (errors included: the token is then the one sent).
async fn sessions(
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> HttpResponse {
    let after = match request.headers().get(AFTER_HEADER).map(|v| {
        v.to_str()
            .map_err(|_| FirnError::BadTime("Firn-After is not text".into()))
            .and_then(|t| {
                t.parse::<CommitTs>()
                    .map_err(|e| FirnError::BadTime(format!("Firn-After: {e}")))
            })
    }) {
        None => None,
        Some(Ok(t)) => Some(t),
        Some(Err(e)) => return ApiError(e).into_response(),
    };
    let session = Session(Arc::new(std::sync::Mutex::new(ClientSession::after(after))));
    request.extensions_mut().insert(session.clone());
    let mut response = next.run(request).await;
    // Every answer carries the token, `0-0` before the client has seen any stamp (as
    // `FIRN.TOKEN` answers).
    let token = session.lock().token().unwrap_or(CommitTs::ZERO);
    if let Ok(v) = HeaderValue::from_str(&token.to_string()) {
        response.headers_mut().insert(TOKEN_HEADER, v);
    }
    response
}

/// A Firn error as an HTTP answer: its status and `{"error", "message", …}`.
struct ApiError(FirnError);

impl From<FirnError> for ApiError {
    fn from(e: FirnError) -> Self {
        ApiError(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> HttpResponse {
        let status =
            StatusCode::from_u16(self.0.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut body = json!({ "error": self.0.resp_code(), "message": self.0.to_string() });
        match &self.0 {
            FirnError::Conflict { current } => body["current_version"] = json!(current),
            FirnError::Compacted { oldest } => body["oldest_version"] = json!(oldest),
            _ => {}
        }
        (status, axum::Json(body)).into_response()
    }
}

type ApiResult<T> = Result<T, ApiError>;

/// A body that is not the JSON an endpoint takes: the same error shape as every other.
fn bad_json(rejection: JsonRejection) -> ApiError {
    ApiError(FirnError::BadArgument(format!(
        "request body: {}",
        rejection.body_text()
    )))
}

fn key_of(path: String) -> Result<Key, FirnError> {
    Key::new(Bytes::from(path))
}

fn param_u64(q: &HashMap<String, String>, name: &str) -> Result<Option<u64>, FirnError> {
    q.get(name)
        .map(|v| {
            v.parse::<u64>().map_err(|_| {
                FirnError::BadArgument(format!("{name} must be a non-negative integer, got '{v}'"))
            })
        })
        .transpose()
}

fn consistency(q: &HashMap<String, String>) -> Result<ReadConsistency, FirnError> {
    q.get("consistency")
        .map_or(Ok(ReadConsistency::Linearizable), |c| c.parse())
}

/// `version`, `as_of` or `event_time`: at most one.
fn read_at(q: &HashMap<String, String>) -> Result<ReadAt, FirnError> {
    let given: Vec<ReadAt> = [
        param_u64(q, "version")?.map(ReadAt::Version),
        q.get("as_of")
            .map(|t| parse_read_time(t))
            .transpose()?
            .map(ReadAt::AsOf),
        q.get("event_time")
            .map(|t| parse_micros(t))
            .transpose()?
            .map(ReadAt::EventTime),
    ]
    .into_iter()
    .flatten()
    .collect();
    match given.as_slice() {
        [] => Ok(ReadAt::Latest),
        [one] => Ok(*one),
        _ => Err(FirnError::BadArgument(
            "give at most one of version, as_of, event_time".into(),
        )),
    }
}

fn version_headers(info: &VersionInfo) -> HeaderMap {
    let mut h = HeaderMap::new();
    let mut set = |name: &'static str, value: String| {
        if let Ok(v) = HeaderValue::from_str(&value) {
            h.insert(name, v);
        }
    };
    set("firn-version", info.version.to_string());
    set("firn-commit-ts", info.commit_ts.to_string());
    if let Some(t) = info.event_time_us {
        set("firn-event-time", t.to_string());
    }
    h
}

/// A value in JSON: text when it is UTF-8, base64 otherwise.
fn value_json(value: &Option<bytes::Bytes>) -> (String, Json) {
    match value {
        None => ("value".into(), Json::Null),
        Some(v) => match std::str::from_utf8(v) {
            Ok(s) => ("value".into(), json!(s)),
            Err(_) => (
                "value_base64".into(),
                json!(base64::engine::general_purpose::STANDARD.encode(v)),
            ),
        },
    }
}

fn version_json(info: &VersionInfo) -> Json {
    let mut j = json!({
        "version": info.version,
        "commit_ts": info.commit_ts.to_string(),
        "commit_time": micros_to_rfc3339(info.commit_ts.wall_us),
        "event_time": info.event_time_us,
        "deleted": info.deleted,
        "size": info.size(),
    });
    let (field, value) = value_json(&info.value);
    j[field] = value;
    j
}

fn written_json(w: &Written) -> Json {
    json!({ "key": w.key.to_string(), "version": w.version, "commit_ts": w.commit_ts.to_string(), "existed": w.existed })
}

fn unexpected(r: Response) -> ApiError {
    ApiError(FirnError::Internal(format!("unexpected answer {r:?}")))
}

async fn get_kv(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    Path(key): Path<String>,
    Query(q): Params,
) -> ApiResult<HttpResponse> {
    let request = KvRead::Get {
        key: key_of(key)?,
        at: read_at(&q)?,
        consistency: consistency(&q)?,
    };
    let answer = session.execute(&router, request.into()).await?;
    match answer.response {
        Response::Value(Some(info)) => {
            let mut headers = version_headers(&info);
            // A local read says how far behind it may be.
            if let Some(stale) = answer.staleness {
                if let Ok(v) = HeaderValue::from_str(&stale.applied_through.to_string()) {
                    headers.insert("firn-applied-through", v);
                }
                headers.insert("firn-stale-at-most-us", HeaderValue::from(stale.at_most_us));
            }
            Ok((headers, info.value.unwrap_or_default()).into_response())
        }
        Response::Value(None) => Ok((StatusCode::NOT_FOUND, axum::Json(json!({"error": "NOTFOUND", "message": "no such key at the requested version or time"}))).into_response()),
        other => Err(unexpected(other)),
    }
}

async fn put_kv(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    Path(key): Path<String>,
    Query(q): Params,
    body: Bytes,
) -> ApiResult<HttpResponse> {
    let mut put = PutRequest::new(key_of(key)?, body);
    if let Some(v) = param_u64(&q, "if_version")? {
        put.condition = WriteCondition::IfVersion(v);
    }
    put.event_time_us = q.get("event_time").map(|t| parse_micros(t)).transpose()?;
    match session
        .execute(&router, KvWrite::Put(put).into())
        .await?
        .response
    {
        Response::Written(w) if !w.is_empty() => {
            let mut headers = HeaderMap::new();
            headers.insert("firn-version", HeaderValue::from(w[0].version));
            if let Ok(v) = HeaderValue::from_str(&w[0].commit_ts.to_string()) {
                headers.insert("firn-commit-ts", v);
            }
            Ok((headers, axum::Json(written_json(&w[0]))).into_response())
        }
        other => Err(unexpected(other)),
    }
}

async fn delete_kv(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    Path(key): Path<String>,
) -> ApiResult<axum::Json<Json>> {
    match session
        .execute(
            &router,
            KvWrite::Delete {
                keys: vec![key_of(key)?],
            }
            .into(),
        )
        .await?
        .response
    {
        Response::Written(w) if !w.is_empty() => Ok(axum::Json(written_json(&w[0]))),
        other => Err(unexpected(other)),
    }
}

async fn history(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    Path(key): Path<String>,
    Query(q): Params,
) -> ApiResult<axum::Json<Json>> {
    let request: Request = KvRead::History {
        key: key_of(key)?,
        from: param_u64(&q, "from")?.unwrap_or(1),
        to: param_u64(&q, "to")?,
        limit: param_u64(&q, "limit")?.map_or(PAGE_ITEMS_DEFAULT, |l| l as usize),
        as_of: q.get("as_of").map(|t| parse_read_time(t)).transpose()?,
        consistency: consistency(&q)?,
    }
    .into();
    match session.execute(&router, request).await?.response {
        Response::History(h) => Ok(axum::Json(
            json!({ "versions": h.iter().map(version_json).collect::<Vec<_>>() }),
        )),
        other => Err(unexpected(other)),
    }
}

async fn scan(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    Query(q): Params,
) -> ApiResult<axum::Json<Json>> {
    let at = read_at(&q)?;
    if matches!(at, ReadAt::Version(_)) {
        return Err(
            FirnError::BadArgument("scan takes as_of or event_time, not version".into()).into(),
        );
    }
    let request: Request = KvRead::Scan {
        prefix: Bytes::from(q.get("prefix").cloned().unwrap_or_default()),
        cursor: q
            .get("cursor")
            .filter(|c| !c.is_empty())
            .map(|c| Bytes::from(c.clone())),
        limit: param_u64(&q, "limit")?.map_or(PAGE_ITEMS_DEFAULT, |l| l as usize),
        pattern: q.get("match").map(|m| Bytes::from(m.clone())),
        at,
        consistency: consistency(&q)?,
    }
    .into();
    match session.execute(&router, request).await?.response {
        Response::Scan { keys, next_cursor } => Ok(axum::Json(scan_page_json(&keys, next_cursor))),
        other => Err(unexpected(other)),
    }
}

/// A page of keys: `{keys: [{key, version, …}], next_cursor}`.
fn scan_page_json(keys: &[(Key, VersionInfo)], next_cursor: Option<Bytes>) -> Json {
    json!({
        "keys": keys.iter().map(|(k, info)| { let mut j = version_json(info); j["key"] = json!(k.to_string()); j }).collect::<Vec<_>>(),
        "next_cursor": next_cursor.map(|c| String::from_utf8_lossy(&c).into_owned()),
    })
}

/// Keys asked for, each with what was found: `{values: [{key, found: {…} | null}]}`.
fn values_json(keys: &[Key], values: Vec<Option<VersionInfo>>) -> Json {
    json!({
        "values": keys.iter().zip(values).map(|(k, v)| json!({"key": k.to_string(), "found": v.as_ref().map(version_json)})).collect::<Vec<_>>()
    })
}

/// The repeated `key` parameters (`?key=a&key=b`, so the query is read as a list of pairs),
/// and the other parameters.
fn keys_and_params(
    pairs: Vec<(String, String)>,
) -> Result<(Vec<Key>, HashMap<String, String>), FirnError> {
    let keys = pairs
        .iter()
        .filter(|(n, _)| n == "key")
        .map(|(_, k)| key_of(k.clone()))
        .collect::<Result<_, _>>()?;
    let params = pairs.into_iter().filter(|(n, _)| n != "key").collect();
    Ok((keys, params))
}

async fn mget(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    Query(pairs): Query<Vec<(String, String)>>,
) -> ApiResult<axum::Json<Json>> {
    let (keys, q) = keys_and_params(pairs)?;
    let request: Request = KvRead::MGet {
        keys: keys.clone(),
        at: read_at(&q)?,
        consistency: consistency(&q)?,
    }
    .into();
    match session.execute(&router, request).await?.response {
        Response::Values(values) => Ok(axum::Json(values_json(&keys, values))),
        other => Err(unexpected(other)),
    }
}

/// `?key=a&key=b` or `?prefix=p[&cursor=c][&limit=n]`, with `at=T` or (without) the newest
/// time every shard involved has closed.
async fn snapshot(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    Query(pairs): Query<Vec<(String, String)>>,
) -> ApiResult<axum::Json<Json>> {
    let (keys, q) = keys_and_params(pairs)?;
    let of = match (keys.is_empty(), q.get("prefix")) {
        (false, None) => SnapshotOf::Keys(keys.clone()),
        (true, Some(prefix)) => SnapshotOf::Prefix {
            prefix: Bytes::from(prefix.clone()),
            cursor: q
                .get("cursor")
                .filter(|c| !c.is_empty())
                .map(|c| Bytes::from(c.clone())),
            limit: param_u64(&q, "limit")?.map_or(PAGE_ITEMS_DEFAULT, |l| l as usize),
        },
        _ => {
            return Err(FirnError::BadArgument(
                "a snapshot reads either keys (key=…, repeated) or one prefix (prefix=…)".into(),
            )
            .into());
        }
    };
    let at = q.get("at").map(|t| parse_read_time(t)).transpose()?;
    match session
        .execute(&router, KvRead::Snapshot { of, at }.into())
        .await?
        .response
    {
        Response::Snapshot { at, read } => {
            let mut body = match *read {
                Response::Values(values) => values_json(&keys, values),
                Response::Scan { keys, next_cursor } => scan_page_json(&keys, next_cursor),
                other => return Err(unexpected(other)),
            };
            body["at"] = json!(at.to_string());
            body["at_time"] = json!(micros_to_rfc3339(at.wall_us));
            Ok(axum::Json(body))
        }
        other => Err(unexpected(other)),
    }
}

async fn watch(
    State(router): State<Arc<Router>>,
    axum::Extension(Stopping(mut stop)): axum::Extension<Stopping>,
    Query(q): Params,
) -> ApiResult<HttpResponse> {
    let target = match (q.get("key"), q.get("prefix")) {
        (Some(k), None) => KeyRange::Key(key_of(k.clone())?),
        (None, Some(p)) => KeyRange::Prefix(Bytes::from(p.clone())),
        _ => return Err(FirnError::BadArgument("give exactly one of key, prefix".into()).into()),
    };
    let from = match (param_u64(&q, "from_version")?, q.get("from_time")) {
        (None, None) => WatchFrom::Now,
        (Some(v), None) => WatchFrom::Version(v),
        (None, Some(t)) => WatchFrom::Time(parse_read_time(t)?),
        _ => {
            return Err(FirnError::BadArgument(
                "give at most one of from_version, from_time".into(),
            )
            .into());
        }
    };
    let stream = router.watch(WatchRequest { target, from }).await?;
    let events = futures::stream::unfold(stream, |mut stream| async move {
        let item = stream.next().await?;
        Some((Ok::<_, Infallible>(sse_event(item)), stream))
    })
    // The stream ends when the node stops, so that its shutdown is not held open.
    .take_until(async move {
        let _ = stop.wait_for(|stopping| *stopping).await;
    });
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response())
}

fn sse_event(item: Result<firn_model::WatchEvent, FirnError>) -> Event {
    match item {
        Ok(e) => {
            let mut j = version_json(&e.info);
            j["key"] = json!(e.key.to_string());
            Event::default()
                .event(if e.info.deleted { "del" } else { "put" })
                .data(j.to_string())
        }
        Err(err) => Event::default()
            .event("error")
            .data(json!({"error": err.resp_code(), "message": err.to_string()}).to_string()),
    }
}

#[derive(Deserialize)]
struct TruncateBody {
    key: Option<String>,
    prefix: Option<String>,
    before_version: Option<u64>,
    before_time: Option<String>,
}

async fn truncate(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    body: Result<axum::Json<TruncateBody>, JsonRejection>,
) -> ApiResult<axum::Json<Json>> {
    let axum::Json(body) = body.map_err(bad_json)?;
    let target = match (body.key, body.prefix) {
        (Some(k), None) => KeyRange::Key(key_of(k)?),
        (None, Some(p)) => KeyRange::Prefix(Bytes::from(p)),
        _ => return Err(FirnError::BadArgument("give exactly one of key, prefix".into()).into()),
    };
    let before = match (body.before_version, body.before_time) {
        (Some(v), None) => TruncateBefore::Version(v),
        (None, Some(t)) => TruncateBefore::Time(parse_read_time(&t)?),
        _ => {
            return Err(FirnError::BadArgument(
                "give exactly one of before_version, before_time".into(),
            )
            .into());
        }
    };
    match session
        .execute(&router, KvWrite::Truncate { target, before }.into())
        .await?
        .response
    {
        Response::Truncated { versions_removed } => {
            Ok(axum::Json(json!({ "versions_removed": versions_removed })))
        }
        other => Err(unexpected(other)),
    }
}

fn keyspace_json(s: &KeyspaceSpec) -> Json {
    json!({ "prefix": s.prefix, "mode": s.mode.to_string(), "max_versions": s.max_versions, "max_age_us": s.max_age_us, "durability": "disk" })
}

async fn list_keyspaces(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
) -> ApiResult<axum::Json<Json>> {
    match session
        .execute(&router, AdminRequest::KeyspaceList.into())
        .await?
        .response
    {
        Response::Keyspaces(specs) => Ok(axum::Json(
            json!({ "keyspaces": specs.iter().map(keyspace_json).collect::<Vec<_>>() }),
        )),
        other => Err(unexpected(other)),
    }
}

#[derive(Deserialize)]
struct KeyspaceBody {
    prefix: String,
    mode: Option<String>,
    max_versions: Option<u64>,
    /// Seconds, or a duration with units (`7d`).
    max_age: Option<Json>,
    durability: Option<String>,
}

async fn create_keyspace(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    body: Result<axum::Json<KeyspaceBody>, JsonRejection>,
) -> ApiResult<(StatusCode, axum::Json<Json>)> {
    let axum::Json(body) = body.map_err(bad_json)?;
    let mut spec = KeyspaceSpec {
        prefix: body.prefix,
        ..KeyspaceSpec::default_keyspace()
    };
    if let Some(m) = body.mode {
        spec.mode = m.parse()?;
    }
    spec.max_versions = body.max_versions;
    spec.max_age_us = match body.max_age {
        None | Some(Json::Null) => None,
        Some(Json::Number(n)) => Some(parse_duration_us(&n.to_string())?),
        Some(Json::String(s)) => Some(parse_duration_us(&s)?),
        Some(other) => {
            return Err(FirnError::BadArgument(format!(
                "max_age must be seconds or a duration like \"7d\", not {other}"
            ))
            .into());
        }
    };
    if let Some(d) = body.durability {
        spec.durability = d.parse()?;
    }
    session
        .execute(&router, AdminRequest::KeyspaceCreate(spec.clone()).into())
        .await?;
    Ok((StatusCode::CREATED, axum::Json(keyspace_json(&spec))))
}

async fn drop_keyspace(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    Path(prefix): Path<String>,
) -> ApiResult<StatusCode> {
    session
        .execute(&router, AdminRequest::KeyspaceDrop { prefix }.into())
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// This node's replicas (`shards`, as in /healthz) and the whole cluster as this node sees
/// it (`nodes`, `cluster`).
async fn cluster(State(router): State<Arc<Router>>) -> axum::Json<Json> {
    let view = router.cluster_view().await;
    axum::Json(
        json!({ "node_id": router.node_id(), "shards": router.replicas().status(), "cluster": view }),
    )
}

/// Starts removing a node: 202, the move goes on in the background (see /v1/cluster).
async fn remove_node(
    State(router): State<Arc<Router>>,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    let id = id
        .parse()
        .map_err(|_| FirnError::BadArgument(format!("node id '{id}' is not a number")))?;
    router.remove_node(id).await?;
    Ok(StatusCode::ACCEPTED)
}

async fn healthz(State(router): State<Arc<Router>>) -> HttpResponse {
    let status = router.replicas().status();
    let serving = status.iter().all(|s| s.leader.is_some());
    let code = if serving {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        code,
        axum::Json(
            json!({ "status": if serving { "ok" } else { "unavailable" }, "shards": status }),
        ),
    )
        .into_response()
}

async fn metrics() -> String {
    crate::metrics::handle().render()
}
