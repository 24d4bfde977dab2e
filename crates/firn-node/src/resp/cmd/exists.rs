//! EXISTS key…: how many of the keys exist.

use firn_model::{FirnError, KvRead, ReadConsistency, Response};

use crate::resp::args::Args;
use crate::resp::command::{
    Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions, Render, unexpected,
};
use crate::resp::reply::Reply;

pub const EXISTS: CommandSpec = CommandSpec {
    name: "exists",
    arity: -2,
    flags: &[Flag::ReadOnly, Flag::Fast],
    keys: KeyPositions::ALL,
    group: Group::Generic,
    since: FIRST_RELEASE,
    summary: "How many of the keys exist (a key given twice counts twice).",
    parse: exists,
};

fn exists(mut args: Args) -> Result<Action, FirnError> {
    Ok(Action::execute(
        KvRead::Exists {
            keys: args.keys()?,
            consistency: ReadConsistency::Linearizable,
        },
        Render::new(show_count),
    ))
}

fn show_count(response: Response) -> Reply {
    match response {
        Response::Count(n) => Reply::Int(n as i64),
        other => unexpected("EXISTS", other),
    }
}
