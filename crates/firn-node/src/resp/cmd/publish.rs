//! PUBLISH (this node's subscribers and every other node's, see `pubsub/`) and
//! PUBSUB CHANNELS | NUMSUB | NUMPAT, which answer for this node alone.

use bytes::Bytes;
use firn_model::FirnError;

use super::subscribe::PubSubAction;
use super::unknown_subcommand;
use crate::pubsub::PubSub;
use crate::resp::args::Args;
use crate::resp::command::{Action, CommandSpec, FIRST_RELEASE, Flag, Group, KeyPositions};
use crate::resp::reply::Reply;

pub const PUBLISH: CommandSpec = CommandSpec {
    name: "publish",
    arity: 3,
    flags: &[Flag::PubSub, Flag::Fast],
    keys: KeyPositions::NONE,
    group: Group::PubSub,
    since: FIRST_RELEASE,
    summary: "Sends a message to a channel's subscribers at every node; answers how many received it.",
    parse: publish,
};

pub const PUBSUB: CommandSpec = CommandSpec {
    name: "pubsub",
    arity: -2,
    flags: &[Flag::PubSub],
    keys: KeyPositions::NONE,
    group: Group::PubSub,
    since: FIRST_RELEASE,
    summary: "PUBSUB CHANNELS [pattern], NUMSUB [channel…], NUMPAT: this node's subscriptions.",
    parse: pubsub,
};

/// What PUBSUB asks about this node's subscriptions.
pub enum PubSubQuery {
    Channels(Option<Bytes>),
    NumSub(Vec<Bytes>),
    NumPat,
}

fn publish(mut args: Args) -> Result<Action, FirnError> {
    let channel = args.bytes()?;
    let message = args.bytes()?;
    Ok(Action::PubSub(PubSubAction::Publish { channel, message }))
}

fn pubsub(mut args: Args) -> Result<Action, FirnError> {
    let sub = args.keyword()?;
    let query = match sub.as_str() {
        "CHANNELS" if args.len() <= 1 => PubSubQuery::Channels(args.rest().pop()),
        "NUMSUB" => PubSubQuery::NumSub(args.rest()),
        "NUMPAT" if args.is_empty() => PubSubQuery::NumPat,
        "CHANNELS" | "NUMPAT" => {
            return Err(FirnError::WrongArity(
                "pubsub|".to_string() + &sub.to_lowercase(),
            ));
        }
        _ => return Err(unknown_subcommand("pubsub", &sub)),
    };
    Ok(Action::PubSub(PubSubAction::Query(query)))
}

/// PUBSUB's answer from this node's registry.
pub fn query_reply(query: PubSubQuery, registry: &PubSub) -> Reply {
    match query {
        PubSubQuery::Channels(pattern) => Reply::Array(
            registry
                .channels(pattern.as_deref())
                .into_iter()
                .map(Reply::Bulk)
                .collect(),
        ),
        // A flat array in RESP3 too, as Redis answers it.
        PubSubQuery::NumSub(channels) => Reply::Array(
            channels
                .into_iter()
                .flat_map(|c| {
                    let n = registry.subscribers(&c);
                    [Reply::Bulk(c), Reply::Int(n as i64)]
                })
                .collect(),
        ),
        PubSubQuery::NumPat => Reply::Int(registry.patterns() as i64),
    }
}
