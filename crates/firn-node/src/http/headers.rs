//! What a request's headers ask of the session it runs in, read before any endpoint runs:
//! the causality token to read after (`Firn-After`), a write's idempotency key
//! (`Idempotency-Key`, and `Firn-Producer`, whose key it is) and the user's bearer token
//! (`Authorization: Bearer TOKEN`). Every answer carries the session's token back
//! (`Firn-Token`).

use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use bytes::Bytes;
use firn_model::{CommitTs, FirnError, IdemKey};

/// The causality token a client sends back (`Firn-After`) and the one every answer carries
/// (`Firn-Token`): the same commit-stamp text RESP's `FIRN.TOKEN` and `FIRN.AFTER` use.
pub const AFTER: &str = "firn-after";
pub const TOKEN: &str = "firn-token";
/// A write's idempotency key (`Idempotency-Key`), and whose it is (`Firn-Producer`; `http`
/// when absent): the write is applied once per key in the producer's window.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
pub const PRODUCER: &str = "firn-producer";

/// What a request's headers ask of its session.
#[derive(Debug, Default)]
pub struct SessionHeaders {
    /// Read nothing older than this stamp.
    pub after: Option<CommitTs>,
    /// Apply the request's write once under this key.
    pub once: Option<IdemKey>,
}

/// Reads `Firn-After`, `Idempotency-Key` and `Firn-Producer`; a header that is there but
/// not what it should be refuses the request (`BADTIME`, `ERR`).
pub fn session(headers: &HeaderMap) -> Result<SessionHeaders, FirnError> {
    let after = match headers.get(AFTER) {
        None => None,
        Some(v) => {
            let text = v
                .to_str()
                .map_err(|_| FirnError::BadTime("Firn-After is not text".into()))?;
            Some(
                text.parse::<CommitTs>()
                    .map_err(|e| FirnError::BadTime(format!("Firn-After: {e}")))?,
            )
        }
    };
    Ok(SessionHeaders {
        after,
        once: idempotency_key(headers)?,
    })
}

/// The request's idempotency key, if it names one.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<IdemKey>, FirnError> {
    let header = |name: &str| {
        headers
            .get(name)
            .map(|v| Bytes::copy_from_slice(v.as_bytes()))
    };
    match (header(IDEMPOTENCY_KEY), header(PRODUCER)) {
        (None, None) => Ok(None),
        (None, Some(_)) => Err(FirnError::BadArgument(
            "Firn-Producer names whose Idempotency-Key a write carries; it came without one".into(),
        )),
        (Some(id), producer) => {
            IdemKey::new(producer.unwrap_or_else(|| Bytes::from_static(b"http")), id).map(Some)
        }
    }
}

/// The token of `Authorization: Bearer TOKEN`, trimmed; `None` without one.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.insert(*name, HeaderValue::from_static(value));
        }
        h
    }

    #[test]
    fn a_session_reads_its_token_and_key_and_refuses_them_malformed() {
        let read = session(&headers(&[
            (AFTER, "1790000000000000-3"),
            (IDEMPOTENCY_KEY, "k1"),
        ]))
        .unwrap();
        assert_eq!(read.after, Some(CommitTs::new(1_790_000_000_000_000, 3)));
        assert!(read.once.is_some());
        assert!(session(&HeaderMap::new()).unwrap().once.is_none());
        assert!(matches!(
            session(&headers(&[(AFTER, "yesterday")])),
            Err(FirnError::BadTime(_))
        ));
        assert!(matches!(
            session(&headers(&[(PRODUCER, "sensor-7")])),
            Err(FirnError::BadArgument(_))
        ));
        let mut not_text = HeaderMap::new();
        not_text.insert(AFTER, HeaderValue::from_bytes(b"\xff1-0").unwrap());
        assert!(matches!(session(&not_text), Err(FirnError::BadTime(_))));
    }

    #[test]
    fn a_bearer_token_is_the_authorization_after_bearer() {
        assert_eq!(
            bearer(&headers(&[("authorization", "Bearer  t0k ")])),
            Some("t0k")
        );
        assert_eq!(bearer(&headers(&[("authorization", "Basic dTpw")])), None);
        assert_eq!(bearer(&HeaderMap::new()), None);
    }
}
