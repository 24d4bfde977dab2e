//! SET key value [NX|XX] [GET]: a Redis write, conditional on presence; GETSET and SETNX,
//! its older spellings.

use firn_model::{FirnError, KvWrite, PutRequest, Response, WriteCondition};

use crate::resp::args::Args;
use crate::resp::command::{
    Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions, Render, unexpected,
};
use crate::resp::reply::Reply;

pub const SET: CommandSpec = CommandSpec {
    name: "set",
    arity: -3,
    flags: &[Flag::Write],
    keys: KeyPositions::FIRST,
    group: Group::String,
    since: FIRST_RELEASE,
    summary: "Writes a new version of the key; NX, XX and GET as in Redis (no expiry options).",
    parse: set,
};

pub const GETSET: CommandSpec = CommandSpec {
    name: "getset",
    arity: 3,
    summary: "SET key value GET: writes the value and answers the one it replaced, or nil.",
    parse: |mut args| {
        let mut put = PutRequest::new(args.key()?, args.bytes()?);
        put.return_previous = true;
        Ok(Action::execute(
            KvWrite::Put(put),
            Render::new(show_previous),
        ))
    },
    ..SET
};

pub const SETNX: CommandSpec = CommandSpec {
    name: "setnx",
    arity: 3,
    summary: "SET key value NX: 1 if the key was written, 0 if it existed.",
    parse: |mut args| {
        let mut put = PutRequest::new(args.key()?, args.bytes()?);
        put.condition = WriteCondition::IfVersion(0);
        Ok(Action::execute(
            KvWrite::Put(put),
            Render::new(|response| match response {
                Response::Written(_) => Reply::Int(1),
                other => unexpected("SETNX", other),
            })
            .errors_as(|e| match e {
                FirnError::Conflict { .. } => Reply::Int(0),
                e => Reply::error(&e),
            }),
        ))
    },
    ..SET
};

fn set(mut args: Args) -> Result<Action, FirnError> {
    let key = args.key()?;
    let value = args.bytes()?;
    let mut put = PutRequest::new(key, value);
    while !args.is_empty() {
        let opt = args.keyword()?;
        match opt.as_str() {
            "NX" | "XX" if put.condition != WriteCondition::Always => {
                return Err(FirnError::BadArgument("syntax error".into()));
            }
            "NX" => put.condition = WriteCondition::IfVersion(0),
            "XX" => put.condition = WriteCondition::IfPresent,
            "GET" => put.return_previous = true,
            "EX" | "PX" | "EXAT" | "PXAT" | "KEEPTTL" => {
                return Err(FirnError::Refused(format!(
                    "SET {opt} is not supported: Firn has no expiring keys yet; use a keyspace with a max age"
                )));
            }
            // Redis says no more than this for an option it does not know.
            _ => return Err(FirnError::BadArgument("syntax error".into())),
        }
    }
    let show = if put.return_previous {
        show_previous
    } else {
        show_ok
    };
    Ok(Action::execute(
        KvWrite::Put(put),
        Render::new(show).errors_as(conflict_is_nil),
    ))
}

fn show_ok(response: Response) -> Reply {
    match response {
        Response::Written(_) => Reply::Ok,
        other => unexpected("SET", other),
    }
}

/// SET … GET: the value the key had.
fn show_previous(response: Response) -> Reply {
    match response {
        Response::Written(w) => w
            .first()
            .and_then(|w| w.previous.as_ref())
            .and_then(|p| p.value.clone())
            .map_or(Reply::Nil, Reply::Bulk),
        other => unexpected("SET", other),
    }
}

/// SET NX / XX whose condition fails answers nil, as Redis does.
fn conflict_is_nil(e: FirnError) -> Reply {
    match e {
        FirnError::Conflict { .. } => Reply::Nil,
        e => Reply::error(&e),
    }
}
