//! FIRN.LOG APPEND | NEXT | PREV | TAIL | RANGE | TRIM | INFO: the tagged shared log. A
//! record carries 1 to 16 tags and is read through any of them, by seq (`<ms>-<n>`).

use firn_model::limits::PAGE_ITEMS_DEFAULT;
use firn_model::{
    FirnError, Key, LogQuery, LogRead, LogRecord, LogSeq, LogWrite, NewRecord, ReadConsistency,
    Response, TagInfo,
};

use super::{exact_arity, unknown_subcommand};
use crate::resp::args::Args;
use crate::resp::command::{
    Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions, Render, unexpected,
};
use crate::resp::reply::Reply;

pub const FIRN_LOG: CommandSpec = CommandSpec {
    name: "firn.log",
    // Every subcommand names a log.
    arity: -3,
    // APPEND and TRIM write; the reads share the one command.
    flags: &[Flag::Write],
    keys: KeyPositions::at(2, 2, 1),
    group: Group::Firn,
    since: FIRST_RELEASE,
    summary: "APPEND log TAGS n tag… payload…, NEXT/PREV/TAIL/RANGE log tag …, TRIM log [TAG t] BEFORE seq, INFO log tag.",
    parse: firn_log,
};

fn firn_log(mut args: Args) -> Result<Action, FirnError> {
    let sub = args.keyword()?;
    let log = args.key()?;
    match sub.as_str() {
        "APPEND" => append(log, args),
        "NEXT" => {
            let tag = args.key()?;
            let min = seq_bound(&args.text()?, false)?;
            read(
                LogQuery::next(log, tag, min),
                args,
                "NEXT",
                Some("BLOCK"),
                show_record,
            )
        }
        "PREV" => {
            let tag = args.key()?;
            let max = seq_bound(&args.text()?, true)?;
            read(
                LogQuery::prev(log, tag, max),
                args,
                "PREV",
                None,
                show_record,
            )
        }
        "TAIL" => {
            let tag = args.key()?;
            read(LogQuery::tail(log, tag), args, "TAIL", None, show_record)
        }
        "RANGE" => {
            let tag = args.key()?;
            let from = args.text()?;
            let to = seq_bound(&args.text()?, true)?;
            let mut q = LogQuery::range(log, tag, seq_bound(&from, false)?, to, PAGE_ITEMS_DEFAULT);
            if from == "-" {
                // `-` is the first record kept, as XRANGE's is.
                q = q.from_start();
            }
            read(q, args, "RANGE", Some("LIMIT"), show_records)
        }
        "TRIM" => trim(log, args),
        "INFO" => {
            let tag = args.key()?;
            let mut consistency = ReadConsistency::Linearizable;
            if !args.is_empty() {
                exact_arity(&args, 2)?;
                match args.keyword()?.as_str() {
                    "CONSISTENCY" => consistency = args.text()?.parse()?,
                    other => {
                        return Err(FirnError::BadArgument(format!(
                            "unknown FIRN.LOG INFO option '{other}'; use CONSISTENCY"
                        )));
                    }
                }
            }
            Ok(Action::execute(
                LogRead::Info {
                    log,
                    tag,
                    consistency,
                },
                Render::new(show_info),
            ))
        }
        _ => Err(unknown_subcommand("firn.log", &sub)),
    }
}

/// `TAGS n tag… payload`, once per record.
fn append(log: Key, mut args: Args) -> Result<Action, FirnError> {
    let mut records = Vec::new();
    while !args.is_empty() {
        match args.keyword()?.as_str() {
            "TAGS" => {}
            other => {
                return Err(FirnError::BadArgument(format!(
                    "expected TAGS, got '{other}': FIRN.LOG APPEND log TAGS n tag… payload [TAGS n tag… payload …]"
                )));
            }
        }
        // No room is reserved from the count: it runs out with the arguments.
        let n = args.usize("TAGS")?;
        let tags = (0..n).map(|_| args.key()).collect::<Result<_, _>>()?;
        records.push(NewRecord {
            tags,
            payload: args.bytes()?,
        });
    }
    if records.is_empty() {
        return Err(FirnError::WrongArity("firn.log".into()));
    }
    Ok(Action::execute(
        LogWrite::Append { log, records },
        Render::new(show_appended),
    ))
}

/// `[TAG tag] BEFORE seq`.
fn trim(log: Key, mut args: Args) -> Result<Action, FirnError> {
    let (mut tag, mut before) = (None, None);
    while !args.is_empty() {
        match args.keyword()?.as_str() {
            "TAG" => tag = Some(args.key()?),
            "BEFORE" => before = Some(seq_bound(&args.text()?, false)?),
            other => {
                return Err(FirnError::BadArgument(format!(
                    "unknown FIRN.LOG TRIM option '{other}'; use TAG, BEFORE"
                )));
            }
        }
    }
    let before = before.ok_or_else(|| {
        FirnError::BadArgument("FIRN.LOG TRIM needs BEFORE seq: the first seq to keep".into())
    })?;
    Ok(Action::execute(
        LogWrite::Trim { log, tag, before },
        Render::new(show_count),
    ))
}

/// `[ASOF t | AT t] [CONSISTENCY c]` (`AT` as FIRN.SNAPSHOT spells it) and the subcommand's `extra` option (`BLOCK ms`, `LIMIT n`).
fn read(
    mut q: LogQuery,
    mut args: Args,
    sub: &str,
    extra: Option<&str>,
    show: fn(Response) -> Reply,
) -> Result<Action, FirnError> {
    while !args.is_empty() {
        let option = args.keyword()?;
        match (option.as_str(), extra) {
            ("ASOF" | "AT", _) => q.at = Some(args.read_time()?),
            ("CONSISTENCY", _) => q.consistency = args.text()?.parse()?,
            ("BLOCK", Some("BLOCK")) => q.block_ms = Some(args.u64("BLOCK")?),
            ("LIMIT", Some("LIMIT")) => q.limit = args.usize("LIMIT")?,
            (other, _) => return Err(unknown_option(sub, other, extra)),
        }
    }
    Ok(Action::execute(LogRead::Query(q), Render::new(show)))
}

fn unknown_option(sub: &str, option: &str, extra: Option<&str>) -> FirnError {
    let extra = extra.map(|e| format!("{e}, ")).unwrap_or_default();
    FirnError::BadArgument(format!(
        "unknown FIRN.LOG {sub} option '{option}'; use {extra}ASOF (or AT), CONSISTENCY"
    ))
}

/// A seq, or `-` (the first) and `+` (the last); `ms` alone is `ms-0`, or `ms-<max>` as an
/// upper bound (`end`).
fn seq_bound(text: &str, end: bool) -> Result<LogSeq, FirnError> {
    match text {
        "-" => Ok(LogSeq::ZERO),
        "+" => Ok(LogSeq::MAX),
        _ => LogSeq::parse_bound(text, end),
    }
}

/// `[seq, [tag…], payload, commit_ts]`.
fn record(r: &LogRecord) -> Reply {
    Reply::Array(vec![
        Reply::text(r.seq.to_string()),
        Reply::Array(
            r.tags
                .iter()
                .map(|t| Reply::Bulk(t.bytes().clone()))
                .collect(),
        ),
        Reply::Bulk(r.payload.clone()),
        Reply::text(r.commit_ts.to_string()),
    ])
}

fn show_appended(response: Response) -> Reply {
    match response {
        Response::Appended(a) => {
            Reply::Array(a.iter().map(|a| Reply::text(a.seq.to_string())).collect())
        }
        other => unexpected("FIRN.LOG APPEND", other),
    }
}

fn show_record(response: Response) -> Reply {
    match response {
        Response::Records(r) => r.first().map_or(Reply::Nil, record),
        other => unexpected("FIRN.LOG", other),
    }
}

fn show_records(response: Response) -> Reply {
    match response {
        Response::Records(r) => Reply::Array(r.iter().map(record).collect()),
        other => unexpected("FIRN.LOG RANGE", other),
    }
}

fn show_count(response: Response) -> Reply {
    match response {
        Response::Count(n) => Reply::Int(n as i64),
        other => unexpected("FIRN.LOG TRIM", other),
    }
}

/// Like XINFO STREAM: a flat key/value array (a map in RESP3). A tag never written reads as
/// empty.
fn show_info(response: Response) -> Reply {
    let Response::TagInfo(info) = response else {
        return unexpected("FIRN.LOG INFO", response);
    };
    let info = info.unwrap_or_default();
    let seq = |r: &Option<LogRecord>| {
        r.as_ref()
            .map_or(Reply::Nil, |r| Reply::text(r.seq.to_string()))
    };
    let TagInfo {
        len,
        first,
        last,
        first_kept,
        added,
        ..
    } = &info;
    Reply::Map(vec![
        (Reply::text("length"), Reply::Int(*len as i64)),
        (Reply::text("first-seq"), seq(first)),
        (Reply::text("last-seq"), seq(last)),
        (
            Reply::text("first-kept-seq"),
            Reply::text(first_kept.to_string()),
        ),
        (Reply::text("entries-added"), Reply::Int(*added as i64)),
    ])
}
