//! FIRN.TWIN GET name [ASOF t] | DESIRE name patch | REPORT name patch: a device twin — the
//! JSON objects at `name/desired` and `name/reported` read in one snapshot with their delta,
//! or a JSON merge patch of one of them.

use firn_model::{FirnError, Response, TwinName, TwinRequest, TwinSide, TwinState};

use super::{unknown_subcommand, version_map, written_pair};
use crate::resp::args::Args;
use crate::resp::command::{
    Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions, Render, unexpected,
};
use crate::resp::reply::Reply;

pub const FIRN_TWIN: CommandSpec = CommandSpec {
    name: "firn.twin",
    arity: -3,
    flags: &[Flag::Write],
    keys: KeyPositions::NONE,
    group: Group::Firn,
    since: FIRST_RELEASE,
    summary: "A device twin: GET name [ASOF t] (desired, reported and their delta, at one time); DESIRE|REPORT name patch (a JSON merge patch); answers a map, or [version, commit_ts].",
    parse: firn_twin,
};

fn firn_twin(mut args: Args) -> Result<Action, FirnError> {
    let sub = args.keyword()?;
    let twin = TwinName::new(args.bytes()?)?;
    let side = match sub.as_str() {
        "GET" => {
            let mut at = None;
            while !args.is_empty() {
                match args.keyword()?.as_str() {
                    "ASOF" => at = Some(args.read_time()?),
                    other => {
                        return Err(FirnError::BadArgument(format!(
                            "unknown FIRN.TWIN GET option '{other}'; use ASOF t"
                        )));
                    }
                }
            }
            return Ok(Action::execute(
                TwinRequest::Get { twin, at },
                Render::new(show_twin),
            ));
        }
        "DESIRE" => TwinSide::Desired,
        "REPORT" => TwinSide::Reported,
        _ => return Err(unknown_subcommand("firn.twin", &sub)),
    };
    let patch = args.bytes()?;
    args.done()?;
    Ok(Action::execute(
        TwinRequest::Patch { twin, side, patch },
        Render::new(show_patched),
    ))
}

fn show_twin(response: Response) -> Reply {
    let Response::Twin(state) = response else {
        return unexpected("FIRN.TWIN", response);
    };
    let TwinState {
        at,
        desired,
        reported,
        delta,
    } = *state;
    let version = |v: Option<firn_model::VersionInfo>| v.as_ref().map_or(Reply::Nil, version_map);
    Reply::Map(vec![
        (Reply::text("at"), Reply::text(at.to_string())),
        (Reply::text("desired"), version(desired)),
        (Reply::text("reported"), version(reported)),
        (Reply::text("delta"), Reply::Bulk(delta)),
    ])
}

fn show_patched(response: Response) -> Reply {
    match response {
        Response::Written(w) => w.first().map_or(Reply::Nil, written_pair),
        other => unexpected("FIRN.TWIN", other),
    }
}
