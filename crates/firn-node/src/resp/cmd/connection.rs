//! Connection commands: PING, ECHO, QUIT, HELLO, AUTH, ACL WHOAMI, SELECT, CLIENT. They answer from the
//! connection alone and never reach the router.

use firn_model::FirnError;

use super::{REDIS_COMPAT_VERSION, exact_arity, unknown_subcommand};
use crate::resp::args::Args;
use crate::resp::client::Client;
use crate::resp::command::{Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions};
use crate::resp::reply::{Reply, answered};

pub const PING: CommandSpec = CommandSpec {
    name: "ping",
    arity: -1,
    flags: &[Flag::Fast],
    keys: KeyPositions::NONE,
    group: Group::Connection,
    since: FIRST_RELEASE,
    summary: "Returns PONG, or the message given.",
    parse: ping,
};

pub const ECHO: CommandSpec = CommandSpec {
    name: "echo",
    arity: 2,
    flags: &[Flag::Fast],
    keys: KeyPositions::NONE,
    group: Group::Connection,
    since: FIRST_RELEASE,
    summary: "Returns the given string.",
    parse: echo,
};

pub const QUIT: CommandSpec = CommandSpec {
    name: "quit",
    arity: -1,
    flags: &[Flag::Fast],
    keys: KeyPositions::NONE,
    group: Group::Connection,
    since: FIRST_RELEASE,
    summary: "Answers OK and closes the connection.",
    parse: |_| Ok(quit()),
};

pub const HELLO: CommandSpec = CommandSpec {
    name: "hello",
    arity: -1,
    flags: &[Flag::Fast],
    keys: KeyPositions::NONE,
    group: Group::Connection,
    since: FIRST_RELEASE,
    summary: "Switches the protocol (2 or 3), names the connection, and with AUTH signs in.",
    parse: hello,
};

pub const AUTH: CommandSpec = CommandSpec {
    name: "auth",
    arity: -2,
    flags: &[Flag::Fast],
    keys: KeyPositions::NONE,
    group: Group::Connection,
    since: FIRST_RELEASE,
    summary: "Signs in as a user (without a user: default); accepted as is on a node without users.",
    parse: auth,
};

pub const SELECT: CommandSpec = CommandSpec {
    name: "select",
    arity: 2,
    flags: &[Flag::Fast],
    keys: KeyPositions::NONE,
    group: Group::Connection,
    since: FIRST_RELEASE,
    summary: "Selects database 0, the only one.",
    parse: select,
};

pub const CLIENT: CommandSpec = CommandSpec {
    name: "client",
    arity: -2,
    flags: &[],
    keys: KeyPositions::NONE,
    group: Group::Connection,
    since: FIRST_RELEASE,
    summary: "CLIENT SETNAME, GETNAME, ID and SETINFO.",
    parse: client,
};

fn ping(mut args: Args) -> Result<Action, FirnError> {
    match args.len() {
        0 => Ok(Action::Reply(Reply::Simple("PONG".into()))),
        1 => Ok(Action::Reply(Reply::Bulk(args.bytes()?))),
        _ => Err(FirnError::WrongArity("ping".into())),
    }
}

fn echo(mut args: Args) -> Result<Action, FirnError> {
    Ok(Action::Reply(Reply::Bulk(args.bytes()?)))
}

fn hello(mut args: Args) -> Result<Action, FirnError> {
    let proto = if args.is_empty() {
        None
    } else {
        match args.text()?.as_str() {
            "2" => Some(2),
            "3" => Some(3),
            _ => {
                return Ok(Action::Reply(Reply::Error(
                    "NOPROTO unsupported protocol version".into(),
                )));
            }
        }
    };
    let mut setname = None;
    let mut auth: Option<(bytes::Bytes, bytes::Bytes)> = None;
    while !args.is_empty() {
        match args.keyword()?.as_str() {
            "AUTH" => auth = Some((args.bytes()?, args.bytes()?)),
            "SETNAME" => setname = Some(args.bytes()?),
            other => {
                return Err(FirnError::BadArgument(format!(
                    "syntax error in HELLO near '{other}'"
                )));
            }
        }
    }
    let signs_in = auth.is_some();
    // Signing in first: a failed sign-in changes nothing else.
    let apply = move |client: &mut Client| {
        if let Some((user, password)) = auth
            && let Err(e) = client.sign_in(Some(user), &password)
        {
            return Reply::error(&e);
        }
        if let Some(p) = proto {
            client.proto = p;
        }
        if let Some(name) = setname {
            client.session.set_name(name);
        }
        hello_reply(client.proto, client.id)
    };
    Ok(match signs_in {
        true => Action::client_before_sign_in(apply),
        false => Action::client(apply),
    })
}

/// QUIT: OK, and the connection closes once the answers before it are written.
fn quit() -> Action {
    Action::client_before_sign_in(|client| {
        client.closing = true;
        Reply::Ok
    })
}

/// What HELLO answers, once the connection has switched.
pub fn hello_reply(proto: u8, client_id: u64) -> Reply {
    Reply::Map(vec![
        (Reply::text("server"), Reply::text("redis")),
        (Reply::text("version"), Reply::text(REDIS_COMPAT_VERSION)),
        (Reply::text("proto"), Reply::Int(proto as i64)),
        (Reply::text("id"), Reply::Int(client_id as i64)),
        (Reply::text("mode"), Reply::text("standalone")),
        (Reply::text("role"), Reply::text("master")),
        (Reply::text("modules"), Reply::Array(vec![])),
        (
            Reply::text("firn_version"),
            Reply::text(env!("CARGO_PKG_VERSION")),
        ),
    ])
}

fn auth(mut args: Args) -> Result<Action, FirnError> {
    let user = match args.len() {
        1 => None,
        2 => Some(args.bytes()?),
        _ => return Err(FirnError::WrongArity("auth".into())),
    };
    let password = args.bytes()?;
    Ok(Action::client_before_sign_in(move |client| {
        answered(client.sign_in(user, &password))
    }))
}

pub const ACL: CommandSpec = CommandSpec {
    name: "acl",
    arity: -2,
    flags: &[],
    keys: KeyPositions::NONE,
    group: Group::Server,
    since: FIRST_RELEASE,
    summary: "ACL WHOAMI: the user this connection acts for.",
    parse: acl,
};

fn acl(mut args: Args) -> Result<Action, FirnError> {
    let sub = args.keyword()?;
    match sub.as_str() {
        "WHOAMI" => {
            exact_arity(&args, 0)?;
            Ok(Action::client(|client| {
                match client.session.principal().name() {
                    Ok(name) => Reply::Bulk(name.to_string().into()),
                    Err(e) => Reply::error(&e),
                }
            }))
        }
        _ => Err(unknown_subcommand("acl", &sub)),
    }
}

fn select(mut args: Args) -> Result<Action, FirnError> {
    match args.text()?.as_str() {
        "0" => Ok(Action::Reply(Reply::Ok)),
        _ => Err(FirnError::BadArgument(
            "DB index is out of range (Firn has one database, 0)".into(),
        )),
    }
}

fn client(mut args: Args) -> Result<Action, FirnError> {
    let sub = args.keyword()?;
    match sub.as_str() {
        "SETNAME" => {
            exact_arity(&args, 1)?;
            let name = args.bytes()?;
            Ok(Action::client(move |client| {
                client.session.set_name(name);
                Reply::Ok
            }))
        }
        "GETNAME" => Ok(Action::client(|client| {
            client
                .session
                .name()
                .cloned()
                .map_or(Reply::Nil, Reply::Bulk)
        })),
        "ID" => Ok(Action::client(|client| Reply::Int(client.id as i64))),
        // Client libraries announce themselves (redis-py, go-redis); nothing to keep.
        "SETINFO" => Ok(Action::Reply(Reply::Ok)),
        _ => Err(unknown_subcommand("client", &sub)),
    }
}
