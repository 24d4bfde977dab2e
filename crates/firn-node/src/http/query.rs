//! A query parameter an endpoint does not take is refused (`400`, `ERR unknown parameter
//! 'ver' (GET /v1/kv/{key} takes version, as_of, event_time, consistency)`), before the
//! endpoint runs: a misspelt `?ver=1` must not answer the latest value as if it were asked
//! for. What each endpoint takes is read from the API's description (`openapi.json`, which
//! `tests/openapi/check` keeps equal to the routes), the one place that says it.

use std::collections::HashMap;
use std::sync::LazyLock;

use axum::extract::{MatchedPath, Query, Request};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use firn_model::FirnError;

use super::ApiError;

/// (method, path as the description writes it) → the query parameters it takes.
static TAKES: LazyLock<HashMap<(String, String), Vec<String>>> =
    LazyLock::new(|| parameters(super::openapi::DOCUMENT));

/// Every operation's query parameters, from an OpenAPI document (its own and the path's
/// parameters, `$ref`s to components followed).
fn parameters(document: &str) -> HashMap<(String, String), Vec<String>> {
    let doc: serde_json::Value = serde_json::from_str(document).expect("openapi.json is JSON");
    let component = |p: &serde_json::Value| -> serde_json::Value {
        match p["$ref"].as_str().and_then(|r| r.rsplit('/').next()) {
            Some(name) => doc["components"]["parameters"][name].clone(),
            None => p.clone(),
        }
    };
    let mut takes = HashMap::new();
    let Some(paths) = doc["paths"].as_object() else {
        return takes;
    };
    for (path, ops) in paths {
        let shared = ops["parameters"].as_array().cloned().unwrap_or_default();
        for (method, op) in ops.as_object().into_iter().flatten() {
            if method == "parameters" {
                continue;
            }
            let own = op["parameters"].as_array().cloned().unwrap_or_default();
            let names = own
                .iter()
                .chain(&shared)
                .map(component)
                .filter(|p| p["in"] == "query")
                .filter_map(|p| p["name"].as_str().map(str::to_string))
                .collect();
            takes.insert((method.to_uppercase(), path.clone()), names);
        }
    }
    takes
}

/// The route's path as the description writes it: `{*key}` is `{key}`.
fn described(route: &str) -> String {
    route.replace("{*", "{")
}

/// The first of `names` the route does not take, with what it takes.
fn unknown(method: &str, route: &str, names: &[String]) -> Option<FirnError> {
    let path = described(route);
    let takes = TAKES.get(&(method.to_string(), path.clone()))?;
    let name = names.iter().find(|name| !takes.contains(name))?;
    let list = match takes.as_slice() {
        [] => "no parameters".to_string(),
        names => names.join(", "),
    };
    Some(FirnError::BadArgument(format!(
        "unknown parameter '{name}' ({method} {path} takes {list})"
    )))
}

/// The layer over every route: refuses a request with a parameter its endpoint does not take.
pub(super) async fn known_parameters(route: MatchedPath, request: Request, next: Next) -> Response {
    // A query that does not decode is the endpoint's to refuse.
    if let Ok(Query(pairs)) = Query::<Vec<(String, String)>>::try_from_uri(request.uri()) {
        let names: Vec<String> = pairs.into_iter().map(|(name, _)| name).collect();
        if let Some(e) = unknown(request.method().as_str(), route.as_str(), &names) {
            return ApiError(e).into_response();
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_is_described_and_unknown_parameters_are_named() {
        assert_eq!(
            TAKES[&("GET".to_string(), "/v1/kv/{key}".to_string())],
            ["version", "as_of", "event_time", "complete", "consistency"]
        );
        let names = |q: &[&str]| q.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        assert!(unknown("GET", "/v1/kv/{*key}", &names(&["version", "consistency"])).is_none());
        let e = unknown("GET", "/v1/kv/{*key}", &names(&["ver"]))
            .unwrap()
            .to_string();
        assert!(
            e.contains("unknown parameter 'ver'") && e.contains("as_of"),
            "{e}"
        );
        let e = unknown("POST", "/v1/truncate", &names(&["x"]))
            .unwrap()
            .to_string();
        assert!(e.contains("takes no parameters"), "{e}");
        // A repeated parameter the endpoint takes is its to judge.
        assert!(unknown("GET", "/v1/mget", &names(&["key", "key"])).is_none());
    }
}
