//! Takeover across nodes. MQTT says a CONNECT with a client id closes any connection that
//! has it; a node knows only its own ([`Clients`]), so a CONNECT asks every other node
//! ([`MqttTakeOver`]) to end its connection with that client id and to end the wait of the
//! client's delayed will there, as a reconnect on that node would. A node that does not
//! answer within [`REMOTE_TAKEOVER_WAIT`] is not waited for: the CONNECT goes on, and a
//! connection with the client id there (if any) stays until it ends on its own.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::clients::{Clients, TAKEOVER_WAIT};
use super::counted;
use super::wills::{DelayedWills, Reconnect};
use crate::router::Router;
use crate::rpc::rpc;

/// How long a CONNECT waits for the other nodes, all asked at once: the time a node gives
/// its connection to end, and a second for the call itself.
pub const REMOTE_TAKEOVER_WAIT: Duration = TAKEOVER_WAIT.saturating_add(Duration::from_secs(1));

/// "Client `client` connected elsewhere": end its connection here and its will's wait
/// (`clean`: the CONNECT started clean, so the session ended and the will is published now;
/// else it is not published). Answers whether a connection with that client id was here.
#[derive(Debug, Serialize, Deserialize)]
pub struct MqttTakeOver {
    pub client: String,
    pub clean: bool,
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
    /// [`TAKEOVER_WAIT`]), then its will's wait — after the connection's end, which may have
    /// left a delayed will.
    pub async fn taken_over_elsewhere(&self, call: MqttTakeOver) -> bool {
        let connected = self.clients.end(&call.client).await;
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
/// once each has answered, or after [`REMOTE_TAKEOVER_WAIT`] at most.
pub async fn take_over_elsewhere(router: &Router, client: &str, clean: bool) {
    let kernel = router.kernel();
    let me = kernel.node_id();
    let layout = kernel.layout();
    let asks = layout.nodes.keys().filter(|&&id| id != me).map(|&id| {
        let call = MqttTakeOver {
            client: client.to_owned(),
            clean,
        };
        async move {
            if let Err(e) = kernel
                .peers()
                .call_within(id, call, REMOTE_TAKEOVER_WAIT)
                .await
            {
                counted("takeover_unanswered");
                tracing::debug!(node = id, "an MQTT takeover went unanswered: {e}");
            }
        }
    });
    // The call's own timeout bounds each; this bounds them all, whatever the transport does.
    let all = futures::future::join_all(asks);
    if tokio::time::timeout(REMOTE_TAKEOVER_WAIT, all)
        .await
        .is_err()
    {
        counted("takeover_unanswered");
    }
}
