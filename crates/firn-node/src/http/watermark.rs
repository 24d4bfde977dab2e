//! `/v1/watermark`: a keyspace's event-time watermark — read (or waited for), moved up,
//! its rules set — as `FIRN.WATERMARK` does over RESP.

use std::sync::Arc;

use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use firn_model::time::parse_micros;
use firn_model::{
    AdminRequest, FirnError, Response, WatermarkInfo, WatermarkPolicy, WatermarkRequest,
};
use serde::Deserialize;
use serde_json::{Value as Json, json};

use super::params::{json_duration_us, param_u64};
use super::{ApiResult, Params, Session, bad_json, unexpected};
use crate::router::Router;

/// How long `wait_for` waits without `timeout_ms`.
const WAIT_MS_DEFAULT: u64 = 5_000;

pub(super) fn watermark_json(info: &WatermarkInfo) -> Json {
    json!({
        "prefix": info.prefix,
        "watermark_us": info.watermark_us,
        "advanced_us": info.state.advanced_us,
        "lateness_us": info.state.policy.lateness_us,
        "late": info.state.policy.late.to_string(),
    })
}

/// `GET /v1/watermark?prefix=p[&wait_for=t&timeout_ms=n]`.
pub(super) async fn get(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    axum::extract::Query(q): Params,
) -> ApiResult<axum::Json<Json>> {
    let prefix = q.get("prefix").cloned().ok_or_else(|| {
        FirnError::BadArgument("prefix is required (\"\": the default keyspace)".into())
    })?;
    let wait_for = q.get("wait_for").map(|t| parse_micros(t)).transpose()?;
    let timeout_ms = param_u64(&q, "timeout_ms")?.unwrap_or(WAIT_MS_DEFAULT);
    if timeout_ms > crate::watermark::WAIT_MS_MAX {
        return Err(FirnError::BadArgument(format!(
            "timeout_ms is at most {}",
            crate::watermark::WAIT_MS_MAX
        ))
        .into());
    }
    let request = WatermarkRequest::Get {
        prefix,
        wait_for,
        timeout_ms,
    };
    match session
        .execute(&router, AdminRequest::Watermark(request).into())
        .await?
        .response
    {
        Response::Watermark(info) => Ok(axum::Json(watermark_json(&info))),
        other => Err(unexpected(other)),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AdvanceBody {
    prefix: String,
    /// An event time: microseconds since the epoch, or RFC 3339.
    to: Json,
}

impl AdvanceBody {
    /// The event time to advance to, checked.
    pub(super) fn to_us(&self) -> Result<u64, FirnError> {
        match &self.to {
            Json::Number(n) => parse_micros(&n.to_string()),
            Json::String(s) => parse_micros(s),
            other => Err(FirnError::BadArgument(format!(
                "to is an event time (microseconds or RFC 3339), not {other}"
            ))),
        }
    }
}

/// `POST /v1/watermark/advance` `{"prefix": p, "to": t}`.
pub(super) async fn advance(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    body: Result<axum::Json<AdvanceBody>, JsonRejection>,
) -> ApiResult<axum::Json<Json>> {
    let axum::Json(body) = body.map_err(bad_json)?;
    let prefix = body.prefix.clone();
    let to_us = body.to_us()?;
    let request = WatermarkRequest::Advance {
        prefix: prefix.clone(),
        to_us,
    };
    session
        .execute(&router, AdminRequest::Watermark(request).into())
        .await?;
    Ok(axum::Json(
        json!({ "prefix": prefix, "advanced_us": to_us }),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PolicyBody {
    prefix: String,
    /// The allowed lateness: seconds or a duration with units (`"5s"`); null or absent:
    /// none.
    lateness: Option<Json>,
    /// `"keep"` (the default) or `"refuse"`.
    late: Option<String>,
}

impl PolicyBody {
    /// The policy the body sets, checked.
    pub(super) fn into_policy(self) -> Result<WatermarkPolicy, FirnError> {
        Ok(WatermarkPolicy {
            lateness_us: json_duration_us("lateness", self.lateness, "5s")?,
            late: self
                .late
                .as_deref()
                .map_or(Ok(Default::default()), str::parse)?,
        })
    }
}

/// `PUT /v1/watermark/policy` `{"prefix": p, "lateness": d, "late": "keep"|"refuse"}`.
pub(super) async fn policy(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    body: Result<axum::Json<PolicyBody>, JsonRejection>,
) -> ApiResult<axum::Json<Json>> {
    let axum::Json(body) = body.map_err(bad_json)?;
    let prefix = body.prefix.clone();
    let policy = body.into_policy()?;
    let request = WatermarkRequest::Policy {
        prefix: prefix.clone(),
        policy,
    };
    session
        .execute(&router, AdminRequest::Watermark(request).into())
        .await?;
    Ok(axum::Json(json!({
        "prefix": prefix,
        "lateness_us": policy.lateness_us,
        "late": policy.late.to_string(),
    })))
}
