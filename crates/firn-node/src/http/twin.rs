//! `/v1/twins/{name}`: a device twin — its desired and reported documents read at one time
//! with their delta, or a JSON merge patch of one of them — as `FIRN.TWIN` does over RESP.

use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, Query, State};
use firn_model::time::{micros_to_rfc3339, parse_read_time};
use firn_model::{FirnError, Response, TwinName, TwinRequest, TwinSide, TwinState, VersionInfo};
use serde::Deserialize;
use serde_json::{Value as Json, json};

use super::json::written_json;
use super::{ApiResult, Params, Session, bad_json, unexpected};
use crate::router::Router;

/// `GET /v1/twins/{name}[?as_of=t]`.
pub(super) async fn get(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    Path(name): Path<String>,
    Query(q): Params,
) -> ApiResult<axum::Json<Json>> {
    let request = TwinRequest::Get {
        twin: TwinName::new(name)?,
        at: q.get("as_of").map(|t| parse_read_time(t)).transpose()?,
    };
    match session.execute(&router, request.into()).await?.response {
        Response::Twin(state) => Ok(axum::Json(twin_json(&state))),
        other => Err(unexpected(other)),
    }
}

/// A twin as `GET /v1/twins/{name}` shows it: the time read, each document with its
/// version (null: none), and the delta.
fn twin_json(state: &TwinState) -> Json {
    let side = |v: &Option<VersionInfo>| {
        v.as_ref().map_or(Json::Null, |info| {
            let document = info.value.as_deref().map(serde_json::from_slice::<Json>);
            json!({
                "version": info.version,
                "commit_ts": info.commit_ts.to_string(),
                "commit_time": micros_to_rfc3339(info.commit_ts.wall_us),
                "event_time": info.event_time_us,
                "document": document.and_then(Result::ok).unwrap_or(Json::Null),
            })
        })
    };
    json!({
        "at": state.at.to_string(),
        "desired": side(&state.desired),
        "reported": side(&state.reported),
        "delta": serde_json::from_slice::<Json>(&state.delta).unwrap_or(Json::Null),
    })
}

/// `PATCH /v1/twins/{name}`'s body: a JSON merge patch of exactly one document,
/// `{"desired": {...}}` or `{"reported": {...}}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TwinPatchBody {
    desired: Option<Json>,
    reported: Option<Json>,
}

impl TwinPatchBody {
    /// The patch the body asks for, of twin `name`.
    pub(super) fn into_request(self, name: String) -> Result<TwinRequest, FirnError> {
        let (side, patch) = match (self.desired, self.reported) {
            (Some(patch), None) => (TwinSide::Desired, patch),
            (None, Some(patch)) => (TwinSide::Reported, patch),
            _ => {
                return Err(FirnError::BadArgument(
                    "a twin patch names exactly one of desired, reported".into(),
                ));
            }
        };
        let patch = serde_json::to_vec(&patch)
            .map_err(|e| FirnError::BadArgument(format!("the patch: {e}")))?;
        crate::twin::Document::patch(&patch)?;
        Ok(TwinRequest::Patch {
            twin: TwinName::new(name)?,
            side,
            patch: patch.into(),
        })
    }
}

/// `PATCH /v1/twins/{name}` `{"desired": patch}` or `{"reported": patch}`.
pub(super) async fn patch(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    Path(name): Path<String>,
    body: Result<axum::Json<TwinPatchBody>, JsonRejection>,
) -> ApiResult<axum::Json<Json>> {
    let axum::Json(body) = body.map_err(bad_json)?;
    let request = body.into_request(name)?;
    match session.execute(&router, request.into()).await?.response {
        Response::Written(w) if !w.is_empty() => Ok(axum::Json(written_json(&w[0]))),
        other => Err(unexpected(other)),
    }
}
