//! FIRN.SNAPSHOT [AT t] KEYS k… | [AT t] PREFIX p [CURSOR c] [COUNT n]: one consistent cut
//! of several keys or a prefix, and the time it was read at.

use firn_model::{FirnError, KvRead, Response, SnapshotOf, limits::PAGE_ITEMS_DEFAULT};

use super::{version_map, version_maps};
use crate::resp::args::Args;
use crate::resp::command::{
    Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions, Render, unexpected,
};
use crate::resp::reply::Reply;

pub const FIRN_SNAPSHOT: CommandSpec = CommandSpec {
    name: "firn.snapshot",
    arity: -3,
    flags: &[Flag::ReadOnly, Flag::MovableKeys],
    keys: KeyPositions::NONE,
    group: Group::Firn,
    since: FIRST_RELEASE,
    summary: "One cut at a time: [AT t] KEYS k… or [AT t] PREFIX p [CURSOR c] [COUNT n]; a map with at.",
    parse: firn_snapshot,
};

fn firn_snapshot(mut args: Args) -> Result<Action, FirnError> {
    let mut at = None;
    let of = loop {
        match args.keyword()?.as_str() {
            "AT" => at = Some(args.read_time()?),
            "KEYS" => break SnapshotOf::Keys(args.keys()?),
            "PREFIX" => {
                let prefix = args.bytes()?;
                let (mut cursor, mut limit) = (None, PAGE_ITEMS_DEFAULT);
                while !args.is_empty() {
                    match args.keyword()?.as_str() {
                        "CURSOR" => cursor = Some(args.bytes()?).filter(|c| !c.is_empty()),
                        "COUNT" | "LIMIT" => limit = args.usize("COUNT")?,
                        other => {
                            return Err(FirnError::BadArgument(format!(
                                "unknown FIRN.SNAPSHOT PREFIX option '{other}'; use CURSOR, COUNT"
                            )));
                        }
                    }
                }
                break SnapshotOf::Prefix {
                    prefix,
                    cursor,
                    limit,
                };
            }
            other => {
                return Err(FirnError::BadArgument(format!(
                    "unknown FIRN.SNAPSHOT option '{other}'; use [AT t] KEYS k… or [AT t] PREFIX p [CURSOR c] [COUNT n]"
                )));
            }
        }
    };
    Ok(Action::execute(
        KvRead::Snapshot { of, at },
        Render::new(show_snapshot),
    ))
}

fn show_snapshot(response: Response) -> Reply {
    let Response::Snapshot { at, read } = response else {
        return unexpected("FIRN.SNAPSHOT", response);
    };
    let mut fields = vec![(Reply::text("at"), Reply::text(at.to_string()))];
    match *read {
        Response::Values(vs) => fields.push((Reply::text("values"), version_maps(&vs))),
        Response::Scan { keys, next_cursor } => {
            fields.push((
                Reply::text("cursor"),
                Reply::Bulk(next_cursor.unwrap_or_default()),
            ));
            fields.push((
                Reply::text("keys"),
                Reply::Array(
                    keys.iter()
                        .map(|(k, info)| match version_map(info) {
                            Reply::Map(mut m) => {
                                m.insert(0, (Reply::text("key"), Reply::Bulk(k.bytes().clone())));
                                Reply::Map(m)
                            }
                            other => other,
                        })
                        .collect(),
                ),
            ));
        }
        other => {
            return Reply::error(&FirnError::Internal(format!(
                "a snapshot answered {other:?}"
            )));
        }
    }
    Reply::Map(fields)
}
