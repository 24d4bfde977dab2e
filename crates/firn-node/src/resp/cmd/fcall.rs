//! FCALL name numkeys key… arg…: runs a function next to the data as one transaction over
//! the keys it reads and writes (Redis 7's Functions naming; the function is a WebAssembly
//! module loaded with FIRN.FUNCTION LOAD, docs/functions.md). Answers the function's reply,
//! or nil.

use firn_model::{FirnError, FunctionRequest, Key, Response};

use crate::resp::args::Args;
use crate::resp::command::{
    Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions, Render, unexpected,
};
use crate::resp::reply::Reply;

pub const FCALL: CommandSpec = CommandSpec {
    name: "fcall",
    arity: -3,
    flags: &[Flag::Write, Flag::MovableKeys],
    keys: KeyPositions::NONE,
    group: Group::Scripting,
    since: FIRST_RELEASE,
    summary: "Runs a function loaded with FIRN.FUNCTION LOAD on keys and arguments, as one transaction.",
    parse: fcall,
};

fn fcall(mut args: Args) -> Result<Action, FirnError> {
    let name = args.text()?;
    let numkeys = args.text()?;
    let numkeys: usize = numkeys
        .parse()
        .map_err(|_| FirnError::BadArgument("numkeys must be a non-negative integer".into()))?;
    if numkeys > args.len() {
        return Err(FirnError::BadArgument(
            "Number of keys can't be greater than number of args".into(),
        ));
    }
    let mut rest = args.rest();
    let call_args = rest.split_off(numkeys);
    let keys = rest
        .into_iter()
        .map(Key::new)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Action::execute(
        FunctionRequest::Call {
            name,
            keys,
            args: call_args,
        },
        Render::new(|r| match r {
            Response::Called(Some(reply)) => Reply::Bulk(reply),
            Response::Called(None) => Reply::Nil,
            other => unexpected("FCALL", other),
        }),
    ))
}
