//! The web page every node serves (`GET /`): the cluster, a key's timeline, a prefix at a
//! time, a log or stream. Three static files built into the binary (`crates/firn-node/ui`);
//! the page reads the same HTTP API as any client, so it has no endpoints of its own.

use axum::http::header::{CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE};
use axum::response::IntoResponse;

const INDEX_HTML: &str = include_str!("../../ui/index.html");
const APP_JS: &str = include_str!("../../ui/app.js");
const STYLE_CSS: &str = include_str!("../../ui/style.css");

/// The page loads nothing from elsewhere, and runs no script it did not come with.
const POLICY: &str = "default-src 'self'; img-src 'self' data:; object-src 'none'; \
                      frame-ancestors 'none'; base-uri 'none'";

fn asset(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [
            (CONTENT_TYPE, content_type),
            // A node upgraded in place serves its own page at once.
            (CACHE_CONTROL, "no-cache"),
            (CONTENT_SECURITY_POLICY, POLICY),
        ],
        body,
    )
}

pub(super) async fn index() -> impl IntoResponse {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

pub(super) async fn app_js() -> impl IntoResponse {
    asset("text/javascript; charset=utf-8", APP_JS)
}

pub(super) async fn style_css() -> impl IntoResponse {
    asset("text/css; charset=utf-8", STYLE_CSS)
}
