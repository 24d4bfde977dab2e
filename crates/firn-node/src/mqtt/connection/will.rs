//! The last will: published for the client when its connection ends without DISCONNECT.

use bytes::Bytes;
use firn_model::{Access, FirnError, Key};

use super::Connection;
use crate::mqtt::counted;
use crate::mqtt::queue;
use crate::mqtt::topic::check_topic;
use crate::mqtt::wire;

impl Connection {
    /// Publishes the client's last will as the client would have: written (retained or to
    /// the log) with its permission, delivered, and queued for the persistent sessions it
    /// matches. One that cannot be written is dropped (logged).
    pub(super) async fn publish_will(&mut self, will: wire::Publish) {
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
        let written = match self.write_of(&will, &key) {
            Ok(Some(request)) => self.session.run(&self.router, request).await.map(|_| ()),
            Ok(None) => self.session.authorize(&[Access::write_key(&key)]),
            Err(e) => Err(e),
        };
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
