//! FIRN.GET and FIRN.MGET: versions with their stamps, at a version, a time or an event
//! time, at a chosen consistency.

use firn_model::{FirnError, KvRead, Response};

use super::{read_options, version_map, version_maps};
use crate::resp::args::Args;
use crate::resp::command::{
    Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions, Render, unexpected,
};
use crate::resp::reply::Reply;

pub const FIRN_GET: CommandSpec = CommandSpec {
    name: "firn.get",
    arity: -2,
    flags: &[Flag::ReadOnly, Flag::Fast],
    keys: KeyPositions::FIRST,
    group: Group::Firn,
    since: FIRST_RELEASE,
    summary: "The key's version (newest, VERSION n, ASOF t, EVENTTIME t [ASOF t | COMPLETE]) with its stamps; CONSISTENCY c.",
    parse: firn_get,
};

pub const FIRN_MGET: CommandSpec = CommandSpec {
    name: "firn.mget",
    arity: -2,
    flags: &[Flag::ReadOnly, Flag::MovableKeys],
    keys: KeyPositions::NONE,
    group: Group::Firn,
    since: FIRST_RELEASE,
    summary: "[ASOF t | EVENTTIME t] [CONSISTENCY c] key…: each key's version, nil if absent.",
    parse: firn_mget,
};

fn firn_get(mut args: Args) -> Result<Action, FirnError> {
    let key = args.key()?;
    let (at, consistency) = read_options(&mut args, true)?;
    args.done()?;
    Ok(Action::execute(
        KvRead::Get {
            key,
            at,
            consistency,
        },
        Render::new(show_version),
    ))
}

fn firn_mget(mut args: Args) -> Result<Action, FirnError> {
    let (at, consistency) = read_options(&mut args, false)?;
    Ok(Action::execute(
        KvRead::MGet {
            keys: args.keys()?,
            at,
            consistency,
        },
        Render::new(show_versions),
    ))
}

fn show_version(response: Response) -> Reply {
    match response {
        Response::Value(v) => v.as_ref().map_or(Reply::Nil, version_map),
        other => unexpected("FIRN.GET", other),
    }
}

fn show_versions(response: Response) -> Reply {
    match response {
        Response::Values(vs) => version_maps(&vs),
        other => unexpected("FIRN.MGET", other),
    }
}
