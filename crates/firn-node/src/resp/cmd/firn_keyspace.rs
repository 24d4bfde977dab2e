//! FIRN.KEYSPACE CREATE prefix [MODE m] [MAXVERSIONS n] [MAXAGE d] [DURABILITY d]
//! [LOCAL on|off] [FOLLOW on|off|node] | LIST | DROP prefix: the rules and placement of key
//! prefixes.

use firn_model::keyspace::parse_on_off;
use firn_model::time::parse_duration_us;
use firn_model::{AdminRequest, FirnError, KeyspaceDef, KeyspaceSpec, Response};

use super::{exact_arity, unknown_subcommand};
use crate::resp::args::Args;
use crate::resp::command::{
    Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions, Render, unexpected,
};
use crate::resp::reply::Reply;

pub const FIRN_KEYSPACE: CommandSpec = CommandSpec {
    name: "firn.keyspace",
    arity: -2,
    flags: &[Flag::Admin],
    keys: KeyPositions::NONE,
    group: Group::Firn,
    since: FIRST_RELEASE,
    summary: "CREATE prefix [MODE m] [MAXVERSIONS n] [MAXAGE d] [TTL d] [DURABILITY d] [LOCAL on|off] [FOLLOW on|off|node], LIST, DROP prefix.",
    parse: firn_keyspace,
};

fn firn_keyspace(mut args: Args) -> Result<Action, FirnError> {
    let ok = Render::new(|_| Reply::Ok);
    let sub = args.keyword()?;
    match sub.as_str() {
        "LIST" => Ok(Action::execute(
            AdminRequest::KeyspaceList,
            Render::new(show_keyspaces),
        )),
        "DROP" => {
            exact_arity(&args, 1)?;
            Ok(Action::execute(
                AdminRequest::KeyspaceDrop {
                    prefix: args.text()?,
                },
                ok,
            ))
        }
        "CREATE" => {
            let mut def = KeyspaceDef::new(KeyspaceSpec {
                prefix: args.text()?,
                ..KeyspaceSpec::default_keyspace()
            });
            let spec = &mut def.spec;
            while !args.is_empty() {
                match args.keyword()?.as_str() {
                    "MODE" => spec.mode = args.text()?.parse()?,
                    "MAXVERSIONS" => spec.max_versions = Some(args.u64("MAXVERSIONS")?),
                    "MAXAGE" => spec.max_age_us = Some(parse_duration_us(&args.text()?)?),
                    "TTL" => spec.ttl_ms = Some(parse_duration_us(&args.text()?)? / 1_000),
                    "DURABILITY" => spec.durability = args.text()?.parse()?,
                    "LOCAL" => def.placement.local = parse_on_off("LOCAL", &args.text()?)?,
                    "FOLLOW" => def.placement.follow = args.text()?.parse()?,
                    other => {
                        return Err(FirnError::BadArgument(format!(
                            "unknown keyspace option '{other}'; use MODE, MAXVERSIONS, MAXAGE, \
                             TTL, DURABILITY, LOCAL, FOLLOW"
                        )));
                    }
                }
            }
            Ok(Action::execute(AdminRequest::KeyspaceCreate(def), ok))
        }
        _ => Err(unknown_subcommand("firn.keyspace", &sub)),
    }
}

fn show_keyspaces(response: Response) -> Reply {
    let Response::KeyspaceDefs(defs) = response else {
        return unexpected("FIRN.KEYSPACE LIST", response);
    };
    Reply::Array(
        defs.iter()
            .map(|KeyspaceDef { spec: s, placement }| {
                Reply::Map(vec![
                    (Reply::text("prefix"), Reply::text(&s.prefix)),
                    (Reply::text("mode"), Reply::text(s.mode.to_string())),
                    (
                        Reply::text("max_versions"),
                        s.max_versions.map_or(Reply::Nil, |n| Reply::Int(n as i64)),
                    ),
                    (
                        Reply::text("max_age_us"),
                        s.max_age_us.map_or(Reply::Nil, |n| Reply::Int(n as i64)),
                    ),
                    (
                        Reply::text("ttl_ms"),
                        s.ttl_ms.map_or(Reply::Nil, |n| Reply::Int(n as i64)),
                    ),
                    (
                        Reply::text("durability"),
                        Reply::text(s.durability.as_str()),
                    ),
                    (
                        Reply::text("local"),
                        Reply::text(if placement.local { "on" } else { "off" }),
                    ),
                    (
                        Reply::text("follow"),
                        Reply::text(placement.follow.to_string()),
                    ),
                ])
            })
            .collect(),
    )
}
