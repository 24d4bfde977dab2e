//! FIRN.AFTER and FIRN.TOKEN: the connection's causality token, handed over between
//! connections or processes.

use firn_model::{CommitTs, FirnError};

use crate::resp::args::Args;
use crate::resp::command::{Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions};
use crate::resp::reply::Reply;

pub const FIRN_AFTER: CommandSpec = CommandSpec {
    name: "firn.after",
    arity: 2,
    flags: &[Flag::Fast],
    keys: KeyPositions::NONE,
    group: Group::Firn,
    since: FIRST_RELEASE,
    summary: "What this connection sends from now on comes after the token (a commit stamp).",
    parse: after,
};

pub const FIRN_TOKEN: CommandSpec = CommandSpec {
    name: "firn.token",
    arity: 1,
    flags: &[Flag::Fast],
    keys: KeyPositions::NONE,
    group: Group::Firn,
    since: FIRST_RELEASE,
    summary: "This connection's causality token (0-0 before it has seen any stamp).",
    parse: |_| {
        Ok(Action::client(|client| {
            Reply::text(client.session.token().unwrap_or(CommitTs::ZERO).to_string())
        }))
    },
};

fn after(mut args: Args) -> Result<Action, FirnError> {
    let token = args.read_time()?;
    Ok(Action::client(move |client| {
        match client.session.advance(token) {
            Ok(()) => Reply::Ok,
            Err(e) => Reply::error(&e),
        }
    }))
}
