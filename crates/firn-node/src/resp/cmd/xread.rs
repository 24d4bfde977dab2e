//! XREAD [COUNT n] [BLOCK ms] STREAMS key… id…: entries after an id (`$`: after the
//! stream's last one when the read begins) of several streams, waiting up to BLOCK ms (0:
//! without end) for one to have any. A blocked read holds its connection's replies, as in
//! Redis.

use firn_model::log::LOG_READ_RECORDS_MAX;
use firn_model::{FirnError, LogRead, Response};

use super::{redis_integer, stream_entries, stream_id, streams_and_ids, syntax_error};
use crate::resp::args::Args;
use crate::resp::command::{
    Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions, Render, unexpected,
};
use crate::resp::reply::Reply;

pub const XREAD: CommandSpec = CommandSpec {
    name: "xread",
    arity: -4,
    flags: &[Flag::ReadOnly, Flag::MovableKeys],
    keys: KeyPositions::NONE,
    group: Group::Stream,
    since: FIRST_RELEASE,
    summary: "[COUNT n] [BLOCK ms] STREAMS key… id…: each stream's entries after its id ($: its last).",
    parse: xread,
};

fn xread(mut args: Args) -> Result<Action, FirnError> {
    let (mut count, mut block_ms) = (0, None);
    loop {
        let option = args.keyword()?;
        match option.as_str() {
            // A count of 0 or less reads everything (a page), as in Redis.
            "COUNT" if !args.is_empty() => count = redis_integer(&mut args)?.max(0),
            "BLOCK" if !args.is_empty() => block_ms = Some(timeout_ms(&mut args)?),
            "STREAMS" if !args.is_empty() => break,
            _ => return Err(syntax_error()),
        }
    }
    let after = streams_and_ids(&mut args, "xread", "$", |id| match id {
        b"$" => Ok(None),
        id => stream_id(&String::from_utf8_lossy(id), false).map(Some),
    })?;
    let limit = match count {
        0 => LOG_READ_RECORDS_MAX,
        n => usize::try_from(n).unwrap_or(usize::MAX),
    };
    Ok(Action::execute(
        LogRead::Streams {
            after,
            limit,
            block_ms,
        },
        Render::new(show_streams),
    ))
}

/// BLOCK's milliseconds, with Redis's words for a bad one.
pub(super) fn timeout_ms(args: &mut Args) -> Result<u64, FirnError> {
    let ms = redis_integer(args)
        .map_err(|_| FirnError::BadArgument("timeout is not an integer or out of range".into()))?;
    u64::try_from(ms).map_err(|_| FirnError::BadArgument("timeout is negative".into()))
}

/// Nil when no stream had entries; otherwise `[[key, entries]…]` in RESP2 and a map of key
/// to entries in RESP3, as Redis answers.
fn show_streams(response: Response) -> Reply {
    let Response::Streams(streams) = response else {
        return unexpected("XREAD", response);
    };
    if streams.is_empty() {
        return Reply::Nil;
    }
    streams
        .iter()
        .map(|(key, records)| Ok((Reply::Bulk(key.bytes().clone()), stream_entries(records)?)))
        .collect::<Result<_, FirnError>>()
        .map_or_else(|e| Reply::error(&e), Reply::MapOrPairs)
}
