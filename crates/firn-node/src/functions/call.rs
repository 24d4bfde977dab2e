//! `FCALL name numkeys key… arg…`: one run of a function as one transaction. The run reads
//! the newest committed values, each remembered with its version; its writes commit under
//! compares that every key it read is still that version. A compare that fails means a
//! write came between: the run is thrown away and made again, so the function's effect is
//! serializable.

use std::sync::Arc;

use bytes::Bytes;
use firn_model::limits::TXN_TRIES_MAX;
use firn_model::{CallContext, FirnError, Key, KvRequest, Request, Response, hlc::system_wall_us};

use super::commit::Writes;
use super::host::{Cut, StoreReads};
use super::sandbox::{InputKind, Invocation};
use super::{Functions, Rights};

pub async fn call(
    functions: &Arc<Functions>,
    ctx: &CallContext,
    name: &str,
    keys: Vec<Key>,
    args: Vec<Bytes>,
    rights: Rights,
) -> Result<Option<Bytes>, FirnError> {
    let loaded = functions.loaded(ctx, name, None).await?;
    for _ in 0..TXN_TRIES_MAX {
        let reads = StoreReads::new(
            functions.kernel().clone(),
            tokio::runtime::Handle::current(),
            ctx.clone(),
            Cut::Newest,
            rights.clone(),
        );
        let seen = reads.seen();
        let input = Invocation {
            kind: InputKind::Call,
            keys: keys.iter().map(|k| k.bytes().clone()).collect(),
            args: args.clone(),
            stamp_us: system_wall_us(),
            input_version: 0,
        };
        let outcome = functions.run_once(&loaded, input, reads).await?;
        let mut writes = Writes::default();
        writes.add(outcome.effects, &rights)?;
        let compares = seen.unchanged();
        if writes.steps.is_empty() && compares.len() <= 1 {
            // One linearizable read, or none: nothing to commit or to check.
            functions.publish(writes.publishes).await;
            return Ok(outcome.reply);
        }
        // Reads of several keys commit too, with no step: their compares check that the
        // keys were, together, what the run saw at one moment (one cut).
        let request = Request::Kv(KvRequest::Write(writes.atomic(compares)));
        let answer = functions.kernel().execute(ctx, request).await?;
        match answer.response {
            Response::Steps(Some(steps)) => {
                if let Some(Err(e)) = steps.into_iter().find(|s| s.is_err()) {
                    // The other writes stand (one transaction): say so.
                    return Err(FirnError::FunctionFailed(format!(
                        "the run committed, but one of its writes was refused: {e}"
                    )));
                }
                functions.publish(writes.publishes).await;
                return Ok(outcome.reply);
            }
            // A key read changed before the commit: run again on the new values.
            Response::Steps(None) => continue,
            other => {
                return Err(FirnError::Internal(format!(
                    "a function's commit answered {other:?}"
                )));
            }
        }
    }
    Err(FirnError::TryAgain(format!(
        "the keys function '{name}' reads kept changing under it ({TXN_TRIES_MAX} runs); try again"
    )))
}
