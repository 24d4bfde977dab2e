//! XGROUP CREATE|DESTROY|SETID|CREATECONSUMER|DELCONSUMER: a stream's consumer groups, as
//! Redis 7 makes and answers them, and Firn's delivery options (`CREATE … POLICY …`,
//! `CONFIGURE`; docs/api.md). Each is an entry of the stream's shard.

use bytes::Bytes;
use firn_model::{
    DeliveryPolicy, FirnError, GroupChange, GroupKey, GroupOptions, GroupWrite, Key, MaxDeliver,
    Response,
};

use super::{exact_arity, group_start, redis_integer, syntax_error, unknown_subcommand};
use crate::resp::args::Args;
use crate::resp::command::{
    Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions, Render, unexpected,
};
use crate::resp::reply::Reply;

pub const XGROUP: CommandSpec = CommandSpec {
    name: "xgroup",
    arity: -2,
    flags: &[Flag::Write],
    keys: KeyPositions::at(2, 2, 1),
    group: Group::Stream,
    since: FIRST_RELEASE,
    summary: "CREATE key group id|$ [MKSTREAM] [ENTRIESREAD n] [delivery options], CONFIGURE key group [delivery options], DESTROY, SETID, CREATECONSUMER, DELCONSUMER.",
    parse: xgroup,
};

fn xgroup(mut args: Args) -> Result<Action, FirnError> {
    let sub = args.keyword()?;
    let change = |key: Key, group: Bytes, change| GroupWrite::Change { key, group, change };
    match sub.as_str() {
        "CREATE" | "SETID" => {
            if args.len() < 3 {
                return Err(FirnError::WrongArity(format!(
                    "xgroup|{}",
                    sub.to_lowercase()
                )));
            }
            let (key, group) = (args.key()?, args.bytes()?);
            let start = group_start(&args.text()?)?;
            let (mut mkstream, mut entries_read) = (false, None);
            let mut options = OptionWords::default();
            while !args.is_empty() {
                match args.keyword()?.as_str() {
                    "MKSTREAM" if sub == "CREATE" => mkstream = true,
                    // What the group has read, for its lag (-1: unknown).
                    "ENTRIESREAD" if !args.is_empty() => {
                        let n = redis_integer(&mut args)?;
                        if n < -1 {
                            return Err(FirnError::BadArgument(
                                "value for ENTRIESREAD must be positive or -1".into(),
                            ));
                        }
                        entries_read = u64::try_from(n).ok();
                    }
                    word if sub == "CREATE" => options.take(word, &mut args)?,
                    _ => return Err(syntax_error()),
                }
            }
            let options = options.finish(&key)?;
            let write = if sub == "CREATE" {
                change(
                    key,
                    group,
                    GroupChange::Create {
                        start,
                        mkstream,
                        options,
                        entries_read,
                    },
                )
            } else {
                change(
                    key,
                    group,
                    GroupChange::SetId {
                        start,
                        entries_read,
                    },
                )
            };
            Ok(Action::execute(write, Render::new(show_ok)))
        }
        "CONFIGURE" => {
            if args.len() < 2 {
                return Err(FirnError::WrongArity("xgroup|configure".into()));
            }
            let (key, group) = (args.key()?, args.bytes()?);
            let mut options = OptionWords::default();
            while !args.is_empty() {
                options.take(&args.keyword()?, &mut args)?;
            }
            let options = options.finish(&key)?;
            Ok(Action::execute(
                change(key, group, GroupChange::Configure { options }),
                Render::new(show_ok),
            ))
        }
        "DESTROY" => {
            exact_arity(&args, 2)?;
            let (key, group) = (args.key()?, args.bytes()?);
            Ok(Action::execute(
                change(key, group, GroupChange::Destroy),
                Render::new(show_count),
            ))
        }
        "CREATECONSUMER" | "DELCONSUMER" => {
            exact_arity(&args, 3)?;
            let (key, group, consumer) = (args.key()?, args.bytes()?, args.bytes()?);
            let c = if sub == "CREATECONSUMER" {
                GroupChange::CreateConsumer { consumer }
            } else {
                GroupChange::DelConsumer { consumer }
            };
            Ok(Action::execute(
                change(key, group, c),
                Render::new(show_count),
            ))
        }
        _ => Err(unknown_subcommand("xgroup", &sub)),
    }
}

/// The delivery options of `XGROUP CREATE` and `CONFIGURE` as they are read, each at most
/// once, in any order.
#[derive(Default)]
pub struct OptionWords {
    policy: Option<String>,
    key: Option<GroupKey>,
    ack_wait_ms: Option<u64>,
    max_deliver: Option<MaxDeliver>,
    liveness_ms: Option<u64>,
}

/// A number of an option; anything but a whole number is Redis's integer error.
fn option_number(args: &mut Args) -> Result<u64, FirnError> {
    if args.is_empty() {
        return Err(syntax_error());
    }
    args.text()?
        .parse()
        .map_err(|_| FirnError::BadArgument("value is not an integer or out of range".into()))
}

/// Sets `slot` once: a repeated option is a syntax error.
fn once<T>(slot: &mut Option<T>, value: T) -> Result<(), FirnError> {
    if slot.replace(value).is_some() {
        return Err(syntax_error());
    }
    Ok(())
}

impl OptionWords {
    /// Reads the option `word` and its arguments (`ERR syntax error` for anything else).
    pub fn take(&mut self, word: &str, args: &mut Args) -> Result<(), FirnError> {
        match word {
            "POLICY" if !args.is_empty() => once(&mut self.policy, args.keyword()?),
            "KEYFIELD" if !args.is_empty() => once(&mut self.key, GroupKey::Field(args.bytes()?)),
            "KEYTAG" => once(&mut self.key, GroupKey::Tag),
            "ACKWAIT" => {
                let ms = option_number(args)?;
                once(&mut self.ack_wait_ms, ms)
            }
            "LIVENESS" => {
                let ms = option_number(args)?;
                once(&mut self.liveness_ms, ms)
            }
            "MAXDELIVER" => {
                let deliveries = option_number(args)?;
                if args.len() < 2 || args.keyword()? != "DEADLETTER" {
                    return Err(syntax_error());
                }
                let dead_letter = args.key()?;
                once(
                    &mut self.max_deliver,
                    MaxDeliver {
                        deliveries,
                        dead_letter,
                    },
                )
            }
            _ => Err(syntax_error()),
        }
    }

    /// The options for a group of `stream`, checked (`GroupOptions::check`): KEYFIELD and
    /// KEYTAG only with `hrw`, whose key is the field `key` unless one is named.
    pub fn finish(self, stream: &Key) -> Result<GroupOptions, FirnError> {
        let policy = match (self.policy.as_deref(), self.key) {
            (None | Some("FIRST"), None) => DeliveryPolicy::First,
            (Some("ROUNDROBIN"), None) => DeliveryPolicy::RoundRobin,
            (Some("HRW"), key) => {
                DeliveryPolicy::Hrw(key.unwrap_or(GroupKey::Field(Bytes::from_static(b"key"))))
            }
            _ => return Err(syntax_error()),
        };
        let defaults = GroupOptions::default();
        let options = GroupOptions {
            policy,
            ack_wait_ms: self.ack_wait_ms,
            max_deliver: self.max_deliver,
            liveness_ms: self.liveness_ms.unwrap_or(defaults.liveness_ms),
        };
        options.check(stream)?;
        Ok(options)
    }
}

fn show_ok(response: Response) -> Reply {
    match response {
        Response::Done => Reply::Ok,
        other => unexpected("XGROUP", other),
    }
}

pub(super) fn show_count(response: Response) -> Reply {
    match response {
        Response::Count(n) => Reply::Int(n as i64),
        other => unexpected("XGROUP", other),
    }
}
