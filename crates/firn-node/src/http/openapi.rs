//! `GET /v1/openapi.json`: the HTTP API described as OpenAPI 3.1, built into the binary.
//! `tests/openapi/check` keeps it true: its operations are exactly the routes, and a node
//! answers generated requests as it says.

use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::IntoResponse;

pub(super) const DOCUMENT: &str = include_str!("openapi.json");

pub(super) async fn document() -> impl IntoResponse {
    (
        [
            (CONTENT_TYPE, "application/json"),
            (CACHE_CONTROL, "no-cache"),
        ],
        DOCUMENT,
    )
}
