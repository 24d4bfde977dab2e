//! Consumer groups of streams over HTTP: `/v1/streams/{key}/groups…`. Each endpoint parses
//! its path, query and JSON body into the same `GroupRead`/`GroupWrite` the RESP commands
//! (XGROUP, XREADGROUP, XACK, XPENDING, XCLAIM, XAUTOCLAIM, XINFO) build, calls the router,
//! and renders its answer; it holds no group logic. The event stream of a consumer is in
//! [`super::group_events`].

use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use bytes::Bytes;
use firn_model::limits::PAGE_ITEMS_DEFAULT;
use firn_model::log::{LOG_READ_RECORDS_MAX, decode_fields};
use firn_model::{
    ClaimOptions, ConsumerInfo, DeliveryPolicy, FirnError, GroupChange, GroupEntry, GroupInfo,
    GroupKey, GroupOptions, GroupRead, GroupStart, GroupWrite, Key, LogSeq, MaxDeliver, Response,
};
use serde::Deserialize;
use serde_json::{Map, Value as Json, json};

use super::json::value_json;
use super::log::check_block_ms;
use super::params::{key_of, param_u64};
use super::{ApiError, ApiResult, Params, Session, bad_json, unexpected};
use crate::router::Router;

/// The stream and group a request names: `{key}` and `{group}` of its path.
pub(super) struct GroupAt {
    key: Key,
    group: Bytes,
}

impl<S: Send + Sync> FromRequestParts<S> for GroupAt {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path((key, group)) = Path::<(String, String)>::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError(FirnError::BadArgument(e.body_text())))?;
        Ok(GroupAt {
            key: key_of(key)?,
            group: name_of("group", group)?,
        })
    }
}

/// A JSON body; one that is not the JSON asked for is a 400 with the usual error shape.
pub(super) struct Body<T>(T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(request: axum::extract::Request, state: &S) -> Result<Self, ApiError> {
        let result: Result<axum::Json<T>, JsonRejection> =
            axum::Json::from_request(request, state).await;
        result.map(|axum::Json(body)| Body(body)).map_err(bad_json)
    }
}

/// `POST /v1/streams/{key}/groups`: XGROUP CREATE with Firn's delivery options.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CreateBody {
    group: String,
    start: Option<String>,
    #[serde(default)]
    mkstream: bool,
    policy: Option<String>,
    key_field: Option<String>,
    #[serde(default)]
    key_tag: bool,
    ack_wait_ms: Option<u64>,
    max_deliver: Option<u64>,
    dead_letter: Option<String>,
    liveness_ms: Option<u64>,
}

impl CreateBody {
    /// The group the body names and the change that creates it, or what is wrong with them.
    pub(super) fn into_change(self) -> Result<(Bytes, GroupChange), FirnError> {
        let start = match self.start.as_deref().unwrap_or("$") {
            "$" => GroupStart::Last,
            id => GroupStart::Id(seq_of("start", id)?),
        };
        let change = GroupChange::Create {
            entries_read: None,
            start,
            mkstream: self.mkstream,
            options: self.options()?,
        };
        Ok((name_of("group", self.group)?, change))
    }

    /// The body's options as the model's, or what is wrong with them.
    fn options(&self) -> Result<GroupOptions, FirnError> {
        let bad = |m: &str| Err(FirnError::BadArgument(m.into()));
        let policy = match (self.policy.as_deref(), &self.key_field, self.key_tag) {
            (_, Some(_), true) => return bad("give at most one of key_field, key_tag"),
            (None | Some("first"), None, false) => DeliveryPolicy::First,
            (Some("roundrobin"), None, false) => DeliveryPolicy::RoundRobin,
            (Some("hrw"), None, false) => DeliveryPolicy::Hrw(GroupKey::Field(Bytes::from("key"))),
            (Some("hrw"), Some(f), false) => DeliveryPolicy::Hrw(GroupKey::Field(f.clone().into())),
            (Some("hrw"), None, true) => DeliveryPolicy::Hrw(GroupKey::Tag),
            (Some("first" | "roundrobin") | None, _, _) => {
                return bad("key_field and key_tag go with policy hrw only");
            }
            (Some(other), _, _) => {
                return Err(FirnError::BadArgument(format!(
                    "no policy '{other}': use first, roundrobin or hrw"
                )));
            }
        };
        let max_deliver = match (self.max_deliver, &self.dead_letter) {
            (None, None) => None,
            (Some(0), _) => return bad("max_deliver is at least 1"),
            (Some(deliveries), Some(stream)) => Some(MaxDeliver {
                deliveries,
                dead_letter: key_of(stream.clone())?,
            }),
            _ => return bad("max_deliver and dead_letter go together"),
        };
        if self.ack_wait_ms == Some(0) || self.liveness_ms == Some(0) {
            return bad("ack_wait_ms and liveness_ms are at least 1");
        }
        let default = GroupOptions::default();
        Ok(GroupOptions {
            policy,
            ack_wait_ms: self.ack_wait_ms,
            max_deliver,
            liveness_ms: self.liveness_ms.unwrap_or(default.liveness_ms),
        })
    }
}

pub(super) async fn create(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    Path(key): Path<String>,
    Body(body): Body<CreateBody>,
) -> ApiResult<(StatusCode, axum::Json<Json>)> {
    let (group, change) = body.into_change()?;
    let at = GroupAt {
        key: key_of(key)?,
        group,
    };
    match at.change(&router, &session, change).await? {
        Response::Done => Ok((StatusCode::CREATED, axum::Json(json!({ "created": true })))),
        other => Err(unexpected(other)),
    }
}

/// `DELETE /v1/streams/{key}/groups/{group}`: XGROUP DESTROY; 404 when there is no such
/// group.
pub(super) async fn destroy(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    at: GroupAt,
) -> ApiResult<axum::Json<Json>> {
    match at.change(&router, &session, GroupChange::Destroy).await? {
        Response::Count(1) => Ok(axum::Json(json!({ "destroyed": true }))),
        Response::Count(_) => Err(no_group(&at.group)),
        other => Err(unexpected(other)),
    }
}

/// `GET /v1/streams/{key}/groups`: XINFO GROUPS.
pub(super) async fn groups(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    Path(key): Path<String>,
) -> ApiResult<axum::Json<Json>> {
    let read = GroupRead::Groups { key: key_of(key)? };
    match session.execute(&router, read.into()).await?.response {
        Response::Groups(groups) => Ok(axum::Json(
            json!({ "groups": groups.iter().map(group_json).collect::<Vec<_>>() }),
        )),
        other => Err(unexpected(other)),
    }
}

/// `GET /v1/streams/{key}/groups/{group}/consumers`: XINFO CONSUMERS.
pub(super) async fn consumers(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    at: GroupAt,
) -> ApiResult<axum::Json<Json>> {
    let read = GroupRead::Consumers {
        key: at.key,
        group: at.group,
    };
    match session.execute(&router, read.into()).await?.response {
        Response::Consumers(consumers) => Ok(axum::Json(
            json!({ "consumers": consumers.iter().map(consumer_json).collect::<Vec<_>>() }),
        )),
        other => Err(unexpected(other)),
    }
}

/// `GET /v1/streams/{key}/groups/{group}/pending`: XPENDING's summary, or entry by entry
/// when any of `start`, `end`, `count`, `consumer`, `min_idle_ms` is given (`start` defaults
/// to `-`, `end` to `+`, `count` to 100).
pub(super) async fn pending(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    GroupAt { key, group }: GroupAt,
    Query(q): Params,
) -> ApiResult<axum::Json<Json>> {
    let extended = ["start", "end", "count", "consumer", "min_idle_ms"]
        .iter()
        .any(|p| q.contains_key(*p));
    if !extended {
        let read = GroupRead::PendingSummary { key, group };
        return match session.execute(&router, read.into()).await?.response {
            Response::PendingSummary(s) => Ok(axum::Json(json!({
                "count": s.count,
                "first": s.first.map(|s| s.to_string()),
                "last": s.last.map(|s| s.to_string()),
                "consumers": s.consumers.iter().map(|(name, n)| json!({
                    "name": String::from_utf8_lossy(name), "pending": n
                })).collect::<Vec<_>>(),
            }))),
            other => Err(unexpected(other)),
        };
    }
    let bound = |name: &str, end: bool| match q.get(name).map(String::as_str) {
        None => Ok(if end { LogSeq::MAX } else { LogSeq::ZERO }),
        Some("-") => Ok(LogSeq::ZERO),
        Some("+") => Ok(LogSeq::MAX),
        Some(id) => {
            LogSeq::parse_bound(id, end).map_err(|e| FirnError::BadArgument(format!("{name}: {e}")))
        }
    };
    let read = GroupRead::Pending {
        key,
        group,
        min_idle_ms: param_u64(&q, "min_idle_ms")?,
        start: bound("start", false)?,
        end: bound("end", true)?,
        count: page_count(param_u64(&q, "count")?)?,
        consumer: q.get("consumer").cloned().map(Bytes::from),
    };
    match session.execute(&router, read.into()).await?.response {
        Response::PendingEntries(entries) => Ok(axum::Json(json!({
            "pending": entries.iter().map(|e| json!({
                "id": e.seq.to_string(),
                "consumer": String::from_utf8_lossy(&e.consumer),
                "idle_ms": e.idle_ms,
                "deliveries": e.deliveries,
            })).collect::<Vec<_>>()
        }))),
        other => Err(unexpected(other)),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ReadBody {
    consumer: String,
    count: Option<u64>,
    block_ms: Option<u64>,
    #[serde(default)]
    noack: bool,
    id: Option<String>,
}

/// What a read's body asks for, checked.
pub(super) struct ReadAsked {
    consumer: Bytes,
    /// `None`: `>`, new entries.
    id: Option<LogSeq>,
    count: usize,
    noack: bool,
    block_ms: Option<u64>,
}

impl ReadBody {
    pub(super) fn checked(self) -> Result<ReadAsked, FirnError> {
        Ok(ReadAsked {
            id: match self.id.as_deref().unwrap_or(">") {
                ">" => None,
                id => Some(seq_of("id", id)?),
            },
            consumer: name_of("consumer", self.consumer)?,
            count: page_count(self.count)?,
            noack: self.noack,
            block_ms: check_block_ms(self.block_ms)?,
        })
    }
}

/// `POST /v1/streams/{key}/groups/{group}/read`: XREADGROUP of one stream; `id` `>` (the
/// default) for new entries, or an id for the consumer's own pending entries after it.
pub(super) async fn read_group(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    at: GroupAt,
    Body(body): Body<ReadBody>,
) -> ApiResult<axum::Json<Json>> {
    let asked = body.checked()?;
    let read = GroupReadOf {
        key: at.key,
        group: at.group,
        consumer: asked.consumer,
    };
    let entries = read
        .entries(
            &router,
            &session,
            asked.id,
            asked.count,
            asked.noack,
            asked.block_ms,
        )
        .await?;
    Ok(axum::Json(entries_json(&entries)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AckBody {
    ids: Vec<String>,
}

impl AckBody {
    pub(super) fn into_change(self) -> Result<GroupChange, FirnError> {
        Ok(GroupChange::Ack {
            ids: ids_of(&self.ids)?,
        })
    }
}

/// `POST /v1/streams/{key}/groups/{group}/ack`: XACK; `{"acked": n}`, the ids that were
/// pending.
pub(super) async fn ack(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    at: GroupAt,
    Body(body): Body<AckBody>,
) -> ApiResult<axum::Json<Json>> {
    match at.change(&router, &session, body.into_change()?).await? {
        Response::Count(n) => Ok(axum::Json(json!({ "acked": n }))),
        other => Err(unexpected(other)),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ClaimBody {
    consumer: String,
    min_idle_ms: u64,
    ids: Vec<String>,
}

impl ClaimBody {
    pub(super) fn into_change(self) -> Result<GroupChange, FirnError> {
        Ok(GroupChange::Claim {
            consumer: name_of("consumer", self.consumer)?,
            min_idle_ms: self.min_idle_ms,
            ids: ids_of(&self.ids)?,
            options: ClaimOptions::default(),
        })
    }
}

/// `POST /v1/streams/{key}/groups/{group}/claim`: XCLAIM without options; the entries
/// claimed.
pub(super) async fn claim(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    at: GroupAt,
    Body(body): Body<ClaimBody>,
) -> ApiResult<axum::Json<Json>> {
    match at.change(&router, &session, body.into_change()?).await? {
        Response::GroupEntries { entries, .. } => Ok(axum::Json(entries_json(&entries))),
        other => Err(unexpected(other)),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AutoClaimBody {
    consumer: String,
    min_idle_ms: u64,
    start: Option<String>,
    count: Option<u64>,
}

impl AutoClaimBody {
    pub(super) fn into_change(self) -> Result<GroupChange, FirnError> {
        Ok(GroupChange::AutoClaim {
            consumer: name_of("consumer", self.consumer)?,
            min_idle_ms: self.min_idle_ms,
            start: match self.start.as_deref() {
                None | Some("-") | Some("0") => LogSeq::ZERO,
                Some(id) => seq_of("start", id)?,
            },
            count: page_count(self.count)?,
            just_id: false,
        })
    }
}

/// `POST /v1/streams/{key}/groups/{group}/autoclaim`: XAUTOCLAIM; `{next, entries,
/// deleted}` (`next` `0-0`: the scan is done).
pub(super) async fn autoclaim(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    at: GroupAt,
    Body(body): Body<AutoClaimBody>,
) -> ApiResult<axum::Json<Json>> {
    match at.change(&router, &session, body.into_change()?).await? {
        Response::AutoClaimed {
            next,
            entries,
            deleted,
            ..
        } => Ok(axum::Json(json!({
            "next": next.to_string(),
            "entries": entries.iter().map(entry_json).collect::<Vec<_>>(),
            "deleted": deleted.iter().map(LogSeq::to_string).collect::<Vec<_>>(),
        }))),
        other => Err(unexpected(other)),
    }
}

/// One consumer's reads of one stream's group (what the read endpoint and the event stream
/// share).
#[derive(Clone)]
pub(super) struct GroupReadOf {
    pub(super) key: Key,
    pub(super) group: Bytes,
    pub(super) consumer: Bytes,
}

impl GroupReadOf {
    /// XREADGROUP of this one stream: `id` `None` is `>`.
    pub(super) async fn entries(
        &self,
        router: &Router,
        session: &Session,
        id: Option<LogSeq>,
        count: usize,
        noack: bool,
        block_ms: Option<u64>,
    ) -> Result<Vec<GroupEntry>, ApiError> {
        let write = GroupWrite::ReadGroup {
            group: self.group.clone(),
            consumer: self.consumer.clone(),
            streams: vec![(self.key.clone(), id)],
            count,
            noack,
            block_ms,
        };
        match session.execute(router, write.into()).await?.response {
            Response::GroupStreams { streams, .. } => Ok(streams
                .into_iter()
                .flat_map(|(_, entries)| entries)
                .collect()),
            other => Err(unexpected(other)),
        }
    }
}

impl GroupAt {
    /// One change to the group, as the RESP commands make it.
    async fn change(
        &self,
        router: &Router,
        session: &Session,
        change: GroupChange,
    ) -> Result<Response, ApiError> {
        let write = GroupWrite::Change {
            key: self.key.clone(),
            group: self.group.clone(),
            change,
        };
        Ok(session.execute(router, write.into()).await?.response)
    }
}

fn entries_json(entries: &[GroupEntry]) -> Json {
    json!({ "entries": entries.iter().map(entry_json).collect::<Vec<_>>() })
}

/// A group or consumer name: not empty (the router states the longest).
pub(super) fn name_of(what: &str, name: String) -> Result<Bytes, FirnError> {
    if name.is_empty() {
        return Err(FirnError::BadArgument(format!("the {what} name is empty")));
    }
    Ok(Bytes::from(name))
}

fn no_group(group: &[u8]) -> ApiError {
    ApiError(FirnError::NoGroup(format!(
        "No such consumer group '{}' for this stream",
        String::from_utf8_lossy(group)
    )))
}

/// An entry id: `<ms>-<n>`, or `<ms>` for `<ms>-0`.
fn seq_of(what: &str, id: &str) -> Result<LogSeq, FirnError> {
    LogSeq::parse_bound(id, false).map_err(|e| FirnError::BadArgument(format!("{what}: {e}")))
}

fn ids_of(ids: &[String]) -> Result<Vec<LogSeq>, FirnError> {
    if ids.is_empty() {
        return Err(FirnError::BadArgument("give at least one id".into()));
    }
    ids.iter().map(|id| seq_of("ids", id)).collect()
}

/// A page's count: 1 to [`LOG_READ_RECORDS_MAX`], [`PAGE_ITEMS_DEFAULT`] when not given.
pub(super) fn page_count(count: Option<u64>) -> Result<usize, FirnError> {
    match count {
        None => Ok(PAGE_ITEMS_DEFAULT),
        Some(n) if n >= 1 && n <= LOG_READ_RECORDS_MAX as u64 => Ok(n as usize),
        Some(n) => Err(FirnError::BadArgument(format!(
            "count is {n}; it is 1 to {LOG_READ_RECORDS_MAX}"
        ))),
    }
}

/// An entry a group handed out: `{id, fields: {name: value}}` when every name and value is
/// UTF-8 and no name repeats; `{id, fields_base64: [[name, value]…]}` otherwise; `{id,
/// value|value_base64}` for a record that is not a field list (a `FIRN.LOG APPEND` one);
/// `{id, deleted: true, fields: null}` for an entry deleted since its delivery.
pub(super) fn entry_json(e: &GroupEntry) -> Json {
    let id = e.seq.to_string();
    let Some(record) = &e.record else {
        return json!({ "id": id, "deleted": true, "fields": null });
    };
    let Ok(fields) = decode_fields(&record.payload) else {
        let (field, value) = value_json(&Some(record.payload.clone()));
        return json!({ "id": id, field: value });
    };
    let mut text = Map::new();
    for (name, value) in &fields {
        match (std::str::from_utf8(name), std::str::from_utf8(value)) {
            (Ok(n), Ok(v)) if !text.contains_key(n) => {
                text.insert(n.to_string(), json!(v));
            }
            _ => {
                let b64 = |b: &Bytes| {
                    use base64::Engine;
                    base64::engine::general_purpose::STANDARD.encode(b)
                };
                let pairs: Vec<Json> = fields
                    .iter()
                    .map(|(n, v)| json!([b64(n), b64(v)]))
                    .collect();
                return json!({ "id": id, "fields_base64": pairs });
            }
        }
    }
    json!({ "id": id, "fields": text })
}

fn group_json(g: &GroupInfo) -> Json {
    json!({
        "name": String::from_utf8_lossy(&g.name),
        "consumers": g.consumers,
        "pending": g.pending,
        "last_delivered": g.last_delivered.to_string(),
        "entries_read": g.entries_read,
        "lag": g.lag,
    })
}

fn consumer_json(c: &ConsumerInfo) -> Json {
    json!({
        "name": String::from_utf8_lossy(&c.name),
        "pending": c.pending,
        "idle_ms": c.idle_ms,
        "inactive_ms": c.inactive_ms,
    })
}
