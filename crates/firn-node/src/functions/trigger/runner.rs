//! Running triggers: on every shard this node leads, each trigger's inputs — the shard's
//! versions under its prefix after its cursor and at or below the shard's closed time, in
//! (stamp, key, version) order — each run reading the cut at its own stamp, and a batch's
//! outputs committed together with the cursor, under a compare that the cursor is still the
//! version this runner read. A second runner (an old leader) fails that compare and writes
//! nothing; a runner that stops before its commit leaves the cursor where it was, and the
//! next one runs the same inputs again, reading the same cuts. So every input's effect
//! happens once.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use firn_model::log::encode_fields;
use firn_model::{
    CallContext, CommitTs, Compare, CompareOp, CompareTarget, FirnError, KeyRange, KvRead,
    KvRequest, KvWrite, LogWrite, PutRequest, ReadAt, ReadConsistency, Request, Response, StreamId,
    TriggerFrom, TriggerSpec, TxnStep, WatchEvent, WatchFrom, hlc::system_wall_us,
};
use firn_raft::ShardReplica;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::{cursor_key, dead_letters, specs};
use crate::functions::commit::Writes;
use crate::functions::host::{Cut, StoreReads};
use crate::functions::sandbox::{InputKind, Invocation};
use crate::functions::{Functions, Rights};

/// How often a leader looks for new inputs when nothing wakes it sooner.
const LOOK_EVERY: Duration = Duration::from_millis(50);

/// How often the runner reads the triggers' definitions again.
const SPECS_EVERY: Duration = Duration::from_millis(500);

/// Inputs one commit takes (their outputs and the cursor in one transaction).
pub const INPUTS_PER_COMMIT: usize = 64;

/// Where a trigger is on one shard: the last input whose outputs committed.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
struct Cursor {
    wall_us: u64,
    logical: u32,
    key: Vec<u8>,
    version: u64,
}

impl Cursor {
    fn of(event: &WatchEvent) -> Cursor {
        Cursor {
            wall_us: event.info.commit_ts.wall_us,
            logical: event.info.commit_ts.logical,
            key: event.key.bytes().to_vec(),
            version: event.info.version,
        }
    }

    fn stamp(&self) -> CommitTs {
        CommitTs::new(self.wall_us, self.logical)
    }
}

/// Runs the triggers on the shards this node leads, until `stop`.
pub async fn run(functions: Arc<Functions>, mut stop: watch::Receiver<bool>) {
    let ctx = CallContext::default();
    let mut triggers: Vec<TriggerSpec> = Vec::new();
    let mut specs_read = tokio::time::Instant::now() - SPECS_EVERY;
    let mut behind = false;
    loop {
        // A round that took a full batch looks again at once: more inputs are waiting.
        let pause = if behind { Duration::ZERO } else { LOOK_EVERY };
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = stop.changed() => return,
        }
        behind = false;
        let kernel = functions.kernel().clone();
        let led: Vec<_> = kernel
            .replicas()
            .all()
            .into_iter()
            .filter(|r| r.leader() == Some(kernel.node_id()))
            .collect();
        // A node that leads no shard runs no trigger, and asks nothing of the others.
        if led.is_empty() {
            continue;
        }
        if specs_read.elapsed() >= SPECS_EVERY {
            // A local read: a trigger this replica has not seen yet starts at the next look,
            // and an idle cluster asks nothing of its leaders.
            match specs(&functions, &ctx, ReadConsistency::Local).await {
                Ok(s) => triggers = s,
                Err(e) => tracing::debug!("reading the triggers: {e}"),
            }
            specs_read = tokio::time::Instant::now();
        }
        for replica in &led {
            for spec in triggers.iter().filter(|s| !s.paused) {
                match round(&functions, &ctx, spec, replica).await {
                    Ok(inputs) => behind |= inputs == INPUTS_PER_COMMIT,
                    Err(e) => {
                        // Shown by INFO (say the function was deleted); tried again.
                        functions.triggers.stalled(&spec.name, &e.to_string());
                        tracing::debug!(trigger = %spec.name, shard = replica.shard_id(), "{e}")
                    }
                }
            }
        }
    }
}

/// One batch of a trigger's inputs on one shard: run, and committed with the cursor. Answers
/// how many inputs it took.
async fn round(
    functions: &Arc<Functions>,
    ctx: &CallContext,
    spec: &TriggerSpec,
    replica: &Arc<ShardReplica>,
) -> Result<usize, FirnError> {
    let shard = replica.shard_id();
    let (cursor_version, cursor) = read_cursor(functions, ctx, spec, shard).await?;
    let closed = replica.store().last_commit_ts();
    let inputs = inputs(replica, spec, &cursor, closed).await?;
    let name = &spec.name;
    let Some(oldest) = inputs.first() else {
        functions.triggers.lag(name, shard, 0);
        return Ok(0);
    };
    let now_us = system_wall_us();
    functions.triggers.lag(
        name,
        shard,
        now_us.saturating_sub(oldest.info.commit_ts.wall_us) / 1_000,
    );
    let loaded = functions.loaded(ctx, &spec.function, spec.version).await?;
    let rights = Rights::of(functions.kernel(), spec.creator.as_deref())?;
    let mut writes = Writes::default();
    let (mut runs, mut dead) = (0, 0);
    for event in &inputs {
        match run_input(functions, ctx, spec, &loaded, event, &rights).await {
            Ok(effects) => {
                let effects = match &spec.into {
                    Some(into) => effects.into_iter().filter_map(|e| e.under(into)).collect(),
                    None => effects,
                };
                if let Err(e) = writes.add(effects, &rights) {
                    // Beyond the creator's rights: a failed input, as a trap is.
                    functions.triggers.failed(name, &e.to_string());
                    writes.steps.push(dead_letter(spec, event, &e)?);
                    dead += 1;
                    continue;
                }
                runs += 1;
            }
            // The store could not answer a read (a shard between leaders): not the
            // function's fault, so not a dead letter — the round is given up and made again.
            Err(e) if !the_functions(&e) => return Err(e),
            Err(e) => {
                functions.triggers.failed(name, &e.to_string());
                writes.steps.push(dead_letter(spec, event, &e)?);
                dead += 1;
            }
        }
    }
    let last = Cursor::of(inputs.last().expect("not empty"));
    writes
        .steps
        .push(TxnStep::Write(KvWrite::Put(PutRequest::new(
            cursor_key(name, shard),
            Bytes::from(postcard::to_allocvec(&last).expect("a cursor encodes")),
        ))));
    let compare = Compare {
        key: cursor_key(name, shard),
        target: CompareTarget::Version(cursor_version),
        op: CompareOp::Eq,
    };
    let request = Request::Kv(KvRequest::Write(writes.atomic(vec![compare])));
    match functions.kernel().execute(ctx, request).await?.response {
        Response::Steps(Some(steps)) => {
            if let Some(Err(e)) = steps.iter().find(|s| s.is_err()) {
                // Committed with the cursor; a refused write (say an INCR of a value that
                // is not a number) is the function's error, counted, not run again.
                functions
                    .triggers
                    .failed(name, &format!("a write of a run was refused: {e}"));
            }
            functions.triggers.ran(name, runs, dead);
            functions.publish(writes.publishes).await;
            Ok(inputs.len())
        }
        // Another runner moved the cursor: its outputs stand, these are dropped.
        Response::Steps(None) => Ok(0),
        other => Err(FirnError::Internal(format!(
            "a trigger's commit answered {other:?}"
        ))),
    }
}

/// Whether a run's error is the function's own (it trapped, failed, went past a limit or
/// its rights), which running it again will not change.
fn the_functions(e: &FirnError) -> bool {
    matches!(
        e,
        FirnError::FunctionFailed(_)
            | FirnError::NoPerm { .. }
            | FirnError::WrongType
            | FirnError::KeyTooLarge { .. }
            | FirnError::ValueTooLarge { .. }
            | FirnError::BadArgument(_)
            | FirnError::Refused(_)
    )
}

/// The trigger's cursor on `shard` and its version (0: none yet, so it starts where the
/// trigger says).
async fn read_cursor(
    functions: &Functions,
    ctx: &CallContext,
    spec: &TriggerSpec,
    shard: u32,
) -> Result<(u64, Cursor), FirnError> {
    let read = KvRead::Get {
        key: cursor_key(&spec.name, shard),
        at: ReadAt::Latest,
        consistency: ReadConsistency::Linearizable,
    };
    if let Response::Value(Some(v)) = functions.read(ctx, read).await?
        && !v.deleted
        && let Some(cursor) = v
            .value
            .as_deref()
            .and_then(|b| postcard::from_bytes(b).ok())
    {
        return Ok((v.version, cursor));
    }
    let start_us = match spec.from {
        TriggerFrom::Now => spec.created_us,
        TriggerFrom::Start => 0,
        TriggerFrom::TimeUs(t) => t,
    };
    // Everything at or after the start: a cursor just before it.
    let start = Cursor {
        wall_us: start_us.saturating_sub(1),
        logical: u32::MAX,
        key: Vec::new(),
        version: 0,
    };
    Ok((0, start))
}

/// The shard's versions under the trigger's prefix after `cursor`, at or below `closed`,
/// oldest first, at most [`INPUTS_PER_COMMIT`].
async fn inputs(
    replica: &Arc<ShardReplica>,
    spec: &TriggerSpec,
    cursor: &Cursor,
    closed: CommitTs,
) -> Result<Vec<WatchEvent>, FirnError> {
    if cursor.stamp() >= closed {
        return Ok(Vec::new());
    }
    let store = replica.store().clone();
    let target = KeyRange::Prefix(spec.prefix.clone());
    let from = WatchFrom::Time(cursor.stamp());
    let events = tokio::task::spawn_blocking(move || store.replay(&target, from))
        .await
        .map_err(|e| FirnError::Internal(format!("reading a trigger's inputs: {e}")))??;
    let mut events: Vec<WatchEvent> = events
        .into_iter()
        .filter(|e| e.info.commit_ts <= closed && Cursor::of(e) > *cursor)
        .filter(|e| {
            spec.until_us
                .is_none_or(|until| e.info.commit_ts.wall_us <= until)
        })
        .collect();
    events.sort_by_key(Cursor::of);
    events.truncate(INPUTS_PER_COMMIT);
    Ok(events)
}

/// Runs one input (tried again up to the trigger's retries); its writes.
async fn run_input(
    functions: &Arc<Functions>,
    ctx: &CallContext,
    spec: &TriggerSpec,
    loaded: &crate::functions::Loaded,
    event: &WatchEvent,
    rights: &Rights,
) -> Result<Vec<crate::functions::sandbox::Effect>, FirnError> {
    let mut last = None;
    for _ in 0..=spec.retries {
        let deleted = event.info.deleted;
        let input = Invocation {
            kind: if deleted {
                InputKind::Delete
            } else {
                InputKind::Put
            },
            keys: vec![event.key.bytes().clone()],
            args: event.info.value.iter().cloned().collect(),
            stamp_us: event.info.commit_ts.wall_us,
            input_version: event.info.version,
        };
        let reads = StoreReads::new(
            functions.kernel().clone(),
            tokio::runtime::Handle::current(),
            ctx.clone(),
            Cut::At(event.info.commit_ts),
            rights.clone(),
        );
        match functions.run_once(loaded, input, reads).await {
            Ok(outcome) => return Ok(outcome.effects),
            Err(e) => last = Some(e),
        }
    }
    Err(last.expect("at least one try"))
}

/// The entry of a failed input in the trigger's dead letters: its key, version, stamp and
/// the error.
fn dead_letter(
    spec: &TriggerSpec,
    event: &WatchEvent,
    error: &FirnError,
) -> Result<TxnStep, FirnError> {
    let field = |f: &str, v: String| (Bytes::from(f.to_owned()), Bytes::from(v));
    let fields = [
        (Bytes::from_static(b"key"), event.key.bytes().clone()),
        field("version", event.info.version.to_string()),
        field("stamp", event.info.commit_ts.to_string()),
        field("error", error.to_string()),
    ];
    Ok(TxnStep::Log(LogWrite::StreamAdd {
        key: firn_model::Key::new(dead_letters(spec).to_vec())?,
        id: StreamId::Auto,
        payload: encode_fields(&fields),
        trim: None,
        no_create: false,
    }))
}
