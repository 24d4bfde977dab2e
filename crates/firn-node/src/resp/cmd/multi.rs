//! MULTI, EXEC, DISCARD, WATCH and UNWATCH: Redis's transactions on a connection. Commands
//! sent after MULTI are queued (`resp/transaction.rs`); EXEC runs them as one transaction
//! (`KvWrite::Atomic`: one entry within one shard, `Kernel::transact` across shards),
//! unless a watched key changed since its WATCH.

use firn_model::{FirnError, Key};

use crate::resp::args::Args;
use crate::resp::command::{Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions};

/// What a transaction command asks of its connection.
pub enum TxnCommand {
    Multi,
    Exec,
    Discard,
    Watch(Vec<Key>),
    Unwatch,
    /// FIRN.TXN: compares, then one branch of commands.
    Firn(Box<super::firn_txn::FirnTxn>),
}

const TRANSACTION: CommandSpec = CommandSpec {
    name: "multi",
    arity: 1,
    flags: &[Flag::Fast],
    keys: KeyPositions::NONE,
    group: Group::Transactions,
    since: FIRST_RELEASE,
    summary: "Starts a transaction: later commands are queued until EXEC or DISCARD.",
    parse: |_| Ok(Action::Transaction(TxnCommand::Multi)),
};

pub const MULTI: CommandSpec = TRANSACTION;

pub const EXEC: CommandSpec = CommandSpec {
    name: "exec",
    flags: &[Flag::Write],
    summary: "Runs the queued commands as one transaction, across shards: each command's answer, or nil when a watched key changed.",
    parse: |_| Ok(Action::Transaction(TxnCommand::Exec)),
    ..TRANSACTION
};

pub const DISCARD: CommandSpec = CommandSpec {
    name: "discard",
    summary: "Drops the queued commands and the watched keys.",
    parse: |_| Ok(Action::Transaction(TxnCommand::Discard)),
    ..TRANSACTION
};

pub const WATCH: CommandSpec = CommandSpec {
    name: "watch",
    arity: -2,
    flags: &[Flag::ReadOnly, Flag::Fast],
    keys: KeyPositions::ALL,
    summary: "EXEC runs nothing (answers nil) if any of the keys changes before it.",
    parse: watch,
    ..TRANSACTION
};

pub const UNWATCH: CommandSpec = CommandSpec {
    name: "unwatch",
    summary: "Forgets every watched key.",
    parse: |_| Ok(Action::Transaction(TxnCommand::Unwatch)),
    ..TRANSACTION
};

fn watch(mut args: Args) -> Result<Action, FirnError> {
    Ok(Action::Transaction(TxnCommand::Watch(args.keys()?)))
}
