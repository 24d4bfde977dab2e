//! Admin endpoints: keyspaces, the cluster, health and metrics.

use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response as HttpResponse};

use firn_model::{AdminRequest, FirnError, Follow, KeyspaceDef, KeyspaceSpec, Response};
use serde::Deserialize;
use serde_json::{Value as Json, json};

use super::params::json_duration_us;
use super::{ApiResult, Session, bad_json, unexpected};
use crate::router::Router;

pub(super) fn keyspace_json(def: &KeyspaceDef) -> Json {
    let KeyspaceDef { spec: s, placement } = def;
    json!({
        "prefix": s.prefix,
        "mode": s.mode.to_string(),
        "max_versions": s.max_versions,
        "max_age_us": s.max_age_us,
        "ttl_ms": s.ttl_ms,
        "durability": s.durability.as_str(),
        "local": placement.local,
        "follow": placement.follow.to_string(),
    })
}

pub(super) async fn list_keyspaces(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
) -> ApiResult<axum::Json<Json>> {
    match session
        .execute(&router, AdminRequest::KeyspaceList.into())
        .await?
        .response
    {
        Response::KeyspaceDefs(defs) => Ok(axum::Json(
            json!({ "keyspaces": defs.iter().map(keyspace_json).collect::<Vec<_>>() }),
        )),
        other => Err(unexpected(other)),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct KeyspaceBody {
    prefix: String,
    mode: Option<String>,
    max_versions: Option<u64>,
    /// Seconds, or a duration with units (`7d`).
    max_age: Option<Json>,
    /// The keys' default TTL: seconds, or a duration with units (`90s`, `15m`).
    ttl: Option<Json>,
    durability: Option<String>,
    /// Publish the newest values in each node's shared-memory region.
    local: Option<bool>,
    /// `"on"`, `"off"`, or a node id to pin leaders to.
    follow: Option<Json>,
}

pub(super) async fn create_keyspace(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    body: Result<axum::Json<KeyspaceBody>, JsonRejection>,
) -> ApiResult<(StatusCode, axum::Json<Json>)> {
    let axum::Json(body) = body.map_err(bad_json)?;
    let def = body.into_def()?;
    session
        .execute(&router, AdminRequest::KeyspaceCreate(def.clone()).into())
        .await?;
    Ok((StatusCode::CREATED, axum::Json(keyspace_json(&def))))
}

impl KeyspaceBody {
    /// The keyspace the body defines, checked.
    pub(super) fn into_def(self) -> Result<KeyspaceDef, FirnError> {
        let body = self;
        let mut def = KeyspaceDef::new(KeyspaceSpec {
            prefix: body.prefix,
            ..KeyspaceSpec::default_keyspace()
        });
        def.placement.local = body.local.unwrap_or(false);
        def.placement.follow = match body.follow {
            None | Some(Json::Null) => Follow::Off,
            Some(Json::String(s)) => s.parse()?,
            Some(Json::Number(n)) => n.to_string().parse()?,
            Some(other) => {
                return Err(FirnError::BadArgument(format!(
                    "follow must be \"on\", \"off\" or a node id, not {other}"
                )));
            }
        };
        let spec = &mut def.spec;
        if let Some(m) = body.mode {
            spec.mode = m.parse()?;
        }
        spec.max_versions = body.max_versions;
        spec.max_age_us = json_duration_us("max_age", body.max_age, "7d")?;
        spec.ttl_ms = json_duration_us("ttl", body.ttl, "15m")?.map(|us| us / 1_000);
        if let Some(d) = body.durability {
            spec.durability = d.parse()?;
        }
        Ok(def)
    }
}

/// Where this node's shared-memory region is (`FIRN.LOCAL`).
pub(super) async fn local_region(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
) -> ApiResult<axum::Json<Json>> {
    match session
        .execute(&router, AdminRequest::LocalRegion.into())
        .await?
        .response
    {
        Response::LocalRegion(info) => Ok(axum::Json(json!(info))),
        other => Err(unexpected(other)),
    }
}

pub(super) async fn drop_keyspace(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    Path(prefix): Path<String>,
) -> ApiResult<StatusCode> {
    session
        .execute(&router, AdminRequest::KeyspaceDrop { prefix }.into())
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// This node's replicas (`shards`, as in /healthz), the whole cluster as this node sees it
/// (`nodes`, `cluster`) and, on a hub, the sites that send to it (`sites`; empty when it
/// could not be read).
pub(super) async fn cluster(State(router): State<Arc<Router>>) -> axum::Json<Json> {
    let view = router.kernel().cluster_view().await;
    let sites = crate::uplink::sites(&router).await;
    axum::Json(json!({
        "node_id": router.kernel().node_id(),
        "shards": router.kernel().replicas().status(),
        "cluster": view,
        "sites": sites,
    }))
}

/// Starts removing a node: 202, the move goes on in the background (see /v1/cluster).
pub(super) async fn remove_node(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    session
        .authorize(&[firn_model::Access::admin(firn_model::Scope::everything())])
        .await?;
    let id = id
        .parse()
        .map_err(|_| FirnError::BadArgument(format!("node id '{id}' is not a number")))?;
    router.kernel().remove_node(id).await?;
    Ok(StatusCode::ACCEPTED)
}

/// 200 while every replica here has a leader; 503 otherwise, and on a node the cluster's
/// layout no longer lists (`removed`: it serves no requests).
pub(super) async fn healthz(State(router): State<Arc<Router>>) -> HttpResponse {
    let kernel = router.kernel();
    let status = kernel.replicas().status();
    let layout = kernel.layout();
    let removed = layout.is_routable() && !kernel.is_member(&layout);
    let serving = !removed && status.iter().all(|s| s.leader.is_some());
    let code = if serving {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let said = match (removed, serving) {
        (true, _) => "removed",
        (false, true) => "ok",
        (false, false) => "unavailable",
    };
    (
        code,
        axum::Json(json!({ "status": said, "shards": status })),
    )
        .into_response()
}

pub(super) async fn metrics() -> String {
    crate::metrics::handle().render()
}
