//! A peer connection's appends go to the replica of their group held now: after a replica
//! is removed and a new one of the same group added in its place, the next append on the
//! same connection reaches the new one.

mod nodes;

use std::sync::Arc;
use std::time::Duration;

use firn_raft::peer::{LocalGroups, PeerPool, PeerRequest, PeerResponse};
use firn_raft::types::Vote;
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse};

/// An empty append (a heartbeat) from node 1, leader of term 1.
fn heartbeat() -> PeerRequest {
    PeerRequest::Append {
        shard: 0,
        rpc: AppendEntriesRequest {
            vote: Vote::new_committed(1, 1),
            prev_log_id: None,
            entries: Vec::new(),
            leader_commit: None,
        },
    }
}

async fn append(pool: &PeerPool) -> PeerResponse {
    pool.call(2, heartbeat(), Duration::from_secs(5))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_added_again_takes_the_next_append_on_the_same_connection() {
    let dir = tempfile::tempdir().unwrap();
    let (mut bound, addrs) = nodes::listeners(&[2]).await;
    // Node 2 serves; node 1 is this test, sending by hand on one connection.
    let groups = LocalGroups::default();
    let _serving = nodes::serve(bound.remove(0), groups.clone());
    let own_pool = Arc::new(PeerPool::new(2, addrs.clone()));
    let open = |name: &str| {
        let dir = dir.path().join(name);
        let (addrs, groups, pool) = (addrs.clone(), groups.clone(), own_pool.clone());
        async move { nodes::open_replica(2, &dir, &addrs, 0, groups, pool).await }
    };
    let pool = PeerPool::new(1, addrs.clone());

    let first = open("first").await;
    let answer = append(&pool).await;
    assert!(
        matches!(answer, PeerResponse::Append(AppendEntriesResponse::Success)),
        "{answer:?}"
    );

    // Removed (as a node closes a replica it no longer holds), and a new replica of the
    // same group added in its place.
    groups.remove(0);
    first.shutdown().await;
    let second = open("second").await;
    let answer = append(&pool).await;
    assert!(
        matches!(answer, PeerResponse::Append(AppendEntriesResponse::Success)),
        "the first append to the new replica was answered {answer:?}"
    );
    // Raft publishes its metrics after it answers: wait (bounded) for the vote to show.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while second.status().term != 1 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(second.status().term, 1, "the new replica took no append");
    second.shutdown().await;
}
