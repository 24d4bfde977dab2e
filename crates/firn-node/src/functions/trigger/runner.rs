//! Running triggers: on every shard this node leads, each trigger's inputs — the shard's
//! versions under its prefix after its cursor and at or below the shard's closed time, in
//! (stamp, key, version) order — each run reading the cut at its own stamp, and a batch's
//! outputs committed together with the cursor, under a compare that the cursor is still the
//! version this runner read. A second runner (an old leader) fails that compare and writes
//! nothing; a runner that stops before its commit leaves the cursor where it was, and the
//! next one runs the same inputs again, reading the same cuts. So every input's effect
//! happens once.
//!
//! Inputs come from the shard's live [`Feed`] once a trigger has caught up with it, else from
//! the store; a leader keeps the cursors it committed, so a round that finds inputs reads
//! nothing but the feed before its commit. Shards are looked at concurrently.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use firn_model::log::encode_fields;
use firn_model::{
    CallContext, CommitTs, Compare, CompareOp, CompareTarget, FirnError, KvRead, KvRequest,
    KvWrite, LogWrite, PutRequest, ReadAt, ReadConsistency, Request, Response, StreamId,
    TriggerFrom, TriggerSpec, TxnStep, hlc::system_wall_us,
};
use firn_raft::ShardReplica;
use firn_store::ChangePosition;
use futures::StreamExt;
use tokio::sync::watch;

use super::feed::Feed;
use super::input::{self, Input};
use super::{cursor_key, dead_letters, specs};
use crate::functions::commit::Writes;
use crate::functions::host::{Cut, StoreReads};
use crate::functions::{Functions, Rights, functions_own};

/// How often a leader looks for new inputs when nothing wakes it sooner.
const LOOK_EVERY: Duration = Duration::from_millis(50);

/// How often the runner reads the triggers' definitions again.
const SPECS_EVERY: Duration = Duration::from_millis(500);

/// The most inputs one commit takes (their outputs and the cursor in one transaction); fewer
/// when their writes would pass half a transaction's bound.
pub const INPUTS_PER_COMMIT: usize = 256;

/// Inputs of a batch run at once. Each run reads the fixed cut at its own input's stamp and
/// none sees another's writes, so runs may overlap; their writes are added in input order.
const RUNS_AT_ONCE: usize = 4;

/// What a runner knows of a trigger's cursor on a shard it leads: the cursor, the version of
/// its key (the next commit's compare), and a stamp through which no input lies beyond it.
#[derive(Clone)]
struct Known {
    version: u64,
    cursor: ChangePosition,
    seen_through: CommitTs,
}

/// What the runner keeps for a shard it leads: its live feed and the cursors it knows.
struct Led {
    replica: Arc<ShardReplica>,
    feed: Option<Feed>,
    known: HashMap<String, Known>,
}

/// Runs the triggers on the shards this node leads, until `stop`.
pub async fn run(functions: Arc<Functions>, mut stop: watch::Receiver<bool>) {
    let ctx = CallContext::default();
    let mut triggers: Vec<TriggerSpec> = Vec::new();
    let mut specs_read = tokio::time::Instant::now() - SPECS_EVERY;
    let mut led: HashMap<u32, Led> = HashMap::new();
    let mut behind = false;
    loop {
        // A round that took a full batch looks again at once: more inputs are waiting.
        let pause = if behind { Duration::ZERO } else { LOOK_EVERY };
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = stop.changed() => return,
        }
        let kernel = functions.kernel().clone();
        let now_led: Vec<_> = kernel
            .replicas()
            .all()
            .into_iter()
            .filter(|r| r.leader() == Some(kernel.node_id()))
            .collect();
        // A shard led no more is forgotten: its cursors may move elsewhere meanwhile.
        led.retain(|id, _| now_led.iter().any(|r| r.shard_id() == *id));
        for replica in now_led {
            led.entry(replica.shard_id()).or_insert_with(|| Led {
                replica,
                feed: None,
                known: HashMap::new(),
            });
        }
        // A node that leads no shard runs no trigger, and asks nothing of the others.
        if led.is_empty() {
            behind = false;
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
        let rounds = led
            .values_mut()
            .map(|shard| shard.look(&functions, &ctx, &triggers));
        behind = futures::future::join_all(rounds).await.contains(&true);
    }
}

impl Led {
    /// A round of every running trigger on this shard; whether one of them is behind.
    async fn look(
        &mut self,
        functions: &Arc<Functions>,
        ctx: &CallContext,
        triggers: &[TriggerSpec],
    ) -> bool {
        let mut prefixes: Vec<Bytes> = triggers
            .iter()
            .filter(|t| t.entries.is_none())
            .map(|t| t.prefix.clone())
            .collect();
        prefixes.sort();
        prefixes.dedup();
        // Drained at every look, busy or idle, so that it keeps up with the store's buffer
        // however few of the shard's writes are the triggers' inputs.
        if !self
            .feed
            .as_mut()
            .is_some_and(|f| f.serves(&prefixes) && f.pull())
        {
            self.feed = Some(Feed::start(self.replica.store(), prefixes));
        }
        self.known
            .retain(|name, _| triggers.iter().any(|t| t.name == *name));
        let mut behind = false;
        for spec in triggers.iter().filter(|s| !s.paused) {
            match self.round(functions, ctx, spec).await {
                Ok(inputs) => behind |= inputs == INPUTS_PER_COMMIT,
                Err(e) => {
                    // Read again next time: another runner may have moved it.
                    self.known.remove(&spec.name);
                    // Shown by INFO (say the function was deleted); tried again.
                    functions.triggers.stalled(&spec.name, &e.to_string());
                    tracing::debug!(trigger = %spec.name, shard = self.replica.shard_id(), "{e}")
                }
            }
        }
        // What every running trigger is past is let go.
        let running: Vec<_> = triggers
            .iter()
            .filter(|s| !s.paused && s.entries.is_none())
            .collect();
        let passed = running
            .iter()
            .map(|s| self.known.get(&s.name).map(|k| &k.cursor))
            .collect::<Option<Vec<_>>>()
            .and_then(|cursors| cursors.into_iter().min().cloned());
        if let (Some(feed), Some(passed)) = (self.feed.as_mut(), passed) {
            feed.forget_through(&passed);
        }
        behind
    }

    /// One batch of a trigger's inputs on this shard: run, and committed with the cursor.
    /// Answers how many inputs it took.
    async fn round(
        &mut self,
        functions: &Arc<Functions>,
        ctx: &CallContext,
        spec: &TriggerSpec,
    ) -> Result<usize, FirnError> {
        let shard = self.replica.shard_id();
        let known = match self.known.get(&spec.name) {
            Some(k) => k.clone(),
            None => read_cursor(functions, ctx, spec, shard).await?,
        };
        let store = self.replica.store().clone();
        let mut through = store.last_commit_ts();
        if let Some(until) = spec.until_us {
            through = through.min(CommitTs::new(until, u32::MAX));
        }
        let mut passed = None;
        let inputs: Vec<Input> = if through <= known.cursor.commit_ts {
            Vec::new()
        } else if let Some(source) = spec.entries.clone() {
            let after = known.cursor.clone();
            let (inputs, older) = tokio::task::spawn_blocking(move || {
                input::records(&store, &source, &after, through, INPUTS_PER_COMMIT)
            })
            .await
            .map_err(|e| FirnError::Internal(format!("reading a trigger's inputs: {e}")))??;
            passed = older;
            inputs
        } else if let Some(feed) = self.feed.as_mut()
            && feed.pull()
            && feed.covers(&known.cursor, known.seen_through)
        {
            let changes = feed.changes(&spec.prefix, &known.cursor, through, INPUTS_PER_COMMIT);
            changes.into_iter().map(Input::of_version).collect()
        } else {
            let (prefix, after) = (spec.prefix.clone(), known.cursor.clone());
            let changes = tokio::task::spawn_blocking(move || {
                store.changes(&prefix, &after, through, INPUTS_PER_COMMIT)
            })
            .await
            .map_err(|e| FirnError::Internal(format!("reading a trigger's inputs: {e}")))??;
            changes.into_iter().map(Input::of_version).collect()
        };
        // Fewer than a batch: every input up to `through` is among them.
        let seen_through = if inputs.len() < INPUTS_PER_COMMIT {
            through.max(known.seen_through)
        } else {
            known.seen_through
        };
        let name = &spec.name;
        if inputs.is_empty() {
            functions.triggers.lag(name, shard, 0);
            // Records older than the trigger's start are not looked at again.
            let cursor = passed.unwrap_or(known.cursor);
            self.known.insert(
                name.clone(),
                Known {
                    seen_through,
                    cursor,
                    ..known
                },
            );
            return Ok(0);
        }
        let now_us = system_wall_us();
        functions.triggers.lag(
            name,
            shard,
            now_us.saturating_sub(inputs[0].stamp().wall_us) / 1_000,
        );
        let (writes, taken, runs, dead) = run_batch(functions, ctx, spec, &inputs).await?;
        let last = inputs[taken - 1].at.clone();
        let committed = commit(functions, ctx, spec, shard, known.version, &last, writes).await?;
        match committed {
            Some((version, publishes)) => {
                functions.triggers.ran(name, runs, dead);
                functions.publish(publishes).await;
                self.known.insert(
                    name.clone(),
                    Known {
                        version,
                        cursor: last,
                        seen_through: if taken == inputs.len() {
                            seen_through
                        } else {
                            known.seen_through
                        },
                    },
                );
                Ok(taken)
            }
            // Another runner moved the cursor: its outputs stand, these are dropped.
            None => {
                self.known.remove(name);
                Ok(0)
            }
        }
    }
}

/// Runs a batch's inputs, as many as fit one transaction: their writes (dead letters among
/// them) in input order, how many inputs they cover, how many ran and how many went to the
/// dead letters.
async fn run_batch(
    functions: &Arc<Functions>,
    ctx: &CallContext,
    spec: &TriggerSpec,
    inputs: &[Input],
) -> Result<(Writes, usize, u64, u64), FirnError> {
    let loaded = functions.loaded(ctx, &spec.function, spec.version).await?;
    let rights = Rights::of(functions.kernel(), spec.creator.as_deref())?;
    let (loaded, rights) = (&loaded, &rights);
    // Futures do nothing until polled: `buffered` starts a few at a time, in order.
    let started: Vec<_> = inputs
        .iter()
        .map(|input| run_input(functions, ctx, spec, loaded, input, rights))
        .collect();
    let mut results = futures::stream::iter(started)
        .buffered(RUNS_AT_ONCE)
        .zip(futures::stream::iter(inputs));
    let mut writes = Writes::default();
    let (mut taken, mut runs, mut dead) = (0, 0, 0);
    while let Some((result, input)) = results.next().await {
        let before = writes.steps.len();
        match result {
            Ok(effects) => {
                let effects = match &spec.into {
                    Some(into) => effects.into_iter().filter_map(|e| e.under(into)).collect(),
                    None => effects,
                };
                if taken > 0 && !writes.has_room_for(&effects) {
                    // The next commit takes it (and runs it again, reading the same cut).
                    break;
                }
                if let Err(e) = writes.add(effects, rights) {
                    // Beyond the creator's rights: a failed input, as a trap is.
                    functions.triggers.failed(&spec.name, &e.to_string());
                    writes.steps.truncate(before);
                    writes.steps.push(dead_letter(spec, input, &e)?);
                    dead += 1;
                } else {
                    runs += 1;
                }
            }
            // The store could not answer a read (a shard between leaders): not the
            // function's fault, so not a dead letter — the round is given up and made again.
            Err(e) if !functions_own(&e) => return Err(e),
            Err(e) => {
                functions.triggers.failed(&spec.name, &e.to_string());
                writes.steps.push(dead_letter(spec, input, &e)?);
                dead += 1;
            }
        }
        taken += 1;
    }
    Ok((writes, taken, runs, dead))
}

/// Commits a batch's writes with the trigger's cursor moved to `last`, if the cursor is still
/// at `version`: the cursor's new version and what the runs publish; `None` when another
/// runner moved it first.
async fn commit(
    functions: &Arc<Functions>,
    ctx: &CallContext,
    spec: &TriggerSpec,
    shard: u32,
    version: u64,
    last: &ChangePosition,
    mut writes: Writes,
) -> Result<Option<(u64, Vec<(Bytes, Bytes)>)>, FirnError> {
    let cursor = Bytes::from(postcard::to_allocvec(last).expect("a cursor encodes"));
    writes
        .steps
        .push(TxnStep::Write(KvWrite::Put(PutRequest::new(
            cursor_key(&spec.name, shard),
            cursor,
        ))));
    let compare = Compare {
        key: cursor_key(&spec.name, shard),
        target: CompareTarget::Version(version),
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
                    .failed(&spec.name, &format!("a write of a run was refused: {e}"));
            }
            let version = match steps.last() {
                Some(Ok(Response::Written(w))) if w.len() == 1 => w[0].version,
                other => {
                    return Err(FirnError::Internal(format!(
                        "a trigger's cursor write answered {other:?}"
                    )));
                }
            };
            Ok(Some((version, writes.publishes)))
        }
        Response::Steps(None) => Ok(None),
        other => Err(FirnError::Internal(format!(
            "a trigger's commit answered {other:?}"
        ))),
    }
}

/// The trigger's cursor on `shard` as its key holds it (version 0: none yet, so it starts
/// where the trigger says).
async fn read_cursor(
    functions: &Functions,
    ctx: &CallContext,
    spec: &TriggerSpec,
    shard: u32,
) -> Result<Known, FirnError> {
    let read = KvRead::Get {
        key: cursor_key(&spec.name, shard),
        at: ReadAt::Latest,
        consistency: ReadConsistency::Linearizable,
    };
    let unknown = |version, cursor: ChangePosition| Known {
        version,
        cursor,
        seen_through: CommitTs::default(),
    };
    if let Response::Value(Some(v)) = functions.read(ctx, read).await?
        && !v.deleted
        && let Some(cursor) = v
            .value
            .as_deref()
            .and_then(|b| postcard::from_bytes::<ChangePosition>(b).ok())
    {
        return Ok(unknown(v.version, cursor));
    }
    let start_us = match spec.from {
        TriggerFrom::Now => spec.created_us,
        TriggerFrom::Start => 0,
        TriggerFrom::TimeUs(t) => t,
    };
    // Everything at or after the start: a cursor just before it.
    let start = ChangePosition {
        commit_ts: CommitTs::new(start_us.saturating_sub(1), u32::MAX),
        key: Vec::new(),
        version: 0,
    };
    Ok(unknown(0, start))
}

/// Runs one input (tried again up to the trigger's retries), reading the cut at its stamp;
/// its writes.
async fn run_input(
    functions: &Arc<Functions>,
    ctx: &CallContext,
    spec: &TriggerSpec,
    loaded: &crate::functions::Loaded,
    input: &Input,
    rights: &Rights,
) -> Result<Vec<crate::functions::sandbox::Effect>, FirnError> {
    if input.too_large {
        return Err(FirnError::Refused(
            "the input is a large value; a function reads values up to the inline value limit"
                .into(),
        ));
    }
    let mut last = None;
    for _ in 0..=spec.retries {
        let reads = StoreReads::new(
            functions.kernel().clone(),
            tokio::runtime::Handle::current(),
            ctx.clone(),
            Cut::At(input.stamp()),
            rights.clone(),
        );
        match functions
            .run_once(loaded, input.invocation.clone(), reads)
            .await
        {
            Ok(outcome) => return Ok(outcome.effects),
            Err(e) => last = Some(e),
        }
    }
    Err(last.expect("at least one try"))
}

/// The entry of a failed input in the trigger's dead letters: its key (or stream, or tag),
/// version (or id), stamp and the error.
fn dead_letter(spec: &TriggerSpec, input: &Input, error: &FirnError) -> Result<TxnStep, FirnError> {
    let field = |f: &str, v: String| (Bytes::from(f.to_owned()), Bytes::from(v));
    let fields = [
        (Bytes::from_static(b"key"), input.key.clone()),
        field("version", input.id.clone()),
        field("stamp", input.stamp().to_string()),
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
