//! Keys that expire, as Redis 7 spells them: EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT (with NX,
//! XX, GT, LT), PERSIST, TTL, PTTL, EXPIRETIME, PEXPIRETIME and GETEX; and the options SET
//! shares with GETEX (EX, PX, EXAT, PXAT). An expiry changes no version: the key's value ends
//! then, and every read after sees it deleted (docs/architecture.md, "Keys that expire").

use firn_model::{
    ExpireIf, Expiry, FirnError, KeyExpiry, KvRead, KvWrite, Lifetime, ReadAt, ReadConsistency,
    Response, TxnStep,
};

use super::redis_integer;
use crate::resp::args::Args;
use crate::resp::command::{
    Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions, Render, unexpected,
};
use crate::resp::reply::Reply;

const EXPIRE_SPEC: CommandSpec = CommandSpec {
    name: "expire",
    arity: -3,
    flags: &[Flag::Write, Flag::Fast],
    keys: KeyPositions::FIRST,
    group: Group::Generic,
    since: FIRST_RELEASE,
    summary: "Sets the key's TTL in seconds (NX, XX, GT, LT); 1 if set, 0 if not.",
    parse: |args| expire(args, Unit::Seconds, false, "expire"),
};

pub const EXPIRE: CommandSpec = EXPIRE_SPEC;

pub const PEXPIRE: CommandSpec = CommandSpec {
    name: "pexpire",
    summary: "Sets the key's TTL in milliseconds (NX, XX, GT, LT); 1 if set, 0 if not.",
    parse: |args| expire(args, Unit::Millis, false, "pexpire"),
    ..EXPIRE_SPEC
};

pub const EXPIREAT: CommandSpec = CommandSpec {
    name: "expireat",
    summary: "Sets when the key ends, a Unix time in seconds (NX, XX, GT, LT).",
    parse: |args| expire(args, Unit::Seconds, true, "expireat"),
    ..EXPIRE_SPEC
};

pub const PEXPIREAT: CommandSpec = CommandSpec {
    name: "pexpireat",
    summary: "Sets when the key ends, a Unix time in milliseconds (NX, XX, GT, LT).",
    parse: |args| expire(args, Unit::Millis, true, "pexpireat"),
    ..EXPIRE_SPEC
};

pub const PERSIST: CommandSpec = CommandSpec {
    name: "persist",
    arity: 2,
    summary: "Removes the key's expiry (or lease); 1 if it had one, 0 if not.",
    parse: |mut args| {
        let write = KvWrite::Expire {
            key: args.key()?,
            to: Expiry::Never,
            only: ExpireIf::Always,
        };
        Ok(Action::execute(write, Render::new(show_set)))
    },
    ..EXPIRE_SPEC
};

const TTL_SPEC: CommandSpec = CommandSpec {
    name: "ttl",
    arity: 2,
    flags: &[Flag::ReadOnly, Flag::Fast],
    keys: KeyPositions::FIRST,
    group: Group::Generic,
    since: FIRST_RELEASE,
    summary: "Seconds the key has left; -1 without an expiry, -2 when it does not exist.",
    parse: |args| ttl(args, |r| show_ttl(r, |left_ms, _| (left_ms + 500) / 1_000)),
};

pub const TTL: CommandSpec = TTL_SPEC;

pub const PTTL: CommandSpec = CommandSpec {
    name: "pttl",
    summary: "Milliseconds the key has left; -1 without an expiry, -2 when it does not exist.",
    parse: |args| ttl(args, |r| show_ttl(r, |left_ms, _| left_ms)),
    ..TTL_SPEC
};

pub const EXPIRETIME: CommandSpec = CommandSpec {
    name: "expiretime",
    summary: "When the key ends, a Unix time in seconds; -1 without an expiry, -2 when absent.",
    parse: |args| ttl(args, |r| show_ttl(r, |_, at_ms| at_ms / 1_000)),
    ..TTL_SPEC
};

pub const PEXPIRETIME: CommandSpec = CommandSpec {
    name: "pexpiretime",
    summary: "When the key ends, a Unix time in milliseconds; -1 without an expiry, -2 when absent.",
    parse: |args| ttl(args, |r| show_ttl(r, |_, at_ms| at_ms)),
    ..TTL_SPEC
};

pub const GETEX: CommandSpec = CommandSpec {
    name: "getex",
    arity: -2,
    flags: &[Flag::Write, Flag::Fast],
    keys: KeyPositions::FIRST,
    group: Group::String,
    since: FIRST_RELEASE,
    summary: "The key's value, and sets its expiry (EX, PX, EXAT, PXAT) or removes it (PERSIST).",
    parse: getex,
};

#[derive(Clone, Copy)]
enum Unit {
    Seconds,
    Millis,
}

impl Unit {
    fn ms(self, n: i64) -> Option<i64> {
        match self {
            Unit::Seconds => n.checked_mul(1_000),
            Unit::Millis => Some(n),
        }
    }
}

fn invalid_expire_time(command: &str) -> FirnError {
    FirnError::BadArgument(format!("invalid expire time in '{command}' command"))
}

fn expire(mut args: Args, unit: Unit, absolute: bool, command: &str) -> Result<Action, FirnError> {
    let key = args.key()?;
    let n = redis_integer(&mut args)?;
    let mut only = ExpireIf::Always;
    while !args.is_empty() {
        let opt = args.keyword()?;
        let next = match opt.as_str() {
            "NX" => ExpireIf::NoExpiry,
            "XX" => ExpireIf::HasExpiry,
            "GT" => ExpireIf::Later,
            "LT" => ExpireIf::Sooner,
            _ => return Err(FirnError::BadArgument(format!("Unsupported option {opt}"))),
        };
        only = match (only, next) {
            (ExpireIf::Always, next) => next,
            (a, b) if a == b => a,
            (ExpireIf::NoExpiry, _) | (_, ExpireIf::NoExpiry) => {
                return Err(FirnError::BadArgument(
                    "NX and XX, GT or LT options at the same time are not compatible".into(),
                ));
            }
            (ExpireIf::Later | ExpireIf::Sooner, ExpireIf::Later | ExpireIf::Sooner) => {
                return Err(FirnError::BadArgument(
                    "GT and LT options at the same time are not compatible".into(),
                ));
            }
            (_, next) => next,
        };
    }
    let ms = unit
        .ms(n)
        .filter(|ms| ms.unsigned_abs() <= firn_model::limits::TTL_MS_MAX * 2)
        .ok_or_else(|| invalid_expire_time(command))?;
    let to = if absolute {
        Expiry::At { unix_ms: ms }
    } else {
        Expiry::In { ms }
    };
    let write = KvWrite::Expire { key, to, only };
    Ok(Action::execute(write, Render::new(show_set)))
}

fn show_set(response: Response) -> Reply {
    match response {
        Response::ExpirySet(set) => Reply::Int(set as i64),
        other => unexpected("EXPIRE", other),
    }
}

/// TTL and its kin, each showing the key's expiry its way.
fn ttl(mut args: Args, show: fn(Response) -> Reply) -> Result<Action, FirnError> {
    let read = KvRead::Expiry {
        key: args.key()?,
        consistency: ReadConsistency::Linearizable,
    };
    Ok(Action::execute(read, Render::new(show)))
}

/// -2 for a key that does not exist, -1 for one without an expiry (a key attached to a
/// lease has none of its own), else `show(ms left, expiry as Unix ms)`.
fn show_ttl(response: Response, show: fn(i64, i64) -> i64) -> Reply {
    match response {
        Response::Expiry(KeyExpiry::Absent) => Reply::Int(-2),
        Response::Expiry(KeyExpiry::Never | KeyExpiry::Lease(_)) => Reply::Int(-1),
        Response::Expiry(KeyExpiry::At(at)) => {
            let at_ms = (at.wall_us / 1_000) as i64;
            let now_ms = (firn_model::hlc::system_wall_us() / 1_000) as i64;
            Reply::Int(show((at_ms - now_ms).max(0), at_ms))
        }
        other => unexpected("TTL", other),
    }
}

/// An expiry option of SET or GETEX (`EX`, `PX`, `EXAT`, `PXAT`) and its argument, as
/// Redis checks them: a positive integer, within [`firn_model::limits::TTL_MS_MAX`].
pub fn expiry_option(opt: &str, args: &mut Args, command: &str) -> Result<Lifetime, FirnError> {
    if args.is_empty() {
        return Err(FirnError::BadArgument("syntax error".into()));
    }
    let n = redis_integer(args)?;
    let (unit, absolute) = match opt {
        "EX" => (Unit::Seconds, false),
        "PX" => (Unit::Millis, false),
        "EXAT" => (Unit::Seconds, true),
        "PXAT" => (Unit::Millis, true),
        _ => return Err(FirnError::BadArgument("syntax error".into())),
    };
    let ms = unit
        .ms(n)
        .filter(|ms| *ms > 0)
        .ok_or_else(|| invalid_expire_time(command))?;
    let ms = ms as u64;
    if absolute {
        Ok(Lifetime::Until { unix_ms: ms })
    } else if ms > firn_model::limits::TTL_MS_MAX {
        Err(invalid_expire_time(command))
    } else {
        Ok(Lifetime::For { ms })
    }
}

fn getex(mut args: Args) -> Result<Action, FirnError> {
    let key = args.key()?;
    let mut to = None;
    // Redis looks the key up before it checks the time: an absent key answers nil.
    let mut invalid_time = false;
    while !args.is_empty() {
        let opt = args.keyword()?;
        if to.is_some() || invalid_time {
            return Err(FirnError::BadArgument("syntax error".into()));
        }
        to = match opt.as_str() {
            "PERSIST" => Some(Expiry::Never),
            "EX" | "PX" | "EXAT" | "PXAT" => match expiry_option(&opt, &mut args, "getex") {
                Ok(Lifetime::For { ms }) => Some(Expiry::In { ms: ms as i64 }),
                Ok(Lifetime::Until { unix_ms }) => Some(Expiry::At {
                    unix_ms: unix_ms as i64,
                }),
                Ok(_) => unreachable!("an expiry option gives a time"),
                Err(FirnError::BadArgument(e)) if e.starts_with("invalid expire time") => {
                    invalid_time = true;
                    None
                }
                Err(e) => return Err(e),
            },
            _ => return Err(FirnError::BadArgument("syntax error".into())),
        };
    }
    let get = KvRead::Get {
        key: key.clone(),
        at: ReadAt::Latest,
        consistency: ReadConsistency::Linearizable,
    };
    if invalid_time {
        return Ok(Action::execute(
            get,
            Render::new(|response| match response {
                Response::Value(None) => Reply::Nil,
                _ => Reply::error(&invalid_expire_time("getex")),
            }),
        ));
    }
    let Some(to) = to else {
        return Ok(Action::execute(get, Render::new(show_value)));
    };
    // The value and the new expiry in one entry of the key's shard.
    let write = KvWrite::Atomic {
        compares: Vec::new(),
        steps: vec![
            TxnStep::Read(get),
            TxnStep::Write(KvWrite::Expire {
                key,
                to,
                only: ExpireIf::Always,
            }),
        ],
        otherwise: None,
    };
    Ok(Action::execute(
        write,
        Render::new(|response| match response {
            Response::Steps(Some(mut answers)) if !answers.is_empty() => {
                match answers.swap_remove(0) {
                    Ok(value) => show_value(value),
                    Err(e) => Reply::error(&e),
                }
            }
            other => unexpected("GETEX", other),
        }),
    ))
}

fn show_value(response: Response) -> Reply {
    match response {
        Response::Value(v) => v.and_then(|i| i.value).map_or(Reply::Nil, Reply::Bulk),
        other => unexpected("GETEX", other),
    }
}
