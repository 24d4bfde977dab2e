//! `/v1/watch`: a watch as Server-Sent Events, ended when the node stops.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response as HttpResponse};
use firn_model::time::parse_read_time;
use firn_model::{FirnError, KeyRange, WatchFrom, WatchRequest};
use futures::StreamExt;
use serde_json::json;

use super::json::{set_key, version_json};
use super::params::{key_of, param_u64};
use super::{ApiResult, Params, Session, Stopping};
use crate::router::Router;

pub(super) async fn watch(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
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
    let request = WatchRequest { target, from };
    session.authorize(&request.access()).await?;
    let stream = router.watches().watch(request).await?;
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

pub(super) fn sse_event(item: Result<firn_model::WatchEvent, FirnError>) -> Event {
    match item {
        Ok(e) => {
            let mut j = version_json(&e.info);
            set_key(&mut j, &e.key);
            Event::default()
                .event(if e.info.deleted { "del" } else { "put" })
                .data(j.to_string())
        }
        Err(err) => Event::default()
            .event("error")
            .data(json!({"error": err.resp_code(), "message": err.to_string()}).to_string()),
    }
}
