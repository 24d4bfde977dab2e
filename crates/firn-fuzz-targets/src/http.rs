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
