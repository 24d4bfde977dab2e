//! Key-value endpoints: `/v1/kv`, `/v1/history`, `/v1/scan`, `/v1/mget`, `/v1/snapshot`,
//! `/v1/truncate`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response as HttpResponse};
use firn_model::limits::PAGE_ITEMS_DEFAULT;
use firn_model::time::{micros_to_rfc3339, parse_micros, parse_read_time};
use firn_model::{
    FirnError, KeyRange, KvRead, KvWrite, PutRequest, ReadAt, Request, Response, SnapshotOf,
    TruncateBefore, WriteCondition,
};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{Value as Json, json};

use super::json::{scan_page_json, values_json, version_headers, version_json, written_json};
use super::params::{
    consistency, cursor_of, key_of, keys_and_params, param_bool, param_u64, read_at,
};
use super::{ApiResult, Params, Session, bad_json, unexpected};
use crate::router::Router;

pub(super) async fn get_kv(
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
            match info.blob {
                // A large value streams from its blob, never whole in memory.
                Some(blob) => {
                    headers.insert(
                        axum::http::header::CONTENT_LENGTH,
                        HeaderValue::from(blob.size),
                    );
                    // As an inline value's bytes are answered.
                    headers.insert(
                        axum::http::header::CONTENT_TYPE,
                        HeaderValue::from_static("application/octet-stream"),
                    );
                    let body = axum::body::Body::from_stream(router.large().blobs().stream(blob));
                    Ok((headers, body).into_response())
                }
                None => Ok((headers, info.value.unwrap_or_default()).into_response()),
            }
        }
        Response::Value(None) => Ok((StatusCode::NOT_FOUND, axum::Json(json!({"error": "NOTFOUND", "message": "no such key at the requested version or time"}))).into_response()),
        other => Err(unexpected(other)),
    }
}

pub(super) async fn put_kv(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    Path(key): Path<String>,
    Query(q): Params,
    body: axum::body::Body,
) -> ApiResult<HttpResponse> {
    let mut put = PutRequest::new(key_of(key)?, Bytes::new());
    if let Some(v) = param_u64(&q, "if_version")? {
        put.condition = WriteCondition::IfVersion(v);
    }
    put.event_time_us = q.get("event_time").map(|t| parse_micros(t)).transpose()?;
    put.life = match (param_u64(&q, "ttl_ms")?, param_u64(&q, "lease")?) {
        (None, None) => firn_model::Lifetime::Default,
        (Some(ms), None) if (1..=firn_model::limits::TTL_MS_MAX).contains(&ms) => {
            firn_model::Lifetime::For { ms }
        }
        (Some(_), None) => {
            return Err(FirnError::BadArgument(format!(
                "ttl_ms is 1 to {} (100 years)",
                firn_model::limits::TTL_MS_MAX
            ))
            .into());
        }
        (None, Some(id)) => firn_model::Lifetime::Lease(id),
        (Some(_), Some(_)) => {
            return Err(
                FirnError::BadArgument("a write takes ttl_ms or lease, not both".into()).into(),
            );
        }
    };
    // The body streams in: a value above the inline limit goes beside the log in chunks.
    let body = body.into_data_stream().map(|chunk| {
        chunk.map_err(|e| FirnError::BadArgument(format!("reading the request body: {e}")))
    });
    match session.put_streamed(&router, put, body).await?.response {
        Response::Written(w) if !w.is_empty() => {
            let mut headers = HeaderMap::new();
            headers.insert("firn-version", HeaderValue::from(w[0].version));
            if let Ok(v) = HeaderValue::from_str(&w[0].commit_ts.to_string()) {
                headers.insert("firn-commit-ts", v);
            }
            headers.insert(
                "firn-durability",
                HeaderValue::from_static(w[0].durability.as_str()),
            );
            Ok((headers, axum::Json(written_json(&w[0]))).into_response())
        }
        other => Err(unexpected(other)),
    }
}

pub(super) async fn delete_kv(
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

pub(super) async fn history(
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
        corrections: param_bool(&q, "corrections")?.unwrap_or(false),
    }
    .into();
    match session.execute(&router, request).await?.response {
        Response::History(h) => Ok(axum::Json(
            json!({ "versions": h.iter().map(version_json).collect::<Vec<_>>() }),
        )),
        other => Err(unexpected(other)),
    }
}

pub(super) async fn scan(
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
        cursor: cursor_of(&q)?,
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

pub(super) async fn mget(
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
pub(super) async fn snapshot(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    Query(pairs): Query<Vec<(String, String)>>,
) -> ApiResult<axum::Json<Json>> {
    let (keys, q) = keys_and_params(pairs)?;
    let of = match (keys.is_empty(), q.get("prefix")) {
        (false, None) => SnapshotOf::Keys(keys.clone()),
        (true, Some(prefix)) => SnapshotOf::Prefix {
            prefix: Bytes::from(prefix.clone()),
            cursor: cursor_of(&q)?,
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TruncateBody {
    key: Option<String>,
    prefix: Option<String>,
    before_version: Option<u64>,
    before_time: Option<String>,
}

impl TruncateBody {
    /// The truncation the body asks for, checked.
    pub(super) fn into_write(self) -> Result<KvWrite, FirnError> {
        let target = match (self.key, self.prefix) {
            (Some(k), None) => KeyRange::Key(key_of(k)?),
            (None, Some(p)) => KeyRange::Prefix(Bytes::from(p)),
            _ => {
                return Err(FirnError::BadArgument(
                    "give exactly one of key, prefix".into(),
                ));
            }
        };
        let before = match (self.before_version, self.before_time) {
            (Some(v), None) => TruncateBefore::Version(v),
            (None, Some(t)) => TruncateBefore::Time(parse_read_time(&t)?),
            _ => {
                return Err(FirnError::BadArgument(
                    "give exactly one of before_version, before_time".into(),
                ));
            }
        };
        Ok(KvWrite::Truncate { target, before })
    }
}

pub(super) async fn truncate(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    body: Result<axum::Json<TruncateBody>, JsonRejection>,
) -> ApiResult<axum::Json<Json>> {
    let axum::Json(body) = body.map_err(bad_json)?;
    match session
        .execute(&router, body.into_write()?.into())
        .await?
        .response
    {
        Response::Truncated { versions_removed } => {
            Ok(axum::Json(json!({ "versions_removed": versions_removed })))
        }
        other => Err(unexpected(other)),
    }
}
