//! One file per RESP command or family of commands. Each holds its `CommandSpec`s, the
//! parse that turns arguments into a typed [`firn_model::Request`] (or a connection-local
//! action) and the render that shows the router's answer. What several commands share —
//! read options, the version map, the written pair, stream ids and entries as Redis writes
//! them — is here. To add a command, see
//! docs/architecture.md ("How to add a RESP command").

pub mod change;
pub mod cluster;
pub mod connection;
pub mod del;
pub mod exists;
pub mod expire;
pub mod fcall;
pub mod firn_del;
pub mod firn_function;
pub mod firn_get;
pub mod firn_history;
pub mod firn_keyspace;
pub mod firn_lease;
pub mod firn_local;
pub mod firn_log;
pub mod firn_logs;
pub mod firn_put;
pub mod firn_scan;
pub mod firn_snapshot;
pub mod firn_timer;
pub mod firn_trigger;
pub mod firn_truncate;
pub mod firn_twin;
pub mod firn_txn;
pub mod firn_watch;
pub mod firn_watermark;
pub mod get;
pub mod idmp;
pub mod mget;
pub mod mset;
pub mod multi;
pub mod publish;
pub mod scan;
pub mod server;
pub mod service;
pub mod session;
pub mod set;
pub mod subscribe;
pub mod xack;
pub mod xadd;
pub mod xclaim;
pub mod xdel;
pub mod xgroup;
pub mod xinfo;
pub mod xpending;
pub mod xrange;
pub mod xread;
pub mod xreadgroup;

use firn_model::log::decode_fields;
use firn_model::{
    FirnError, GroupEntry, LogRecord, LogSeq, ReadAt, ReadConsistency, VersionInfo, Written,
};

use super::args::Args;
use super::reply::Reply;

/// The Redis version Firn answers to HELLO and INFO: clients use it to pick features.
pub const REDIS_COMPAT_VERSION: &str = "7.2.0";

pub fn unknown_subcommand(cmd: &str, sub: &str) -> FirnError {
    FirnError::BadArgument(format!("unknown subcommand '{sub}' for '{cmd}'"))
}

/// For arities the registry cannot state: those of subcommands, or "exactly n" after a
/// keyword.
pub fn exact_arity(args: &Args, n: usize) -> Result<(), FirnError> {
    if args.len() != n {
        return Err(FirnError::WrongArity(args.name.to_lowercase()));
    }
    Ok(())
}

/// Parses `[CONSISTENCY linearizable|lease|local]` and the read-position options shared by reads.
pub fn read_options(
    args: &mut Args,
    allow_version: bool,
) -> Result<(ReadAt, ReadConsistency), FirnError> {
    let mut at = ReadAt::Latest;
    let mut consistency = ReadConsistency::Linearizable;
    let set_at = |new: ReadAt, at: &mut ReadAt| {
        *at = at.and(new)?;
        Ok::<(), FirnError>(())
    };
    while let Some(kw) = args.peek_keyword() {
        match kw.as_str() {
            "VERSION" if allow_version => {
                args.bytes()?;
                let v = args.u64("VERSION")?;
                set_at(ReadAt::Version(v), &mut at)?;
            }
            "ASOF" => {
                args.bytes()?;
                let t = args.read_time()?;
                set_at(ReadAt::AsOf(t), &mut at)?;
            }
            "EVENTTIME" => {
                args.bytes()?;
                let t = args.micros()?;
                set_at(ReadAt::EventTime(t), &mut at)?;
            }
            // One key's read by event time, once its keyspace's watermark has passed it.
            "COMPLETE" if allow_version => {
                args.bytes()?;
                let ReadAt::EventTime(e) = at else {
                    return Err(FirnError::BadArgument(
                        "COMPLETE follows EVENTTIME e (and not ASOF: it chooses the time itself)"
                            .into(),
                    ));
                };
                at = ReadAt::EventTimeComplete(e);
            }
            "CONSISTENCY" => {
                args.bytes()?;
                consistency = args.text()?.parse()?;
            }
            _ => break,
        }
    }
    Ok((at, consistency))
}

/// A version as `FIRN.*` reads show it.
pub fn version_map(info: &VersionInfo) -> Reply {
    Reply::Map(vec![
        (Reply::text("version"), Reply::Int(info.version as i64)),
        (
            Reply::text("commit_ts"),
            Reply::text(info.commit_ts.to_string()),
        ),
        (
            Reply::text("event_time"),
            info.event_time_us
                .map_or(Reply::Nil, |t| Reply::Int(t as i64)),
        ),
        (Reply::text("deleted"), Reply::Int(info.deleted as i64)),
        (
            Reply::text("value"),
            info.value.clone().map_or(Reply::Nil, Reply::Bulk),
        ),
        (Reply::text("type"), Reply::text(info.kind.name())),
    ])
}

/// Each key's version or nil, as FIRN.MGET and FIRN.SNAPSHOT KEYS show them.
pub fn version_maps(values: &[Option<VersionInfo>]) -> Reply {
    Reply::Array(
        values
            .iter()
            .map(|v| v.as_ref().map_or(Reply::Nil, version_map))
            .collect(),
    )
}

/// `[version, commit_ts]`, as `FIRN.*` writes answer.
pub fn written_pair(w: &Written) -> Reply {
    Reply::Array(vec![
        Reply::Int(w.version as i64),
        Reply::text(w.commit_ts.to_string()),
    ])
}

/// Redis's words for a command's options in a wrong order or combination.
pub fn syntax_error() -> FirnError {
    FirnError::BadArgument("syntax error".into())
}

/// An integer argument, with Redis's words when it is not one (stream commands, whose
/// clients match Redis's texts).
pub fn redis_integer(args: &mut Args) -> Result<i64, FirnError> {
    firn_model::redis_integer(&args.bytes()?)
        .ok_or_else(|| FirnError::BadArgument("value is not an integer or out of range".into()))
}

/// Redis's words for a malformed stream id.
pub fn invalid_stream_id() -> FirnError {
    FirnError::BadArgument("Invalid stream ID specified as stream command argument".into())
}

/// A stream id as Redis's strict parse takes it: `ms-n`, or `ms` alone meaning `ms-0` (with
/// `end`, `ms-<max>`); never `-` or `+`.
pub fn stream_id(text: &str, end: bool) -> Result<LogSeq, FirnError> {
    LogSeq::parse_bound(text, end).map_err(|_| invalid_stream_id())
}

/// A stream entry as Redis shows it: `[id, [field, value, …]]`.
pub fn stream_entry(record: &LogRecord) -> Result<Reply, FirnError> {
    let fields = decode_fields(&record.payload)
        .map_err(|e| FirnError::BadArgument(format!("entry {} of the stream: {e}", record.seq)))?;
    Ok(Reply::Array(vec![
        Reply::text(record.seq.to_string()),
        Reply::Array(
            fields
                .into_iter()
                .flat_map(|(f, v)| [Reply::Bulk(f), Reply::Bulk(v)])
                .collect(),
        ),
    ]))
}

/// Entries in the order read, as XRANGE and XREAD show them.
pub fn stream_entries(records: &[LogRecord]) -> Result<Reply, FirnError> {
    records
        .iter()
        .map(stream_entry)
        .collect::<Result<_, _>>()
        .map(Reply::Array)
}

/// The rest of the arguments as stream ids, every one checked before anything is done (as
/// Redis does: XDEL, XACK).
pub fn stream_ids(args: &mut Args) -> Result<Vec<LogSeq>, FirnError> {
    args.rest()
        .iter()
        .map(|id| stream_id(&String::from_utf8_lossy(id), false))
        .collect()
}

/// `key… id…` after STREAMS (XREAD, XREADGROUP): as many ids as keys, each read by
/// `parse_id` (which knows the command's special ids), with Redis's words when unbalanced
/// (`special` names the id that stands for "new": `$` or `>`).
pub fn streams_and_ids<T>(
    args: &mut Args,
    command: &str,
    special: &str,
    parse_id: impl Fn(&[u8]) -> Result<T, FirnError>,
) -> Result<Vec<(firn_model::Key, T)>, FirnError> {
    let items = args.rest();
    if items.len() % 2 == 1 {
        return Err(FirnError::BadArgument(format!(
            "Unbalanced '{command}' list of streams: for each stream key an ID or '{special}' must be specified."
        )));
    }
    let (keys, ids) = items.split_at(items.len() / 2);
    keys.iter()
        .zip(ids)
        .map(|(key, id)| Ok((firn_model::Key::new(key.clone())?, parse_id(id)?)))
        .collect()
}

/// Entries a group handed a consumer: `[id, [field, value, …]]`, or `[id, nil]` for one
/// deleted from the stream since it was delivered, as Redis shows it.
pub fn group_entries(entries: &[GroupEntry]) -> Result<Reply, FirnError> {
    entries
        .iter()
        .map(|e| match &e.record {
            Some(r) => stream_entry(r),
            None => Ok(Reply::Array(vec![
                Reply::text(e.seq.to_string()),
                Reply::Nil,
            ])),
        })
        .collect::<Result<_, _>>()
        .map(Reply::Array)
}

/// A consumer group's name and the stream id that starts it (`$`: the stream's last).
pub fn group_start(text: &str) -> Result<firn_model::GroupStart, FirnError> {
    match text {
        "$" => Ok(firn_model::GroupStart::Last),
        // The smallest id, as Redis reads `-` here.
        "-" => Ok(firn_model::GroupStart::Id(firn_model::LogSeq::ZERO)),
        id => stream_id(id, false).map(firn_model::GroupStart::Id),
    }
}
