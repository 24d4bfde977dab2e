//! XCLAIM key group consumer min-idle-time id… [IDLE ms] [TIME ms] [RETRYCOUNT n] [FORCE]
//! [JUSTID] [LASTID id] and XAUTOCLAIM key group consumer min-idle-time start [COUNT n]
//! [JUSTID]: pending entries idle long enough become the consumer's, as in Redis 7. Each is
//! an entry of the stream's shard, whose stamp is the clock idle times are measured by.

use firn_model::log::LOG_READ_RECORDS_MAX;
use firn_model::{ClaimOptions, FirnError, GroupChange, GroupWrite, LogSeq, Response};

use super::xrange::interval_id;
use super::{group_entries, redis_integer, stream_id, syntax_error};
use crate::resp::args::Args;
use crate::resp::command::{
    Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions, Render, unexpected,
};
use crate::resp::reply::Reply;

pub const XCLAIM: CommandSpec = CommandSpec {
    name: "xclaim",
    arity: -6,
    flags: &[Flag::Write, Flag::Fast],
    keys: KeyPositions::FIRST,
    group: Group::Stream,
    since: FIRST_RELEASE,
    summary: "Gives the consumer pending entries idle at least min-idle-time ms; IDLE, TIME, RETRYCOUNT, FORCE, JUSTID.",
    parse: xclaim,
};

pub const XAUTOCLAIM: CommandSpec = CommandSpec {
    name: "xautoclaim",
    arity: -6,
    flags: &[Flag::Write, Flag::Fast],
    keys: KeyPositions::FIRST,
    group: Group::Stream,
    since: FIRST_RELEASE,
    summary: "Claims up to COUNT pending entries idle at least min-idle-time ms from start on; answers the next start.",
    parse: xautoclaim,
};

/// A millisecond argument; a negative one is 0, as Redis takes it.
fn millis(args: &mut Args) -> Result<u64, FirnError> {
    Ok(u64::try_from(redis_integer(args)?).unwrap_or(0))
}

fn min_idle(args: &mut Args) -> Result<u64, FirnError> {
    let ms = args
        .text()?
        .parse::<i64>()
        .map_err(|_| FirnError::BadArgument("Invalid min-idle-time argument for XCLAIM".into()))?;
    Ok(u64::try_from(ms).unwrap_or(0))
}

fn xclaim(mut args: Args) -> Result<Action, FirnError> {
    let (key, group, consumer) = (args.key()?, args.bytes()?, args.bytes()?);
    let min_idle_ms = min_idle(&mut args)?;
    let mut ids = Vec::new();
    // Ids run until the first argument that is not one; options follow.
    while let Some(next) = args.peek_keyword() {
        match stream_id(&next, false) {
            Ok(id) => {
                args.text()?;
                ids.push(id);
            }
            Err(e) if ids.is_empty() => return Err(e),
            Err(_) => break,
        }
    }
    let mut options = ClaimOptions::default();
    while !args.is_empty() {
        match args.keyword()?.as_str() {
            "IDLE" if !args.is_empty() => options.idle_ms = Some(millis(&mut args)?),
            "TIME" if !args.is_empty() => options.time_ms = Some(millis(&mut args)?),
            "RETRYCOUNT" if !args.is_empty() => options.retry_count = Some(millis(&mut args)?),
            "FORCE" => options.force = true,
            "JUSTID" => options.just_id = true,
            // Firn's group keeps its own last delivered id; LASTID is checked and unused.
            "LASTID" if !args.is_empty() => {
                stream_id(&args.text()?, false)?;
            }
            other => {
                return Err(FirnError::BadArgument(format!(
                    "Unrecognized XCLAIM option '{other}'"
                )));
            }
        }
    }
    Ok(Action::execute(
        GroupWrite::Change {
            key,
            group,
            change: GroupChange::Claim {
                consumer,
                min_idle_ms,
                ids,
                options,
            },
        },
        Render::new(show_claimed),
    ))
}

fn xautoclaim(mut args: Args) -> Result<Action, FirnError> {
    let (key, group, consumer) = (args.key()?, args.bytes()?, args.bytes()?);
    let min_idle_ms = min_idle(&mut args)?;
    let start = interval_id(&args.text()?, false)?;
    let (mut count, mut just_id) = (100, false);
    while !args.is_empty() {
        match args.keyword()?.as_str() {
            "COUNT" if !args.is_empty() => {
                let n = redis_integer(&mut args)?;
                // Redis's bound is LONG_MAX / 10 attempts; Firn's is a page.
                if n < 1 || n > LOG_READ_RECORDS_MAX as i64 {
                    return Err(FirnError::BadArgument(format!(
                        "COUNT must be > 0 and at most {LOG_READ_RECORDS_MAX}"
                    )));
                }
                count = n as usize;
            }
            "JUSTID" => just_id = true,
            _ => return Err(syntax_error()),
        }
    }
    Ok(Action::execute(
        GroupWrite::Change {
            key,
            group,
            change: GroupChange::AutoClaim {
                consumer,
                min_idle_ms,
                start,
                count,
                just_id,
            },
        },
        Render::new(show_autoclaimed),
    ))
}

fn ids(ids: &[LogSeq]) -> Reply {
    Reply::Array(ids.iter().map(|s| Reply::text(s.to_string())).collect())
}

fn show_claimed(response: Response) -> Reply {
    match response {
        Response::GroupEntries { entries, .. } => {
            group_entries(&entries).unwrap_or_else(|e| Reply::error(&e))
        }
        Response::Ids(claimed) => ids(&claimed),
        other => unexpected("XCLAIM", other),
    }
}

/// `[next start, entries (ids with JUSTID), deleted ids]`.
fn show_autoclaimed(response: Response) -> Reply {
    let Response::AutoClaimed {
        next,
        entries,
        deleted,
        just_id,
        ..
    } = response
    else {
        return unexpected("XAUTOCLAIM", response);
    };
    let claimed = if just_id {
        ids(&entries.iter().map(|e| e.seq).collect::<Vec<_>>())
    } else {
        match group_entries(&entries) {
            Ok(r) => r,
            Err(e) => return Reply::error(&e),
        }
    };
    Reply::Array(vec![Reply::text(next.to_string()), claimed, ids(&deleted)])
}
