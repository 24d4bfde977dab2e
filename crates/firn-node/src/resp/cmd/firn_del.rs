//! FIRN.DEL key: a tombstone version; answers its [version, commit_ts], or nil when the
//! key did not exist.

use firn_model::{FirnError, KvWrite, Response};

use super::written_pair;
use crate::resp::args::Args;
use crate::resp::command::{
    Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions, Render, unexpected,
};
use crate::resp::reply::Reply;

pub const FIRN_DEL: CommandSpec = CommandSpec {
    name: "firn.del",
    arity: 2,
    flags: &[Flag::Write],
    keys: KeyPositions::FIRST,
    group: Group::Firn,
    since: FIRST_RELEASE,
    summary: "Deletes the key; answers the tombstone's [version, commit_ts], nil if it did not exist.",
    parse: firn_del,
};

fn firn_del(mut args: Args) -> Result<Action, FirnError> {
    Ok(Action::execute(
        KvWrite::Delete {
            keys: vec![args.key()?],
        },
        Render::new(show_tombstone),
    ))
}

fn show_tombstone(response: Response) -> Reply {
    match response {
        Response::Written(w) => w
            .first()
            .filter(|w| w.existed)
            .map_or(Reply::Nil, written_pair),
        other => unexpected("FIRN.DEL", other),
    }
}
