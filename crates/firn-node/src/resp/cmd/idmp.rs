//! IDMP producer id command…: the command (a write, `EXEC`, `FIRN.TXN`) with an
//! idempotency key. Sent again with the same key within the producer's window, it applies
//! nothing and answers what it answered the first time (docs/api.md, "Exactly once").

use firn_model::{FirnError, IdemKey};

use super::multi::TxnCommand;
use crate::resp::args::Args;
use crate::resp::command::{Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions};

pub const IDMP: CommandSpec = CommandSpec {
    name: "idmp",
    arity: -4,
    flags: &[Flag::Write, Flag::MovableKeys],
    keys: KeyPositions::NONE,
    group: Group::Firn,
    since: FIRST_RELEASE,
    summary: "IDMP producer id command…: the write applied once per key; sent again, the first answer.",
    parse: idmp,
};

fn idmp(mut args: Args) -> Result<Action, FirnError> {
    let key = IdemKey::new(args.bytes()?, args.bytes()?)?;
    let name = args.keyword()?;
    let action =
        crate::resp::registry::dispatch(&name, args.rest().into()).map_err(|e| match e {
            // The unknown command is IDMP's argument: IDMP itself is known.
            FirnError::UnknownCommand(_) => not_a_write(&name),
            e => e,
        })?;
    match action {
        Action::Execute(request, _) if !request.is_write() => Err(not_a_write(&name)),
        Action::Execute(..) | Action::Transaction(TxnCommand::Exec | TxnCommand::Firn(_)) => {
            Ok(Action::Once(key, Box::new(action)))
        }
        Action::Once(..) => Err(FirnError::BadArgument(
            "a command takes one idempotency key".into(),
        )),
        _ => Err(not_a_write(&name)),
    }
}

fn not_a_write(name: &str) -> FirnError {
    FirnError::BadArgument(format!(
        "IDMP takes a write (SET, INCR, DEL, XADD, EXEC, FIRN.TXN …), not {name}"
    ))
}
