//! Takeover across nodes. MQTT says a CONNECT with a client id closes any connection that
//! has it; a node knows only its own ([`Clients`]), so a CONNECT asks every other node
//! ([`MqttTakeOver`]) to end its connection with that client id and to end the wait of the
//! client's delayed will there, as a reconnect on that node would. It asks in two rounds:
//! every other node at once, each answering at once whether it held the client id (and
//! telling that connection to end), within [`ASK_WAIT`]; then only those that held it,
//! each answering once the connection has ended, within [`REMOTE_TAKEOVER_WAIT`]. A node
//! that does not answer the first round (down, paused, cut off) holds the CONNECT up
//! [`ASK_WAIT`], not the whole wait; it is passed over, and a connection with the client id
//! there (if any) stays until it ends on its own.

use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use serde::{Deserialize, Serialize};

use super::clients::{Clients, TAKEOVER_WAIT};
use super::counted;
use super::wills::{DelayedWills, Reconnect};
use crate::router::Router;
use crate::rpc::rpc;
use firn_raft::NodeId;

/// How long a CONNECT waits for the first round's answers: whether each node held the
/// client id.
pub const ASK_WAIT: Duration = Duration::from_secs(1);
/// How long a CONNECT waits for the second round, the nodes that held it: the time a node
/// gives its connection to end, and a second for the call itself.
pub const REMOTE_TAKEOVER_WAIT: Duration = TAKEOVER_WAIT.saturating_add(Duration::from_secs(1));

/// "Client `client` connected elsewhere": end its connection here and its will's wait
/// (`clean`: the CONNECT started clean, so the session ended and the will is published now;
/// else it is not published). Answers whether a connection with that client id was here —
/// at once, having told it to end (`wait` false), or once it has ended (`wait` true; the
/// will's wait is ended after that, since the connection's end may leave a delayed will).
#[derive(Debug, Serialize, Deserialize)]
pub struct MqttTakeOver {
    pub client: String,
    pub clean: bool,
    pub wait: bool,
}

rpc! {
    MqttTakeOver => bool;
}

/// This node's MQTT clients: their connections by client id, and the wills held for those
/// gone. Made with the node, MQTT listener or not, so that peers' calls always find it.
#[derive(Default)]
pub struct ClientsHere {
    pub(super) clients: std::sync::Arc<Clients>,
    pub(super) wills: std::sync::Arc<DelayedWills>,
}

impl ClientsHere {
    /// Answers [`MqttTakeOver`]: ends `client`'s connection here (waiting for it, at most
    /// [`TAKEOVER_WAIT`], if asked to), then its will's wait — after the connection's end,
    /// which may have left a delayed will.
    pub async fn taken_over_elsewhere(&self, call: MqttTakeOver) -> bool {
        let connected = match call.wait {
            true => self.clients.end(&call.client).await,
            false => self.clients.tell(&call.client),
        };
        let how = match call.clean {
            true => Reconnect::Clean,
            false => Reconnect::Resumed,
        };
        self.wills.reconnected(&call.client, how);
        if connected {
            counted("taken_over_elsewhere");
        }
        connected
    }
}

/// Asks every other node to end `client`'s connection and its will's wait there; returns
/// once each has answered, after [`ASK_WAIT`] and [`REMOTE_TAKEOVER_WAIT`] at most.
pub async fn take_over_elsewhere(router: &Router, client: &str, clean: bool) {
    let kernel = router.kernel();
    let me = kernel.node_id();
    let others: Vec<NodeId> = kernel
        .layout()
        .nodes
        .keys()
        .copied()
        .filter(|&id| id != me)
        .collect();
    let held = ask(router, &others, client, clean, false, ASK_WAIT).await;
    ask(router, &held, client, clean, true, REMOTE_TAKEOVER_WAIT).await;
}

/// One round: [`MqttTakeOver`] to each of `nodes` at once, each answered within `within`:
/// the nodes that held the client id.
async fn ask(
    router: &Router,
    nodes: &[NodeId],
    client: &str,
    clean: bool,
    wait: bool,
    within: Duration,
) -> Vec<NodeId> {
    let kernel = router.kernel();
    let deadline = tokio::time::Instant::now() + within;
    let mut asks: FuturesUnordered<_> = nodes
        .iter()
        .map(|&id| {
            let call = MqttTakeOver {
                client: client.to_owned(),
                clean,
                wait,
            };
            async move {
                match kernel.peers().call_within(id, call, within).await {
                    Ok(held) => held.then_some(id),
                    Err(e) => {
                        counted("takeover_unanswered");
                        tracing::debug!(node = id, "an MQTT takeover went unanswered: {e}");
                        None
                    }
                }
            }
        })
        .collect();
    // The call's own timeout bounds each; the deadline bounds them all, whatever the
    // transport does, keeping the answers that came.
    let mut held = Vec::new();
    loop {
        match tokio::time::timeout_at(deadline, asks.next()).await {
            Ok(Some(Some(id))) => held.push(id),
            Ok(Some(None)) => {}
            Ok(None) => return held,
            Err(_) => {
                counted("takeover_unanswered");
                return held;
            }
        }
    }
}
