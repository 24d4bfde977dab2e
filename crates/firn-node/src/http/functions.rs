//! Functions next to the data over HTTP (docs/functions.md): `/v1/functions` (a module is
//! the raw body of a PUT; a call's keys and arguments are JSON), `/v1/triggers` and
//! `/v1/timers`. Each endpoint parses into the [`FunctionRequest`] the RESP commands make
//! (`FIRN.FUNCTION`, `FCALL`, `FIRN.TRIGGER`, `FIRN.TIMER`) and renders its answer; the
//! work is the router's (`functions/`).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, JsonRejection};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use firn_model::function::{TRIGGER_RETRIES_DEFAULT, replay_name};
use firn_model::hlc::system_wall_us;
use firn_model::time::parse_micros;
use firn_model::{
    DelayedEntry, EntrySource, FirnError, FunctionInfo, FunctionRequest, Response, TimerRequest,
    TimerSpec, TriggerFrom, TriggerInfo, TriggerRequest, TriggerSpec,
};
use serde::Deserialize;
use serde_json::{Value as Json, json};

use super::json::set_name;
use super::params::key_of;
use super::{ApiError, ApiResult, BODY_BYTES_MAX, Session, bad_json, unexpected};
use crate::router::Router;

type JsonAnswer = ApiResult<axum::Json<Json>>;
type Created = ApiResult<(StatusCode, axum::Json<Json>)>;

/// Runs `request` in the request's session; its answer.
async fn run(
    router: &Router,
    session: &Session,
    request: FunctionRequest,
) -> Result<Response, ApiError> {
    Ok(session.execute(router, request.into()).await?.response)
}

fn function_json(f: &FunctionInfo) -> Json {
    json!({
        "name": f.name,
        "version": f.version,
        "module_bytes": f.module_bytes,
        "loaded_us": f.loaded_us,
    })
}

/// The one function a load or an info answered.
fn one_function(response: Response) -> ApiResult<Json> {
    match response {
        Response::Functions(f) if f.len() == 1 => Ok(function_json(&f[0])),
        other => Err(unexpected(other)),
    }
}

/// `PUT /v1/functions/{name}`: the body is the module.
pub(super) async fn load(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    Path(name): Path<String>,
    module: Result<Bytes, BytesRejection>,
) -> Created {
    // A module one byte over the values' ceiling reaches the router, which states the
    // modules' limit; a body past that is refused here, naming the bodies' limit.
    let module = module.map_err(|r| match r.status() {
        StatusCode::PAYLOAD_TOO_LARGE => FirnError::BodyTooLarge {
            max: BODY_BYTES_MAX,
        },
        _ => FirnError::BadArgument(format!("request body: {}", r.body_text())),
    })?;
    let response = run(&router, &session, FunctionRequest::Load { name, module }).await?;
    Ok((StatusCode::CREATED, axum::Json(one_function(response)?)))
}

pub(super) async fn list(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
) -> JsonAnswer {
    match run(&router, &session, FunctionRequest::List).await? {
        Response::Functions(f) => Ok(axum::Json(
            json!({ "functions": f.iter().map(function_json).collect::<Vec<_>>() }),
        )),
        other => Err(unexpected(other)),
    }
}

pub(super) async fn info(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    Path(name): Path<String>,
) -> JsonAnswer {
    let response = run(&router, &session, FunctionRequest::Info { name }).await?;
    Ok(axum::Json(one_function(response)?))
}

pub(super) async fn delete(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    Path(name): Path<String>,
) -> JsonAnswer {
    done(run(&router, &session, FunctionRequest::Delete { name }).await?)?;
    Ok(axum::Json(json!({ "deleted": true })))
}

/// A call's keys and arguments, as text (both may be left out).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CallBody {
    #[serde(default)]
    keys: Vec<String>,
    #[serde(default)]
    args: Vec<String>,
}

impl CallBody {
    /// A run of function `name` with the body's keys and arguments.
    pub(super) fn into_request(self, name: String) -> Result<FunctionRequest, FirnError> {
        let keys = self
            .keys
            .into_iter()
            .map(key_of)
            .collect::<Result<_, _>>()?;
        let args = self.args.into_iter().map(Bytes::from).collect();
        Ok(FunctionRequest::Call { name, keys, args })
    }
}

/// `POST /v1/functions/{name}/call`: one run as one transaction (FCALL); answers its reply,
/// text in `reply` (null: it replied nothing), or any bytes in `reply_base64`.
pub(super) async fn call(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    Path(name): Path<String>,
    body: Result<axum::Json<CallBody>, JsonRejection>,
) -> JsonAnswer {
    let axum::Json(body) = body.map_err(bad_json)?;
    let request = body.into_request(name)?;
    match run(&router, &session, request).await? {
        Response::Called(None) => Ok(axum::Json(json!({ "reply": null }))),
        Response::Called(Some(reply)) => {
            let mut j = json!({});
            set_name(&mut j, "reply", &reply);
            Ok(axum::Json(j))
        }
        other => Err(unexpected(other)),
    }
}

fn done(response: Response) -> ApiResult<()> {
    match response {
        Response::Done => Ok(()),
        other => Err(unexpected(other)),
    }
}

/// A trigger to create: `FIRN.TRIGGER CREATE name ON PREFIX p | LOG l TAG t | STREAM s CALL
/// fn[@version] [FROM …] [RETRIES n] [DEADLETTER stream]` — exactly one of `prefix`, `log`
/// with `tag`, `stream`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TriggerBody {
    name: String,
    prefix: Option<String>,
    log: Option<String>,
    tag: Option<String>,
    stream: Option<String>,
    function: String,
    /// The function's version it runs; absent: the newest.
    version: Option<u64>,
    /// `now` (the default), `0` (every change still kept), or a time.
    from: Option<String>,
    retries: Option<u32>,
    deadletter: Option<String>,
}

/// Where a trigger starts, as `FROM` reads it.
fn trigger_from(text: &str) -> Result<TriggerFrom, FirnError> {
    Ok(match text.trim().to_ascii_lowercase().as_str() {
        "now" => TriggerFrom::Now,
        "0" => TriggerFrom::Start,
        _ => TriggerFrom::TimeUs(parse_micros(text)?),
    })
}

/// `POST /v1/triggers`.
pub(super) async fn create_trigger(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    body: Result<axum::Json<TriggerBody>, JsonRejection>,
) -> Created {
    let axum::Json(body) = body.map_err(bad_json)?;
    let create = FunctionRequest::Trigger(TriggerRequest::Create(Box::new(body.into_spec()?)));
    done(run(&router, &session, create).await?)?;
    Ok((StatusCode::CREATED, axum::Json(json!({ "created": true }))))
}

impl TriggerBody {
    /// The trigger the body defines, checked (who made it, and when, the node sets).
    pub(super) fn into_spec(self) -> Result<TriggerSpec, FirnError> {
        let body = self;
        let (prefix, entries) = match (body.prefix, body.log, body.tag, body.stream) {
            (Some(prefix), None, None, None) => (Bytes::from(prefix), None),
            (None, Some(log), Some(tag), None) => (
                Bytes::new(),
                Some(EntrySource::Log {
                    log: Bytes::from(log),
                    tag: Bytes::from(tag),
                }),
            ),
            (None, None, None, Some(stream)) => {
                (Bytes::new(), Some(EntrySource::Stream(Bytes::from(stream))))
            }
            _ => {
                return Err(FirnError::BadArgument(
                "a trigger follows exactly one of: \"prefix\"; \"log\" with \"tag\"; \"stream\""
                    .into(),
            ));
            }
        };
        Ok(TriggerSpec {
            name: body.name,
            prefix,
            entries,
            function: body.function,
            version: body.version,
            from: body
                .from
                .as_deref()
                .map_or(Ok(TriggerFrom::Now), trigger_from)?,
            retries: body.retries.unwrap_or(TRIGGER_RETRIES_DEFAULT),
            deadletter: body.deadletter.map(Bytes::from),
            paused: false,
            // Set by the node: who created it, and when.
            creator: None,
            created_us: 0,
            until_us: None,
            into: None,
        })
    }
}

/// A trigger's definition and this node's counts of it. `from` is written as `FROM` takes
/// it (`now`, `0`, or µs since the epoch as text).
fn trigger_json(t: &TriggerInfo) -> Json {
    let s = &t.spec;
    let from = match s.from {
        TriggerFrom::Now => "now".to_string(),
        TriggerFrom::Start => "0".to_string(),
        TriggerFrom::TimeUs(us) => us.to_string(),
    };
    let mut j = json!({
        "name": s.name,
        "function": s.function,
        "version": s.version,
        "from": from,
        "retries": s.retries,
        "paused": s.paused,
        "creator": s.creator,
        "created_us": s.created_us,
        "until_us": s.until_us,
        "runs": t.runs,
        "errors": t.errors,
        "dead_letters": t.dead_letters,
        "last_error": t.last_error,
        "lag_ms": t.lag_ms,
    });
    match &s.entries {
        None => set_name(&mut j, "prefix", &s.prefix),
        Some(EntrySource::Log { log, tag }) => {
            set_name(&mut j, "log", log);
            set_name(&mut j, "tag", tag);
        }
        Some(EntrySource::Stream(stream)) => set_name(&mut j, "stream", stream),
    }
    set_name(
        &mut j,
        "deadletter",
        &crate::functions::trigger::dead_letters(s),
    );
    match &s.into {
        Some(into) => set_name(&mut j, "into", into),
        None => j["into"] = Json::Null,
    }
    j
}

pub(super) async fn triggers(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
) -> JsonAnswer {
    let list = FunctionRequest::Trigger(TriggerRequest::List);
    match run(&router, &session, list).await? {
        Response::Triggers(t) => Ok(axum::Json(
            json!({ "triggers": t.iter().map(trigger_json).collect::<Vec<_>>() }),
        )),
        other => Err(unexpected(other)),
    }
}

pub(super) async fn trigger_info(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    Path(name): Path<String>,
) -> JsonAnswer {
    let info = FunctionRequest::Trigger(TriggerRequest::Info(name));
    match run(&router, &session, info).await? {
        Response::Triggers(t) if t.len() == 1 => Ok(axum::Json(trigger_json(&t[0]))),
        other => Err(unexpected(other)),
    }
}

pub(super) async fn drop_trigger(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    Path(name): Path<String>,
) -> JsonAnswer {
    let drop = FunctionRequest::Trigger(TriggerRequest::Drop(name));
    done(run(&router, &session, drop).await?)?;
    Ok(axum::Json(json!({ "deleted": true })))
}

pub(super) async fn pause_trigger(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    Path(name): Path<String>,
) -> JsonAnswer {
    let pause = FunctionRequest::Trigger(TriggerRequest::Pause(name));
    done(run(&router, &session, pause).await?)?;
    Ok(axum::Json(json!({ "paused": true })))
}

pub(super) async fn resume_trigger(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    Path(name): Path<String>,
) -> JsonAnswer {
    let resume = FunctionRequest::Trigger(TriggerRequest::Resume(name));
    done(run(&router, &session, resume).await?)?;
    Ok(axum::Json(json!({ "paused": false })))
}

/// A replay: `FIRN.TRIGGER REPLAY name FROM t1 TO t2 INTO prefix`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ReplayBody {
    /// Times: µs since the epoch, or RFC 3339.
    from: String,
    to: String,
    into: String,
}

impl ReplayBody {
    /// The replay of trigger `name` the body asks for.
    pub(super) fn into_request(self, name: String) -> Result<TriggerRequest, FirnError> {
        Ok(TriggerRequest::Replay {
            name,
            from_us: parse_micros(&self.from)?,
            to_us: parse_micros(&self.to)?,
            into: Bytes::from(self.into),
        })
    }
}

/// `POST /v1/triggers/{name}/replay`: answers the replay's own name, `<name>~replay`.
pub(super) async fn replay_trigger(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    Path(name): Path<String>,
    body: Result<axum::Json<ReplayBody>, JsonRejection>,
) -> Created {
    let axum::Json(body) = body.map_err(bad_json)?;
    let replay = body.into_request(name.clone())?;
    done(run(&router, &session, FunctionRequest::Trigger(replay)).await?)?;
    Ok((
        StatusCode::CREATED,
        axum::Json(json!({ "replay": replay_name(&name) })),
    ))
}

/// A timer to set: `FIRN.TIMER SET name AT t | IN ms CALL fn [PAYLOAD p] | XADD stream
/// field value…`; exactly one of `at` and `in_ms`, and of `function` and `stream` (with
/// `fields`, flat: field, value, …).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TimerBody {
    name: String,
    at: Option<String>,
    in_ms: Option<u64>,
    function: Option<String>,
    #[serde(default)]
    payload: String,
    stream: Option<String>,
    #[serde(default)]
    fields: Vec<String>,
}

fn timer_json(t: &TimerSpec) -> Json {
    let mut j = json!({ "name": t.name, "at_us": t.at_us });
    match &t.entry {
        None => {
            j["function"] = json!(t.function);
            set_name(&mut j, "payload", &t.payload);
        }
        Some(e) => {
            set_name(&mut j, "stream", &e.stream);
            let fields: Vec<String> = e
                .fields
                .iter()
                .flat_map(|(f, v)| [f, v])
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .collect();
            j["fields"] = json!(fields);
        }
    }
    j
}

/// `POST /v1/timers`: answers the timer as set (its time in µs since the epoch).
pub(super) async fn set_timer(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    body: Result<axum::Json<TimerBody>, JsonRejection>,
) -> Created {
    let axum::Json(body) = body.map_err(bad_json)?;
    let timer = body.into_spec()?;
    let set = TimerRequest::Set {
        name: timer.name.clone(),
        at_us: timer.at_us,
        function: timer.function.clone(),
        payload: timer.payload.clone(),
        entry: timer.entry.clone(),
    };
    done(run(&router, &session, FunctionRequest::Timer(set)).await?)?;
    Ok((StatusCode::CREATED, axum::Json(timer_json(&timer))))
}

impl TimerBody {
    /// The timer the body sets, checked; `in_ms` counts from this node's clock, as
    /// `FIRN.TIMER SET … IN ms` does.
    pub(super) fn into_spec(self) -> Result<TimerSpec, FirnError> {
        let body = self;
        let at_us = match (&body.at, body.in_ms) {
            (Some(at), None) => parse_micros(at)?,
            // As `FIRN.TIMER SET … IN ms` reads it: from this node's clock.
            (None, Some(ms)) => system_wall_us().saturating_add(ms.saturating_mul(1_000)),
            _ => {
                return Err(FirnError::BadArgument(
                    "a timer names exactly one of at (a time) and in_ms (milliseconds from now)"
                        .into(),
                ));
            }
        };
        let (function, entry) = match (body.function, body.stream) {
            (Some(function), None) if body.fields.is_empty() => (function, None),
            (None, Some(stream)) if body.fields.len().is_multiple_of(2) => {
                let mut fields = body.fields.into_iter().map(Bytes::from);
                let pairs = std::iter::from_fn(|| Some((fields.next()?, fields.next()?))).collect();
                let stream = Bytes::from(stream);
                (
                    String::new(),
                    Some(DelayedEntry {
                        stream,
                        fields: pairs,
                    }),
                )
            }
            _ => {
                return Err(FirnError::BadArgument(
                    "a timer names a function (and a payload), or a stream and its fields \
                 (field, value, …), not both"
                        .into(),
                ));
            }
        };
        Ok(TimerSpec {
            name: body.name,
            at_us,
            function,
            payload: Bytes::from(body.payload),
            creator: None,
            entry,
        })
    }
}

pub(super) async fn timers(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
) -> JsonAnswer {
    let list = FunctionRequest::Timer(TimerRequest::List);
    match run(&router, &session, list).await? {
        Response::Timers(t) => Ok(axum::Json(
            json!({ "timers": t.iter().map(timer_json).collect::<Vec<_>>() }),
        )),
        other => Err(unexpected(other)),
    }
}

pub(super) async fn cancel_timer(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    Path(name): Path<String>,
) -> JsonAnswer {
    let cancel = FunctionRequest::Timer(TimerRequest::Cancel(name));
    done(run(&router, &session, cancel).await?)?;
    Ok(axum::Json(json!({ "deleted": true })))
}
