//! A connection's publish/subscribe side: its subscriptions (a [`Subscriber`] in the node's
//! registry, made on the first SUBSCRIBE and dropped with the last UNSUBSCRIBE), the
//! messages it is sent, and what RESP2 allows while it is subscribed. In RESP3 messages are
//! push frames between replies, and every command keeps working.

use bytes::Bytes;
use firn_model::FirnError;

use super::cmd::publish;
use super::cmd::subscribe::{self, PubSubAction};
use super::reply::Reply;
use super::{Connection, Queued};
use crate::pubsub::{Delivery, Kind, SUBSCRIPTIONS_PER_CONNECTION_MAX, Subscriber};

impl Connection {
    /// What a subscribed RESP2 connection answers instead of running `name`: Redis's
    /// refusal, or PING's `[pong, …]`. `None` runs it as usual.
    pub(super) fn instead_while_subscribed(
        &self,
        name: &str,
        items: &std::collections::VecDeque<Bytes>,
    ) -> Option<Reply> {
        if self.client.proto >= 3 || self.subscriber.is_none() {
            return None;
        }
        if name == "PING" && items.len() <= 1 {
            return Some(subscribe::subscribed_pong(items.front().cloned()));
        }
        if subscribe::allowed_while_subscribed(name) {
            return None;
        }
        // An unknown command is still unknown, as in Redis.
        if !super::registry::knows(name) {
            return Some(Reply::error(&super::registry::unknown_command(name, items)));
        }
        Some(subscribe::only_pubsub_error(name))
    }

    /// Messages already queued for this connection go out before the answer to anything it
    /// sends now: a message a PUBLISH counted is never lost to an UNSUBSCRIBE (or RESET)
    /// the subscriber sends after it, nor shown after that command's answer.
    pub(super) fn take_delivered(&mut self) {
        let Some(subscriber) = self.subscriber.as_mut() else {
            return;
        };
        while let Some(d) = subscriber.try_next() {
            self.queue
                .push_back(Queued::Ready(subscribe::delivery_reply(d)));
        }
    }

    pub(super) async fn pubsub(&mut self, action: PubSubAction) {
        match action {
            PubSubAction::Subscribe(kind, names) => {
                let subscriber = self
                    .subscriber
                    .get_or_insert_with(|| self.shared.router.publisher().pubsub().subscriber());
                for name in names {
                    let reply = if subscriber.subscribe(kind, name.clone()) {
                        subscribe::subscribed_reply(kind, name, subscriber.count())
                    } else {
                        Reply::error(&FirnError::BadArgument(format!(
                            "a connection may hold at most {SUBSCRIPTIONS_PER_CONNECTION_MAX} subscriptions"
                        )))
                    };
                    self.queue.push_back(Queued::Ready(reply));
                }
            }
            PubSubAction::Unsubscribe(kind, names) => self.unsubscribe(kind, names),
            PubSubAction::Publish { channel, message } => {
                // In order: the answers before it are sent first.
                self.drain().await;
                let reply = match self
                    .shared
                    .router
                    .publisher()
                    .publish(channel, message)
                    .await
                {
                    Ok(receivers) => Reply::Int(receivers as i64),
                    Err(e) => Reply::error(&e),
                };
                self.queue.push_back(Queued::Ready(reply));
            }
            PubSubAction::Query(query) => {
                let reply = publish::query_reply(query, self.shared.router.publisher().pubsub());
                self.queue.push_back(Queued::Ready(reply));
            }
            PubSubAction::Reset => {
                self.subscriber = None;
                self.multi = None;
                self.watched.clear();
                self.client.proto = 2;
                self.client.session.set_name(Bytes::new());
                self.queue
                    .push_back(Queued::Ready(Reply::Simple("RESET".into())));
            }
        }
    }

    /// Each name answers once (with the count left); no name and nothing subscribed to of
    /// the kind answers once, with a nil name — as Redis does, subscribed or not.
    fn unsubscribe(&mut self, kind: Kind, names: Vec<Bytes>) {
        let Some(subscriber) = self.subscriber.as_mut() else {
            if names.is_empty() {
                let reply = subscribe::unsubscribed_reply(kind, None, 0);
                self.queue.push_back(Queued::Ready(reply));
            }
            for name in names {
                let reply = subscribe::unsubscribed_reply(kind, Some(name), 0);
                self.queue.push_back(Queued::Ready(reply));
            }
            return;
        };
        let names = if names.is_empty() {
            subscriber.names(kind)
        } else {
            names
        };
        if names.is_empty() {
            let reply = subscribe::unsubscribed_reply(kind, None, subscriber.count());
            self.queue.push_back(Queued::Ready(reply));
        }
        for name in names {
            subscriber.unsubscribe(kind, &name);
            let reply = subscribe::unsubscribed_reply(kind, Some(name), subscriber.count());
            self.queue.push_back(Queued::Ready(reply));
        }
        // Out of subscribed mode: messages still queued for it are dropped with it.
        if subscriber.count() == 0 {
            self.subscriber = None;
        }
    }
}

/// The connection's next message; waits forever while it subscribes to nothing.
pub(super) async fn next_delivery(subscriber: &mut Option<Subscriber>) -> Delivery {
    match subscriber {
        Some(s) => match s.next().await {
            Some(d) => d,
            None => std::future::pending().await,
        },
        None => std::future::pending().await,
    }
}
