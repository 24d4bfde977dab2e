//! The HTTP/JSON front end: parses into the same typed requests the RESP front end does and
//! calls the same router, in one session per request. Values travel as raw bytes, metadata
//! in `Firn-*` headers. Endpoints by subsystem: [`kv`], [`fs`] (the file view), [`log`], [`groups`] and
//! [`group_events`], [`service`], [`watch`], [`functions`], [`admin`]; the web page in
//! [`ui`], the API's description in [`openapi`].

mod admin;
pub mod bodies;
pub mod fs;
mod functions;
mod group_events;
mod groups;
pub mod headers;
mod json;
mod kv;
pub(crate) mod linger;
mod log;
mod openapi;
#[doc(hidden)]
pub mod params;
mod query;
mod service;
#[doc(hidden)]
mod twin;
pub mod txn;
mod ui;
mod watch;
mod watermark;

use self::admin::{
    cluster, create_keyspace, drop_keyspace, healthz, list_keyspaces, local_region, metrics,
    remove_node,
};
use self::group_events::{EventStreams, events};
use self::groups::{
    ack, autoclaim, claim, consumers, create, destroy, groups, pending, read_group,
};
use self::kv::{delete_kv, get_kv, history, mget, put_kv, scan, snapshot, truncate};
use self::log::{append, read, tag_info, tags, trim};
use self::watch::watch;

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router as HttpRouter;
use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, Query};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response as HttpResponse};
use axum::routing::{delete, get, post};
use firn_model::limits::VALUE_BYTES_MAX_CEILING;
use firn_model::{Answer, CommitTs, FirnError, Request, Response};
use serde_json::json;

use crate::auth::Principal;
use crate::router::Router;
use crate::session::Session as ClientSession;

type Params = Query<HashMap<String, String>>;

/// How long a node's shutdown waits for HTTP answers in progress; open watch streams end at
/// once when it begins.
pub const SHUTDOWN_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The node is stopping: open watch streams end.
#[derive(Clone)]
struct Stopping(tokio::sync::watch::Receiver<bool>);

/// The most an endpoint reads of a body it takes whole (JSON, a service's payload): one byte
/// over the values' ceiling, so that a value over it reaches the router, which states the
/// configured limit.
const BODY_BYTES_MAX: usize = VALUE_BYTES_MAX_CEILING + 1;

pub fn routes(router: Arc<Router>, stop: tokio::sync::watch::Receiver<bool>) -> HttpRouter {
    HttpRouter::new()
        .route("/v1/kv/{*key}", get(get_kv).put(put_kv).delete(delete_kv))
        .route("/v1/fs", get(fs::root))
        .route("/v1/fs/", get(fs::root))
        .route("/v1/fs/{*path}", get(fs::read))
        .route("/v1/history/{*key}", get(history))
        .route("/v1/scan", get(scan))
        .route("/v1/mget", get(mget))
        .route("/v1/snapshot", get(snapshot))
        .route("/v1/watch", get(watch))
        .route("/v1/truncate", post(truncate))
        .route("/v1/txn", post(txn::txn))
        .route("/v1/logs", get(tags))
        .route("/v1/log/{log}", post(append).delete(trim))
        .route("/v1/log/{log}/{tag}", get(tag_info))
        .route("/v1/log/{log}/{tag}/{read}", get(read))
        .route("/v1/streams/{key}/groups", get(groups).post(create))
        .route("/v1/streams/{key}/groups/{group}", delete(destroy))
        .route("/v1/streams/{key}/groups/{group}/consumers", get(consumers))
        .route(
            "/v1/streams/{key}/groups/{group}/consumers/{consumer}/events",
            get(events),
        )
        .route("/v1/streams/{key}/groups/{group}/pending", get(pending))
        .route("/v1/streams/{key}/groups/{group}/read", post(read_group))
        .route("/v1/streams/{key}/groups/{group}/ack", post(ack))
        .route("/v1/streams/{key}/groups/{group}/claim", post(claim))
        .route(
            "/v1/streams/{key}/groups/{group}/autoclaim",
            post(autoclaim),
        )
        .route("/v1/keyspaces", get(list_keyspaces).post(create_keyspace))
        .route(
            "/v1/keyspaces/{*prefix}",
            axum::routing::delete(drop_keyspace),
        )
        .route("/v1/twins/{*name}", get(twin::get).patch(twin::patch))
        .route("/v1/watermark", get(watermark::get))
        .route("/v1/watermark/advance", post(watermark::advance))
        .route(
            "/v1/watermark/policy",
            axum::routing::put(watermark::policy),
        )
        .route("/v1/services/{name}", post(service::request))
        .route("/v1/functions", get(functions::list))
        .route(
            "/v1/functions/{name}",
            get(functions::info)
                .put(functions::load)
                .delete(functions::delete),
        )
        .route("/v1/functions/{name}/call", post(functions::call))
        .route(
            "/v1/triggers",
            get(functions::triggers).post(functions::create_trigger),
        )
        .route(
            "/v1/triggers/{name}",
            get(functions::trigger_info).delete(functions::drop_trigger),
        )
        .route("/v1/triggers/{name}/pause", post(functions::pause_trigger))
        .route(
            "/v1/triggers/{name}/resume",
            post(functions::resume_trigger),
        )
        .route(
            "/v1/triggers/{name}/replay",
            post(functions::replay_trigger),
        )
        .route(
            "/v1/timers",
            get(functions::timers).post(functions::set_timer),
        )
        .route("/v1/timers/{name}", delete(functions::cancel_timer))
        .route("/v1/local", get(local_region))
        .route("/v1/cluster", get(cluster))
        .route("/v1/cluster/nodes/{id}", delete(remove_node))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/v1/openapi.json", get(openapi::document))
        .route("/", get(ui::index))
        .route("/ui/app.js", get(ui::app_js))
        .route("/ui/style.css", get(ui::style_css))
        .route_layer(axum::middleware::from_fn(query::known_parameters))
        .layer(DefaultBodyLimit::max(BODY_BYTES_MAX))
        .layer(axum::middleware::from_fn_with_state(
            router.clone(),
            sessions,
        ))
        .layer(axum::Extension(Stopping(stop)))
        .layer(axum::Extension(EventStreams::default()))
        .with_state(router)
}

/// One HTTP request's session (HTTP has no connection state, so the client keeps the token
/// between requests): the one [`ClientSession`] both front ends run requests in, shared
/// between the `sessions` layer, which makes it and writes its token on the answer, and
/// the endpoint, which runs the request in it. It holds no logic of its own.
#[derive(Clone)]
struct Session(Arc<tokio::sync::Mutex<ClientSession>>);

impl Session {
    /// See [`ClientSession::run`].
    async fn execute(&self, router: &Router, request: Request) -> Result<Answer, FirnError> {
        self.0.lock().await.run(router, request).await
    }

    /// See [`ClientSession::put_streamed`].
    async fn put_streamed(
        &self,
        router: &Router,
        put: firn_model::PutRequest,
        body: impl futures::Stream<Item = Result<axum::body::Bytes, FirnError>> + Send + Unpin,
    ) -> Result<Answer, FirnError> {
        self.0.lock().await.put_streamed(router, put, body).await
    }

    /// Whether the request's user may do what `needs` names (see [`crate::auth`]).
    async fn authorize(&self, needs: &[firn_model::Access]) -> Result<(), FirnError> {
        self.0.lock().await.authorize(needs)
    }

    /// The context of the session's next call.
    async fn context(&self) -> firn_model::CallContext {
        self.0.lock().await.context()
    }
}

/// What answers without signing in on a node with users: the health probe, the web page
/// (which then signs its own requests) and the API's description.
const OPEN_PATHS: &[&str] = &[
    "/healthz",
    "/",
    "/ui/app.js",
    "/ui/style.css",
    "/v1/openapi.json",
];

/// Whom an HTTP request acts for: on a node with users, the user of its
/// `Authorization: Bearer TOKEN` — a request without one is answered 401 `NOAUTH`, a token
/// no user has 401 `WRONGPASS`, before any endpoint runs (but the [`OPEN_PATHS`]).
fn principal(router: &Router, request: &axum::extract::Request) -> Result<Principal, FirnError> {
    let Some(users) = router.kernel().users() else {
        return Ok(Principal::Open);
    };
    match headers::bearer(request.headers()) {
        Some(t) => users.bearer(t).map(Principal::User).inspect_err(|_| {
            metrics::counter!("firn_auth_failures_total", "front" => "http").increment(1);
        }),
        None if OPEN_PATHS.contains(&request.uri().path()) => Ok(Principal::Anonymous),
        None => Err(FirnError::NoAuth),
    }
}

/// Reads `Firn-After` and the user into the request's [`Session`] and writes `Firn-Token` on
/// its answer (errors included: the token is then the one sent).
async fn sessions(
    axum::extract::State(router): axum::extract::State<Arc<Router>>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> HttpResponse {
    let principal = match principal(&router, &request) {
        Ok(p) => p,
        Err(e) => {
            let mut answer = refused(e);
            answer.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer"),
            );
            return answer;
        }
    };
    let asked = match headers::session(request.headers()) {
        Ok(asked) => asked,
        Err(e) => return refused(e),
    };
    let session = match ClientSession::after(asked.after) {
        Ok(mut s) => {
            s.set_principal(principal);
            if let Some(key) = asked.once {
                s.with_once(key);
            }
            Session(Arc::new(tokio::sync::Mutex::new(s)))
        }
        Err(e) => return refused(e),
    };
    request.extensions_mut().insert(session.clone());
    let mut response = as_json_error(next.run(request).await).await;
    // Every answer carries the token, `0-0` before the client has seen any stamp (as
    // `FIRN.TOKEN` answers).
    let token = session.0.lock().await.token().unwrap_or(CommitTs::ZERO);
    if let Ok(v) = HeaderValue::from_str(&token.to_string()) {
        response.headers_mut().insert(headers::TOKEN, v);
    }
    response
}

/// A request refused before it had a session: it carries the token `0-0` (the one sent, if
/// any, was not taken), as every answer carries one.
fn refused(e: FirnError) -> HttpResponse {
    let mut answer = ApiError(e).into_response();
    answer
        .headers_mut()
        .insert(headers::TOKEN, HeaderValue::from_static("0-0"));
    answer
}

/// An error answer that axum or hyper wrote as plain text (a path segment that is not UTF-8,
/// say) or with no body at all (a path no endpoint has: 404; a method the path does not take:
/// 405) in the one error shape every endpoint answers: `{"error": "ERR", "message": …}`.
async fn as_json_error(response: HttpResponse) -> HttpResponse {
    use axum::http::{StatusCode, header};
    let status = response.status();
    let kind = response.headers().get(header::CONTENT_TYPE);
    let plain = kind.is_some_and(|t| t.as_bytes().starts_with(b"text/plain"));
    if !(status.is_client_error() || status.is_server_error()) || !(plain || kind.is_none()) {
        return response;
    }
    let text = axum::body::to_bytes(response.into_body(), 64 * 1024)
        .await
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let message = match (text.is_empty(), status) {
        (false, _) => text,
        (true, StatusCode::NOT_FOUND) => {
            "no such endpoint (every endpoint is in /v1/openapi.json)".to_string()
        }
        // axum adds the `Allow` header after this layer.
        (true, StatusCode::METHOD_NOT_ALLOWED) => {
            "this endpoint does not take that method (its Allow header says which it takes)"
                .to_string()
        }
        (true, s) => s.canonical_reason().unwrap_or("refused").to_string(),
    };
    (
        status,
        axum::Json(json!({ "error": "ERR", "message": message })),
    )
        .into_response()
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
            FirnError::Trimmed { first_kept } => body["first_kept"] = json!(first_kept.to_string()),
            _ => {}
        }
        (status, axum::Json(body)).into_response()
    }
}

type ApiResult<T> = Result<T, ApiError>;

/// A body that is not the JSON an endpoint takes: the same error shape as every other. One
/// over the bodies' limit (`DefaultBodyLimit` in `routes`) is 413, naming the limit.
fn bad_json(rejection: JsonRejection) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        return ApiError(FirnError::BodyTooLarge {
            max: BODY_BYTES_MAX,
        });
    }
    ApiError(FirnError::BadArgument(format!(
        "request body: {}",
        rejection.body_text()
    )))
}

fn unexpected(r: Response) -> ApiError {
    ApiError(FirnError::Internal(format!("unexpected answer {r:?}")))
}
