//! DEL and UNLINK: a tombstone version for each key.

use firn_model::{FirnError, KvWrite, Response};

use crate::resp::args::Args;
use crate::resp::command::{
    Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions, Render, unexpected,
};
use crate::resp::reply::Reply;

pub const DEL: CommandSpec = CommandSpec {
    name: "del",
    arity: -2,
    flags: &[Flag::Write],
    keys: KeyPositions::ALL,
    group: Group::Generic,
    since: FIRST_RELEASE,
    summary: "Deletes the keys (writes tombstone versions); answers how many existed.",
    parse: del,
};

pub const UNLINK: CommandSpec = CommandSpec {
    name: "unlink",
    summary: "DEL: a delete in Firn is one log entry either way.",
    ..DEL
};

fn del(mut args: Args) -> Result<Action, FirnError> {
    Ok(Action::execute(
        KvWrite::Delete { keys: args.keys()? },
        Render::new(show_existed),
    ))
}

fn show_existed(response: Response) -> Reply {
    match response {
        Response::Written(w) => Reply::Int(w.iter().filter(|w| w.existed).count() as i64),
        other => unexpected("DEL", other),
    }
}
