//! Watch: replay then live, in commit order, exactly once; COMPACTED when the start was
//! truncated; notify keyspaces reach watchers without storing.

mod common;

use common::*;
use firn_client::{Client, ClientError, PutOptions};
use firn_model::{ReadAt, ReadConsistency, WatchFrom};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_replays_then_follows_live_writes_in_commit_order() {
    let node = start_node(false).await;
    let client = Client::connect(&node.resp_addr.to_string()).await.unwrap();
    for i in 1..=3 {
        client
            .put(
                b"cam/1",
                format!("frame{i}").as_bytes(),
                PutOptions::default(),
            )
            .await
            .unwrap();
    }
    client
        .put(b"cam/2", b"other", PutOptions::default())
        .await
        .unwrap();
    client
        .put(b"dog/1", b"not watched", PutOptions::default())
        .await
        .unwrap();

    let mut watcher = client.watch(b"cam/", true, WatchFrom::Version(2)).unwrap();
    watcher
        .set_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let writer = client.clone();
    tokio::spawn(async move {
        writer
            .put(b"cam/1", b"live", PutOptions::default())
            .await
            .unwrap();
        writer.delete(b"cam/2").await.unwrap();
    });
    let events = tokio::task::spawn_blocking(move || {
        (0..4)
            .map(|_| watcher.next_event().unwrap())
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    let seen: Vec<(String, u64)> = events
        .iter()
        .map(|e| (String::from_utf8_lossy(&e.key).into_owned(), e.info.version))
        .collect();
    // Replay from version 2 of each key: cam/1 v2, v3 (cam/2 has only v1, below the start).
    assert_eq!(&seen[..2], &[("cam/1".into(), 2), ("cam/1".into(), 3)]);
    assert!(seen.contains(&("cam/1".into(), 4)));
    assert!(seen.contains(&("cam/2".into(), 2)));
    let ts: Vec<_> = events.iter().map(|e| e.info.commit_ts).collect();
    assert!(
        ts.windows(2).all(|w| w[0] < w[1]),
        "events out of commit order: {ts:?}"
    );
    assert!(
        events.iter().any(|e| e.info.deleted),
        "the delete arrives as a tombstone"
    );
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_from_a_truncated_version_is_compacted_naming_the_oldest() {
    let node = start_node(false).await;
    let client = Client::connect(&node.resp_addr.to_string()).await.unwrap();
    for i in 0..5 {
        client
            .put(b"k", i.to_string().as_bytes(), PutOptions::default())
            .await
            .unwrap();
    }
    client
        .raw(
            redis::cmd("FIRN.TRUNCATE")
                .arg("KEY")
                .arg("k")
                .arg("VERSION")
                .arg(4),
        )
        .await
        .unwrap();
    match client.watch(b"k", false, WatchFrom::Version(1)) {
        Err(ClientError::Server { code, message }) => {
            assert_eq!(code, "COMPACTED");
            assert!(
                message.contains("oldest available version is 4"),
                "{message}"
            );
        }
        Err(other) => panic!("expected COMPACTED, got {other}"),
        Ok(_) => panic!("expected COMPACTED, got a watch"),
    }
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notify_keyspace_delivers_to_watchers_and_stores_nothing() {
    let node = start_node(false).await;
    let client = Client::connect(&node.resp_addr.to_string()).await.unwrap();
    client
        .raw(
            redis::cmd("FIRN.KEYSPACE")
                .arg("CREATE")
                .arg("ping/")
                .arg("MODE")
                .arg("notify"),
        )
        .await
        .unwrap();
    let mut watcher = client.watch(b"ping/", true, WatchFrom::Now).unwrap();
    watcher
        .set_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    client
        .put(b"ping/a", b"wake up", PutOptions::default())
        .await
        .unwrap();
    let event = tokio::task::spawn_blocking(move || watcher.next_event().unwrap())
        .await
        .unwrap();
    assert_eq!(event.info.value.as_deref(), Some(&b"wake up"[..]));
    assert_eq!(
        client
            .get(b"ping/a", ReadAt::Latest, ReadConsistency::Linearizable)
            .await
            .unwrap(),
        None
    );
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_with_an_open_http_watch_ends_the_stream_and_finishes_promptly() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let node = start_node(false).await;
    let mut sse = tokio::net::TcpStream::connect(node.http_addr)
        .await
        .unwrap();
    sse.write_all(b"GET /v1/watch?prefix=cam/ HTTP/1.1\r\nHost: firn\r\n\r\n")
        .await
        .unwrap();
    let mut head = vec![0u8; 1024];
    let n = sse.read(&mut head).await.unwrap();
    assert!(
        String::from_utf8_lossy(&head[..n]).starts_with("HTTP/1.1 200"),
        "the watch stream is open"
    );
    let started = std::time::Instant::now();
    tokio::time::timeout(std::time::Duration::from_secs(10), node.shutdown())
        .await
        .expect("shutdown finishes");
    // The stream ends when shutdown begins; a stream held open would keep the HTTP server
    // until the node's last-resort cut-off (`SHUTDOWN_TASKS_WAIT`).
    assert!(
        started.elapsed() < firn_node::node::SHUTDOWN_TASKS_WAIT / 2,
        "shutdown took {:?}",
        started.elapsed()
    );
}
