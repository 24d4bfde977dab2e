//! FIRN.HISTORY key [FROM v] [TO v] [LIMIT n] [ASOF t] [CONSISTENCY c] [CORRECTIONS]: a
//! key's versions (or only its corrections: versions written late and kept), oldest first.

use firn_model::{FirnError, KvRead, ReadConsistency, Response, limits::PAGE_ITEMS_DEFAULT};

use super::version_map;
use crate::resp::args::Args;
use crate::resp::command::{
    Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions, Render, unexpected,
};
use crate::resp::reply::Reply;

pub const FIRN_HISTORY: CommandSpec = CommandSpec {
    name: "firn.history",
    arity: -2,
    flags: &[Flag::ReadOnly],
    keys: KeyPositions::FIRST,
    group: Group::Firn,
    since: FIRST_RELEASE,
    summary: "The key's versions, oldest first: FROM v, TO v, LIMIT n, ASOF t, CONSISTENCY c, CORRECTIONS (only versions written late).",
    parse: firn_history,
};

fn firn_history(mut args: Args) -> Result<Action, FirnError> {
    let key = args.key()?;
    let (mut from, mut to, mut limit, mut as_of, mut consistency, mut corrections) = (
        1,
        None,
        PAGE_ITEMS_DEFAULT,
        None,
        ReadConsistency::Linearizable,
        false,
    );
    while !args.is_empty() {
        match args.keyword()?.as_str() {
            "FROM" => from = args.u64("FROM")?,
            "TO" => to = Some(args.u64("TO")?),
            "LIMIT" => limit = args.usize("LIMIT")?,
            "ASOF" => as_of = Some(args.read_time()?),
            "CONSISTENCY" => consistency = args.text()?.parse()?,
            "CORRECTIONS" => corrections = true,
            other => {
                return Err(FirnError::BadArgument(format!(
                    "unknown FIRN.HISTORY option '{other}'; use FROM, TO, LIMIT, ASOF, \
                     CONSISTENCY, CORRECTIONS"
                )));
            }
        }
    }
    Ok(Action::execute(
        KvRead::History {
            key,
            from,
            to,
            limit,
            as_of,
            consistency,
            corrections,
        },
        Render::new(show_history),
    ))
}

fn show_history(response: Response) -> Reply {
    match response {
        Response::History(h) => Reply::Array(h.iter().map(version_map).collect()),
        other => unexpected("FIRN.HISTORY", other),
    }
}
