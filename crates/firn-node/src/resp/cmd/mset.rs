//! MSET k v [k v…]: several keys written together, atomically (one log entry within a
//! shard, a transaction across shards); MSETNX: the same, only if none of them exists.

use firn_model::{Compare, CompareOp, CompareTarget, FirnError, KvWrite, Response, TxnStep};

use crate::resp::args::Args;
use crate::resp::command::{Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions, Render};
use crate::resp::reply::Reply;

pub const MSET: CommandSpec = CommandSpec {
    name: "mset",
    arity: -3,
    flags: &[Flag::Write],
    keys: KeyPositions::PAIRS,
    group: Group::String,
    since: FIRST_RELEASE,
    summary: "Writes every pair atomically, across shards too.",
    parse: mset,
};

pub const MSETNX: CommandSpec = CommandSpec {
    name: "msetnx",
    summary: "Writes every pair atomically if none of the keys exists: 1, else 0 and nothing.",
    parse: msetnx,
    ..MSET
};

fn mset(mut args: Args) -> Result<Action, FirnError> {
    Ok(Action::execute(
        KvWrite::MSet {
            items: pairs(&mut args, "mset")?,
        },
        Render::new(|_| Reply::Ok),
    ))
}

/// One transaction: every key compared absent, then one MSET.
fn msetnx(mut args: Args) -> Result<Action, FirnError> {
    let items = pairs(&mut args, "msetnx")?;
    let compares = items
        .iter()
        .map(|(key, _)| Compare {
            key: key.clone(),
            target: CompareTarget::Exists(false),
            op: CompareOp::Eq,
        })
        .collect();
    Ok(Action::execute(
        KvWrite::Atomic {
            compares,
            steps: vec![TxnStep::Write(KvWrite::MSet { items })],
            otherwise: Some(Vec::new()),
        },
        Render::new(|response| match response {
            Response::Branch { succeeded, .. } => Reply::Int(succeeded as i64),
            other => crate::resp::command::unexpected("MSETNX", other),
        }),
    ))
}

fn pairs(args: &mut Args, name: &str) -> Result<Vec<(firn_model::Key, bytes::Bytes)>, FirnError> {
    if !args.len().is_multiple_of(2) {
        return Err(FirnError::WrongArity(name.into()));
    }
    let mut items = Vec::with_capacity(args.len() / 2);
    while !args.is_empty() {
        let k = args.key()?;
        items.push((k, args.bytes()?));
    }
    Ok(items)
}
