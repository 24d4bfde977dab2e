//! `POST /v1/services/{name}?key=k&timeout_ms=N`: request/response over HTTP. The body is the
//! request's payload and the answer's body is the worker's reply (raw bytes both ways); no
//! reply within the timeout is `504` with the usual error body (`TIMEOUT`). The work is the
//! router's (`services/`), as FIRN.REQUEST's is.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response as HttpResponse};

use super::params::param_u64;
use super::{ApiResult, Params, Session};
use crate::router::Router;
use crate::services::check_timeout_ms;

pub(super) async fn request(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    Path(service): Path<String>,
    params: Params,
    body: Bytes,
) -> ApiResult<HttpResponse> {
    // Parameters it does not take were refused before it ran (`query.rs`).
    let timeout_ms = check_timeout_ms(param_u64(&params, "timeout_ms")?)?;
    let key = params.get("key").map(|k| Bytes::from(k.clone()));
    session
        .authorize(&[firn_model::Access::write_key(
            &crate::services::service_stream(service.as_bytes())?,
        )])
        .await?;
    let ctx = session.context().await;
    let reply = router
        .services()
        .request(&ctx, Bytes::from(service), body, key, timeout_ms)
        .await?;
    Ok(([(header::CONTENT_TYPE, "application/octet-stream")], reply).into_response())
}
