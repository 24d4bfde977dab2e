//! The file view at a time (`/v1/fs/…`): keys as files and `/`-separated prefixes as
//! directories, read now or at any time `T` (`cams/cam3@T`, `cams/@T`), for any program
//! that reads files over HTTP — `curl`, a browser, `wget -r`, a mount
//! (docs/architecture.md, "The file view at a time").
//!
//! A file answers its value's bytes with `ETag` (its version), `Last-Modified` (its commit
//! time), `Accept-Ranges` and one `Range` (large values streamed from their blob, only the
//! chunks asked for); `HEAD` answers the same without the bytes. A directory answers its
//! children at one cut, as JSON or (to a browser) an HTML index whose links carry that cut.

mod listing;
pub mod path;
pub mod range;

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response as HttpResponse};
use firn_model::limits::PAGE_ITEMS_MAX;
use firn_model::{CommitTs, FirnError, KvRead, ReadAt, ReadConsistency, Response, VersionInfo};
use serde_json::json;

use self::listing::list;
use self::path::FsPath;
use self::range::{Wanted, asked};
use super::params::{key_of, param_u64};
use super::{ApiResult, Params, Session, unexpected};
use crate::router::Router;

/// Children a directory page lists unless `limit` says otherwise.
const LISTING_CHILDREN_DEFAULT: usize = 1_000;

/// `GET /v1/fs/` (and `/v1/fs`): the root directory, now.
pub(super) async fn root(
    state: State<Arc<Router>>,
    session: axum::Extension<Session>,
    query: Params,
    headers: HeaderMap,
) -> ApiResult<HttpResponse> {
    read(state, session, Path(String::new()), query, headers).await
}

/// `GET /v1/fs/{path}`: a file or a directory, now or at the path's `@T`.
pub(super) async fn read(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    Path(path): Path<String>,
    Query(q): Params,
    headers: HeaderMap,
) -> ApiResult<HttpResponse> {
    let path = FsPath::parse(&path)?;
    let limit = match param_u64(&q, "limit")? {
        None => LISTING_CHILDREN_DEFAULT,
        Some(n @ 1..) if n as usize <= PAGE_ITEMS_MAX => n as usize,
        Some(n) => {
            return Err(FirnError::BadArgument(format!(
                "limit {n} is out of range 1..={PAGE_ITEMS_MAX}"
            ))
            .into());
        }
    };
    let after = q
        .get("cursor")
        .filter(|c| !c.is_empty())
        .map(|c| Bytes::from(c.clone()));
    if !path.is_directory() {
        if after.is_some() {
            return Err(FirnError::BadArgument(
                "cursor pages a directory's listing; this path names a key".into(),
            )
            .into());
        }
        if let Some(info) = file(&router, &session, &path).await? {
            return Ok(answer_file(&router, info, &headers));
        }
    }
    let dir = path.as_directory();
    // Now is this node's clock (and after the client's token): the listing then holds every
    // write acknowledged before it was asked for (of a cluster whose clocks agree), where
    // the newest time already closed everywhere could miss the last ones.
    let at = match path.at {
        Some(t) => t,
        None => CommitTs::end_of_micros(router.kernel().read_now()?.wall_us)
            .max(session_token(&session).await),
    };
    let listing = list(&router, &session, &dir, at, after.clone(), limit).await?;
    // A path that names neither a key nor a prefix with keys below it: nothing there. The
    // root, or a later page of a listing, is there even when empty.
    if listing.children.is_empty() && !dir.is_empty() && after.is_none() {
        return Ok(not_found());
    }
    Ok(if wants_html(&headers) {
        let mut answer = axum::response::Html(listing.html()).into_response();
        set_cut_header(&mut answer, &listing.at);
        answer
    } else {
        let mut answer = axum::Json(listing.json()).into_response();
        set_cut_header(&mut answer, &listing.at);
        answer
    })
}

/// The key's version now (linearizable) or at the path's time (the cut at `T`, as a
/// snapshot reads it), if it holds a value then.
async fn file(router: &Router, session: &Session, path: &FsPath) -> ApiResult<Option<VersionInfo>> {
    let key = key_of(path.name.clone())?;
    let at = path.at.map_or(ReadAt::Latest, ReadAt::AsOf);
    let request = KvRead::Get {
        key,
        at,
        consistency: ReadConsistency::Linearizable,
    };
    match session.execute(router, request.into()).await {
        Ok(answer) => match answer.response {
            Response::Value(found) => Ok(found.filter(|v| !v.deleted)),
            other => Err(unexpected(other)),
        },
        // A key holding a stream or a log is not a file; the path may still be a directory.
        Err(FirnError::WrongType) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// A file's answer: its bytes (or the part asked for), with what caches and ranged readers
/// need to know.
fn answer_file(router: &Router, info: VersionInfo, headers: &HeaderMap) -> HttpResponse {
    let etag = format!("\"{}\"", info.version);
    let size = info.size();
    let mut out = super::json::version_headers(&info);
    let set = |out: &mut HeaderMap, name: header::HeaderName, value: String| {
        if let Ok(v) = HeaderValue::from_str(&value) {
            out.insert(name, v);
        }
    };
    set(&mut out, header::ETAG, etag.clone());
    let modified = UNIX_EPOCH + Duration::from_micros(info.commit_ts.wall_us);
    set(
        &mut out,
        header::LAST_MODIFIED,
        httpdate::fmt_http_date(modified),
    );
    out.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    out.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    let (status, start, end) = match asked(headers, &etag, size) {
        Wanted::NotModified => return (StatusCode::NOT_MODIFIED, out).into_response(),
        Wanted::Whole => (StatusCode::OK, 0, size),
        Wanted::Part { start, end } => {
            set(
                &mut out,
                header::CONTENT_RANGE,
                format!("bytes {start}-{}/{size}", end - 1),
            );
            (StatusCode::PARTIAL_CONTENT, start, end)
        }
        Wanted::Unsatisfiable => {
            set(&mut out, header::CONTENT_RANGE, format!("bytes */{size}"));
            let message =
                format!("the range asked for starts past the value's end (it has {size} bytes)");
            let body = json!({ "error": "ERR", "message": message });
            out.remove(header::CONTENT_TYPE);
            return (StatusCode::RANGE_NOT_SATISFIABLE, out, axum::Json(body)).into_response();
        }
    };
    out.insert(header::CONTENT_LENGTH, HeaderValue::from(end - start));
    let body = match info.blob {
        // A large value streams from its blob, only the chunks of the part asked for.
        Some(blob) => Body::from_stream(router.large().blobs().stream_range(blob, start, end)),
        None => {
            let value = info.value.unwrap_or_default();
            Body::from(value.slice(start as usize..end as usize))
        }
    };
    (status, out, body).into_response()
}

/// The newest stamp the request's session has seen (its `Firn-After`), or zero.
async fn session_token(session: &Session) -> CommitTs {
    session.context().await.after.unwrap_or(CommitTs::ZERO)
}

/// Whether the client asked for HTML before JSON (a browser does).
pub fn wants_html(headers: &HeaderMap) -> bool {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    match (accept.find("text/html"), accept.find("application/json")) {
        (Some(html), Some(json)) => html < json,
        (Some(_), None) => true,
        _ => false,
    }
}

/// The cut a listing was read at (`Firn-At`): its links carry it too.
fn set_cut_header(answer: &mut HttpResponse, at: &CommitTs) {
    if let Ok(v) = HeaderValue::from_str(&at.to_string()) {
        answer.headers_mut().insert("firn-at", v);
    }
}

fn not_found() -> HttpResponse {
    (
        StatusCode::NOT_FOUND,
        axum::Json(json!({
            "error": "NOTFOUND",
            "message": "no file (key) or directory (prefix with keys below it) at this path at that time"
        })),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_browser_gets_html_and_everyone_else_json() {
        let with = |accept: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT, HeaderValue::from_str(accept).unwrap());
            wants_html(&h)
        };
        assert!(with(
            "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
        ));
        assert!(!with("application/json"));
        assert!(!with("*/*"));
        assert!(!wants_html(&HeaderMap::new()));
    }
}
