//! FIRN.TXN: compare, then write — etcd's Txn, across shards.
//!
//! `FIRN.TXN [IF key VERSION|VALUE|EXISTS|STAMP op operand]… [THEN n cmd arg…]… [ELSE n cmd
//! arg…]…`: when every `IF` holds, the `THEN` commands run, else the `ELSE` commands, all
//! of them or none, at one commit stamp. `n` counts the command's words (its name and
//! arguments), so a value may be any word, `THEN` and `ELSE` included. The commands are
//! those a `MULTI` may queue. Answers `[1|0, [reply…]]`: whether the compares held, and the
//! replies of the commands that ran.

use std::collections::VecDeque;

use bytes::Bytes;
use firn_model::{Compare, CompareOp, CompareTarget, FirnError};

use super::multi::TxnCommand;
use crate::resp::args::Args;
use crate::resp::command::{Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions};

/// A FIRN.TXN as parsed: its compares, and each branch's commands as sent (name first).
pub struct FirnTxn {
    pub compares: Vec<Compare>,
    pub then: Vec<VecDeque<Bytes>>,
    pub otherwise: Vec<VecDeque<Bytes>>,
}

pub const FIRN_TXN: CommandSpec = CommandSpec {
    name: "firn.txn",
    arity: -1,
    flags: &[Flag::Write, Flag::MovableKeys],
    keys: KeyPositions::NONE,
    group: Group::Firn,
    since: FIRST_RELEASE,
    summary: "Compare, then write, across shards: [IF key VERSION|VALUE|EXISTS|STAMP op operand]… [THEN n cmd arg…]… [ELSE n cmd arg…]…; [1|0, [reply…]].",
    parse: firn_txn,
};

fn firn_txn(mut args: Args) -> Result<Action, FirnError> {
    let mut txn = FirnTxn {
        compares: Vec::new(),
        then: Vec::new(),
        otherwise: Vec::new(),
    };
    while !args.is_empty() {
        match args.keyword()?.as_str() {
            "IF" => txn.compares.push(compare(&mut args)?),
            "THEN" => txn.then.push(command(&mut args)?),
            "ELSE" => txn.otherwise.push(command(&mut args)?),
            other => {
                return Err(FirnError::BadArgument(format!(
                    "unknown FIRN.TXN word '{other}'; use IF, THEN, ELSE"
                )));
            }
        }
    }
    Ok(Action::Transaction(TxnCommand::Firn(Box::new(txn))))
}

/// `key VERSION|VALUE|EXISTS|STAMP op operand`
fn compare(args: &mut Args) -> Result<Compare, FirnError> {
    let key = args.key()?;
    let what = args.keyword()?;
    let op_word = args.text()?;
    let op = CompareOp::parse(&op_word).ok_or_else(|| {
        FirnError::BadArgument(format!(
            "unknown compare '{op_word}'; use =, !=, <, <=, >, >="
        ))
    })?;
    let target = match what.as_str() {
        "VERSION" => CompareTarget::Version(args.u64("VERSION")?),
        "VALUE" => CompareTarget::Value(args.bytes()?),
        "EXISTS" => match args.text()?.as_str() {
            "1" => CompareTarget::Exists(true),
            "0" => CompareTarget::Exists(false),
            other => {
                return Err(FirnError::BadArgument(format!(
                    "EXISTS compares with 1 or 0, got '{other}'"
                )));
            }
        },
        "STAMP" => CompareTarget::Stamp(args.read_time()?),
        other => {
            return Err(FirnError::BadArgument(format!(
                "unknown compare target '{other}'; use VERSION, VALUE, EXISTS, STAMP"
            )));
        }
    };
    let compare = Compare { key, target, op };
    compare.check()?;
    Ok(compare)
}

/// `n word…`: a command of `n` words.
fn command(args: &mut Args) -> Result<VecDeque<Bytes>, FirnError> {
    let n = args.usize("the command's word count")?;
    if n == 0 || n > args.len() {
        return Err(FirnError::BadArgument(format!(
            "a command of {n} words, and {} words follow",
            args.len()
        )));
    }
    (0..n).map(|_| args.bytes()).collect()
}
