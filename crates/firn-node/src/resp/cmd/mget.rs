//! MGET key…: the keys' newest values, nil for absent ones.

use firn_model::{FirnError, KvRead, ReadAt, ReadConsistency, Response};

use crate::resp::args::Args;
use crate::resp::command::{
    Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions, Render, unexpected,
};
use crate::resp::reply::Reply;

pub const MGET: CommandSpec = CommandSpec {
    name: "mget",
    arity: -2,
    flags: &[Flag::ReadOnly, Flag::Fast],
    keys: KeyPositions::ALL,
    group: Group::String,
    since: FIRST_RELEASE,
    summary: "The keys' values, nil for absent ones.",
    parse: mget,
};

fn mget(mut args: Args) -> Result<Action, FirnError> {
    Ok(Action::execute(
        KvRead::MGet {
            keys: args.keys()?,
            at: ReadAt::Latest,
            consistency: ReadConsistency::Linearizable,
        },
        Render::new(show_values),
    ))
}

fn show_values(response: Response) -> Reply {
    match response {
        Response::Values(vs) => Reply::Array(
            vs.into_iter()
                .map(|v| v.and_then(|i| i.value).map_or(Reply::Nil, Reply::Bulk))
                .collect(),
        ),
        other => unexpected("MGET", other),
    }
}
