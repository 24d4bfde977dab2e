//! Bytes as they arrive on a peer connection, before any frame is decoded: cut into frames
//! by the connection's own codec ([`firn_raft::peer::codec`]: a 4-byte length, at most
//! `PEER_FRAME_BYTES_MAX`), the end of the stream included, and each frame read as the
//! serving end reads a request and the calling end an answer.

use bytes::BytesMut;
use firn_raft::peer::{codec, read_request, read_response};
use tokio_util::codec::Decoder;

pub fn peer_stream(data: &[u8]) {
    let mut codec = codec();
    let mut input = BytesMut::from(data);
    // At most as many frames as bytes: each takes its 4-byte length at least.
    for _ in 0..=data.len() {
        let frame = match codec.decode_eof(&mut input) {
            Ok(Some(frame)) => frame,
            // The stream's end in the middle of a frame, or a length over the limit: the
            // connection is closed.
            Ok(None) | Err(_) => return,
        };
        let _ = read_request(&frame);
        let _ = read_response(&frame);
    }
}
