//! MQTT 5.0 topic aliases (3.3.2.3.4): a PUBLISH that sets alias N names its topic, and
//! later PUBLISHes on the same connection may send alias N and an empty topic instead.
//! Each way has its own aliases. Client to server ([`TopicAliases`]): the CONNACK announces
//! [`TOPIC_ALIAS_MAX`]; an alias of 0 or above it, or an empty topic with an alias not set,
//! is a protocol error that closes the connection (DISCONNECT `Topic Alias invalid`).
//! Server to client ([`SentAliases`]): as many as the client's CONNECT allows, at most
//! [`SENT_ALIASES_MAX`], given to the first topics delivered and kept for the connection.

use std::collections::HashMap;

use firn_model::limits::KEY_BYTES_MAX;

/// The most aliases a client may set per connection (announced in the CONNACK): 1 to this.
pub const TOPIC_ALIAS_MAX: u16 = 64;
/// The most aliases this server sets on a connection, whatever the client allows: with
/// [`ALIASED_TOPIC_BYTES_MAX`], at most 512 KiB of topics a connection.
pub const SENT_ALIASES_MAX: u16 = 64;
/// The longest topic an alias keeps: a longer one cannot be a key, so a PUBLISH to it is
/// refused whatever its alias. With [`TOPIC_ALIAS_MAX`], a connection's aliases hold at
/// most 512 KiB.
const ALIASED_TOPIC_BYTES_MAX: usize = KEY_BYTES_MAX;

/// Why a PUBLISH's alias is a protocol error.
#[derive(Debug, PartialEq, Eq)]
pub enum AliasInvalid {
    /// 0, or above [`TOPIC_ALIAS_MAX`].
    OutOfRange(u16),
    /// An empty topic with an alias this connection's client has not set.
    NotSet(u16),
}

impl std::fmt::Display for AliasInvalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AliasInvalid::OutOfRange(n) => write!(
                f,
                "Topic Alias {n} is invalid: an alias is 1 to {TOPIC_ALIAS_MAX}"
            ),
            AliasInvalid::NotSet(n) => write!(
                f,
                "Topic Alias {n} with an empty topic: the alias was not set on this connection"
            ),
        }
    }
}

/// The aliases one connection's client has set: alias → topic.
#[derive(Debug, Default)]
pub struct TopicAliases {
    topics: HashMap<u16, String>,
}

impl TopicAliases {
    /// The topic a PUBLISH is to: `topic` when it names one (and from now on alias `alias`
    /// stands for it, if the PUBLISH sets one), or the topic `alias` was set to.
    pub fn resolve(&mut self, topic: String, alias: Option<u16>) -> Result<String, AliasInvalid> {
        let Some(alias) = alias else {
            return Ok(topic);
        };
        if alias == 0 || alias > TOPIC_ALIAS_MAX {
            return Err(AliasInvalid::OutOfRange(alias));
        }
        if topic.is_empty() {
            return self
                .topics
                .get(&alias)
                .cloned()
                .ok_or(AliasInvalid::NotSet(alias));
        }
        if topic.len() <= ALIASED_TOPIC_BYTES_MAX {
            self.topics.insert(alias, topic.clone());
        } else {
            // Not kept (see `ALIASED_TOPIC_BYTES_MAX`); one it stood for before is dropped,
            // as the client set the alias anew.
            self.topics.remove(&alias);
        }
        Ok(topic)
    }
}

/// The aliases this server sets on one connection: topic → alias. The first topics
/// delivered get one, up to the limit, and keep it: a topic's first delivery sets its
/// alias, every later one sends the alias and an empty topic. Topics past the limit go in
/// full (no alias is set anew: the client's topics tend to be few, and a steady mapping
/// costs nothing to keep).
#[derive(Debug, Default)]
pub struct SentAliases {
    max: u16,
    aliases: HashMap<String, u16>,
}

impl SentAliases {
    /// For a client whose CONNECT said Topic Alias Maximum `client_max` (0: none).
    pub fn new(client_max: u16) -> Self {
        SentAliases {
            max: client_max.min(SENT_ALIASES_MAX),
            aliases: HashMap::new(),
        }
    }

    /// The topic and the alias a delivery to `topic` goes with: the topic and a new alias
    /// (set now), an empty topic and the alias set before, or the topic alone.
    pub fn name(&mut self, topic: String) -> (String, Option<u16>) {
        if let Some(&alias) = self.aliases.get(&topic) {
            return (String::new(), Some(alias));
        }
        let next = u16::try_from(self.aliases.len() + 1).unwrap_or(u16::MAX);
        if next > self.max || topic.is_empty() || topic.len() > ALIASED_TOPIC_BYTES_MAX {
            return (topic, None);
        }
        self.aliases.insert(topic.clone(), next);
        (topic, Some(next))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_topics_sent_get_an_alias_up_to_the_clients_maximum_and_keep_it() {
        let mut sent = SentAliases::new(2);
        assert_eq!(sent.name("a".into()), ("a".into(), Some(1)));
        assert_eq!(sent.name("a".into()), (String::new(), Some(1)));
        assert_eq!(sent.name("b".into()), ("b".into(), Some(2)));
        // Past the client's maximum: in full, every time.
        assert_eq!(sent.name("c".into()), ("c".into(), None));
        assert_eq!(sent.name("c".into()), ("c".into(), None));
        assert_eq!(sent.name("b".into()), (String::new(), Some(2)));
        // A client that allows none gets none; one that allows more gets SENT_ALIASES_MAX.
        assert_eq!(SentAliases::new(0).name("a".into()), ("a".into(), None));
        let mut many = SentAliases::new(u16::MAX);
        for i in 0..SENT_ALIASES_MAX {
            assert_eq!(many.name(format!("t{i}")).1, Some(i + 1));
        }
        assert_eq!(many.name("one more".into()).1, None);
        // A topic longer than a key is not kept.
        let long = "t".repeat(ALIASED_TOPIC_BYTES_MAX + 1);
        assert_eq!(SentAliases::new(4).name(long.clone()), (long, None));
    }

    #[test]
    fn an_alias_set_with_a_topic_names_it_in_later_publishes() {
        let mut aliases = TopicAliases::default();
        assert_eq!(aliases.resolve("a/b".into(), Some(1)), Ok("a/b".into()));
        assert_eq!(aliases.resolve(String::new(), Some(1)), Ok("a/b".into()));
        // Set again: the alias names the new topic.
        assert_eq!(aliases.resolve("c".into(), Some(1)), Ok("c".into()));
        assert_eq!(aliases.resolve(String::new(), Some(1)), Ok("c".into()));
        assert_eq!(
            aliases.resolve("d".into(), Some(TOPIC_ALIAS_MAX)),
            Ok("d".into())
        );
        assert_eq!(
            aliases.resolve(String::new(), Some(TOPIC_ALIAS_MAX)),
            Ok("d".into())
        );
        // Without an alias, a topic is its own (an empty one is left to the topic check).
        assert_eq!(aliases.resolve("e".into(), None), Ok("e".into()));
        assert_eq!(aliases.resolve(String::new(), None), Ok(String::new()));
    }

    #[test]
    fn an_alias_out_of_range_or_not_set_is_invalid() {
        let mut aliases = TopicAliases::default();
        assert_eq!(
            aliases.resolve("a".into(), Some(0)),
            Err(AliasInvalid::OutOfRange(0))
        );
        assert_eq!(
            aliases.resolve("a".into(), Some(TOPIC_ALIAS_MAX + 1)),
            Err(AliasInvalid::OutOfRange(TOPIC_ALIAS_MAX + 1))
        );
        assert_eq!(
            aliases.resolve(String::new(), Some(2)),
            Err(AliasInvalid::NotSet(2))
        );
        // One out of range set nothing.
        assert_eq!(
            aliases.resolve(String::new(), Some(TOPIC_ALIAS_MAX + 1)),
            Err(AliasInvalid::OutOfRange(TOPIC_ALIAS_MAX + 1))
        );
    }

    #[test]
    fn a_topic_longer_than_a_key_is_not_kept_by_its_alias() {
        let mut aliases = TopicAliases::default();
        aliases.resolve("short".into(), Some(3)).unwrap();
        let long = "t".repeat(ALIASED_TOPIC_BYTES_MAX + 1);
        assert_eq!(aliases.resolve(long.clone(), Some(3)), Ok(long));
        assert_eq!(
            aliases.resolve(String::new(), Some(3)),
            Err(AliasInvalid::NotSet(3))
        );
    }
}
