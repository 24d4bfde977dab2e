//! MQTT 5.0 topic aliases, client to server (5.0, 3.3.2.3.4): a PUBLISH that sets alias N
//! names its topic, and later PUBLISHes on the same connection may send alias N and an
//! empty topic instead. The CONNACK announces [`TOPIC_ALIAS_MAX`]; an alias of 0 or above
//! it, or an empty topic with an alias not set, is a protocol error that closes the
//! connection (DISCONNECT `Topic Alias invalid`). Firn sends no aliases itself (a server may
//! send none): every delivery names its topic.

use std::collections::HashMap;

use firn_model::limits::KEY_BYTES_MAX;

/// The most aliases a client may set per connection (announced in the CONNACK): 1 to this.
pub const TOPIC_ALIAS_MAX: u16 = 64;
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

#[cfg(test)]
mod tests {
    use super::*;

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
