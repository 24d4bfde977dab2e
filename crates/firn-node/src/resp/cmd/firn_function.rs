//! FIRN.FUNCTION LOAD name module | LIST | INFO name | DELETE name: WebAssembly functions run
//! next to the data (docs/functions.md), kept as versioned keys.

use firn_model::{FirnError, FunctionInfo, FunctionRequest, Response};

use crate::resp::args::Args;
use crate::resp::command::{
    Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions, Render, unexpected,
};
use crate::resp::reply::Reply;

pub const FIRN_FUNCTION: CommandSpec = CommandSpec {
    name: "firn.function",
    arity: -2,
    flags: &[Flag::Write],
    keys: KeyPositions::NONE,
    group: Group::Firn,
    since: FIRST_RELEASE,
    summary: "LOAD name module -> version; LIST; INFO name; DELETE name: WebAssembly functions.",
    parse: firn_function,
};

/// A function as LIST and INFO show it.
pub fn function_reply(f: FunctionInfo) -> Reply {
    Reply::Map(vec![
        (Reply::text("name"), Reply::text(&f.name)),
        (Reply::text("version"), Reply::Int(f.version as i64)),
        (
            Reply::text("module_bytes"),
            Reply::Int(f.module_bytes as i64),
        ),
        (Reply::text("loaded_us"), Reply::Int(f.loaded_us as i64)),
    ])
}

fn firn_function(mut args: Args) -> Result<Action, FirnError> {
    let sub = args.keyword()?;
    let (request, render): (FunctionRequest, fn(Response) -> Reply) = match sub.as_str() {
        "LOAD" => {
            let name = args.text()?;
            let module = args.bytes()?;
            (FunctionRequest::Load { name, module }, |r| match r {
                Response::Functions(mut f) if f.len() == 1 => {
                    Reply::Int(f.remove(0).version as i64)
                }
                other => unexpected("FIRN.FUNCTION LOAD", other),
            })
        }
        "LIST" => (FunctionRequest::List, |r| match r {
            Response::Functions(f) => Reply::Array(f.into_iter().map(function_reply).collect()),
            other => unexpected("FIRN.FUNCTION LIST", other),
        }),
        "INFO" => (FunctionRequest::Info { name: args.text()? }, |r| match r {
            Response::Functions(mut f) if f.len() == 1 => function_reply(f.remove(0)),
            other => unexpected("FIRN.FUNCTION INFO", other),
        }),
        "DELETE" => (
            FunctionRequest::Delete { name: args.text()? },
            |r| match r {
                Response::Done => Reply::Ok,
                other => unexpected("FIRN.FUNCTION DELETE", other),
            },
        ),
        other => {
            return Err(FirnError::BadArgument(format!(
                "unknown FIRN.FUNCTION subcommand '{other}'; use LOAD, LIST, INFO or DELETE"
            )));
        }
    };
    args.done()?;
    Ok(Action::execute(request, Render::new(render)))
}
