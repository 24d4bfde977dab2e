//! FIRN.TIMER SET name AT t | IN ms CALL fn [PAYLOAD p] | XADD stream field value… | CANCEL
//! name | LIST: a function run, or a stream entry added, once, at or after a time, also
//! across leader changes and restarts (docs/functions.md).

use bytes::Bytes;
use firn_model::{
    DelayedEntry, FirnError, FunctionRequest, Response, TimerRequest, hlc::system_wall_us,
};

use crate::resp::args::Args;
use crate::resp::command::{
    Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions, Render, unexpected,
};
use crate::resp::reply::Reply;

pub const FIRN_TIMER: CommandSpec = CommandSpec {
    name: "firn.timer",
    arity: -2,
    flags: &[Flag::Write],
    keys: KeyPositions::NONE,
    group: Group::Firn,
    since: FIRST_RELEASE,
    summary: "SET name AT t | IN ms CALL fn [PAYLOAD p] | XADD stream field value…; CANCEL name; LIST: durable timers and delayed stream entries.",
    parse: firn_timer,
};

fn firn_timer(mut args: Args) -> Result<Action, FirnError> {
    let sub = args.keyword()?;
    let done = |r: Response| match r {
        Response::Done => Reply::Ok,
        other => unexpected("FIRN.TIMER", other),
    };
    let (request, render): (TimerRequest, fn(Response) -> Reply) = match sub.as_str() {
        "SET" => {
            let name = args.text()?;
            let at_us = match args.keyword()?.as_str() {
                "AT" => firn_model::time::parse_micros(&args.text()?)?,
                "IN" => {
                    let ms = args.u64("IN ms")?;
                    system_wall_us().saturating_add(ms.saturating_mul(1_000))
                }
                other => {
                    return Err(FirnError::BadArgument(format!(
                        "FIRN.TIMER SET name AT t | IN ms CALL fn: expected AT or IN, got '{other}'"
                    )));
                }
            };
            let usage = "FIRN.TIMER SET name AT t | IN ms CALL fn [PAYLOAD p] | XADD stream field value [field value …]";
            let set = match args.keyword()?.as_str() {
                "CALL" => {
                    let function = args.text()?;
                    let mut payload = Bytes::new();
                    if args.peek_keyword().as_deref() == Some("PAYLOAD") {
                        args.keyword()?;
                        payload = args.bytes()?;
                    }
                    TimerRequest::Set {
                        name,
                        at_us,
                        function,
                        payload,
                        entry: None,
                    }
                }
                "XADD" => {
                    let stream = args.bytes()?;
                    let mut fields = Vec::new();
                    while !args.is_empty() {
                        fields.push((args.bytes()?, args.bytes()?));
                    }
                    TimerRequest::Set {
                        name,
                        at_us,
                        function: String::new(),
                        payload: Bytes::new(),
                        entry: Some(DelayedEntry { stream, fields }),
                    }
                }
                other => {
                    return Err(FirnError::BadArgument(format!(
                        "{usage}: expected CALL or XADD, got '{other}'"
                    )));
                }
            };
            (set, done)
        }
        "CANCEL" => (TimerRequest::Cancel(args.text()?), done),
        "LIST" => (TimerRequest::List, |r| match r {
            Response::Timers(t) => Reply::Array(
                t.into_iter()
                    .map(|t| {
                        let mut fields = vec![
                            (Reply::text("name"), Reply::text(&t.name)),
                            (Reply::text("at_us"), Reply::Int(t.at_us as i64)),
                        ];
                        match t.entry {
                            None => fields.extend([
                                (Reply::text("function"), Reply::text(&t.function)),
                                (Reply::text("payload"), Reply::Bulk(t.payload)),
                            ]),
                            Some(e) => fields.extend([
                                (Reply::text("stream"), Reply::Bulk(e.stream)),
                                (
                                    Reply::text("fields"),
                                    Reply::Array(
                                        e.fields
                                            .into_iter()
                                            .flat_map(|(f, v)| [Reply::Bulk(f), Reply::Bulk(v)])
                                            .collect(),
                                    ),
                                ),
                            ]),
                        }
                        Reply::Map(fields)
                    })
                    .collect(),
            ),
            other => unexpected("FIRN.TIMER LIST", other),
        }),
        other => {
            return Err(FirnError::BadArgument(format!(
                "unknown FIRN.TIMER subcommand '{other}'; use SET, CANCEL or LIST"
            )));
        }
    };
    args.done()?;
    Ok(Action::execute(
        FunctionRequest::Timer(request),
        Render::new(render),
    ))
}
