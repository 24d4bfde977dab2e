//! What openraft makes of a failed call to a peer. Both the group's network (one call at a
//! time) and the replication pipeline (appends in flight) report failures this way, so it
//! sits below both of them, over the peer transport's [`PeerError`].

use openraft::errors::{RPCError, Timeout, Unreachable};
use openraft::network::RPCTypes;

use crate::peer::PeerError;
use crate::types::{FirnRaft, NodeId};

pub(crate) fn unreachable(e: impl std::fmt::Display) -> Unreachable<FirnRaft> {
    Unreachable::from_string(e.to_string())
}

/// What openraft makes of a call of `me`'s to `target` that failed: a target that did not
/// answer within the RPC's time is a timeout, which openraft sends again at once, and slows
/// the replication to it only after many in a row. Any other failure (no connection, the
/// connection lost, a refusal) is unreachable: openraft backs off (200 ms a try) until a
/// request succeeds. A follower slower than the heartbeat interval for a moment (a memtable
/// flush on a small machine) is not gone: taken for one, the replication to it paused for
/// the backoff on top of the delay.
pub(crate) fn rpc_error(
    action: RPCTypes,
    me: NodeId,
    target: NodeId,
    e: PeerError,
) -> RPCError<FirnRaft> {
    match e {
        PeerError::Timeout(_, timeout) => RPCError::Timeout(Timeout {
            action,
            id: me,
            target,
            timeout,
        }),
        e => RPCError::Unreachable(unreachable(e)),
    }
}
