//! A frame from a peer, as the peer connection decodes it: a postcard request (what a node
//! serves) or response (what a caller reads). Framing is tokio-util's length-delimited
//! codec; what is fed here is the body.

use firn_raft::peer::{PeerRequest, PeerResponse};

pub fn peer_frame(data: &[u8]) {
    let _ = postcard::from_bytes::<PeerRequest>(data);
    let _ = postcard::from_bytes::<PeerResponse>(data);
    // As an envelope (id, body, sender's wall clock): the body after a varint id.
    if let Ok((_id, rest)) = postcard::take_from_bytes::<u64>(data) {
        let _ = postcard::take_from_bytes::<PeerRequest>(rest);
    }
}
