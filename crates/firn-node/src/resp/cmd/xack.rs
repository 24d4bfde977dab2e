//! XACK key group id…: drops entries from the group's pending list; answers how many were
//! there.

use firn_model::{FirnError, GroupChange, GroupWrite};

use super::stream_ids;
use super::xgroup::show_count;
use crate::resp::args::Args;
use crate::resp::command::{Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions, Render};

pub const XACK: CommandSpec = CommandSpec {
    name: "xack",
    arity: -4,
    flags: &[Flag::Write, Flag::Fast],
    keys: KeyPositions::FIRST,
    group: Group::Stream,
    since: FIRST_RELEASE,
    summary: "Acknowledges entries of the group: drops them from its pending list; answers how many were pending.",
    parse: xack,
};

fn xack(mut args: Args) -> Result<Action, FirnError> {
    let (key, group) = (args.key()?, args.bytes()?);
    let ids = stream_ids(&mut args)?;
    Ok(Action::execute(
        GroupWrite::Change {
            key,
            group,
            change: GroupChange::Ack { ids },
        },
        Render::new(show_count),
    ))
}
