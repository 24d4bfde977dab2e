//! GET and TYPE: one key's newest value (WRONGTYPE for a key that holds no string), and its
//! type, read linearizably.

use firn_model::{FirnError, KvRead, ReadAt, ReadConsistency, Response};

use crate::resp::args::Args;
use crate::resp::command::{
    Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions, Render, unexpected,
};
use crate::resp::reply::Reply;

pub const GET: CommandSpec = CommandSpec {
    name: "get",
    arity: 2,
    flags: &[Flag::ReadOnly, Flag::Fast],
    keys: KeyPositions::FIRST,
    group: Group::String,
    since: FIRST_RELEASE,
    summary: "The key's value, or nil.",
    parse: |args| Ok(Action::execute(newest(args)?, Render::new(show_value))),
};

pub const TYPE: CommandSpec = CommandSpec {
    name: "type",
    arity: 2,
    flags: &[Flag::ReadOnly, Flag::Fast],
    keys: KeyPositions::FIRST,
    group: Group::Generic,
    since: FIRST_RELEASE,
    summary: "The key's type (string, stream), none if it does not exist.",
    parse: |mut args| {
        let read = KvRead::Type {
            key: args.key()?,
            consistency: ReadConsistency::Linearizable,
        };
        Ok(Action::execute(read, Render::new(show_type)))
    },
};

fn newest(mut args: Args) -> Result<KvRead, FirnError> {
    Ok(KvRead::Get {
        key: args.key()?,
        at: ReadAt::Latest,
        consistency: ReadConsistency::Linearizable,
    })
}

fn show_value(response: Response) -> Reply {
    match response {
        Response::Value(v) => v.and_then(|i| i.value).map_or(Reply::Nil, Reply::Bulk),
        other => unexpected("GET", other),
    }
}

fn show_type(response: Response) -> Reply {
    match response {
        Response::Value(v) => Reply::Simple(v.map_or("none", |i| i.kind.name()).into()),
        other => unexpected("TYPE", other),
    }
}
