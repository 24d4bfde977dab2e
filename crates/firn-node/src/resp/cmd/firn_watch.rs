//! FIRN.WATCH subject [PREFIX] [VERSION n | TIME t] and FIRN.UNWATCH: the connection turns
//! into a stream of committed versions until FIRN.UNWATCH, QUIT, or the node stops.

use firn_model::{FirnError, KeyKind, KeyRange, WatchEvent, WatchFrom, WatchRequest};

use crate::resp::args::Args;
use crate::resp::command::{Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions};
use crate::resp::reply::Reply;

pub const FIRN_WATCH: CommandSpec = CommandSpec {
    name: "firn.watch",
    arity: -2,
    flags: &[Flag::ReadOnly, Flag::PubSub],
    keys: KeyPositions::NONE,
    group: Group::Firn,
    since: FIRST_RELEASE,
    summary: "Streams each committed version of a key (or PREFIX), from now, VERSION n or TIME t.",
    parse: firn_watch,
};

pub const FIRN_UNWATCH: CommandSpec = CommandSpec {
    name: "firn.unwatch",
    arity: 1,
    flags: &[Flag::PubSub, Flag::Fast],
    keys: KeyPositions::NONE,
    group: Group::Firn,
    since: FIRST_RELEASE,
    summary: "Ends this connection's watch.",
    parse: |_| Ok(Action::Unwatch),
};

fn firn_watch(mut args: Args) -> Result<Action, FirnError> {
    let subject = args.bytes()?;
    let mut prefix = false;
    let mut from = WatchFrom::Now;
    while !args.is_empty() {
        match args.keyword()?.as_str() {
            "PREFIX" => prefix = true,
            "VERSION" => from = WatchFrom::Version(args.u64("VERSION")?),
            "TIME" => from = WatchFrom::Time(args.read_time()?),
            other => {
                return Err(FirnError::BadArgument(format!(
                    "unknown FIRN.WATCH option '{other}'; use PREFIX, VERSION n, TIME t"
                )));
            }
        }
    }
    let target = if prefix {
        KeyRange::Prefix(subject)
    } else {
        KeyRange::Key(firn_model::Key::new(subject)?)
    };
    Ok(Action::Watch(WatchRequest { target, from }))
}

/// The first message of a watch: `["watching", subject]`.
pub fn watching_reply(request: &WatchRequest) -> Reply {
    let subject = match &request.target {
        KeyRange::Key(k) => k.bytes().clone(),
        KeyRange::Prefix(p) => p.clone(),
    };
    Reply::Push(vec![Reply::text("watching"), Reply::Bulk(subject)])
}

/// One committed version: `["firn.watch", key, version, commit_ts, event_time, put|del|stream,
/// value]` (`stream`: the key became a stream; no value).
pub fn event_reply(e: &WatchEvent) -> Reply {
    Reply::Push(vec![
        Reply::text("firn.watch"),
        Reply::Bulk(e.key.bytes().clone()),
        Reply::Int(e.info.version as i64),
        Reply::text(e.info.commit_ts.to_string()),
        e.info
            .event_time_us
            .map_or(Reply::Nil, |t| Reply::Int(t as i64)),
        Reply::text(match (e.info.deleted, e.info.kind) {
            (true, _) => "del",
            (false, KeyKind::Stream) => "stream",
            (false, _) => "put",
        }),
        e.info.value.clone().map_or(Reply::Nil, Reply::Bulk),
    ])
}
