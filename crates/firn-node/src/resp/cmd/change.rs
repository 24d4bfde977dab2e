//! INCR, INCRBY, DECR, DECRBY, INCRBYFLOAT, APPEND and GETDEL: a key's next value computed
//! from its current one in the key's shard, one log entry each, with Redis's replies and
//! errors (`firn_store`'s `store/change.rs` computes them).

use firn_model::{FirnError, KeyChange, KvWrite, Response};

use super::redis_integer;
use crate::resp::args::Args;
use crate::resp::command::{
    Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions, Render, unexpected,
};
use crate::resp::reply::Reply;

const COUNTER: CommandSpec = CommandSpec {
    name: "incr",
    arity: 2,
    flags: &[Flag::Write, Flag::Fast],
    keys: KeyPositions::FIRST,
    group: Group::String,
    since: FIRST_RELEASE,
    summary: "Adds 1 to the key's integer value (0 when absent); answers the new value.",
    parse: |args| by(args, 1),
};

pub const INCR: CommandSpec = COUNTER;

pub const DECR: CommandSpec = CommandSpec {
    name: "decr",
    summary: "Subtracts 1 from the key's integer value (0 when absent); answers the new value.",
    parse: |args| by(args, -1),
    ..COUNTER
};

pub const INCRBY: CommandSpec = CommandSpec {
    name: "incrby",
    arity: 3,
    summary: "Adds an integer to the key's integer value; answers the new value.",
    parse: |args| by_argument(args, false),
    ..COUNTER
};

pub const DECRBY: CommandSpec = CommandSpec {
    name: "decrby",
    arity: 3,
    summary: "Subtracts an integer from the key's integer value; answers the new value.",
    parse: |args| by_argument(args, true),
    ..COUNTER
};

pub const INCRBYFLOAT: CommandSpec = CommandSpec {
    name: "incrbyfloat",
    arity: 3,
    summary: "Adds a decimal number to the key's value; answers the new value as text.",
    parse: incr_by_float,
    ..COUNTER
};

pub const APPEND: CommandSpec = CommandSpec {
    name: "append",
    arity: 3,
    summary: "Appends to the key's value (made when absent); answers the new length.",
    parse: append,
    ..COUNTER
};

pub const GETDEL: CommandSpec = CommandSpec {
    name: "getdel",
    arity: 2,
    summary: "Deletes the key (a tombstone version) and answers the value it had, or nil.",
    parse: getdel,
    ..COUNTER
};

/// The change of `args`' key, shown with `show`.
fn change(
    args: &mut Args,
    change: impl FnOnce(&mut Args) -> Result<KeyChange, FirnError>,
    show: fn(Response) -> Reply,
) -> Result<Action, FirnError> {
    let key = args.key()?;
    let change = change(args)?;
    Ok(Action::execute(
        KvWrite::Change { key, change },
        Render::new(show),
    ))
}

fn by(mut args: Args, by: i64) -> Result<Action, FirnError> {
    change(&mut args, |_| Ok(KeyChange::IncrBy(by)), show_integer)
}

fn by_argument(mut args: Args, negate: bool) -> Result<Action, FirnError> {
    let by = |args: &mut Args| {
        let n = redis_integer(args)?;
        let by = if negate {
            n.checked_neg()
                .ok_or_else(|| FirnError::BadArgument("decrement would overflow".into()))?
        } else {
            n
        };
        Ok(KeyChange::IncrBy(by))
    };
    change(&mut args, by, show_integer)
}

fn incr_by_float(mut args: Args) -> Result<Action, FirnError> {
    change(
        &mut args,
        |args| Ok(KeyChange::IncrByFloat(args.text()?)),
        show_value,
    )
}

fn append(mut args: Args) -> Result<Action, FirnError> {
    // The node writes its own --max-value-bytes into `max_len` before the write is planned.
    let suffix = |args: &mut Args| {
        Ok(KeyChange::Append {
            suffix: args.bytes()?,
            max_len: 0,
        })
    };
    change(&mut args, suffix, show_length)
}

fn getdel(mut args: Args) -> Result<Action, FirnError> {
    change(&mut args, |_| Ok(KeyChange::GetDel), show_previous)
}

fn show_integer(response: Response) -> Reply {
    match response {
        Response::Changed { value: Some(v), .. } => match std::str::from_utf8(&v)
            .ok()
            .and_then(|t| t.parse::<i64>().ok())
        {
            Some(n) => Reply::Int(n),
            None => Reply::error(&FirnError::Internal(format!("a counter answered {v:?}"))),
        },
        other => unexpected("INCR", other),
    }
}

fn show_value(response: Response) -> Reply {
    match response {
        Response::Changed { value: Some(v), .. } => Reply::Bulk(v),
        other => unexpected("INCRBYFLOAT", other),
    }
}

fn show_length(response: Response) -> Reply {
    match response {
        Response::Changed { value: Some(v), .. } => Reply::Int(v.len() as i64),
        other => unexpected("APPEND", other),
    }
}

fn show_previous(response: Response) -> Reply {
    match response {
        Response::Changed { written, .. } => written
            .previous
            .and_then(|p| p.value)
            .map_or(Reply::Nil, Reply::Bulk),
        other => unexpected("GETDEL", other),
    }
}
