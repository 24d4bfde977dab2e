//! Plain HTTP calls for the JSON endpoints' tests.

use std::time::Duration;

use serde_json::Value as Json;

pub fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(20))
        .build()
}

/// Status and JSON body of a request, whatever the status.
pub fn call(req: ureq::Request, body: Option<Json>) -> (u16, Json) {
    let result = match body {
        Some(b) => req.send_json(b),
        None => req.call(),
    };
    let (code, r) = match result {
        Ok(r) => (r.status(), r),
        Err(ureq::Error::Status(code, r)) => (code, r),
        Err(e) => panic!("transport error: {e}"),
    };
    (code, r.into_json().unwrap_or(Json::Null))
}

/// A PUT of raw bytes: status and JSON body (null if none), whatever the status; run off
/// the async runtime's threads.
pub async fn put_bytes(url: String, body: Vec<u8>) -> (u16, Json) {
    tokio::task::spawn_blocking(move || {
        let (code, r) = match ureq::put(&url).send_bytes(&body) {
            Ok(r) => (r.status(), r),
            Err(ureq::Error::Status(code, r)) => (code, r),
            Err(e) => panic!("transport error: {e}"),
        };
        (code, r.into_json().unwrap_or(Json::Null))
    })
    .await
    .unwrap()
}
