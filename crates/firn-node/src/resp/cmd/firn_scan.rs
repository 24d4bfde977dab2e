//! FIRN.SCAN prefix [CURSOR c] [COUNT n] [MATCH p] [ASOF t | EVENTTIME t] [CONSISTENCY c]:
//! a page of keys under a prefix, with a key cursor.

use firn_model::{
    FirnError, KvRead, ReadAt, ReadConsistency, Response, limits::PAGE_ITEMS_DEFAULT,
};

use crate::resp::args::Args;
use crate::resp::command::{
    Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions, Render, unexpected,
};
use crate::resp::reply::Reply;

pub const FIRN_SCAN: CommandSpec = CommandSpec {
    name: "firn.scan",
    arity: -2,
    flags: &[Flag::ReadOnly],
    keys: KeyPositions::NONE,
    group: Group::Firn,
    since: FIRST_RELEASE,
    summary: "[next cursor, keys] under a prefix: CURSOR c, COUNT n, MATCH p, ASOF t, EVENTTIME t, CONSISTENCY c.",
    parse: firn_scan,
};

fn firn_scan(mut args: Args) -> Result<Action, FirnError> {
    let prefix = args.bytes()?;
    let (mut cursor, mut limit, mut pattern) = (None, PAGE_ITEMS_DEFAULT, None);
    let mut at = ReadAt::Latest;
    let mut consistency = ReadConsistency::Linearizable;
    while !args.is_empty() {
        match args.keyword()?.as_str() {
            "CURSOR" => cursor = Some(args.bytes()?).filter(|c| !c.is_empty()),
            "COUNT" | "LIMIT" => limit = args.usize("COUNT")?,
            "MATCH" => pattern = Some(args.bytes()?),
            "ASOF" => at = at.and(ReadAt::AsOf(args.read_time()?))?,
            "EVENTTIME" => at = at.and(ReadAt::EventTime(args.micros()?))?,
            "CONSISTENCY" => consistency = args.text()?.parse()?,
            other => {
                return Err(FirnError::BadArgument(format!(
                    "unknown FIRN.SCAN option '{other}'; use CURSOR, COUNT, MATCH, ASOF, EVENTTIME, CONSISTENCY"
                )));
            }
        }
    }
    Ok(Action::execute(
        KvRead::Scan {
            prefix,
            cursor,
            limit,
            pattern,
            at,
            consistency,
        },
        Render::new(show_page),
    ))
}

fn show_page(response: Response) -> Reply {
    match response {
        Response::Scan { keys, next_cursor } => Reply::Array(vec![
            Reply::Bulk(next_cursor.unwrap_or_default()),
            Reply::Array(
                keys.into_iter()
                    .map(|(k, _)| Reply::Bulk(k.bytes().clone()))
                    .collect(),
            ),
        ]),
        other => unexpected("FIRN.SCAN", other),
    }
}
