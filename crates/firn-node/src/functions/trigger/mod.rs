//! Triggers: a function run on each committed change of a prefix, on the leader of the
//! change's shard, its outputs committed together with the trigger's cursor for that shard
//! ([`runner`]). A definition is the key `_firn/trigger/<name>`; a cursor is
//! `_firn/cursor/<name>/<shard>`. This file owns the definitions and the node's counts.

mod feed;
mod input;
pub mod runner;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use firn_model::function::{TRIGGER_RETRIES_MAX, check_name, replay_name};
use firn_model::{
    CallContext, Compare, CompareOp, CompareTarget, FirnError, Key, KvRead, KvWrite, PutRequest,
    ReadAt, ReadConsistency, Response, TriggerFrom, TriggerInfo, TriggerRequest, TriggerSpec,
    TxnStep, hlc::system_wall_us,
};

use super::Functions;
use super::sandbox::RESERVED_PREFIX;

const TRIGGER_PREFIX: &str = "_firn/trigger/";
const CURSOR_PREFIX: &str = "_firn/cursor/";

pub fn trigger_key(name: &str) -> Key {
    Key::new(format!("{TRIGGER_PREFIX}{name}").into_bytes()).expect("a checked name is a key")
}

/// The prefix of a trigger's cursors, one a shard.
pub fn cursor_prefix(name: &str) -> String {
    format!("{CURSOR_PREFIX}{name}/")
}

pub fn cursor_key(name: &str, shard: u32) -> Key {
    Key::new(format!("{}{shard}", cursor_prefix(name)).into_bytes())
        .expect("a checked name is a key")
}

/// The stream a trigger's failing inputs go to.
pub fn dead_letters(spec: &TriggerSpec) -> Bytes {
    spec.deadletter
        .clone()
        .unwrap_or_else(|| Bytes::from(format!("_firn/deadletter/{}", spec.name)))
}

/// What this node counted of each trigger since it started.
#[derive(Default)]
pub struct Triggers {
    stats: Mutex<HashMap<String, Stats>>,
}

#[derive(Clone, Default)]
struct Stats {
    runs: u64,
    errors: u64,
    dead_letters: u64,
    last_error: Option<String>,
    /// Per shard: how far the oldest input not yet committed is behind now (0: caught up).
    lag_ms: HashMap<u32, u64>,
}

impl Triggers {
    fn with(&self, name: &str, f: impl FnOnce(&mut Stats)) {
        let mut stats = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        f(stats.entry(name.to_owned()).or_default());
    }

    pub(super) fn ran(&self, name: &str, runs: u64, dead: u64) {
        self.with(name, |s| {
            s.runs += runs;
            s.dead_letters += dead;
        });
    }

    pub(super) fn failed(&self, name: &str, error: &str) {
        self.with(name, |s| {
            s.errors += 1;
            s.last_error = Some(error.to_owned());
        });
    }

    /// A round that could not run (its function is gone, a shard is unreachable): the
    /// last error, not counted as a run's.
    pub(super) fn stalled(&self, name: &str, error: &str) {
        self.with(name, |s| s.last_error = Some(error.to_owned()));
    }

    pub(super) fn lag(&self, name: &str, shard: u32, lag_ms: u64) {
        self.with(name, |s| {
            s.lag_ms.insert(shard, lag_ms);
        });
    }

    fn info(&self, spec: TriggerSpec) -> TriggerInfo {
        let stats = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        let s = stats.get(&spec.name).cloned().unwrap_or_default();
        TriggerInfo {
            spec,
            runs: s.runs,
            errors: s.errors,
            dead_letters: s.dead_letters,
            last_error: s.last_error,
            lag_ms: s.lag_ms.values().max().copied(),
        }
    }
}

/// `FIRN.TRIGGER CREATE | PAUSE | RESUME | DROP | INFO | LIST`.
pub async fn run(
    functions: &Arc<Functions>,
    ctx: &CallContext,
    request: TriggerRequest,
    user: Option<String>,
) -> Result<Response, FirnError> {
    match request {
        TriggerRequest::Create(mut spec) => {
            spec.creator = user;
            create(functions, ctx, *spec).await
        }
        TriggerRequest::Replay {
            name,
            from_us,
            to_us,
            into,
        } => {
            if to_us < from_us {
                return Err(FirnError::BadArgument(
                    "a replay's TO is not before its FROM".into(),
                ));
            }
            if into.is_empty() || into.starts_with(RESERVED_PREFIX) {
                return Err(FirnError::BadArgument(
                    "INTO names a prefix of the user's keys, not empty and not under _firn/".into(),
                ));
            }
            let (_, live) = spec_of(functions, ctx, &name).await?;
            let replay = TriggerSpec {
                name: replay_name(&name),
                from: TriggerFrom::TimeUs(from_us),
                until_us: Some(to_us),
                into: Some(into),
                deadletter: None,
                ..live
            };
            put_new(functions, ctx, replay).await
        }
        TriggerRequest::Pause(name) => set_paused(functions, ctx, &name, true).await,
        TriggerRequest::Resume(name) => set_paused(functions, ctx, &name, false).await,
        TriggerRequest::Drop(name) => {
            let (version, _) = spec_of(functions, ctx, &name).await?;
            let cursors = functions
                .scan_keys(
                    ctx,
                    cursor_prefix(&name).as_bytes(),
                    ReadConsistency::Linearizable,
                )
                .await?;
            let mut keys = vec![trigger_key(&name)];
            keys.extend(cursors);
            let drop = KvWrite::Atomic {
                compares: vec![still(&name, version)],
                steps: vec![TxnStep::Write(KvWrite::Delete { keys })],
                otherwise: None,
            };
            committed(functions.write(ctx, drop).await?.response, &name)
        }
        TriggerRequest::Info(name) => {
            let (_, spec) = spec_of(functions, ctx, &name).await?;
            Ok(Response::Triggers(vec![functions.triggers.info(spec)]))
        }
        TriggerRequest::List => {
            let specs = specs(functions, ctx, ReadConsistency::Linearizable).await?;
            Ok(Response::Triggers(
                specs
                    .into_iter()
                    .map(|s| functions.triggers.info(s))
                    .collect(),
            ))
        }
    }
}

async fn create(
    functions: &Arc<Functions>,
    ctx: &CallContext,
    mut spec: TriggerSpec,
) -> Result<Response, FirnError> {
    check_name("trigger", &spec.name)?;
    if let Some(source) = &spec.entries {
        let (log, tag) = source.log_and_tag();
        if log.is_empty() || tag.is_empty() {
            return Err(FirnError::BadArgument(
                "a trigger's log, tag or stream is named (not empty)".into(),
            ));
        }
        spec.prefix = Bytes::new();
    } else if spec.prefix.starts_with(RESERVED_PREFIX) || RESERVED_PREFIX.starts_with(&spec.prefix)
    {
        return Err(FirnError::BadArgument(
            "a trigger's prefix may not cover keys under _firn/ (Firn's own); name a narrower prefix"
                .into(),
        ));
    }
    if spec.retries > TRIGGER_RETRIES_MAX {
        return Err(FirnError::BadArgument(format!(
            "RETRIES is at most {TRIGGER_RETRIES_MAX}"
        )));
    }
    spec.until_us = None;
    spec.into = None;
    put_new(functions, ctx, spec).await
}

/// Writes a new trigger's definition (none of that name may exist).
async fn put_new(
    functions: &Arc<Functions>,
    ctx: &CallContext,
    mut spec: TriggerSpec,
) -> Result<Response, FirnError> {
    // The function must be there (at the version named) when the trigger is made.
    functions.loaded(ctx, &spec.function, spec.version).await?;
    spec.created_us = system_wall_us();
    spec.paused = false;
    let put = KvWrite::Atomic {
        compares: vec![Compare {
            key: trigger_key(&spec.name),
            target: CompareTarget::Exists(false),
            op: CompareOp::Eq,
        }],
        steps: vec![TxnStep::Write(KvWrite::Put(PutRequest::new(
            trigger_key(&spec.name),
            encode(&spec),
        )))],
        otherwise: None,
    };
    match functions.write(ctx, put).await?.response {
        Response::Steps(Some(_)) => Ok(Response::Done),
        Response::Steps(None) => Err(FirnError::BadArgument(format!(
            "a trigger named '{}' exists; DROP it first",
            spec.name
        ))),
        other => Err(FirnError::Internal(format!(
            "a trigger's creation answered {other:?}"
        ))),
    }
}

async fn set_paused(
    functions: &Arc<Functions>,
    ctx: &CallContext,
    name: &str,
    paused: bool,
) -> Result<Response, FirnError> {
    let (version, mut spec) = spec_of(functions, ctx, name).await?;
    spec.paused = paused;
    let put = KvWrite::Atomic {
        compares: vec![still(name, version)],
        steps: vec![TxnStep::Write(KvWrite::Put(PutRequest::new(
            trigger_key(name),
            encode(&spec),
        )))],
        otherwise: None,
    };
    committed(functions.write(ctx, put).await?.response, name)
}

/// The compare that the trigger's definition is still the version read.
fn still(name: &str, version: u64) -> Compare {
    Compare {
        key: trigger_key(name),
        target: CompareTarget::Version(version),
        op: CompareOp::Eq,
    }
}

fn committed(response: Response, name: &str) -> Result<Response, FirnError> {
    match response {
        Response::Steps(Some(_)) => Ok(Response::Done),
        Response::Steps(None) => Err(FirnError::TryAgain(format!(
            "trigger '{name}' changed meanwhile; try again"
        ))),
        other => Err(FirnError::Internal(format!(
            "a trigger's change answered {other:?}"
        ))),
    }
}

pub(super) fn encode(spec: &TriggerSpec) -> Bytes {
    Bytes::from(serde_json::to_vec(spec).expect("a spec serializes"))
}

fn decode(value: &[u8]) -> Option<TriggerSpec> {
    serde_json::from_slice(value).ok()
}

/// A trigger's definition and its version.
async fn spec_of(
    functions: &Arc<Functions>,
    ctx: &CallContext,
    name: &str,
) -> Result<(u64, TriggerSpec), FirnError> {
    // A replay is named after its trigger.
    check_name("trigger", name.strip_suffix("~replay").unwrap_or(name))?;
    let read = KvRead::Get {
        key: trigger_key(name),
        at: ReadAt::Latest,
        consistency: ReadConsistency::Linearizable,
    };
    match functions.read(ctx, read).await? {
        Response::Value(Some(v)) if !v.deleted => {
            let spec = v.value.as_deref().and_then(decode);
            spec.map(|s| (v.version, s)).ok_or_else(|| {
                FirnError::Internal(format!("trigger '{name}': its definition does not read"))
            })
        }
        _ => Err(FirnError::NotFound {
            kind: "trigger".into(),
            name: name.into(),
        }),
    }
}

/// Every trigger's definition.
pub(super) async fn specs(
    functions: &Functions,
    ctx: &CallContext,
    consistency: ReadConsistency,
) -> Result<Vec<TriggerSpec>, FirnError> {
    let values = functions
        .scan_values(ctx, TRIGGER_PREFIX.as_bytes(), consistency)
        .await?;
    Ok(values.iter().filter_map(|(_, v)| decode(v)).collect())
}
