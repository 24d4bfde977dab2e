//! SET key value [NX|XX|IFEQ v] [GET] [EX s|PX ms|EXAT t|PXAT t|KEEPTTL|LEASE id]: a Redis
//! write, conditional on presence or on the value (IFEQ, Redis 8.4: a one-key transaction
//! comparing the value), with an expiry or attached to a lease; GETSET and SETNX, its older
//! spellings.

use bytes::Bytes;
use firn_model::{
    Compare, CompareOp, CompareTarget, FirnError, KvRead, KvWrite, Lifetime, PutRequest, ReadAt,
    ReadConsistency, Response, TxnStep, WriteCondition,
};

use super::expire::expiry_option;
use crate::resp::args::Args;
use crate::resp::command::{
    Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions, Render, unexpected,
};
use crate::resp::reply::Reply;

pub const SET: CommandSpec = CommandSpec {
    name: "set",
    arity: -3,
    flags: &[Flag::Write],
    keys: KeyPositions::FIRST,
    group: Group::String,
    since: FIRST_RELEASE,
    summary: "Writes a new version of the key; NX, XX, IFEQ, GET, EX, PX, EXAT, PXAT and KEEPTTL as in Redis; LEASE id attaches it to a lease.",
    parse: set,
};

pub const GETSET: CommandSpec = CommandSpec {
    name: "getset",
    arity: 3,
    summary: "SET key value GET: writes the value and answers the one it replaced, or nil.",
    parse: |mut args| {
        let mut put = PutRequest::new(args.key()?, args.bytes()?);
        put.return_previous = true;
        Ok(Action::execute(
            KvWrite::Put(put),
            Render::new(show_previous),
        ))
    },
    ..SET
};

pub const SETNX: CommandSpec = CommandSpec {
    name: "setnx",
    arity: 3,
    summary: "SET key value NX: 1 if the key was written, 0 if it existed.",
    parse: |mut args| {
        let mut put = PutRequest::new(args.key()?, args.bytes()?);
        put.condition = WriteCondition::IfVersion(0);
        Ok(Action::execute(
            KvWrite::Put(put),
            Render::new(|response| match response {
                Response::Written(_) => Reply::Int(1),
                other => unexpected("SETNX", other),
            })
            .errors_as(|e| match e {
                FirnError::Conflict { .. } => Reply::Int(0),
                e => Reply::error(&e),
            }),
        ))
    },
    ..SET
};

fn set(mut args: Args) -> Result<Action, FirnError> {
    let key = args.key()?;
    let value = args.bytes()?;
    let mut put = PutRequest::new(key, value);
    let mut if_equal: Option<Bytes> = None;
    while !args.is_empty() {
        let opt = args.keyword()?;
        match opt.as_str() {
            "NX" | "XX" | "IFEQ"
                if put.condition != WriteCondition::Always || if_equal.is_some() =>
            {
                return Err(FirnError::BadArgument("syntax error".into()));
            }
            "NX" => put.condition = WriteCondition::IfVersion(0),
            "XX" => put.condition = WriteCondition::IfPresent,
            "IFEQ" => if_equal = Some(args.bytes()?),
            "GET" => put.return_previous = true,
            "EX" | "PX" | "EXAT" | "PXAT" | "KEEPTTL" | "LEASE"
                if put.life != Lifetime::Default =>
            {
                return Err(FirnError::BadArgument("syntax error".into()));
            }
            "EX" | "PX" | "EXAT" | "PXAT" => put.life = expiry_option(&opt, &mut args, "set")?,
            "KEEPTTL" => put.life = Lifetime::Kept,
            "LEASE" => put.life = Lifetime::Lease(args.u64("LEASE")?),
            // Redis says no more than this for an option it does not know.
            _ => return Err(FirnError::BadArgument("syntax error".into())),
        }
    }
    if let Some(expected) = if_equal {
        return Ok(set_if_equal(put, expected));
    }
    let show = if put.return_previous {
        show_previous
    } else {
        show_ok
    };
    Ok(Action::execute(
        KvWrite::Put(put),
        Render::new(show).errors_as(conflict_is_nil),
    ))
}

fn show_ok(response: Response) -> Reply {
    match response {
        Response::Written(_) => Reply::Ok,
        other => unexpected("SET", other),
    }
}

/// SET … GET: the value the key had.
fn show_previous(response: Response) -> Reply {
    match response {
        Response::Written(w) => w
            .first()
            .and_then(|w| w.previous.as_ref())
            .and_then(|p| p.value.clone())
            .map_or(Reply::Nil, Reply::Bulk),
        other => unexpected("SET", other),
    }
}

/// SET NX / XX whose condition fails answers nil, as Redis does.
fn conflict_is_nil(e: FirnError) -> Reply {
    match e {
        FirnError::Conflict { .. } => Reply::Nil,
        e => Reply::error(&e),
    }
}

/// SET … IFEQ v: the write runs only while the key's value is `v` (a transaction of one key:
/// compare, then write). Without GET, OK or nil (not written); with GET, the value the key
/// had either way.
fn set_if_equal(put: PutRequest, expected: Bytes) -> Action {
    let key = put.key.clone();
    let with_get = put.return_previous;
    let read = TxnStep::Read(KvRead::Get {
        key: key.clone(),
        at: ReadAt::Latest,
        consistency: ReadConsistency::Linearizable,
    });
    let write = KvWrite::Atomic {
        compares: vec![Compare {
            key,
            target: CompareTarget::Value(expected),
            op: CompareOp::Eq,
        }],
        steps: vec![TxnStep::Write(KvWrite::Put(put))],
        otherwise: Some(if with_get { vec![read] } else { Vec::new() }),
    };
    let show = if with_get {
        show_if_equal_get
    } else {
        show_if_equal
    };
    Action::execute(write, Render::new(show))
}

/// SET … IFEQ: OK when written, nil when not.
fn show_if_equal(response: Response) -> Reply {
    match response {
        Response::Branch {
            succeeded: true, ..
        } => Reply::Ok,
        Response::Branch { .. } => Reply::Nil,
        other => unexpected("SET", other),
    }
}

/// SET … IFEQ … GET: the value the key had, written or not.
fn show_if_equal_get(response: Response) -> Reply {
    let Response::Branch { succeeded, steps } = response else {
        return unexpected("SET", response);
    };
    match steps.into_iter().next() {
        Some(Ok(answer)) if succeeded => show_previous(answer),
        Some(Ok(Response::Value(found))) => {
            found.and_then(|v| v.value).map_or(Reply::Nil, Reply::Bulk)
        }
        Some(Err(e)) => Reply::error(&e),
        Some(Ok(other)) => unexpected("SET", other),
        None => unexpected("SET", Response::Done),
    }
}
