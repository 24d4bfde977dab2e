//! MSET k v [k v…]: several keys in one atomic log entry.

use firn_model::{FirnError, KvWrite};

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
    summary: "Writes every pair in one atomic log entry.",
    parse: mset,
};

fn mset(mut args: Args) -> Result<Action, FirnError> {
    if !args.len().is_multiple_of(2) {
        return Err(FirnError::WrongArity("mset".into()));
    }
    let mut items = Vec::with_capacity(args.len() / 2);
    while !args.is_empty() {
        let k = args.key()?;
        items.push((k, args.bytes()?));
    }
    Ok(Action::execute(
        KvWrite::MSet { items },
        Render::new(|_| Reply::Ok),
    ))
}
