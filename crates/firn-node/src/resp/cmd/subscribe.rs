//! SUBSCRIBE, PSUBSCRIBE, UNSUBSCRIBE, PUNSUBSCRIBE and RESET: this connection's
//! subscriptions (held by `resp/subscribed.rs` in the node's registry, `crate::pubsub`) and
//! the confirmations and messages as Redis sends them.

use bytes::Bytes;
use firn_model::FirnError;

use crate::pubsub::{Delivery, Kind};
use crate::resp::args::Args;
use crate::resp::command::{Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions};
use crate::resp::reply::Reply;

/// What a publish/subscribe command asks of the connection.
pub enum PubSubAction {
    Subscribe(Kind, Vec<Bytes>),
    /// No names: every channel (or pattern) subscribed to.
    Unsubscribe(Kind, Vec<Bytes>),
    Publish {
        channel: Bytes,
        message: Bytes,
    },
    Query(super::publish::PubSubQuery),
    /// RESET: no subscriptions, RESP2, no name.
    Reset,
}

const fn spec(
    name: &'static str,
    arity: i64,
    summary: &'static str,
    parse: fn(Args) -> Result<Action, FirnError>,
) -> CommandSpec {
    CommandSpec {
        name,
        arity,
        flags: &[Flag::PubSub],
        keys: KeyPositions::NONE,
        group: Group::PubSub,
        since: FIRST_RELEASE,
        summary,
        parse,
    }
}

pub const SUBSCRIBE: CommandSpec = spec(
    "subscribe",
    -2,
    "Listens for messages published to the given channels, at any node.",
    |args| Ok(subscribe(Kind::Channel, args)),
);

pub const PSUBSCRIBE: CommandSpec = spec(
    "psubscribe",
    -2,
    "Listens for messages published to channels matching the given glob patterns.",
    |args| Ok(subscribe(Kind::Pattern, args)),
);

pub const UNSUBSCRIBE: CommandSpec = spec(
    "unsubscribe",
    -1,
    "Stops listening to the given channels, or to all.",
    |args| Ok(unsubscribe(Kind::Channel, args)),
);

pub const PUNSUBSCRIBE: CommandSpec = spec(
    "punsubscribe",
    -1,
    "Stops listening to the given patterns, or to all.",
    |args| Ok(unsubscribe(Kind::Pattern, args)),
);

pub const RESET: CommandSpec = CommandSpec {
    name: "reset",
    arity: 1,
    flags: &[Flag::Fast],
    keys: KeyPositions::NONE,
    group: Group::Connection,
    since: FIRST_RELEASE,
    summary: "Ends the connection's subscriptions, returns it to RESP2 and clears its name.",
    parse: |_| Ok(Action::PubSub(PubSubAction::Reset)),
};

fn subscribe(kind: Kind, mut args: Args) -> Action {
    Action::PubSub(PubSubAction::Subscribe(kind, args.rest()))
}

fn unsubscribe(kind: Kind, mut args: Args) -> Action {
    Action::PubSub(PubSubAction::Unsubscribe(kind, args.rest()))
}

/// `[subscribe|psubscribe, name, count]`.
pub fn subscribed_reply(kind: Kind, name: Bytes, count: usize) -> Reply {
    let word = match kind {
        Kind::Channel => "subscribe",
        Kind::Pattern => "psubscribe",
    };
    Reply::Push(vec![
        Reply::text(word),
        Reply::Bulk(name),
        Reply::Int(count as i64),
    ])
}

/// `[unsubscribe|punsubscribe, name or nil, count]` (nil when there was nothing to leave).
pub fn unsubscribed_reply(kind: Kind, name: Option<Bytes>, count: usize) -> Reply {
    let word = match kind {
        Kind::Channel => "unsubscribe",
        Kind::Pattern => "punsubscribe",
    };
    Reply::Push(vec![
        Reply::text(word),
        name.map_or(Reply::Nil, Reply::Bulk),
        Reply::Int(count as i64),
    ])
}

/// `[message, channel, payload]` or `[pmessage, pattern, channel, payload]`.
pub fn delivery_reply(d: Delivery) -> Reply {
    match d.pattern {
        None => Reply::Push(vec![
            Reply::text("message"),
            Reply::Bulk(d.channel),
            Reply::Bulk(d.message),
        ]),
        Some(p) => Reply::Push(vec![
            Reply::text("pmessage"),
            Reply::Bulk(p),
            Reply::Bulk(d.channel),
            Reply::Bulk(d.message),
        ]),
    }
}

/// Redis's refusal of other commands on a RESP2 connection that is subscribed.
pub fn only_pubsub_error(name: &str) -> Reply {
    Reply::Error(format!(
        "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
        name.to_lowercase()
    ))
}

/// Whether a RESP2 connection that is subscribed accepts `name` (upper case).
pub fn allowed_while_subscribed(name: &str) -> bool {
    matches!(
        name,
        "SUBSCRIBE" | "PSUBSCRIBE" | "UNSUBSCRIBE" | "PUNSUBSCRIBE" | "PING" | "QUIT" | "RESET"
    )
}

/// PING on a subscribed RESP2 connection: `[pong, message or ""]`, as Redis answers it.
pub fn subscribed_pong(message: Option<Bytes>) -> Reply {
    Reply::Array(vec![
        Reply::text("pong"),
        Reply::Bulk(message.unwrap_or_default()),
    ])
}

impl PubSubAction {
    /// A channel is under its own name: subscribing reads it (a pattern: everything under its
    /// literal start), publishing writes it.
    pub fn access(&self) -> Vec<firn_model::Access> {
        use firn_model::{Access, Scope};
        match self {
            PubSubAction::Subscribe(Kind::Channel, names) => names
                .iter()
                .map(|n| Access::read(Scope::Key(n.clone())))
                .collect(),
            PubSubAction::Subscribe(Kind::Pattern, patterns) => patterns
                .iter()
                .map(|p| Access::read(Scope::Prefix(firn_model::request::access::glob_prefix(p))))
                .collect(),
            PubSubAction::Publish { channel, .. } => {
                vec![Access::write(Scope::Key(channel.clone()))]
            }
            PubSubAction::Unsubscribe(..) | PubSubAction::Query(_) | PubSubAction::Reset => {
                Vec::new()
            }
        }
    }
}
