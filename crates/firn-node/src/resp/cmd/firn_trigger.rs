//! FIRN.TRIGGER CREATE name ON PREFIX p | LOG l TAG t | STREAM s CALL fn[@version]
//! [FROM now|0|t] [RETRIES n] [DEADLETTER stream] | PAUSE name | RESUME name | DROP name |
//! INFO name | LIST | REPLAY name FROM t1 TO t2 INTO prefix: a function run on every
//! committed change of a prefix, record of a log tag or entry of a stream, exactly once in
//! effect (docs/functions.md).

use bytes::Bytes;
use firn_model::function::TRIGGER_RETRIES_DEFAULT;
use firn_model::{
    EntrySource, FirnError, FunctionRequest, Response, TriggerFrom, TriggerInfo, TriggerRequest,
    TriggerSpec,
};

use crate::resp::args::Args;
use crate::resp::command::{
    Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions, Render, unexpected,
};
use crate::resp::reply::Reply;

pub const FIRN_TRIGGER: CommandSpec = CommandSpec {
    name: "firn.trigger",
    arity: -2,
    flags: &[Flag::Write],
    keys: KeyPositions::NONE,
    group: Group::Firn,
    since: FIRST_RELEASE,
    summary: "CREATE name ON PREFIX p | LOG l TAG t | STREAM s CALL fn [FROM now|0|t] [RETRIES n] [DEADLETTER stream]; PAUSE, RESUME, DROP, INFO name; LIST; REPLAY name FROM t1 TO t2 INTO prefix.",
    parse: firn_trigger,
};

fn info_reply(t: TriggerInfo) -> Reply {
    let s = t.spec;
    let text = |v: &str| Reply::text(v);
    let from = match s.from {
        TriggerFrom::Now => text("now"),
        TriggerFrom::Start => text("0"),
        TriggerFrom::TimeUs(us) => Reply::Int(us as i64),
    };
    let function = match s.version {
        Some(v) => format!("{}@{v}", s.function),
        None => s.function.clone(),
    };
    let dead = crate::functions::trigger::dead_letters(&s);
    let mut replay = Vec::new();
    if let (Some(until), Some(into)) = (s.until_us, s.into.clone()) {
        replay.push((text("until"), Reply::Int(until as i64)));
        replay.push((text("into"), Reply::Bulk(into)));
    }
    let on = match &s.entries {
        None => vec![(text("prefix"), Reply::Bulk(s.prefix.clone()))],
        Some(EntrySource::Log { log, tag }) => vec![
            (text("log"), Reply::Bulk(log.clone())),
            (text("tag"), Reply::Bulk(tag.clone())),
        ],
        Some(EntrySource::Stream(stream)) => vec![(text("stream"), Reply::Bulk(stream.clone()))],
    };
    let mut fields = vec![(text("name"), text(&s.name))];
    fields.extend(on);
    fields.extend([
        (text("function"), text(&function)),
        (text("from"), from),
        (text("retries"), Reply::Int(s.retries as i64)),
        (text("deadletter"), Reply::Bulk(dead)),
        (text("paused"), Reply::Int(s.paused as i64)),
        (text("runs"), Reply::Int(t.runs as i64)),
        (text("errors"), Reply::Int(t.errors as i64)),
        (text("dead_letters"), Reply::Int(t.dead_letters as i64)),
        (
            text("last_error"),
            t.last_error.map_or(Reply::Nil, |e| text(&e)),
        ),
        (
            text("lag_ms"),
            t.lag_ms.map_or(Reply::Nil, |l| Reply::Int(l as i64)),
        ),
    ]);
    fields.extend(replay);
    Reply::Map(fields)
}

fn firn_trigger(mut args: Args) -> Result<Action, FirnError> {
    let sub = args.keyword()?;
    let done = |r: Response| match r {
        Response::Done => Reply::Ok,
        other => unexpected("FIRN.TRIGGER", other),
    };
    let (request, render): (TriggerRequest, fn(Response) -> Reply) = match sub.as_str() {
        "CREATE" => (
            TriggerRequest::Create(Box::new(parse_create(&mut args)?)),
            done,
        ),
        "PAUSE" => (TriggerRequest::Pause(args.text()?), done),
        "RESUME" => (TriggerRequest::Resume(args.text()?), done),
        "DROP" => (TriggerRequest::Drop(args.text()?), done),
        "REPLAY" => (parse_replay(&mut args)?, done),
        "INFO" => (TriggerRequest::Info(args.text()?), |r| match r {
            Response::Triggers(mut t) if t.len() == 1 => info_reply(t.remove(0)),
            other => unexpected("FIRN.TRIGGER INFO", other),
        }),
        "LIST" => (TriggerRequest::List, |r| match r {
            Response::Triggers(t) => Reply::Array(t.into_iter().map(info_reply).collect()),
            other => unexpected("FIRN.TRIGGER LIST", other),
        }),
        other => {
            return Err(FirnError::BadArgument(format!(
                "unknown FIRN.TRIGGER subcommand '{other}'; use CREATE, PAUSE, RESUME, DROP, INFO, LIST or REPLAY"
            )));
        }
    };
    args.done()?;
    Ok(Action::execute(
        FunctionRequest::Trigger(request),
        Render::new(render),
    ))
}

/// `name FROM t1 TO t2 INTO prefix`.
fn parse_replay(args: &mut Args) -> Result<TriggerRequest, FirnError> {
    let name = args.text()?;
    let mut word = |want: &str| -> Result<String, FirnError> {
        let got = args.keyword()?;
        if got != want {
            return Err(FirnError::BadArgument(format!(
                "FIRN.TRIGGER REPLAY name FROM t1 TO t2 INTO prefix: expected {want}, got '{got}'"
            )));
        }
        args.text()
    };
    let from_us = firn_model::time::parse_micros(&word("FROM")?)?;
    let to_us = firn_model::time::parse_micros(&word("TO")?)?;
    let into = Bytes::from(word("INTO")?);
    Ok(TriggerRequest::Replay {
        name,
        from_us,
        to_us,
        into,
    })
}

/// `name ON PREFIX p | LOG l TAG t | STREAM s CALL fn[@version] [FROM now|0|t] [RETRIES n]
/// [DEADLETTER stream]`.
fn parse_create(args: &mut Args) -> Result<TriggerSpec, FirnError> {
    let name = args.text()?;
    let expect = |args: &mut Args, word: &str| -> Result<(), FirnError> {
        let got = args.keyword()?;
        if got == word {
            Ok(())
        } else {
            Err(FirnError::BadArgument(format!(
                "FIRN.TRIGGER CREATE name ON PREFIX p CALL fn …: expected {word}, got '{got}'"
            )))
        }
    };
    expect(args, "ON")?;
    let (prefix, entries) = match args.keyword()?.as_str() {
        "PREFIX" => (args.bytes()?, None),
        "LOG" => {
            let log = args.bytes()?;
            expect(args, "TAG")?;
            let tag = args.bytes()?;
            (Bytes::new(), Some(EntrySource::Log { log, tag }))
        }
        "STREAM" => (Bytes::new(), Some(EntrySource::Stream(args.bytes()?))),
        other => {
            return Err(FirnError::BadArgument(format!(
                "a trigger follows ON PREFIX p, ON LOG l TAG t or ON STREAM s; got '{other}'"
            )));
        }
    };
    expect(args, "CALL")?;
    let target = args.text()?;
    let (function, version) = match target.split_once('@') {
        Some((f, v)) => (
            f.to_owned(),
            Some(v.parse().map_err(|_| {
                FirnError::BadArgument(format!("CALL fn@version: '{v}' is not a version"))
            })?),
        ),
        None => (target, None),
    };
    let mut spec = TriggerSpec {
        name,
        prefix,
        entries,
        function,
        version,
        from: TriggerFrom::Now,
        retries: TRIGGER_RETRIES_DEFAULT,
        deadletter: None,
        paused: false,
        creator: None,
        created_us: 0,
        until_us: None,
        into: None,
    };
    while let Some(option) = args.peek_keyword() {
        args.keyword()?;
        match option.as_str() {
            "FROM" => {
                let from = args.text()?;
                spec.from = match from.to_ascii_lowercase().as_str() {
                    "now" => TriggerFrom::Now,
                    "0" => TriggerFrom::Start,
                    _ => TriggerFrom::TimeUs(firn_model::time::parse_micros(&from)?),
                };
            }
            "RETRIES" => spec.retries = u32::try_from(args.u64("RETRIES")?).unwrap_or(u32::MAX),
            "DEADLETTER" => spec.deadletter = Some(args.bytes()?),
            other => {
                return Err(FirnError::BadArgument(format!(
                    "unknown FIRN.TRIGGER CREATE option '{other}'; use FROM, RETRIES or DEADLETTER"
                )));
            }
        }
    }
    Ok(spec)
}
