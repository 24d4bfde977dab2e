//! XPENDING key group [[IDLE ms] start end count [consumer]]: the group's pending list, as a
//! summary or entry by entry, as Redis 7 shows it. Idle times are the answering node's.

use firn_model::log::LOG_READ_RECORDS_MAX;
use firn_model::{FirnError, GroupRead, Response};

use super::xrange::interval_id;
use super::{redis_integer, syntax_error};
use crate::resp::args::Args;
use crate::resp::command::{
    Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions, Render, unexpected,
};
use crate::resp::reply::Reply;

pub const XPENDING: CommandSpec = CommandSpec {
    name: "xpending",
    arity: -3,
    flags: &[Flag::ReadOnly],
    keys: KeyPositions::FIRST,
    group: Group::Stream,
    since: FIRST_RELEASE,
    summary: "The group's pending entries: a summary, or [IDLE ms] start end count [consumer] entry by entry.",
    parse: xpending,
};

fn xpending(mut args: Args) -> Result<Action, FirnError> {
    let (key, group) = (args.key()?, args.bytes()?);
    if args.is_empty() {
        return Ok(Action::execute(
            GroupRead::PendingSummary { key, group },
            Render::new(show_summary),
        ));
    }
    let mut min_idle_ms = None;
    if args.peek_keyword().as_deref() == Some("IDLE") {
        args.keyword()?;
        let ms = redis_integer(&mut args)?;
        min_idle_ms = Some(u64::try_from(ms).unwrap_or(0));
    }
    if args.len() < 3 || args.len() > 4 {
        return Err(syntax_error());
    }
    let start = interval_id(&args.text()?, false)?;
    let end = interval_id(&args.text()?, true)?;
    let count = redis_integer(&mut args)?.max(0);
    let count =
        usize::try_from(count).map_or(LOG_READ_RECORDS_MAX, |n| n.min(LOG_READ_RECORDS_MAX));
    let consumer = if args.is_empty() {
        None
    } else {
        Some(args.bytes()?)
    };
    Ok(Action::execute(
        GroupRead::Pending {
            key,
            group,
            min_idle_ms,
            start,
            end,
            count,
            consumer,
        },
        Render::new(show_entries),
    ))
}

/// `[count, first id, last id, [[consumer, "n"]…]]`, nils when nothing is pending.
fn show_summary(response: Response) -> Reply {
    let Response::PendingSummary(s) = response else {
        return unexpected("XPENDING", response);
    };
    let id =
        |seq: Option<firn_model::LogSeq>| seq.map_or(Reply::Nil, |s| Reply::text(s.to_string()));
    let consumers = if s.consumers.is_empty() {
        Reply::Nil
    } else {
        Reply::Array(
            s.consumers
                .into_iter()
                .map(|(name, n)| Reply::Array(vec![Reply::Bulk(name), Reply::text(n.to_string())]))
                .collect(),
        )
    };
    Reply::Array(vec![
        Reply::Int(s.count as i64),
        id(s.first),
        id(s.last),
        consumers,
    ])
}

/// `[[id, consumer, idle ms, deliveries]…]`.
fn show_entries(response: Response) -> Reply {
    let Response::PendingEntries(entries) = response else {
        return unexpected("XPENDING", response);
    };
    Reply::Array(
        entries
            .into_iter()
            .map(|e| {
                Reply::Array(vec![
                    Reply::text(e.seq.to_string()),
                    Reply::Bulk(e.consumer),
                    Reply::Int(e.idle_ms as i64),
                    Reply::Int(e.deliveries as i64),
                ])
            })
            .collect(),
    )
}
