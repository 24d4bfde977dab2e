//! RESP connections: a node holds at most its stated number, a stopping node ends them
//! (watches included) within a stated bound, and a watching connection answers what was
//! pipelined behind its FIRN.WATCH.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use firn_node::resp::SHUTDOWN_CONNECTIONS_WAIT;
use firn_node::{NodeConfig, RunningNode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";
const REFUSED: &str = "-ERR max number of clients reached\r\n";

async fn node_with_connections_max(n: usize) -> RunningNode {
    let config = NodeConfig {
        resp_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        http_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        peer_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        in_memory: true,
        resp_connections_max: n,
        ..NodeConfig::default()
    };
    RunningNode::start(config).await.expect("node starts")
}

/// Sends `request` and reads until `want` bytes have arrived or the connection closes.
async fn exchange(stream: &mut TcpStream, request: &[u8], want: usize) -> String {
    stream.write_all(request).await.unwrap();
    read_at_most(stream, want).await
}

async fn read_at_most(stream: &mut TcpStream, want: usize) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 256];
    while out.len() < want {
        let n = timeout(Duration::from_secs(5), stream.read(&mut buf))
            .await
            .expect("an answer within 5 s")
            .unwrap_or(0);
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn a_connection_past_the_limit_is_refused_and_a_freed_slot_is_reused() {
    let node = node_with_connections_max(3).await;
    let mut open = Vec::new();
    for _ in 0..3 {
        let mut c = TcpStream::connect(node.resp_addr).await.unwrap();
        assert_eq!(exchange(&mut c, PING, 7).await, "+PONG\r\n");
        open.push(c);
    }
    // The fourth is told why and closed: the read ends after the error.
    let mut fourth = TcpStream::connect(node.resp_addr).await.unwrap();
    assert_eq!(read_at_most(&mut fourth, 1024).await, REFUSED);
    // The three still work.
    for c in &mut open {
        assert_eq!(exchange(c, PING, 7).await, "+PONG\r\n");
    }
    // INFO counts them against the limit, as Redis does.
    let body = "# Clients\r\nconnected_clients:3\r\nmaxclients:3\r\nblocked_clients:0\r\n";
    let info = format!("${}\r\n{body}\r\n", body.len());
    let asked = exchange(
        &mut open[0],
        b"*2\r\n$4\r\nINFO\r\n$7\r\nclients\r\n",
        info.len(),
    )
    .await;
    assert_eq!(asked, info);
    // Closing one frees its slot (as soon as the node has seen it close).
    drop(open.pop());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut c = TcpStream::connect(node.resp_addr).await.unwrap();
        let answer = exchange(&mut c, PING, 7).await;
        if answer == "+PONG\r\n" {
            break;
        }
        assert_eq!(answer, REFUSED);
        assert!(
            Instant::now() < deadline,
            "the closed connection's slot was never freed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_with_a_watch_open_ends_the_watch_within_the_bound() {
    let node = node_with_connections_max(16).await;
    let mut watcher = TcpStream::connect(node.resp_addr).await.unwrap();
    let first = exchange(
        &mut watcher,
        b"*2\r\n$10\r\nFIRN.WATCH\r\n$6\r\ncamera\r\n",
        "*2\r\n$8\r\nwatching\r\n$6\r\ncamera\r\n".len(),
    )
    .await;
    assert!(first.contains("watching"), "{first}");
    // A plain connection, idle, as well.
    let mut idle = TcpStream::connect(node.resp_addr).await.unwrap();
    assert_eq!(exchange(&mut idle, PING, 7).await, "+PONG\r\n");

    let started = Instant::now();
    timeout(SHUTDOWN_CONNECTIONS_WAIT * 10, node.shutdown())
        .await
        .expect("shutdown hangs while a watch is open");
    let took = started.elapsed();
    assert!(
        took < SHUTDOWN_CONNECTIONS_WAIT,
        "shutdown took {took:?}; the bound is {SHUTDOWN_CONNECTIONS_WAIT:?}"
    );
    // Both connections were closed by the node, not left to the runtime.
    for (what, c) in [("watching", &mut watcher), ("idle", &mut idle)] {
        let mut buf = [0u8; 64];
        let read = timeout(Duration::from_millis(500), c.read(&mut buf)).await;
        assert!(
            matches!(read, Ok(Ok(0)) | Ok(Err(_))),
            "the {what} connection is still open after shutdown: {read:?}"
        );
    }
}

/// Commands pipelined behind FIRN.WATCH, in the same write, are answered: the watch takes
/// FIRN.UNWATCH at once, and the commands after it run as on any connection. (They waited
/// for the client's next bytes, forever for a client that waits for their answers.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_pipelined_behind_a_watch_are_answered() {
    let node = node_with_connections_max(16).await;
    let mut c = TcpStream::connect(node.resp_addr).await.unwrap();
    let want = "*2\r\n$8\r\nwatching\r\n$6\r\ncamera\r\n+PONG\r\n+OK\r\n$3\r\nend\r\n";
    let got = exchange(
        &mut c,
        b"*2\r\n$10\r\nFIRN.WATCH\r\n$6\r\ncamera\r\n*1\r\n$4\r\nPING\r\n\
          *1\r\n$12\r\nFIRN.UNWATCH\r\n*2\r\n$4\r\nECHO\r\n$3\r\nend\r\n",
        want.len(),
    )
    .await;
    assert_eq!(got, want);
}
