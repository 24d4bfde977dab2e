//! Durable timers: `FIRN.TIMER SET name AT t | IN ms CALL fn PAYLOAD p` keeps the timer as
//! the key `_firn/timer/<name>`. The leader of that key's shard looks every
//! [`LOOK_EVERY`]; a due timer runs its function once (payload as its argument, reading the
//! newest values), and the run's writes commit together with the timer's deletion, under a
//! compare of the timer's version: a timer fires once, also across leader changes and
//! restarts (at or after its time).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use firn_model::function::check_name;
use firn_model::{
    CallContext, Compare, CompareOp, CompareTarget, DelayedEntry, FirnError, Key, KvRequest,
    KvWrite, PutRequest, ReadConsistency, Request, Response, TimerRequest, TimerSpec, TxnStep,
    hlc::system_wall_us,
};
use tokio::sync::watch;

use super::commit::Writes;
use super::host::{Cut, StoreReads};
use super::sandbox::{Effect, InputKind, Invocation, RESERVED_PREFIX};
use super::{Functions, Rights, functions_own};

const TIMER_PREFIX: &str = "_firn/timer/";

/// How often a leader looks for due timers: a timer fires at most this late (and a run).
pub const LOOK_EVERY: Duration = Duration::from_millis(100);

pub fn timer_key(name: &str) -> Key {
    Key::new(format!("{TIMER_PREFIX}{name}").into_bytes()).expect("a checked name is a key")
}

pub async fn run(
    functions: &Arc<Functions>,
    ctx: &CallContext,
    request: TimerRequest,
    user: Option<String>,
) -> Result<Response, FirnError> {
    match request {
        TimerRequest::Set {
            name,
            at_us,
            function,
            payload,
            entry,
        } => {
            check_name("timer", &name)?;
            match &entry {
                None => {
                    functions.loaded(ctx, &function, None).await?;
                }
                Some(entry) => check_entry(entry)?,
            }
            let spec = TimerSpec {
                name: name.clone(),
                at_us,
                function,
                payload,
                creator: user,
                entry,
            };
            let value = Bytes::from(serde_json::to_vec(&spec).expect("a timer serializes"));
            functions
                .write(ctx, KvWrite::Put(PutRequest::new(timer_key(&name), value)))
                .await?;
            Ok(Response::Done)
        }
        TimerRequest::Cancel(name) => {
            check_name("timer", &name)?;
            let answer = functions
                .write(
                    ctx,
                    KvWrite::Delete {
                        keys: vec![timer_key(&name)],
                    },
                )
                .await?;
            match answer.response {
                Response::Written(w) if w.iter().any(|w| w.existed) => Ok(Response::Done),
                _ => Err(FirnError::NotFound {
                    kind: "timer".into(),
                    name,
                }),
            }
        }
        TimerRequest::List => Ok(Response::Timers(
            timers(functions, ctx, ReadConsistency::Linearizable)
                .await?
                .into_iter()
                .map(|(_, _, t)| t)
                .collect(),
        )),
    }
}

/// A delayed entry must name a stream outside `_firn/` and give fields and values.
fn check_entry(entry: &DelayedEntry) -> Result<(), FirnError> {
    if entry.stream.is_empty() || entry.stream.starts_with(RESERVED_PREFIX) {
        return Err(FirnError::BadArgument(
            "XADD names a stream, not under _firn/ (Firn's own)".into(),
        ));
    }
    if entry.fields.is_empty() {
        return Err(FirnError::BadArgument(
            "XADD stream field value [field value …]: an entry has at least one field".into(),
        ));
    }
    Ok(())
}

/// Every timer, with its key and version.
async fn timers(
    functions: &Functions,
    ctx: &CallContext,
    consistency: ReadConsistency,
) -> Result<Vec<(Key, u64, TimerSpec)>, FirnError> {
    Ok(functions
        .scan(ctx, TIMER_PREFIX.as_bytes(), consistency)
        .await?
        .into_iter()
        .filter_map(|(k, v)| {
            let spec = serde_json::from_slice(v.value.as_deref()?).ok()?;
            Some((k, v.version, spec))
        })
        .collect())
}

/// Fires the due timers of the shards this node leads, until `stop`.
pub async fn fire_due(functions: Arc<Functions>, mut stop: watch::Receiver<bool>) {
    let ctx = CallContext::default();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(LOOK_EVERY) => {}
            _ = stop.changed() => return,
        }
        let kernel = functions.kernel();
        let leads_any = kernel
            .replicas()
            .all()
            .iter()
            .any(|r| r.leader() == Some(kernel.node_id()));
        if !leads_any {
            continue;
        }
        // A local read: a timer this replica has not seen yet fires at the next look.
        let due = match timers(&functions, &ctx, ReadConsistency::Local).await {
            Ok(t) => t,
            Err(e) => {
                tracing::debug!("reading the timers: {e}");
                continue;
            }
        };
        let layout = kernel.layout();
        let now = system_wall_us();
        for (key, version, timer) in due.into_iter().filter(|(_, _, t)| t.at_us <= now) {
            let shard = layout.shard_of_key(key.as_bytes());
            if kernel.replicas().known_leader(shard) != Some(kernel.node_id()) {
                continue;
            }
            if let Err(e) = fire(&functions, &ctx, key, version, &timer).await {
                tracing::warn!(timer = %timer.name, "firing: {e} (again at the next look)");
            }
        }
    }
}

/// Runs a due timer's function and commits its writes with the timer's deletion.
async fn fire(
    functions: &Arc<Functions>,
    ctx: &CallContext,
    key: Key,
    version: u64,
    timer: &TimerSpec,
) -> Result<(), FirnError> {
    let rights = Rights::of(functions.kernel(), timer.creator.as_deref())?;
    let mut writes = Writes::default();
    let mut compares = Vec::new();
    match &timer.entry {
        // A delayed entry: added now, with the timer's deletion.
        Some(entry) => {
            let add = Effect::XAdd(entry.stream.clone(), entry.fields.clone());
            if let Err(e) = writes.add(vec![add], &rights) {
                tracing::warn!(timer = %timer.name, "its entry is refused: {e}");
            }
        }
        None => {
            let (effects, seen) = run_function(functions, ctx, timer, &rights).await?;
            if let Err(e) = writes.add(effects, &rights) {
                tracing::warn!(timer = %timer.name, "its function's writes are refused: {e}");
            }
            compares = seen;
        }
    }
    writes.steps.push(TxnStep::Write(KvWrite::Delete {
        keys: vec![key.clone()],
    }));
    compares.push(Compare {
        key,
        target: CompareTarget::Version(version),
        op: CompareOp::Eq,
    });
    let request = Request::Kv(KvRequest::Write(writes.atomic(compares)));
    match functions.kernel().execute(ctx, request).await?.response {
        Response::Steps(Some(_)) => {
            metrics::counter!("firn_timers_fired_total").increment(1);
            functions.publish(writes.publishes).await;
            Ok(())
        }
        // Fired by another runner, changed, or a key it read changed: looked at again.
        Response::Steps(None) => Ok(()),
        other => Err(FirnError::Internal(format!(
            "a timer's commit answered {other:?}"
        ))),
    }
}

/// Runs a due timer's function once, reading the newest values: its writes, and the compares
/// that what it read is unchanged. A run that fails, or a function deleted meanwhile, writes
/// nothing: the timer goes all the same (it fires once). A read the store could not answer
/// is an error: the timer is looked at again.
async fn run_function(
    functions: &Arc<Functions>,
    ctx: &CallContext,
    timer: &TimerSpec,
    rights: &Rights,
) -> Result<(Vec<Effect>, Vec<Compare>), FirnError> {
    let loaded = match functions.loaded(ctx, &timer.function, None).await {
        Ok(loaded) => loaded,
        // The function was deleted: the timer goes without a run (it fires once).
        Err(FirnError::NotFound { .. }) => {
            tracing::warn!(timer = %timer.name, "its function '{}' is gone", timer.function);
            return Ok((Vec::new(), Vec::new()));
        }
        Err(e) => return Err(e),
    };
    let reads = StoreReads::new(
        functions.kernel().clone(),
        tokio::runtime::Handle::current(),
        ctx.clone(),
        Cut::Newest,
        rights.clone(),
    );
    let seen = reads.seen();
    let input = Invocation {
        kind: InputKind::Timer,
        keys: Vec::new(),
        args: vec![timer.payload.clone()],
        stamp_us: system_wall_us(),
        input_version: 0,
    };
    match functions.run_once(&loaded, input, reads).await {
        Ok(outcome) => Ok((outcome.effects, seen.unchanged())),
        // The store could not answer a read: the timer stays, to fire at the next look.
        Err(e) if !functions_own(&e) => Err(e),
        Err(e) => {
            tracing::warn!(timer = %timer.name, "its function failed: {e}");
            Ok((Vec::new(), seen.unchanged()))
        }
    }
}
