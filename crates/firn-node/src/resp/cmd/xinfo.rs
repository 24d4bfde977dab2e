//! XLEN key, XINFO STREAM key, XINFO GROUPS key and XINFO CONSUMERS key group: what a
//! stream holds and its consumer groups, with Redis 7's fields.

use bytes::Bytes;
use firn_model::{
    DeliveryPolicy, FirnError, GroupKey, GroupOptions, GroupRead, LogRead, LogSeq, ReadConsistency,
    Response,
};

use super::{exact_arity, stream_entry, unknown_subcommand};
use crate::resp::args::Args;
use crate::resp::command::{
    Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions, Render, unexpected,
};
use crate::resp::reply::Reply;

pub const XLEN: CommandSpec = CommandSpec {
    name: "xlen",
    arity: 2,
    flags: &[Flag::ReadOnly, Flag::Fast],
    keys: KeyPositions::FIRST,
    group: Group::Stream,
    since: FIRST_RELEASE,
    summary: "The number of entries in the stream (0 if it does not exist).",
    parse: |mut args| Ok(Action::execute(info(args.key()?), Render::new(show_len))),
};

pub const XINFO: CommandSpec = CommandSpec {
    name: "xinfo",
    arity: -2,
    flags: &[Flag::ReadOnly],
    keys: KeyPositions::at(2, 2, 1),
    group: Group::Stream,
    since: FIRST_RELEASE,
    summary: "STREAM key, GROUPS key, CONSUMERS key group: a stream and its consumer groups, as Redis 7 gives them.",
    parse: xinfo,
};

pub const FIRN_GROUPS: CommandSpec = CommandSpec {
    name: "firn.groups",
    arity: 2,
    flags: &[Flag::ReadOnly],
    keys: KeyPositions::FIRST,
    group: Group::Firn,
    since: FIRST_RELEASE,
    summary: "A stream's consumer groups as XINFO GROUPS gives them, with each group's delivery options (policy, key, ack-wait-ms, max-deliver, dead-letter, liveness-ms).",
    parse: |mut args| {
        Ok(Action::execute(
            GroupRead::Groups { key: args.key()? },
            Render::new(show_groups_with_options),
        ))
    },
};

fn xinfo(mut args: Args) -> Result<Action, FirnError> {
    let sub = args.keyword()?;
    match sub.as_str() {
        "STREAM" => {
            // FULL (consumer groups' state) has nothing to show: Firn has no groups yet.
            exact_arity(&args, 1)?;
            Ok(Action::execute(info(args.key()?), Render::new(show_stream)))
        }
        "GROUPS" => {
            exact_arity(&args, 1)?;
            Ok(Action::execute(
                GroupRead::Groups { key: args.key()? },
                Render::new(show_groups),
            ))
        }
        "CONSUMERS" => {
            exact_arity(&args, 2)?;
            let (key, group) = (args.key()?, args.bytes()?);
            Ok(Action::execute(
                GroupRead::Consumers { key, group },
                Render::new(show_consumers),
            ))
        }
        _ => Err(unknown_subcommand("xinfo", &sub)),
    }
}

/// A stream is the log named by its key, read through the tag that is the key.
fn info(key: firn_model::Key) -> LogRead {
    LogRead::Info {
        log: key.clone(),
        tag: key,
        consistency: ReadConsistency::Linearizable,
    }
}

fn show_len(response: Response) -> Reply {
    match response {
        Response::TagInfo(info) => Reply::Int(info.map_or(0, |i| i.len) as i64),
        other => unexpected("XLEN", other),
    }
}

/// Redis 7's fields in its order. Firn keeps no radix tree: its two counts are 0.
fn show_stream(response: Response) -> Reply {
    let info = match response {
        Response::TagInfo(Some(info)) => info,
        Response::TagInfo(None) => {
            return Reply::error(&FirnError::BadArgument("no such key".into()));
        }
        other => return unexpected("XINFO STREAM", other),
    };
    let entry = |r: &Option<firn_model::LogRecord>| r.as_ref().map(stream_entry).transpose();
    let (first, last) = match (entry(&info.first), entry(&info.last)) {
        (Ok(first), Ok(last)) => (first, last),
        (Err(e), _) | (_, Err(e)) => return Reply::error(&e),
    };
    let id = |seq: LogSeq| Reply::text(seq.to_string());
    Reply::Map(vec![
        (Reply::text("length"), Reply::Int(info.len as i64)),
        (Reply::text("radix-tree-keys"), Reply::Int(0)),
        (Reply::text("radix-tree-nodes"), Reply::Int(0)),
        (Reply::text("last-generated-id"), id(info.last_seq)),
        (Reply::text("max-deleted-entry-id"), id(info.max_deleted)),
        (Reply::text("entries-added"), Reply::Int(info.added as i64)),
        (
            Reply::text("recorded-first-entry-id"),
            id(info.first.as_ref().map_or(LogSeq::ZERO, |r| r.seq)),
        ),
        (Reply::text("groups"), Reply::Int(info.groups as i64)),
        (Reply::text("first-entry"), first.unwrap_or(Reply::Nil)),
        (Reply::text("last-entry"), last.unwrap_or(Reply::Nil)),
    ])
}

fn optional(n: Option<u64>) -> Reply {
    n.map_or(Reply::Nil, |n| Reply::Int(n as i64))
}

/// A group's delivery options as XINFO GROUPS' extra fields (after Redis's).
fn option_fields(options: GroupOptions) -> Vec<(Reply, Reply)> {
    let (policy, key) = match options.policy {
        DeliveryPolicy::First => ("first", Reply::Nil),
        DeliveryPolicy::RoundRobin => ("roundrobin", Reply::Nil),
        DeliveryPolicy::Hrw(GroupKey::Field(f)) => ("hrw", Reply::Bulk(f)),
        DeliveryPolicy::Hrw(GroupKey::Tag) => ("hrw", Reply::text("KEYTAG")),
    };
    let (max_deliver, dead_letter) = match options.max_deliver {
        Some(m) => (
            Reply::Int(m.deliveries as i64),
            Reply::Bulk(Bytes::copy_from_slice(m.dead_letter.as_bytes())),
        ),
        None => (Reply::Nil, Reply::Nil),
    };
    vec![
        (Reply::text("policy"), Reply::text(policy)),
        (Reply::text("key"), key),
        (Reply::text("ack-wait-ms"), optional(options.ack_wait_ms)),
        (Reply::text("max-deliver"), max_deliver),
        (Reply::text("dead-letter"), dead_letter),
        (
            Reply::text("liveness-ms"),
            Reply::Int(options.liveness_ms as i64),
        ),
    ]
}

/// One map per group, Redis's fields only: name, consumers, pending, last-delivered-id,
/// entries-read, lag (a client comparing the reply with Redis's sees no more).
fn show_groups(response: Response) -> Reply {
    groups_reply(response, false)
}

/// FIRN.GROUPS: XINFO GROUPS's maps, each followed by the group's delivery options.
fn show_groups_with_options(response: Response) -> Reply {
    groups_reply(response, true)
}

fn groups_reply(response: Response, with_options: bool) -> Reply {
    let Response::Groups(groups) = response else {
        return unexpected("XINFO GROUPS", response);
    };
    Reply::Array(
        groups
            .into_iter()
            .map(|g| {
                let mut fields = vec![
                    (Reply::text("name"), Reply::Bulk(g.name)),
                    (Reply::text("consumers"), Reply::Int(g.consumers as i64)),
                    (Reply::text("pending"), Reply::Int(g.pending as i64)),
                    (
                        Reply::text("last-delivered-id"),
                        Reply::text(g.last_delivered.to_string()),
                    ),
                    (Reply::text("entries-read"), optional(g.entries_read)),
                    (Reply::text("lag"), optional(g.lag)),
                ];
                if with_options {
                    fields.extend(option_fields(g.options));
                }
                Reply::Map(fields)
            })
            .collect(),
    )
}

/// One map per consumer: name, pending, idle, inactive (-1: it never read anything).
fn show_consumers(response: Response) -> Reply {
    let Response::Consumers(consumers) = response else {
        return unexpected("XINFO CONSUMERS", response);
    };
    Reply::Array(
        consumers
            .into_iter()
            .map(|c| {
                Reply::Map(vec![
                    (Reply::text("name"), Reply::Bulk(c.name)),
                    (Reply::text("pending"), Reply::Int(c.pending as i64)),
                    (Reply::text("idle"), Reply::Int(c.idle_ms as i64)),
                    (
                        Reply::text("inactive"),
                        Reply::Int(c.inactive_ms.map_or(-1, |i| i as i64)),
                    ),
                ])
            })
            .collect(),
    )
}
