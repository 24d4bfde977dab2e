//! Versions, values and pages as JSON and headers.

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue};
use base64::Engine;
use firn_model::time::micros_to_rfc3339;
use firn_model::{FirnError, Key, VersionInfo, Written};
use serde_json::{Value as Json, json};

pub(super) fn version_headers(info: &VersionInfo) -> HeaderMap {
    let mut h = HeaderMap::new();
    let mut set = |name: &'static str, value: String| {
        if let Ok(v) = HeaderValue::from_str(&value) {
            h.insert(name, v);
        }
    };
    set("firn-version", info.version.to_string());
    set("firn-commit-ts", info.commit_ts.to_string());
    if let Some(t) = info.event_time_us {
        set("firn-event-time", t.to_string());
    }
    h
}

/// A value in JSON: text when it is UTF-8, base64 otherwise.
pub(super) fn value_json(value: &Option<bytes::Bytes>) -> (String, Json) {
    match value {
        None => ("value".into(), Json::Null),
        Some(v) => match std::str::from_utf8(v) {
            Ok(s) => ("value".into(), json!(s)),
            Err(_) => (
                "value_base64".into(),
                json!(base64::engine::general_purpose::STANDARD.encode(v)),
            ),
        },
    }
}

/// A value given in JSON, the way [`value_json`] writes one: text in `value`, or any bytes in
/// `value_base64`; exactly one of them.
pub(super) fn payload_of(
    value: Option<String>,
    value_base64: Option<String>,
) -> Result<Bytes, FirnError> {
    match (value, value_base64) {
        (Some(text), None) => Ok(Bytes::from(text)),
        (None, Some(b64)) => base64::engine::general_purpose::STANDARD
            .decode(b64.as_bytes())
            .map(Bytes::from)
            .map_err(|e| FirnError::BadArgument(format!("value_base64 is not base64: {e}"))),
        _ => Err(FirnError::BadArgument(
            "give a record's payload as exactly one of value (text), value_base64".into(),
        )),
    }
}

pub(super) fn version_json(info: &VersionInfo) -> Json {
    let mut j = json!({
        "version": info.version,
        "commit_ts": info.commit_ts.to_string(),
        "commit_time": micros_to_rfc3339(info.commit_ts.wall_us),
        "event_time": info.event_time_us,
        "deleted": info.deleted,
        "size": info.size(),
        "type": info.kind.name(),
    });
    let (field, value) = value_json(&info.value);
    j[field] = value;
    // A large value is not inlined: read it with GET /v1/kv/{key}?version=N.
    if info.blob.is_some() {
        j["large"] = json!(true);
    }
    j
}

/// Names `key` in `j`: as text in `key` when it is UTF-8, else in `key_base64`, the way
/// [`value_json`] writes a value, so that a listing never alters a key.
pub(super) fn set_key(j: &mut Json, key: &Key) {
    set_name(j, "key", key.as_bytes());
}

/// Names `name` in `j` under `field` as text, or under `{field}_base64` when it is not
/// UTF-8 (a log name, a tag, a trigger's prefix).
pub(super) fn set_name(j: &mut Json, field: &str, name: &[u8]) {
    match std::str::from_utf8(name) {
        Ok(text) => j[field] = json!(text),
        Err(_) => {
            j[format!("{field}_base64")] =
                json!(base64::engine::general_purpose::STANDARD.encode(name))
        }
    }
}

/// Marks a cursor given in base64 (see [`cursor_text`]).
pub(super) const CURSOR_BASE64: &str = "b64:";

/// A page's `next_cursor`, opaque to clients: the next key as text when it is UTF-8 and
/// cannot be mistaken for the marked form, else [`CURSOR_BASE64`] and its base64.
pub(super) fn cursor_text(cursor: &[u8]) -> String {
    match std::str::from_utf8(cursor) {
        Ok(text) if !text.starts_with(CURSOR_BASE64) => text.to_string(),
        _ => format!(
            "{CURSOR_BASE64}{}",
            base64::engine::general_purpose::STANDARD.encode(cursor)
        ),
    }
}

pub(super) fn written_json(w: &Written) -> Json {
    let mut j = json!({ "version": w.version, "commit_ts": w.commit_ts.to_string(), "existed": w.existed, "durability": w.durability.as_str() });
    set_key(&mut j, &w.key);
    j
}

/// A page of keys: `{keys: [{key, version, …}], next_cursor}`.
pub(super) fn scan_page_json(keys: &[(Key, VersionInfo)], next_cursor: Option<Bytes>) -> Json {
    json!({
        "keys": keys.iter().map(|(k, info)| { let mut j = version_json(info); set_key(&mut j, k); j }).collect::<Vec<_>>(),
        "next_cursor": next_cursor.map(|c| cursor_text(&c)),
    })
}

/// Keys asked for, each with what was found: `{values: [{key, found: {…} | null}]}`.
pub(super) fn values_json(keys: &[Key], values: Vec<Option<VersionInfo>>) -> Json {
    json!({
        "values": keys.iter().zip(values).map(|(k, v)| { let mut j = json!({"found": v.as_ref().map(version_json)}); set_key(&mut j, k); j }).collect::<Vec<_>>()
    })
}
