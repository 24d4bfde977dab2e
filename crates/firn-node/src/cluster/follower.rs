//! The loops of the cluster part on every node: the layout follower (applies each new
//! layout to this node's replicas, then publishes it on the layout channel), the steward
//! loop (the meta leader's work) and, for a node that joins, its join request.

use std::sync::Arc;
use std::time::Duration;

use firn_model::FirnError;
use tokio::sync::watch;

use super::ShardHost;
use super::follow::{FollowSettings, FollowTracker};
use super::layout::ClusterLayout;
use super::meta::Meta;
use super::steward::{STEWARD_INTERVAL, steward};
use crate::rpc::{MetaChange, PeerClient};

/// How often a node checks its meta replica for a new layout.
const LAYOUT_POLL: Duration = Duration::from_millis(200);
/// How often a joining node repeats its request until a member accepts it.
const JOIN_RETRY: Duration = Duration::from_secs(1);

/// Applies a layout on this node and publishes it: what the router routes by from then on.
pub struct LayoutFollower {
    meta: Arc<Meta>,
    host: Arc<dyn ShardHost>,
    publish: watch::Sender<Arc<ClusterLayout>>,
    /// The meta-store version of the layout applied last.
    applied: Option<u64>,
}

impl LayoutFollower {
    pub fn new(
        meta: Arc<Meta>,
        host: Arc<dyn ShardHost>,
        publish: watch::Sender<Arc<ClusterLayout>>,
    ) -> Self {
        LayoutFollower {
            meta,
            host,
            publish,
            applied: None,
        }
    }

    /// Whether a stored layout has been applied yet.
    pub fn has_applied(&self) -> bool {
        self.applied.is_some()
    }

    /// Applies `layout` (not yet stored: a new `--peers` cluster's derived first layout).
    pub async fn apply(&self, layout: ClusterLayout) -> Result<(), FirnError> {
        self.host.follow(&layout).await?;
        self.publish.send_replace(Arc::new(layout));
        Ok(())
    }

    /// Applies the newest layout the meta replica holds, if it is newer than the last one.
    pub async fn catch_up(&mut self) -> Result<(), FirnError> {
        if self.applied.is_some() && self.meta.layout_version()? == self.applied {
            return Ok(());
        }
        let Some((version, layout)) = self.meta.layout()? else {
            return Ok(());
        };
        if self.applied == Some(version) {
            return Ok(());
        }
        self.apply(layout).await?;
        self.applied = Some(version);
        Ok(())
    }

    /// Follows the layout until `stop`; `bootstrap`, if any, is stored first once this node
    /// leads the meta group (the node that creates the cluster).
    pub async fn run(mut self, bootstrap: Option<ClusterLayout>, mut stop: watch::Receiver<bool>) {
        let mut created = false;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(LAYOUT_POLL) => {}
                _ = stop.changed() => return,
            }
            if let Some(layout) = bootstrap.as_ref().filter(|_| !created)
                && self.meta.is_leader()
            {
                match self.meta.create(layout).await {
                    Ok(()) => created = true,
                    Err(e) => tracing::debug!("storing the first layout: {e}"),
                }
            }
            if let Err(e) = self.catch_up().await {
                tracing::warn!("following the cluster layout: {e}");
            }
        }
    }
}

/// On the meta leader: membership, replica moves and leader spread, a step at a time.
pub async fn steward_loop(
    host: Arc<dyn ShardHost>,
    peers: PeerClient,
    meta: Arc<Meta>,
    follow: FollowSettings,
    mut stop: watch::Receiver<bool>,
) {
    let mut follow = FollowTracker::new(follow);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(STEWARD_INTERVAL) => {}
            _ = stop.changed() => return,
        }
        if meta.is_leader()
            && let Err(e) = steward(host.as_ref(), &peers, &meta, &mut follow).await
        {
            tracing::info!("cluster steward: {e} (retrying)");
        }
    }
}

/// Asks the members at `contacts` (in turn, one a try) to add this node, until one accepts.
/// A refusal (this node's id or address is another member's) is final: it is put in
/// `refused` and the loop ends, for the node to stop with it; anything else (no member
/// reachable, no meta leader yet) is tried again.
pub async fn join(
    peers: PeerClient,
    node: u64,
    contacts: Vec<String>,
    addr: String,
    refused: Arc<watch::Sender<Option<String>>>,
    mut stop: watch::Receiver<bool>,
) {
    for contact in contacts.iter().cycle() {
        let change = MetaChange::Join {
            node,
            addr: addr.clone(),
        };
        match peers.call_addr(contact, change).await {
            Ok(Ok(())) => {
                tracing::info!(node, %contact, "joined the cluster; replicas will move here");
                return;
            }
            Ok(Err(e @ (FirnError::Refused(_) | FirnError::BadArgument(_)))) => {
                tracing::error!(node, %contact, "the cluster refused this node: {e}");
                let _ = refused.send(Some(format!("joining through {contact}: {e}")));
                return;
            }
            Ok(Err(e)) | Err(e) => tracing::warn!(node, %contact, "joining: {e}; retrying"),
        }
        tokio::select! {
            _ = tokio::time::sleep(JOIN_RETRY) => {}
            _ = stop.changed() => return,
        }
    }
}
