//! Query parameters and path segments, read into the typed values requests take. Public
//! only for the fuzz targets (`crates/firn-fuzz-targets`), which feed them any input.

use std::collections::HashMap;

use axum::body::Bytes;
use firn_model::time::{parse_micros, parse_read_time};
use firn_model::{FirnError, Key, LogSeq, ReadAt, ReadConsistency};

pub fn key_of(path: String) -> Result<Key, FirnError> {
    Key::new(Bytes::from(path))
}

/// A page's `cursor`, as the previous page's `next_cursor` gave it (see
/// [`super::json::cursor_text`]); none when absent or empty.
pub fn cursor_of(q: &HashMap<String, String>) -> Result<Option<Bytes>, FirnError> {
    use base64::Engine;
    let Some(cursor) = q.get("cursor").filter(|c| !c.is_empty()) else {
        return Ok(None);
    };
    match cursor.strip_prefix(super::json::CURSOR_BASE64) {
        Some(b64) => base64::engine::general_purpose::STANDARD
            .decode(b64.as_bytes())
            .map(|c| Some(Bytes::from(c)))
            .map_err(|e| {
                FirnError::BadArgument(format!(
                    "cursor: '{cursor}' is not a cursor a page gave (bad base64: {e})"
                ))
            }),
        None => Ok(Some(Bytes::from(cursor.clone()))),
    }
}

/// A `true`/`false` parameter.
pub fn param_bool(q: &HashMap<String, String>, name: &str) -> Result<Option<bool>, FirnError> {
    q.get(name)
        .map(|v| match v.as_str() {
            "true" | "1" => Ok(true),
            "false" | "0" => Ok(false),
            _ => Err(FirnError::BadArgument(format!(
                "{name} is true or false, not '{v}'"
            ))),
        })
        .transpose()
}

pub fn param_u64(q: &HashMap<String, String>, name: &str) -> Result<Option<u64>, FirnError> {
    q.get(name)
        .map(|v| {
            v.parse::<u64>().map_err(|_| {
                FirnError::BadArgument(format!("{name} must be a non-negative integer, got '{v}'"))
            })
        })
        .transpose()
}

/// A seq bound: `<ms>-<n>`, or `<ms>` alone meaning the millisecond's first seq (its last
/// with `end`), as Redis reads a stream id in a range.
pub fn seq_param(
    q: &HashMap<String, String>,
    name: &str,
    end: bool,
) -> Result<Option<LogSeq>, FirnError> {
    q.get(name)
        .map(|v| {
            LogSeq::parse_bound(v, end).map_err(|e| FirnError::BadArgument(format!("{name}: {e}")))
        })
        .transpose()
}

pub fn consistency(q: &HashMap<String, String>) -> Result<ReadConsistency, FirnError> {
    q.get("consistency")
        .map_or(Ok(ReadConsistency::Linearizable), |c| c.parse())
}

/// `version`, `as_of` or `event_time`: at most one — or `event_time` with `as_of`, the
/// bitemporal read.
pub fn read_at(q: &HashMap<String, String>) -> Result<ReadAt, FirnError> {
    let given = [
        param_u64(q, "version")?.map(ReadAt::Version),
        q.get("as_of")
            .map(|t| parse_read_time(t))
            .transpose()?
            .map(ReadAt::AsOf),
        q.get("event_time")
            .map(|t| parse_micros(t))
            .transpose()?
            .map(ReadAt::EventTime),
    ];
    let at = given
        .into_iter()
        .flatten()
        .try_fold(ReadAt::Latest, |at, next| at.and(next))
        .map_err(|_| {
            FirnError::BadArgument(
                "give at most one of version, as_of, event_time — or event_time with as_of".into(),
            )
        })?;
    match (param_bool(q, "complete")?, at) {
        (None | Some(false), at) => Ok(at),
        (Some(true), ReadAt::EventTime(e)) => Ok(ReadAt::EventTimeComplete(e)),
        (Some(true), _) => Err(FirnError::BadArgument(
            "complete=true goes with event_time (and not as_of: it chooses the time itself)".into(),
        )),
    }
}

/// The repeated `key` parameters (`?key=a&key=b`, so the query is read as a list of pairs),
/// and the other parameters.
pub fn keys_and_params(
    pairs: Vec<(String, String)>,
) -> Result<(Vec<Key>, HashMap<String, String>), FirnError> {
    let keys = pairs
        .iter()
        .filter(|(n, _)| n == "key")
        .map(|(_, k)| key_of(k.clone()))
        .collect::<Result<_, _>>()?;
    let params = pairs.into_iter().filter(|(n, _)| n != "key").collect();
    Ok((keys, params))
}

/// A duration a JSON body gives as seconds (a number) or with units (`"90s"`, `"7d"`), in
/// microseconds; null or absent: none. `example` is a form the error suggests.
pub fn json_duration_us(
    name: &str,
    value: Option<serde_json::Value>,
    example: &str,
) -> Result<Option<u64>, FirnError> {
    use firn_model::time::parse_duration_us;
    match value {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::Number(n)) => parse_duration_us(&n.to_string()).map(Some),
        Some(serde_json::Value::String(s)) => parse_duration_us(&s).map(Some),
        Some(other) => Err(FirnError::BadArgument(format!(
            "{name} must be seconds or a duration like \"{example}\", not {other}"
        ))),
    }
}
