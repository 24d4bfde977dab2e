//! XREADGROUP GROUP group consumer [COUNT n] [BLOCK ms] [NOACK] STREAMS key… id…: `>`
//! hands the consumer entries no consumer of the group was given yet (and adds them to the
//! group's pending list unless NOACK); an id reads the consumer's own pending entries after
//! it. Every such read is an entry of the stream's shard. A blocked read holds its
//! connection's replies, as XREAD's does.

use firn_model::log::LOG_READ_RECORDS_MAX;
use firn_model::{FirnError, GroupWrite, Response};

use super::xread::timeout_ms;
use super::{group_entries, redis_integer, stream_id, streams_and_ids, syntax_error};
use crate::resp::args::Args;
use crate::resp::command::{
    Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions, Render, unexpected,
};
use crate::resp::reply::Reply;

pub const XREADGROUP: CommandSpec = CommandSpec {
    name: "xreadgroup",
    arity: -7,
    flags: &[Flag::Write, Flag::MovableKeys],
    keys: KeyPositions::NONE,
    group: Group::Stream,
    since: FIRST_RELEASE,
    summary: "GROUP g c [COUNT n] [BLOCK ms] [NOACK] STREAMS key… id…: new entries (>) for the consumer, or its pending ones after an id.",
    parse: xreadgroup,
};

fn xreadgroup(mut args: Args) -> Result<Action, FirnError> {
    let (mut count, mut block_ms, mut noack) = (0, None, false);
    let mut names = None;
    loop {
        let option = args.keyword()?;
        match option.as_str() {
            "GROUP" if args.len() >= 2 => names = Some((args.bytes()?, args.bytes()?)),
            "COUNT" if !args.is_empty() => count = redis_integer(&mut args)?.max(0),
            "BLOCK" if !args.is_empty() => block_ms = Some(timeout_ms(&mut args)?),
            "NOACK" => noack = true,
            "STREAMS" if !args.is_empty() => break,
            _ => return Err(syntax_error()),
        }
    }
    let Some((group, consumer)) = names else {
        return Err(FirnError::BadArgument(
            "Missing GROUP option for XREADGROUP".into(),
        ));
    };
    let streams = streams_and_ids(&mut args, "xreadgroup", ">", |id| {
        match id {
        b">" => Ok(None),
        b"$" => Err(FirnError::BadArgument(
            "The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set."
                .into(),
        )),
        id => stream_id(&String::from_utf8_lossy(id), false).map(Some),
    }
    })?;
    let count = match count {
        0 => LOG_READ_RECORDS_MAX,
        // More than a page reads a page, as an absent COUNT does.
        n => usize::try_from(n).map_or(LOG_READ_RECORDS_MAX, |n| n.min(LOG_READ_RECORDS_MAX)),
    };
    Ok(Action::execute(
        GroupWrite::ReadGroup {
            group,
            consumer,
            streams,
            count,
            noack,
            block_ms,
        },
        Render::new(show_streams),
    ))
}

/// Nil when no stream had entries; otherwise `[[key, entries]…]` in RESP2 and a map of key
/// to entries in RESP3, as XREAD.
fn show_streams(response: Response) -> Reply {
    let Response::GroupStreams { streams, .. } = response else {
        return unexpected("XREADGROUP", response);
    };
    if streams.is_empty() {
        return Reply::Nil;
    }
    streams
        .iter()
        .map(|(key, entries)| Ok((Reply::Bulk(key.bytes().clone()), group_entries(entries)?)))
        .collect::<Result<_, FirnError>>()
        .map_or_else(|e| Reply::error(&e), Reply::MapOrPairs)
}
