//! XLEN key, XINFO STREAM key, XINFO GROUPS key and XINFO CONSUMERS key group: what a
//! stream holds and its consumer groups, with Redis 7's fields.

use bytes::Bytes;
use firn_model::log::LOG_READ_RECORDS_MAX;
use firn_model::{
    DeliveryPolicy, FirnError, GroupKey, GroupOptions, GroupRead, LogRead, LogSeq, ReadConsistency,
    Response, TagInfo,
};

use super::{exact_arity, stream_entry, syntax_error, unknown_subcommand};
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
    summary: "STREAM key [FULL [COUNT n]], GROUPS key, CONSUMERS key group: a stream and its consumer groups, as Redis 7 gives them.",
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
            if args.is_empty() {
                return Err(FirnError::WrongArity("xinfo|stream".into()));
            }
            let key = args.key()?;
            if args.is_empty() {
                return Ok(Action::execute(info(key), Render::new(show_stream)));
            }
            // FULL [COUNT n]: 0 is as many as Firn shows at once, as Redis's 0 is all.
            let mut count = FULL_COUNT_DEFAULT;
            match args.keyword()?.as_str() {
                "FULL" => {}
                _ => return Err(syntax_error()),
            }
            if !args.is_empty() {
                if args.len() != 2 {
                    return Err(FirnError::BadArgument(
                        "unknown subcommand or wrong number of arguments for 'STREAM'. Try XINFO HELP."
                            .into(),
                    ));
                }
                match args.keyword()?.as_str() {
                    "COUNT" => count = args.usize("COUNT")?,
                    _ => return Err(syntax_error()),
                }
            }
            if count == 0 {
                count = LOG_READ_RECORDS_MAX;
            }
            Ok(Action::execute(
                GroupRead::StreamFull { key, count },
                Render::new(show_stream_full),
            ))
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

/// Entries, and pending entries of each group and consumer, XINFO STREAM … FULL shows
/// without COUNT (Redis's default).
const FULL_COUNT_DEFAULT: usize = 10;

fn no_such_key() -> Reply {
    Reply::error(&FirnError::BadArgument("no such key".into()))
}

fn id(seq: LogSeq) -> Reply {
    Reply::text(seq.to_string())
}

/// The fields both forms of XINFO STREAM start with, in Redis 7's order. Firn keeps no
/// radix tree: its two counts are 0.
fn stream_fields(info: &TagInfo) -> Vec<(Reply, Reply)> {
    vec![
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
    ]
}

fn show_stream(response: Response) -> Reply {
    let info = match response {
        Response::TagInfo(Some(info)) => info,
        Response::TagInfo(None) => return no_such_key(),
        other => return unexpected("XINFO STREAM", other),
    };
    let entry = |r: &Option<firn_model::LogRecord>| r.as_ref().map(stream_entry).transpose();
    let (first, last) = match (entry(&info.first), entry(&info.last)) {
        (Ok(first), Ok(last)) => (first, last),
        (Err(e), _) | (_, Err(e)) => return Reply::error(&e),
    };
    let mut fields = stream_fields(&info);
    fields.extend([
        (Reply::text("groups"), Reply::Int(info.groups as i64)),
        (Reply::text("first-entry"), first.unwrap_or(Reply::Nil)),
        (Reply::text("last-entry"), last.unwrap_or(Reply::Nil)),
    ]);
    Reply::Map(fields)
}

/// XINFO STREAM … FULL in Redis 7.2's shape: times are milliseconds since the epoch on this
/// node's clock (a delivery's, now less its idle time).
fn show_stream_full(response: Response) -> Reply {
    let full = match response {
        Response::StreamFull(Some(full)) => full,
        Response::StreamFull(None) => return no_such_key(),
        other => return unexpected("XINFO STREAM FULL", other),
    };
    let entries = match full.entries.iter().map(stream_entry).collect() {
        Ok(entries) => entries,
        Err(e) => return Reply::error(&e),
    };
    let now = firn_model::hlc::system_wall_us() / 1_000;
    let since = |idle_ms: u64| Reply::Int(now.saturating_sub(idle_ms) as i64);
    let groups = full
        .groups
        .into_iter()
        .map(|g| {
            let pending = g.pending.iter().map(|p| {
                Reply::Array(vec![
                    id(p.seq),
                    Reply::Bulk(p.consumer.clone()),
                    since(p.idle_ms),
                    Reply::Int(p.deliveries as i64),
                ])
            });
            let consumers = g.consumers.into_iter().map(|(c, own)| {
                let own = own.iter().map(|p| {
                    Reply::Array(vec![
                        id(p.seq),
                        since(p.idle_ms),
                        Reply::Int(p.deliveries as i64),
                    ])
                });
                Reply::Map(vec![
                    (Reply::text("name"), Reply::Bulk(c.name)),
                    (Reply::text("seen-time"), since(c.idle_ms)),
                    (
                        Reply::text("active-time"),
                        c.inactive_ms.map_or(Reply::Int(-1), since),
                    ),
                    (Reply::text("pel-count"), Reply::Int(c.pending as i64)),
                    (Reply::text("pending"), Reply::Array(own.collect())),
                ])
            });
            Reply::Map(vec![
                (Reply::text("name"), Reply::Bulk(g.info.name)),
                (Reply::text("last-delivered-id"), id(g.info.last_delivered)),
                (Reply::text("entries-read"), optional(g.info.entries_read)),
                (Reply::text("lag"), optional(g.info.lag)),
                (Reply::text("pel-count"), Reply::Int(g.info.pending as i64)),
                (Reply::text("pending"), Reply::Array(pending.collect())),
                (Reply::text("consumers"), Reply::Array(consumers.collect())),
            ])
        })
        .collect();
    let mut fields = stream_fields(&full.info);
    fields.extend([
        (Reply::text("entries"), Reply::Array(entries)),
        (Reply::text("groups"), Reply::Array(groups)),
    ]);
    Reply::Map(fields)
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
