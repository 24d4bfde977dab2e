//! The last will: published for the client when its connection ends without DISCONNECT, or
//! with 5.0's DISCONNECT "with Will Message" — at once, or after 5.0's Will Delay Interval
//! (held by [`DelayedWills`] meanwhile, so it outlives the connection).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use firn_model::{Access, FirnError, Key};
use tokio::sync::watch;

use super::Connection;
use super::publish::write_of;
use crate::mqtt::registry::Registry;
use crate::mqtt::topic::check_topic;
use crate::mqtt::wills::DelayedWills;
use crate::mqtt::{MqttSettings, counted, queue};
use crate::mqtt::{wire, wire::Publish};
use crate::router::Router;
use crate::session::Session;

/// A will to publish, with what publishing it takes: the connection's user (its
/// permissions) and the node's parts.
struct Will {
    publish: Publish,
    session: Session,
    router: Arc<Router>,
    settings: Arc<MqttSettings>,
    sessions: Arc<Registry>,
}

impl Connection {
    /// The client's will, as its connection ends: held for its delay, then published; at
    /// once if it has none. The delay is at most the session's expiry, as the session
    /// ending publishes it (5.0, 3.1.3.2.2): a session that ends with its connection
    /// (expiry 0, and every 3.1.1 clean session) has its will published at once.
    // (`&mut self`: the connection is `Send` but not `Sync`, and this future is awaited on
    // the connection's task.)
    pub(super) async fn leave_will(
        &mut self,
        will: wire::Publish,
        client: &str,
        delay_s: u32,
        wills: &Arc<DelayedWills>,
        stop: watch::Receiver<bool>,
    ) {
        let expiry_s = self.persistent.as_ref().map_or(0, |p| p.record.expiry_s);
        let delay = Duration::from_secs(u64::from(delay_s).min(expiry_s));
        let will = Will {
            publish: will,
            session: self.session.clone(),
            router: self.router.clone(),
            settings: self.settings.clone(),
            sessions: self.sessions.clone(),
        };
        let publishing = will.publish();
        if delay.is_zero() {
            return publishing.await;
        }
        // No room to hold it: published now rather than never.
        if let Err(publishing) = wills.hold(client, delay, publishing, stop) {
            publishing.await;
        }
    }
}

impl Will {
    /// Publishes the will as the client would have: written (retained or to the log) with
    /// its permission, delivered, and queued for the persistent sessions it matches. One
    /// that cannot be written is dropped (logged).
    async fn publish(mut self) {
        let will = &self.publish;
        let key = match check_topic(&will.topic)
            .map_err(FirnError::BadArgument)
            .and_then(|()| {
                Key::new(Bytes::from(format!(
                    "{}{}",
                    self.settings.prefix, will.topic
                )))
            }) {
            Ok(key) => key,
            Err(e) => {
                tracing::debug!("an MQTT will to '{}' is not published: {e}", will.topic);
                return;
            }
        };
        let written = match write_of(&self.router, &self.settings, will, &key) {
            Ok(Some(request)) => self.session.run(&self.router, request).await.map(|_| ()),
            Ok(None) => self.session.authorize(&[Access::write_key(&key)]),
            Err(e) => Err(e),
        };
        let will = &self.publish;
        if let Err(e) = written {
            tracing::debug!("an MQTT will to '{}' is not published: {e}", will.topic);
            counted("will_refused");
            return;
        }
        let _ = self
            .router
            .publisher()
            .publish(key.bytes().clone(), will.payload.clone())
            .await;
        let clients = self.sessions.matching(&will.topic);
        if !clients.is_empty()
            && let Err(e) = queue::enqueue(&self.router, &clients, &will.topic, &will.payload).await
        {
            tracing::debug!("queueing an MQTT will: {e}");
        }
        counted("will_published");
    }
}
