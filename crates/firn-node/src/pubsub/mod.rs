//! PUBLISH across the cluster: the message goes to this node's subscribers and, with one
//! peer call each, to every other node of the layout, all at once. Fire-and-forget: no log,
//! no retry; a node that does not answer within [`PUBLISH_PEER_TIMEOUT`] is skipped and its
//! subscribers are not counted.

mod subscribers;

pub use subscribers::{
    Delivery, Kind, PubSub, SUBSCRIBER_QUEUE_BYTES_MAX, SUBSCRIBER_QUEUE_MESSAGES_MAX,
    SUBSCRIPTIONS_PER_CONNECTION_MAX, Subscriber,
};

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use firn_model::FirnError;
use firn_model::limits::KEY_BYTES_MAX;

use crate::exec::Kernel;
use crate::rpc::Publish;

/// How long a PUBLISH waits for another node to take the message: a healthy peer answers
/// in milliseconds, and a publisher should not wait on a node that is down.
pub const PUBLISH_PEER_TIMEOUT: Duration = Duration::from_secs(1);

/// Publish/subscribe: this node's subscribers, and PUBLISH to every node's.
/// Cloned, it shares the subscribers (a function publishes through a clone).
#[derive(Clone)]
pub struct Publisher {
    kernel: Arc<Kernel>,
    subscribers: Arc<PubSub>,
}

impl Publisher {
    pub fn new(kernel: Arc<Kernel>) -> Self {
        Publisher {
            kernel,
            subscribers: Arc::default(),
        }
    }

    /// This node's subscription registry.
    pub fn pubsub(&self) -> &Arc<PubSub> {
        &self.subscribers
    }

    /// Delivers `message` on `channel` here and at every other node of the layout; answers
    /// the receivers of the nodes that answered. A channel is bounded as a key is and a
    /// message as a value is, since every subscriber's queue may hold it.
    pub async fn publish(&self, channel: Bytes, message: Bytes) -> Result<usize, FirnError> {
        if channel.len() > KEY_BYTES_MAX {
            return Err(FirnError::KeyTooLarge {
                len: channel.len(),
                max: KEY_BYTES_MAX,
            });
        }
        self.kernel.limits().check_value(message.len())?;
        let local = self.subscribers.deliver(&channel, &message);
        let layout = self.kernel.layout();
        let others = layout
            .nodes
            .keys()
            .filter(|&&id| id != self.kernel.node_id());
        let remote = futures::future::join_all(others.map(|&id| {
            let call = Publish {
                channel: channel.clone(),
                message: message.clone(),
            };
            async move {
                self.kernel
                    .peers()
                    .call_within(id, call, PUBLISH_PEER_TIMEOUT)
                    .await
                    .unwrap_or_else(|e| {
                        tracing::debug!(node = id, "publish skipped a node: {e}");
                        0
                    })
            }
        }))
        .await;
        Ok(local + remote.iter().map(|&n| n as usize).sum::<usize>())
    }
}
