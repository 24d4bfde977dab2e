//! XGROUP CREATE|DESTROY|SETID|CREATECONSUMER|DELCONSUMER: a stream's consumer groups, as
//! Redis 7 makes and answers them. Each is an entry of the stream's shard.

use bytes::Bytes;
use firn_model::{FirnError, GroupChange, GroupOptions, GroupWrite, Key, Response};

use super::{exact_arity, group_start, redis_integer, syntax_error, unknown_subcommand};
use crate::resp::args::Args;
use crate::resp::command::{
    Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions, Render, unexpected,
};
use crate::resp::reply::Reply;

pub const XGROUP: CommandSpec = CommandSpec {
    name: "xgroup",
    arity: -2,
    flags: &[Flag::Write],
    keys: KeyPositions::at(2, 2, 1),
    group: Group::Stream,
    since: FIRST_RELEASE,
    summary: "CREATE key group id|$ [MKSTREAM] [ENTRIESREAD n], DESTROY, SETID, CREATECONSUMER, DELCONSUMER.",
    parse: xgroup,
};

fn xgroup(mut args: Args) -> Result<Action, FirnError> {
    let sub = args.keyword()?;
    let change = |key: Key, group: Bytes, change| GroupWrite::Change { key, group, change };
    match sub.as_str() {
        "CREATE" | "SETID" => {
            if args.len() < 3 {
                return Err(FirnError::WrongArity(format!(
                    "xgroup|{}",
                    sub.to_lowercase()
                )));
            }
            let (key, group) = (args.key()?, args.bytes()?);
            let start = group_start(&args.text()?)?;
            let mut mkstream = false;
            while !args.is_empty() {
                match args.keyword()?.as_str() {
                    "MKSTREAM" if sub == "CREATE" => mkstream = true,
                    // Firn counts what a group has read itself; the hint is checked and
                    // otherwise not needed.
                    "ENTRIESREAD" if !args.is_empty() => {
                        redis_integer(&mut args)?;
                    }
                    _ => return Err(syntax_error()),
                }
            }
            let write = if sub == "CREATE" {
                change(
                    key,
                    group,
                    GroupChange::Create {
                        start,
                        mkstream,
                        options: GroupOptions::default(),
                    },
                )
            } else {
                change(key, group, GroupChange::SetId { start })
            };
            Ok(Action::execute(write, Render::new(show_ok)))
        }
        "DESTROY" => {
            exact_arity(&args, 2)?;
            let (key, group) = (args.key()?, args.bytes()?);
            Ok(Action::execute(
                change(key, group, GroupChange::Destroy),
                Render::new(show_count),
            ))
        }
        "CREATECONSUMER" | "DELCONSUMER" => {
            exact_arity(&args, 3)?;
            let (key, group, consumer) = (args.key()?, args.bytes()?, args.bytes()?);
            let c = if sub == "CREATECONSUMER" {
                GroupChange::CreateConsumer { consumer }
            } else {
                GroupChange::DelConsumer { consumer }
            };
            Ok(Action::execute(
                change(key, group, c),
                Render::new(show_count),
            ))
        }
        _ => Err(unknown_subcommand("xgroup", &sub)),
    }
}

fn show_ok(response: Response) -> Reply {
    match response {
        Response::Done => Reply::Ok,
        other => unexpected("XGROUP", other),
    }
}

pub(super) fn show_count(response: Response) -> Reply {
    match response {
        Response::Count(n) => Reply::Int(n as i64),
        other => unexpected("XGROUP", other),
    }
}
