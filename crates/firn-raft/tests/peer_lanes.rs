//! Large transfers go to a peer over a connection of their own: on a slow link, a small
//! message sent while a large one is crossing is not held up behind it.

mod link;

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use firn_raft::peer::{AppHandler, Lane, PeerPool, PeerRequest, PeerResponse, serve_peers};
use firn_raft::transport::{BoxedPeerStream, PeerTransport, Wrapping};
use link::{Gate, Link};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Sleep;

/// What a slow link lets through: 4 MiB/s, so a 4 MiB frame takes about a second.
const LINK_BYTES_PER_SEC: u64 = 4 << 20;
/// Most bytes one write hands the link before it waits for their time.
const WRITE_BYTES_MAX: usize = 64 << 10;

/// A slow link's gate, counting what it has let through.
struct Slow {
    wait: Option<Pin<Box<Sleep>>>,
    sent: Arc<AtomicU64>,
}

impl Gate for Slow {
    fn before(&mut self, cx: &mut Context<'_>, len: usize) -> Poll<io::Result<usize>> {
        if let Some(wait) = self.wait.as_mut() {
            std::task::ready!(wait.as_mut().poll(cx));
            self.wait = None;
        }
        Poll::Ready(Ok(len.min(WRITE_BYTES_MAX)))
    }

    fn after(&mut self, written: usize) {
        self.sent.fetch_add(written as u64, Ordering::SeqCst);
        let time = Duration::from_secs_f64(written as f64 / LINK_BYTES_PER_SEC as f64);
        self.wait = Some(Box::pin(tokio::time::sleep(time)));
    }
}

/// Connections this node makes go over the slow link; `sent` counts every byte they sent.
struct SlowLinks {
    sent: Arc<AtomicU64>,
}

impl PeerTransport for SlowLinks {
    fn connect(&self, tcp: TcpStream, _addr: &str) -> Wrapping {
        let sent = self.sent.clone();
        Box::pin(async move {
            let gate = Slow { wait: None, sent };
            Ok(Box::new(Link { tcp, gate }) as BoxedPeerStream)
        })
    }

    fn accept(&self, tcp: TcpStream) -> Wrapping {
        Box::pin(async move { Ok(Box::new(tcp) as BoxedPeerStream) })
    }
}

/// Notes the size of each request as it arrives whole, and answers with it.
struct Arrivals(Arc<Mutex<Vec<usize>>>);

impl AppHandler for Arrivals {
    fn handle(&self, payload: Vec<u8>) -> Pin<Box<dyn Future<Output = Vec<u8>> + Send>> {
        self.0.lock().unwrap().push(payload.len());
        Box::pin(async move { (payload.len() as u64).to_be_bytes().to_vec() })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_message_overtakes_a_large_transfer_on_a_slow_link() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let arrivals = Arc::new(Mutex::new(Vec::new()));
    let (_stop, stopped) = watch::channel(false);
    tokio::spawn(serve_peers(
        listener,
        Default::default(),
        Arc::new(Arrivals(arrivals.clone())),
        stopped,
    ));
    let sent = Arc::new(AtomicU64::new(0));
    let pool = Arc::new(
        PeerPool::new(1, HashMap::from([(2, addr)]))
            .with_transport(Arc::new(SlowLinks { sent: sent.clone() })),
    );
    let big = 4 << 20;
    let large = {
        let pool = pool.clone();
        tokio::spawn(async move {
            pool.call_on(
                Lane::Bulk,
                2,
                PeerRequest::App(vec![7; big]),
                Duration::from_secs(60),
            )
            .await
        })
    };
    // A quarter of the large request is on the wire (so it left first), the rest to come.
    while sent.load(Ordering::SeqCst) < big as u64 / 4 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let small = pool
        .call(2, PeerRequest::App(vec![1]), Duration::from_secs(60))
        .await
        .unwrap();
    assert!(matches!(small, PeerResponse::App(_)), "{small:?}");
    assert!(matches!(
        large.await.unwrap().unwrap(),
        PeerResponse::App(_)
    ));
    // On one connection the small request would have arrived after the large one's last
    // byte.
    assert_eq!(*arrivals.lock().unwrap(), vec![1, big]);
}
