//! FIRN.TRUNCATE KEY k | PREFIX p  VERSION n | TIME t: drops the versions before a version
//! or a time (the newest is always kept).

use firn_model::{FirnError, KeyRange, KvWrite, Response, TruncateBefore};

use crate::resp::args::Args;
use crate::resp::command::{
    Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions, Render, unexpected,
};
use crate::resp::reply::Reply;

pub const FIRN_TRUNCATE: CommandSpec = CommandSpec {
    name: "firn.truncate",
    arity: 5,
    flags: &[Flag::Write, Flag::MovableKeys],
    keys: KeyPositions::NONE,
    group: Group::Firn,
    since: FIRST_RELEASE,
    summary: "KEY k | PREFIX p, then VERSION n | TIME t: drops older versions; answers how many.",
    parse: firn_truncate,
};

fn firn_truncate(mut args: Args) -> Result<Action, FirnError> {
    let target = match args.keyword()?.as_str() {
        "KEY" => KeyRange::Key(args.key()?),
        "PREFIX" => KeyRange::Prefix(args.bytes()?),
        other => {
            return Err(FirnError::BadArgument(format!(
                "FIRN.TRUNCATE takes KEY k or PREFIX p, not '{other}'"
            )));
        }
    };
    let before = match args.keyword()?.as_str() {
        "VERSION" => TruncateBefore::Version(args.u64("VERSION")?),
        "TIME" => TruncateBefore::Time(args.read_time()?),
        other => {
            return Err(FirnError::BadArgument(format!(
                "FIRN.TRUNCATE takes VERSION n or TIME t, not '{other}'"
            )));
        }
    };
    Ok(Action::execute(
        KvWrite::Truncate { target, before },
        Render::new(show_removed),
    ))
}

fn show_removed(response: Response) -> Reply {
    match response {
        Response::Truncated { versions_removed } => Reply::Int(versions_removed as i64),
        other => unexpected("FIRN.TRUNCATE", other),
    }
}
