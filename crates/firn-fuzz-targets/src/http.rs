//! What the HTTP routes read from a request before they call the router, without a server:
//! a query string as the routes' `Query` extractors decode it, then every parameter reader
//! the routes call on it ([`firn_node::http::params`]); and the routes' JSON bodies,
//! decoded and checked into the requests they ask for ([`firn_node::http::bodies`]).

use std::collections::HashMap;

use firn_node::http::{bodies, params};

/// A query string (`?` excluded), as `GET /v1/kv/{key}`, `/v1/kv` (scans and `key=` lists)
/// and `/v1/log/{log}` read theirs.
pub fn http_params(data: &[u8]) {
    let Ok(pairs) = serde_urlencoded::from_bytes::<Vec<(String, String)>>(data) else {
        return;
    };
    let _ = params::keys_and_params(pairs.clone());
    let q: HashMap<String, String> = pairs.into_iter().collect();
    let _ = params::read_at(&q);
    let _ = params::consistency(&q);
    let _ = params::cursor_of(&q);
    let _ = params::param_bool(&q, "complete");
    let _ = params::param_u64(&q, "limit");
    let _ = params::seq_param(&q, "start", false);
    let _ = params::seq_param(&q, "end", true);
    for (name, value) in &q {
        let _ = params::key_of(value.clone());
        let _ =
            params::json_duration_us(name, Some(serde_json::Value::String(value.clone())), "90s");
    }
}

/// A `POST /v1/txn` body.
pub fn http_txn(data: &[u8]) {
    let _ = bodies::read(0, data);
}

/// Any other route's JSON body: the first byte picks the route (of [`bodies::ROUTES`],
/// modulo their number), the rest is the body.
pub fn http_bodies(data: &[u8]) {
    if let Some((route, body)) = data.split_first() {
        let _ = bodies::read(usize::from(*route) % bodies::ROUTES.len(), body);
    }
}

/// A request's path segment and headers: the first line is a segment as the routes' `Path`
/// extractors hand it over (decoded), read as a file view path (`KEY@T`) and as a key; each
/// further line a `name: value` header (those HTTP would not carry are left out, as the
/// server refuses them), read as the session's headers (`Firn-After`, `Idempotency-Key`,
/// `Firn-Producer`, `Authorization`) and as a file read's (`If-None-Match`, `If-Range`,
/// `Range`, `Accept`). A part a `Range` asks for must lie within the value: the value is
/// sliced by it.
pub fn http_headers(data: &[u8]) {
    use axum::http::{HeaderMap, HeaderName, HeaderValue};
    use firn_node::http::fs::path::FsPath;
    use firn_node::http::fs::range::{Wanted, asked};
    use firn_node::http::fs::wants_html;
    use firn_node::http::headers;

    let mut lines = data.split(|&b| b == b'\n');
    if let Ok(segment) = std::str::from_utf8(lines.next().unwrap_or_default()) {
        if let Ok(path) = FsPath::parse(segment) {
            let _ = path.as_directory();
            let _ = params::key_of(path.name);
        }
        let _ = params::key_of(segment.to_string());
    }
    let mut map = HeaderMap::new();
    for line in lines {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        if let (Ok(name), Ok(value)) =
            (HeaderName::from_bytes(name), HeaderValue::from_bytes(value))
        {
            map.append(name, value);
        }
    }
    let _ = headers::session(&map);
    let _ = headers::bearer(&map);
    let _ = wants_html(&map);
    for size in [0, 1, 10, 4096, u64::MAX] {
        if let Wanted::Part { start, end } = asked(&map, "\"7\"", size) {
            assert!(start < end && end <= size, "{start}..{end} of {size} bytes");
        }
    }
}
