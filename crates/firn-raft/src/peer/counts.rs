//! What a node's calls to its peers count on `/metrics`: the connections it made, and the
//! calls the transport failed, by peer. On a link that drops or stalls now and then, these
//! say how often, and to which peer.

use std::sync::LazyLock;

use super::PeerError;
use super::pool::Lane;
use crate::types::NodeId;

const CONNECTS: &str = "firn_peer_connects_total";
const FAILED: &str = "firn_peer_calls_failed_total";

static DESCRIBED: LazyLock<()> = LazyLock::new(|| {
    metrics::describe_counter!(
        CONNECTS,
        "connections this node opened to a peer, by peer and lane (messages, bulk): the \
         first, and one after each that failed or stalled"
    );
    metrics::describe_counter!(
        FAILED,
        "calls to a peer that the transport failed, by peer and reason: unreachable (no \
         connection), busy (the peer had no room for it), lost (the connection dropped before \
         the answer), timeout (no answer in time)"
    );
});

/// A connection to `peer` over `lane` was made.
pub(super) fn connected(peer: NodeId, lane: Lane) {
    LazyLock::force(&DESCRIBED);
    let lane = match lane {
        Lane::Messages => "messages",
        Lane::Bulk => "bulk",
    };
    metrics::counter!(CONNECTS, "peer" => peer.to_string(), "lane" => lane).increment(1);
}

/// What a call to `peer` came to, counted if the transport failed it; a peer's refusal is
/// its answer, not a failure of the transport, and is not counted.
pub(super) fn counted<T>(peer: NodeId, outcome: Result<T, PeerError>) -> Result<T, PeerError> {
    if let Err(e) = &outcome {
        failed(peer, e);
    }
    outcome
}

fn failed(peer: NodeId, error: &PeerError) {
    let reason = match error {
        PeerError::Unreachable(..) => "unreachable",
        PeerError::Busy(..) => "busy",
        PeerError::Lost(_) => "lost",
        PeerError::Timeout(..) => "timeout",
        PeerError::Remote(..) | PeerError::Contact(..) => return,
    };
    LazyLock::force(&DESCRIBED);
    metrics::counter!(FAILED, "peer" => peer.to_string(), "reason" => reason).increment(1);
}
