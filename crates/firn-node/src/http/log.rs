//! Shared-log endpoints: `/v1/log/{log}` (append, trim) and `/v1/log/{log}/{tag}/…` (reads by
//! tag, what a tag holds). Log names and tags are path segments: a `/` inside one is written
//! `%2F`.

use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, Query, State};
use firn_model::limits::PAGE_ITEMS_DEFAULT;
use firn_model::log::LOG_BLOCK_MS_MAX;
use firn_model::time::parse_read_time;
use firn_model::{
    FirnError, Key, LogQuery, LogRead, LogRecord, LogSeq, LogWrite, NewRecord, Response,
};
use serde::Deserialize;
use serde_json::{Value as Json, json};

use base64::Engine;

use super::json::{CURSOR_BASE64, payload_of, set_name, value_json};
use super::params::{consistency, cursor_of, key_of, param_u64, seq_param};
use super::{ApiResult, Params, Session, bad_json, unexpected};
use crate::router::Router;

/// One record of an append's body: its tags, and its payload as text (`value`) or as base64
/// (`value_base64`), as values appear in every JSON answer.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RecordBody {
    tags: Vec<String>,
    value: Option<String>,
    value_base64: Option<String>,
}

impl RecordBody {
    pub(super) fn into_record(self) -> Result<NewRecord, FirnError> {
        Ok(NewRecord {
            tags: self
                .tags
                .into_iter()
                .map(key_of)
                .collect::<Result<_, _>>()?,
            payload: payload_of(self.value, self.value_base64)?,
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AppendBody {
    records: Vec<RecordBody>,
}

impl AppendBody {
    /// The records to append to `log`, checked.
    pub(super) fn into_write(self, log: String) -> Result<LogWrite, FirnError> {
        let records = self
            .records
            .into_iter()
            .map(RecordBody::into_record)
            .collect::<Result<Vec<_>, FirnError>>()?;
        Ok(LogWrite::Append {
            log: key_of(log)?,
            records,
        })
    }
}

/// `POST /v1/log/{log}` `{"records": [{"tags": […], "value": "…"}]}`: appends the records
/// in one batch, `{"appended": [{seq, commit_ts}]}` in the order given.
pub(super) async fn append(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    Path(log): Path<String>,
    body: Result<axum::Json<AppendBody>, JsonRejection>,
) -> ApiResult<axum::Json<Json>> {
    let axum::Json(body) = body.map_err(bad_json)?;
    let write = body.into_write(log)?;
    match session.execute(&router, write.into()).await?.response {
        Response::Appended(appended) => Ok(axum::Json(appended_json(&appended))),
        other => Err(unexpected(other)),
    }
}

/// `{"appended": [{seq, commit_ts}]}`: an append's records, in the order given.
pub(super) fn appended_json(appended: &[firn_model::Appended]) -> Json {
    json!({
        "appended": appended
            .iter()
            .map(|a| json!({ "seq": a.seq.to_string(), "commit_ts": a.commit_ts.to_string() }))
            .collect::<Vec<_>>()
    })
}

/// `GET /v1/log/{log}/{tag}/{read}`: `next?min=`, `prev?max=`, `tail`, or
/// `range?from=&to=&limit=`, each with `at=` or `consistency=`, and `block_ms=` (not on
/// `prev`: nothing that arrives can come before `max`). `{"records": […]}`: at most one
/// record but for a range.
pub(super) async fn read(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    Path((log, tag, read)): Path<(String, String, String)>,
    Query(q): Params,
) -> ApiResult<axum::Json<Json>> {
    let (log, tag) = (key_of(log)?, key_of(tag)?);
    let query = match read.as_str() {
        "next" => LogQuery::next(
            log,
            tag,
            seq_param(&q, "min", false)?.unwrap_or(LogSeq::ZERO),
        ),
        "prev" => LogQuery::prev(log, tag, seq_param(&q, "max", true)?.unwrap_or(LogSeq::MAX)),
        "tail" => LogQuery::tail(log, tag),
        "range" => {
            let from = seq_param(&q, "from", false)?;
            let range = LogQuery::range(
                log,
                tag,
                from.unwrap_or(LogSeq::ZERO),
                seq_param(&q, "to", true)?.unwrap_or(LogSeq::MAX),
                param_u64(&q, "limit")?.map_or(PAGE_ITEMS_DEFAULT, |l| l as usize),
            );
            // Without a start: from the first record kept.
            if from.is_none() {
                range.from_start()
            } else {
                range
            }
        }
        other => {
            return Err(FirnError::BadArgument(format!(
                "no log read '{other}': use next, prev, tail or range"
            ))
            .into());
        }
    };
    let block_ms = block_ms(&q)?;
    if read == "prev" && block_ms.is_some() {
        return Err(FirnError::BadArgument(
            "block_ms waits for a newer record; it applies to next, tail and range, not prev"
                .into(),
        )
        .into());
    }
    let query = query
        .at(q.get("at").map(|t| parse_read_time(t)).transpose()?)
        .consistency(consistency(&q)?)
        .block(block_ms);
    match session
        .execute(&router, LogRead::Query(query).into())
        .await?
        .response
    {
        Response::Records(records) => Ok(axum::Json(
            json!({ "records": records.iter().map(record_json).collect::<Vec<_>>() }),
        )),
        other => Err(unexpected(other)),
    }
}

/// `GET /v1/log/{log}/{tag}`: `{len, first_seq, last_seq, first_kept, added}` (the seqs of
/// the first and last records held, `null` when none is).
pub(super) async fn tag_info(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    Path((log, tag)): Path<(String, String)>,
    Query(q): Params,
) -> ApiResult<axum::Json<Json>> {
    let (log, tag) = (key_of(log)?, key_of(tag)?);
    let consistency = consistency(&q)?;
    let info = LogRead::Info {
        log: log.clone(),
        tag: tag.clone(),
        consistency,
    };
    let info = match session.execute(&router, info.into()).await?.response {
        Response::TagInfo(info) => info,
        other => return Err(unexpected(other)),
    };
    if info.is_none() {
        // No record ever carried the tag. A read of it tells an unknown log (404 NOLOG)
        // from a known one whose tag is empty.
        let probe = LogQuery::tail(log, tag).consistency(consistency);
        session
            .execute(&router, LogRead::Query(probe).into())
            .await?;
    }
    let info = info.unwrap_or_default();
    Ok(axum::Json(json!({
        "len": info.len,
        "first_seq": info.first.map(|r| r.seq.to_string()),
        "last_seq": info.last.map(|r| r.seq.to_string()),
        "first_kept": info.first_kept.to_string(),
        "added": info.added,
    })))
}

/// `GET /v1/logs?cursor=&limit=&at=`: every log's tags, a page at a time: `{tags: [{log,
/// tag, len, last_seq, first_kept, shards}], next_cursor}` (`null` when done; pass it back
/// unchanged). With `at`, every tag holding a record committed at or before it is listed.
pub(super) async fn tags(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    Query(q): Params,
) -> ApiResult<axum::Json<Json>> {
    let read = LogRead::Tags {
        cursor: cursor_of(&q)?,
        limit: param_u64(&q, "limit")?.map_or(PAGE_ITEMS_DEFAULT, |l| l as usize),
        at: q.get("at").map(|t| parse_read_time(t)).transpose()?,
    };
    match session.execute(&router, read.into()).await?.response {
        Response::LogTags { tags, next_cursor } => {
            let rows: Vec<Json> = tags
                .iter()
                .map(|t| {
                    let mut j = json!({
                        "len": t.len,
                        "last_seq": t.last_seq.to_string(),
                        "first_kept": t.first_kept.to_string(),
                        "shards": t.shards,
                    });
                    set_name(&mut j, "log", t.log.as_bytes());
                    set_name(&mut j, "tag", t.tag.as_bytes());
                    j
                })
                .collect();
            // Always in base64: a row's key starts with binary lengths.
            let next = next_cursor.map(|c| format!("{CURSOR_BASE64}{}", b64().encode(c)));
            Ok(axum::Json(json!({ "tags": rows, "next_cursor": next })))
        }
        other => Err(unexpected(other)),
    }
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

/// `DELETE /v1/log/{log}?before=SEQ[&tag=TAG]`: drops the records (of `tag`, or of every
/// tag) below `before`; `{"removed": n}`.
pub(super) async fn trim(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    Path(log): Path<String>,
    Query(q): Params,
) -> ApiResult<axum::Json<Json>> {
    let before = seq_param(&q, "before", false)?
        .ok_or_else(|| FirnError::BadArgument("give before=SEQ: the first seq to keep".into()))?;
    let write = LogWrite::Trim {
        log: key_of(log)?,
        tag: q.get("tag").cloned().map(key_of).transpose()?,
        before,
    };
    match session.execute(&router, write.into()).await?.response {
        Response::Count(removed) => Ok(axum::Json(json!({ "removed": removed }))),
        other => Err(unexpected(other)),
    }
}

/// `block_ms`: 1 to [`LOG_BLOCK_MS_MAX`]. Unlike RESP's `BLOCK 0`, HTTP has no wait without
/// end: an answer that may never come holds a connection and every proxy on the way, and a
/// client looping on a refused `0` learns at once, where one read as "no wait" would spin.
fn block_ms(q: &std::collections::HashMap<String, String>) -> Result<Option<u64>, FirnError> {
    check_block_ms(param_u64(q, "block_ms")?)
}

/// A `block_ms` given in a query or a body: 1 to [`LOG_BLOCK_MS_MAX`], as [`block_ms`] says.
pub(super) fn check_block_ms(block_ms: Option<u64>) -> Result<Option<u64>, FirnError> {
    match block_ms {
        Some(ms) if ms == 0 || ms > LOG_BLOCK_MS_MAX => Err(FirnError::BadArgument(format!(
            "block_ms is {ms}; it is 1 to {LOG_BLOCK_MS_MAX} (leave it out not to wait)"
        ))),
        ms => Ok(ms),
    }
}

fn record_json(r: &LogRecord) -> Json {
    let mut j = json!({
        "seq": r.seq.to_string(),
        "tags": r.tags.iter().map(Key::to_string).collect::<Vec<_>>(),
        "commit_ts": r.commit_ts.to_string(),
    });
    let (field, value) = value_json(&Some(r.payload.clone()));
    j[field] = value;
    j
}
