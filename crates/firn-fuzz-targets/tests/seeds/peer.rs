use bytes::Bytes;

use crate::{seed, seeds};

/// A frame as a peer connection carries one: an envelope (id, body, sender's wall clock;
/// postcard writes a struct as its fields in order) after the codec's length.
fn framed(frames: &[Vec<u8>]) -> Vec<u8> {
    use tokio_util::codec::Encoder;
    let mut out = bytes::BytesMut::new();
    for body in frames {
        firn_raft::peer::codec()
            .encode(Bytes::copy_from_slice(body), &mut out)
            .unwrap();
    }
    out.to_vec()
}

fn envelope<T: serde::Serialize>(id: u64, body: T) -> Vec<u8> {
    postcard::to_stdvec(&(id, body, 1_790_000_000_000_000u64)).unwrap()
}

#[test]
#[ignore = "writes fuzz/corpus: run by hand"]
fn write_peer_stream_seeds() {
    use firn_raft::peer::{PeerRequest, PeerResponse};
    use firn_raft::snapshot_transfer::SnapshotChunk;
    use firn_raft::types::{SnapshotMeta, Vote};
    use openraft::raft::{AppendEntriesRequest, VoteRequest};

    let heartbeat = envelope(
        1,
        PeerRequest::Append {
            shard: 3,
            rpc: AppendEntriesRequest {
                vote: Vote::new_committed(2, 1),
                prev_log_id: None,
                entries: Vec::new(),
                leader_commit: None,
            },
        },
    );
    let vote = envelope(
        2,
        PeerRequest::Vote {
            shard: 3,
            rpc: VoteRequest::new(Vote::new(3, 2), None),
        },
    );
    let chunk = envelope(
        3,
        PeerRequest::SnapshotChunk(SnapshotChunk {
            shard: 3,
            vote: Vote::new_committed(2, 1),
            meta: SnapshotMeta::default(),
            total_bytes: 8,
            offset: 0,
            bytes: b"FIRNSNAP".to_vec(),
        }),
    );
    let app = envelope(4, PeerRequest::App(b"forwarded write".to_vec()));
    let answered = envelope(4, PeerResponse::App(b"answer".to_vec()));
    let refused = envelope(5, PeerResponse::Error("busy: retry".into()));
    seed(
        "peer_stream",
        "heartbeat",
        &framed(std::slice::from_ref(&heartbeat)),
    );
    seed("peer_stream", "vote", &framed(std::slice::from_ref(&vote)));
    seed("peer_stream", "snapshot-chunk", &framed(&[chunk]));
    seed(
        "peer_stream",
        "requests",
        &framed(&[heartbeat, vote, app.clone()]),
    );
    seed("peer_stream", "answers", &framed(&[answered, refused]));
    let whole = framed(&[app]);
    seed("peer_stream", "cut", &whole[..whole.len() - 3]);
    // A length past the limit: the connection is closed before anything is read.
    seed("peer_stream", "too-long", &u32::MAX.to_be_bytes());
}

#[test]
fn the_peer_stream_seeds_are_read_frame_by_frame() {
    for (name, bytes) in seeds("peer_stream") {
        use tokio_util::codec::Decoder;
        let mut input = bytes::BytesMut::from(&bytes[..]);
        let mut codec = firn_raft::peer::codec();
        let mut frames = 0;
        while let Ok(Some(frame)) = codec.decode(&mut input) {
            let read = firn_raft::peer::read_request(&frame).is_some()
                || firn_raft::peer::read_response(&frame).is_some();
            assert!(read, "peer_stream/{name}: frame {frames}");
            frames += 1;
        }
        let whole = !["cut", "too-long"].contains(&name.as_str());
        assert_eq!(whole, frames > 0 && input.is_empty(), "peer_stream/{name}");
    }
}
