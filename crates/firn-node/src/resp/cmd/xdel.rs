//! XDEL key id…: removes entries from a stream by id.

use firn_model::{FirnError, LogWrite, Response};

use super::stream_ids;
use crate::resp::args::Args;
use crate::resp::command::{
    Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions, Render, unexpected,
};
use crate::resp::reply::Reply;

pub const XDEL: CommandSpec = CommandSpec {
    name: "xdel",
    arity: -3,
    flags: &[Flag::Write, Flag::Fast],
    keys: KeyPositions::FIRST,
    group: Group::Stream,
    since: FIRST_RELEASE,
    summary: "Removes the entries with these ids; answers how many existed.",
    parse: xdel,
};

fn xdel(mut args: Args) -> Result<Action, FirnError> {
    let key = args.key()?;
    // Every id is checked before anything is removed, as Redis does.
    let ids = stream_ids(&mut args)?;
    Ok(Action::execute(
        LogWrite::StreamDel { key, ids },
        Render::new(show_count),
    ))
}

fn show_count(response: Response) -> Reply {
    match response {
        Response::Count(n) => Reply::Int(n as i64),
        other => unexpected("XDEL", other),
    }
}
