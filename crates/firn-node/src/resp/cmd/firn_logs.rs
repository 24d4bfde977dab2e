//! FIRN.LOGS [CURSOR c] [COUNT n] [AT t]: what every log holds — a page of (log, tag) rows
//! from every shard, with a cursor, as FIRN.SCAN pages keys.

use firn_model::limits::PAGE_ITEMS_DEFAULT;
use firn_model::{FirnError, LogRead, Response};

use crate::resp::args::Args;
use crate::resp::command::{
    Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions, Render, unexpected,
};
use crate::resp::reply::Reply;

pub const FIRN_LOGS: CommandSpec = CommandSpec {
    name: "firn.logs",
    arity: -1,
    flags: &[Flag::ReadOnly],
    keys: KeyPositions::NONE,
    group: Group::Firn,
    since: FIRST_RELEASE,
    summary: "[next cursor, [[log, tag, length, last-seq, first-kept-seq]…]]: every log's tags, a page at a time: CURSOR c, COUNT n, AT t.",
    parse: firn_logs,
};

fn firn_logs(mut args: Args) -> Result<Action, FirnError> {
    let (mut cursor, mut limit, mut at) = (None, PAGE_ITEMS_DEFAULT, None);
    while !args.is_empty() {
        match args.keyword()?.as_str() {
            "CURSOR" => cursor = Some(args.bytes()?).filter(|c| !c.is_empty()),
            "COUNT" | "LIMIT" => limit = args.usize("COUNT")?,
            "AT" | "ASOF" => at = Some(args.read_time()?),
            other => {
                return Err(FirnError::BadArgument(format!(
                    "unknown FIRN.LOGS option '{other}'; use CURSOR, COUNT, AT"
                )));
            }
        }
    }
    Ok(Action::execute(
        LogRead::Tags { cursor, limit, at },
        Render::new(show_page),
    ))
}

/// `[next cursor (empty when done), rows]`, a row `[log, tag, length, last-seq,
/// first-kept-seq]`.
fn show_page(response: Response) -> Reply {
    match response {
        Response::LogTags { tags, next_cursor } => Reply::Array(vec![
            Reply::Bulk(next_cursor.unwrap_or_default()),
            Reply::Array(
                tags.into_iter()
                    .map(|t| {
                        Reply::Array(vec![
                            Reply::Bulk(t.log.bytes().clone()),
                            Reply::Bulk(t.tag.bytes().clone()),
                            Reply::Int(t.len as i64),
                            Reply::text(t.last_seq.to_string()),
                            Reply::text(t.first_kept.to_string()),
                        ])
                    })
                    .collect(),
            ),
        ]),
        other => unexpected("FIRN.LOGS", other),
    }
}
