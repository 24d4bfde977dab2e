//! XRANGE key start end [COUNT n] and XREVRANGE key end start [COUNT n]: a stream's entries
//! between two ids (`-` and `+` for the ends, `(id` to leave an id out), oldest or newest
//! first. Without COUNT a reply holds at most a page (10,000 entries).

use firn_model::log::LOG_READ_RECORDS_MAX;
use firn_model::{FirnError, LogQuery, LogRead, LogSeq, Response};

use super::{redis_integer, stream_entries, stream_id, syntax_error};
use crate::resp::args::Args;
use crate::resp::command::{
    Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions, Render, unexpected,
};
use crate::resp::reply::Reply;

pub const XRANGE: CommandSpec = CommandSpec {
    name: "xrange",
    arity: -4,
    flags: &[Flag::ReadOnly],
    keys: KeyPositions::FIRST,
    group: Group::Stream,
    since: FIRST_RELEASE,
    summary: "The stream's entries from start to end (- and +; (id excludes), oldest first; COUNT n.",
    parse: |args| range(args, false),
};

pub const XREVRANGE: CommandSpec = CommandSpec {
    name: "xrevrange",
    arity: -4,
    flags: &[Flag::ReadOnly],
    keys: KeyPositions::FIRST,
    group: Group::Stream,
    since: FIRST_RELEASE,
    summary: "The stream's entries from end down to start (+ and -; (id excludes), newest first; COUNT n.",
    parse: |args| range(args, true),
};

fn range(mut args: Args, reverse: bool) -> Result<Action, FirnError> {
    let key = args.key()?;
    let (first, second) = (args.text()?, args.text()?);
    let (start, end) = if reverse {
        (second, first)
    } else {
        (first, second)
    };
    let from = interval_id(&start, false)?;
    let to = interval_id(&end, true)?;
    let mut count = None;
    while !args.is_empty() {
        match args.keyword()?.as_str() {
            // A negative count is 0, as in Redis.
            "COUNT" if !args.is_empty() => count = Some(redis_integer(&mut args)?.max(0)),
            _ => return Err(syntax_error()),
        }
    }
    // Nothing to read: an empty range, or COUNT 0.
    if from > to || count == Some(0) {
        return Ok(Action::Reply(Reply::Array(vec![])));
    }
    let limit = count.map_or(LOG_READ_RECORDS_MAX, |n| {
        usize::try_from(n).unwrap_or(usize::MAX)
    });
    let q = LogQuery::stream(key, from, to, limit, reverse);
    Ok(Action::execute(
        LogRead::Query(q),
        Render::new(show_entries),
    ))
}

/// An end of a range as Redis reads it: `-`, `+`, an id, or `(id` for the id after (before,
/// at the `end`) it.
pub(super) fn interval_id(text: &str, end: bool) -> Result<LogSeq, FirnError> {
    if let Some(excluded) = text.strip_prefix('(').filter(|t| !t.is_empty()) {
        let id = stream_id(excluded, end)?;
        let next = if end {
            id.predecessor()
        } else {
            id.successor()
        };
        let which = if end { "end" } else { "start" };
        return next
            .ok_or_else(|| FirnError::BadArgument(format!("invalid {which} ID for the interval")));
    }
    match text {
        "-" => Ok(LogSeq::ZERO),
        "+" => Ok(LogSeq::MAX),
        _ => stream_id(text, end),
    }
}

fn show_entries(response: Response) -> Reply {
    match response {
        Response::Records(r) => stream_entries(&r).unwrap_or_else(|e| Reply::error(&e)),
        other => unexpected("XRANGE", other),
    }
}
