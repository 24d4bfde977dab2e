//! FIRN.PUT key value [IFVERSION n] [EVENTTIME t] [LEASE id]: a write that answers its
//! version and commit stamp.

use firn_model::{FirnError, KvWrite, PutRequest, Response, WriteCondition};

use super::written_pair;
use crate::resp::args::Args;
use crate::resp::command::{
    Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions, Render, unexpected,
};
use crate::resp::reply::Reply;

pub const FIRN_PUT: CommandSpec = CommandSpec {
    name: "firn.put",
    arity: -3,
    flags: &[Flag::Write],
    keys: KeyPositions::FIRST,
    group: Group::Firn,
    since: FIRST_RELEASE,
    summary: "Writes a version (IFVERSION n: only over version n; EVENTTIME t; LEASE id: attached to a lease); answers [version, commit_ts].",
    parse: firn_put,
};

fn firn_put(mut args: Args) -> Result<Action, FirnError> {
    let key = args.key()?;
    let mut put = PutRequest::new(key, args.bytes()?);
    while !args.is_empty() {
        match args.keyword()?.as_str() {
            "IFVERSION" => put.condition = WriteCondition::IfVersion(args.u64("IFVERSION")?),
            "EVENTTIME" => put.event_time_us = Some(args.micros()?),
            "LEASE" => put.life = firn_model::Lifetime::Lease(args.u64("LEASE")?),
            other => {
                return Err(FirnError::BadArgument(format!(
                    "unknown FIRN.PUT option '{other}'; use IFVERSION n, EVENTTIME t, LEASE id"
                )));
            }
        }
    }
    Ok(Action::execute(
        KvWrite::Put(put),
        Render::new(show_written),
    ))
}

fn show_written(response: Response) -> Reply {
    match response {
        Response::Written(w) => w.first().map_or(Reply::Nil, written_pair),
        other => unexpected("FIRN.PUT", other),
    }
}
