//! `POST /v1/txn`: compare, then write — etcd's Txn, across shards. The same transaction
//! `FIRN.TXN` runs over RESP (`KvWrite::Atomic` with `otherwise` steps).
//!
//! ```json
//! {"compare": [{"key": "a", "version": 3}, {"key": "b", "exists": false},
//!              {"key": "c", "value": "x", "op": "!="}, {"key": "d", "stamp": "…", "op": "<="}],
//!  "then": [{"op": "put", "key": "a", "value": "1"}, {"op": "delete", "key": "b"},
//!           {"op": "get", "key": "c"}, {"op": "incr", "key": "n", "by": 2},
//!           {"op": "append", "log": "events", "records": [{"tags": ["paid"], "value": "a"}]}],
//!  "else": [{"op": "get", "key": "a"}]}
//! ```
//! answers `{"succeeded": true|false, "results": [...]}`, one result per step of the branch
//! that ran.

use std::sync::Arc;

use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use firn_model::time::parse_read_time;
use firn_model::{
    Compare, CompareOp, CompareTarget, FirnError, KeyChange, KvRead, KvWrite, LogWrite, PutRequest,
    ReadAt, ReadConsistency, Response, TxnStep, WriteCondition,
};
use serde::Deserialize;
use serde_json::{Value as Json, json};

use super::json::{payload_of, value_json, version_json, written_json};
use super::log::{RecordBody, appended_json};
use super::params::key_of;
use super::{ApiResult, Session, bad_json, unexpected};
use crate::router::Router;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TxnBody {
    #[serde(default)]
    compare: Vec<CompareBody>,
    #[serde(default)]
    then: Vec<StepBody>,
    #[serde(default, rename = "else")]
    otherwise: Vec<StepBody>,
}

/// One compare: `key`, exactly one of `version`, `value` (or `value_base64`), `exists`,
/// `stamp`, and `op` (`=` when absent).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CompareBody {
    key: String,
    #[serde(default)]
    op: Option<String>,
    version: Option<u64>,
    value: Option<String>,
    value_base64: Option<String>,
    exists: Option<bool>,
    stamp: Option<String>,
}

/// One step: `op` and what it takes.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, tag = "op", rename_all = "lowercase")]
enum StepBody {
    Put {
        key: String,
        value: Option<String>,
        value_base64: Option<String>,
        if_version: Option<u64>,
    },
    Delete {
        key: String,
    },
    Get {
        key: String,
    },
    Incr {
        key: String,
        #[serde(default = "one")]
        by: i64,
    },
    /// Records appended to a log, as `POST /v1/log/{log}` takes them.
    Append {
        log: String,
        records: Vec<RecordBody>,
    },
}

fn one() -> i64 {
    1
}

impl TxnBody {
    /// The transaction the body asks for, every compare and step checked.
    pub fn into_write(self) -> Result<KvWrite, FirnError> {
        let compares = self
            .compare
            .into_iter()
            .map(CompareBody::into_compare)
            .collect::<Result<_, _>>()?;
        let steps = |list: Vec<StepBody>| {
            list.into_iter()
                .map(StepBody::into_step)
                .collect::<Result<Vec<_>, FirnError>>()
        };
        Ok(KvWrite::Atomic {
            compares,
            steps: steps(self.then)?,
            otherwise: Some(steps(self.otherwise)?),
        })
    }
}

impl CompareBody {
    fn into_compare(self) -> Result<Compare, FirnError> {
        let op_text = self.op.unwrap_or_else(|| "=".into());
        let op = CompareOp::parse(&op_text).ok_or_else(|| {
            FirnError::BadArgument(format!("unknown op '{op_text}'; use =, !=, <, <=, >, >="))
        })?;
        let has_value = self.value.is_some() || self.value_base64.is_some();
        let target = match (self.version, has_value, self.exists, self.stamp) {
            (Some(v), false, None, None) => CompareTarget::Version(v),
            (None, true, None, None) => {
                CompareTarget::Value(payload_of(self.value, self.value_base64)?)
            }
            (None, false, Some(e), None) => CompareTarget::Exists(e),
            (None, false, None, Some(t)) => CompareTarget::Stamp(parse_read_time(&t)?),
            _ => {
                return Err(FirnError::BadArgument(
                    "a compare names exactly one of version, value (or value_base64), exists, \
                     stamp"
                        .into(),
                ));
            }
        };
        let compare = Compare {
            key: key_of(self.key)?,
            target,
            op,
        };
        compare.check()?;
        Ok(compare)
    }
}

impl StepBody {
    fn into_step(self) -> Result<TxnStep, FirnError> {
        Ok(match self {
            StepBody::Put {
                key,
                value,
                value_base64,
                if_version,
            } => {
                let mut put = PutRequest::new(key_of(key)?, payload_of(value, value_base64)?);
                if let Some(v) = if_version {
                    put.condition = WriteCondition::IfVersion(v);
                }
                TxnStep::Write(KvWrite::Put(put))
            }
            StepBody::Delete { key } => TxnStep::Write(KvWrite::Delete {
                keys: vec![key_of(key)?],
            }),
            StepBody::Get { key } => TxnStep::Read(KvRead::Get {
                key: key_of(key)?,
                at: ReadAt::Latest,
                consistency: ReadConsistency::Linearizable,
            }),
            StepBody::Incr { key, by } => TxnStep::Write(KvWrite::Change {
                key: key_of(key)?,
                change: KeyChange::IncrBy(by),
            }),
            StepBody::Append { log, records } => TxnStep::Log(LogWrite::Append {
                log: key_of(log)?,
                records: records
                    .into_iter()
                    .map(RecordBody::into_record)
                    .collect::<Result<_, _>>()?,
            }),
        })
    }
}

pub(super) async fn txn(
    State(router): State<Arc<Router>>,
    axum::Extension(session): axum::Extension<Session>,
    body: Result<axum::Json<TxnBody>, JsonRejection>,
) -> ApiResult<axum::Json<Json>> {
    let axum::Json(body) = body.map_err(bad_json)?;
    let write = body.into_write()?;
    match session.execute(&router, write.into()).await?.response {
        Response::Branch { succeeded, steps } => Ok(axum::Json(json!({
            "succeeded": succeeded,
            "results": steps.into_iter().map(result_json).collect::<Vec<_>>(),
        }))),
        other => Err(unexpected(other)),
    }
}

/// One step's answer: what a put or delete wrote, what a get found (`found`, null when
/// nothing), an increment's new `value`, an append's `appended`; or the step's `error`.
fn result_json(answer: Result<Response, FirnError>) -> Json {
    match answer {
        Ok(Response::Written(w)) => w.first().map(written_json).unwrap_or(Json::Null),
        Ok(Response::Value(found)) => json!({ "found": found.as_ref().map(version_json) }),
        Ok(Response::Changed { written, value }) => {
            let mut j = written_json(&written);
            let (field, v) = value_json(&value);
            j[field] = v;
            j
        }
        Ok(Response::Appended(appended)) => appended_json(&appended),
        Ok(other) => json!({ "error": "ERR", "message": format!("unexpected answer {other:?}") }),
        Err(e) => json!({ "error": e.resp_code(), "message": e.to_string() }),
    }
}
