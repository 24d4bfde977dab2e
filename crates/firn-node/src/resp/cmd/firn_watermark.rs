//! FIRN.WATERMARK prefix [ADVANCE t | WAIT t [TIMEOUT ms] | POLICY [LATENESS d|OFF]
//! [LATE KEEP|REFUSE]]: a keyspace's event-time watermark — every write with an event time
//! at or below it has arrived — read, waited for, moved up, or its rules set.

use firn_model::time::parse_duration_us;
use firn_model::{
    AdminRequest, FirnError, Response, WatermarkInfo, WatermarkPolicy, WatermarkRequest,
};

use super::unknown_subcommand;
use crate::resp::args::Args;
use crate::resp::command::{
    Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions, Render, unexpected,
};
use crate::resp::reply::Reply;

/// How long `WAIT` waits without `TIMEOUT`.
const WAIT_MS_DEFAULT: u64 = 5_000;

pub const FIRN_WATERMARK: CommandSpec = CommandSpec {
    name: "firn.watermark",
    arity: -2,
    flags: &[Flag::Write],
    keys: KeyPositions::NONE,
    group: Group::Firn,
    since: FIRST_RELEASE,
    summary: "prefix: the keyspace's event-time watermark; ADVANCE t moves it up; WAIT t [TIMEOUT ms] waits for it; POLICY [LATENESS d|OFF] [LATE KEEP|REFUSE] sets its rules.",
    parse: firn_watermark,
};

fn firn_watermark(mut args: Args) -> Result<Action, FirnError> {
    let prefix = args.text()?;
    let ok = Render::new(|_| Reply::Ok);
    let request = if args.is_empty() {
        WatermarkRequest::Get {
            prefix,
            wait_for: None,
            timeout_ms: 0,
        }
    } else {
        let sub = args.keyword()?;
        match sub.as_str() {
            "ADVANCE" => {
                let to_us = args.micros()?;
                args.done()?;
                return Ok(Action::execute(
                    AdminRequest::Watermark(WatermarkRequest::Advance { prefix, to_us }),
                    ok,
                ));
            }
            "WAIT" => {
                let e = args.micros()?;
                let mut timeout_ms = WAIT_MS_DEFAULT;
                while !args.is_empty() {
                    match args.keyword()?.as_str() {
                        "TIMEOUT" => timeout_ms = args.u64("TIMEOUT")?,
                        other => {
                            return Err(FirnError::BadArgument(format!(
                                "unknown FIRN.WATERMARK WAIT option '{other}'; use TIMEOUT"
                            )));
                        }
                    }
                }
                if timeout_ms > crate::watermark::WAIT_MS_MAX {
                    return Err(FirnError::BadArgument(format!(
                        "TIMEOUT is at most {} ms",
                        crate::watermark::WAIT_MS_MAX
                    )));
                }
                WatermarkRequest::Get {
                    prefix,
                    wait_for: Some(e),
                    timeout_ms,
                }
            }
            "POLICY" => {
                let mut policy = WatermarkPolicy::default();
                while !args.is_empty() {
                    match args.keyword()?.as_str() {
                        "LATENESS" => {
                            let d = args.text()?;
                            policy.lateness_us = if d.eq_ignore_ascii_case("off") {
                                None
                            } else {
                                Some(parse_duration_us(&d)?)
                            };
                        }
                        "LATE" => policy.late = args.text()?.parse()?,
                        other => {
                            return Err(FirnError::BadArgument(format!(
                                "unknown FIRN.WATERMARK POLICY option '{other}'; use LATENESS, LATE"
                            )));
                        }
                    }
                }
                return Ok(Action::execute(
                    AdminRequest::Watermark(WatermarkRequest::Policy { prefix, policy }),
                    ok,
                ));
            }
            _ => return Err(unknown_subcommand("firn.watermark", &sub)),
        }
    };
    Ok(Action::execute(
        AdminRequest::Watermark(request),
        Render::new(show_watermark),
    ))
}

fn show_watermark(response: Response) -> Reply {
    let Response::Watermark(info) = response else {
        return unexpected("FIRN.WATERMARK", response);
    };
    watermark_map(&info)
}

/// A keyspace's watermark as `FIRN.WATERMARK` shows it.
pub fn watermark_map(info: &WatermarkInfo) -> Reply {
    let micros = |t: Option<u64>| t.map_or(Reply::Nil, |t| Reply::Int(t as i64));
    Reply::Map(vec![
        (Reply::text("prefix"), Reply::text(&info.prefix)),
        (Reply::text("watermark"), micros(info.watermark_us)),
        (Reply::text("advanced"), micros(info.state.advanced_us)),
        (
            Reply::text("lateness_us"),
            micros(info.state.policy.lateness_us),
        ),
        (
            Reply::text("late"),
            Reply::text(info.state.policy.late.to_string()),
        ),
    ])
}
