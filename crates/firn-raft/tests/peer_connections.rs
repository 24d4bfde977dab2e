//! A peer connection that fails, at either end: the calls waiting on it learn so at once
//! (not at their timeout), the next call opens a new connection, and the failed one is
//! closed at both ends.

mod link;

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use firn_raft::peer::{
    AppHandler, Lane, PeerError, PeerPool, PeerRequest, PeerResponse, serve_peers_over,
};
use firn_raft::transport::{BoxedPeerStream, PeerTransport, Wrapping};
use link::{Dropping, DroppingAccepted, Gate, Link};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Answers every request with its payload.
struct Echo;

impl AppHandler for Echo {
    fn handle(&self, payload: Vec<u8>) -> Pin<Box<dyn Future<Output = Vec<u8>> + Send>> {
        Box::pin(async move { payload })
    }
}

/// The server's connections, counting those still open.
struct Counted {
    open: Arc<AtomicU64>,
}

/// Counts one open connection for as long as it lives.
struct Open(Arc<AtomicU64>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Gate for Open {
    fn before(&mut self, _cx: &mut Context<'_>, len: usize) -> Poll<io::Result<usize>> {
        Poll::Ready(Ok(len))
    }

    fn after(&mut self, _written: usize) {}
}

impl PeerTransport for Counted {
    fn connect(&self, tcp: TcpStream, _addr: &str) -> Wrapping {
        Box::pin(async move { Ok(Box::new(tcp) as BoxedPeerStream) })
    }

    fn accept(&self, tcp: TcpStream) -> Wrapping {
        self.open.fetch_add(1, Ordering::SeqCst);
        let gate = Open(self.open.clone());
        Box::pin(async move { Ok(Box::new(Link { tcp, gate }) as BoxedPeerStream) })
    }
}

/// Serves peers over `transport`, answering every request with its payload; its address.
fn serve(transport: Arc<dyn PeerTransport>) -> (String, watch::Sender<bool>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let listener = TcpListener::from_std(listener).unwrap();
    let (stop, stopped) = watch::channel(false);
    let groups = Default::default();
    tokio::spawn(serve_peers_over(
        listener,
        transport,
        groups,
        Arc::new(Echo),
        stopped,
    ));
    (addr, stop)
}

/// A link that drops once, at the write that takes a connection past 1 KiB.
fn drops_once() -> (Dropping, Arc<AtomicU64>) {
    let drops = Arc::new(AtomicU64::new(0));
    let link = Dropping {
        after: 1024,
        times: 1,
        drops: drops.clone(),
    };
    (link, drops)
}

/// A small call goes through; the next, large enough to reach the drop, is lost at once;
/// the one after goes through on a new connection.
async fn lost_at_once_then_reconnects(pool: &PeerPool, drops: &AtomicU64) {
    let call = |bytes: usize| {
        // Far longer than the test: a call that waits for it has missed the failure.
        pool.call_on(
            Lane::Messages,
            2,
            PeerRequest::App(vec![7; bytes]),
            Duration::from_secs(120),
        )
    };
    assert!(matches!(call(10).await, Ok(PeerResponse::App(_))));
    match call(4096).await {
        Err(PeerError::Lost(2)) => {}
        other => panic!("a call on the connection that dropped was answered {other:?}"),
    }
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    match call(4096).await {
        Ok(PeerResponse::App(echo)) => assert_eq!(echo.len(), 4096),
        other => panic!("the call after the drop was answered {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_on_a_connection_whose_write_fails_is_lost_at_once_and_the_next_reconnects() {
    let open = Arc::new(AtomicU64::new(0));
    let (addr, _stop) = serve(Arc::new(Counted { open: open.clone() }));
    // The calling end's connection fails a write.
    let (link, drops) = drops_once();
    let pool = link.pool(1, &HashMap::from([(2, addr)]));
    lost_at_once_then_reconnects(&pool, &drops).await;
    // The failed connection is closed at the server too: one is left, the new one.
    let deadline = Instant::now() + Duration::from_secs(30);
    while open.load(Ordering::SeqCst) != 1 {
        assert!(
            Instant::now() < deadline,
            "{} connections open at the server",
            open.load(Ordering::SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_answer_cannot_be_sent_is_lost_at_once_and_the_next_reconnects() {
    // The answering end's connection fails a write (an answer).
    let (link, drops) = drops_once();
    let (addr, _stop) = serve(Arc::new(DroppingAccepted(link)));
    let pool = PeerPool::new(1, HashMap::from([(2, addr)]));
    lost_at_once_then_reconnects(&pool, &drops).await;
}

/// The first connection's first write waits until `fail` is set, then fails; later
/// connections pass everything.
struct HeldThenFailed {
    state: Arc<std::sync::Mutex<Held>>,
}

#[derive(Default)]
struct Held {
    connections: u64,
    /// A write is waiting at the gate.
    waiting: bool,
    fail: bool,
    waker: Option<std::task::Waker>,
}

/// The gate of one of [`HeldThenFailed`]'s connections (only the first holds).
struct HoldGate {
    state: Arc<std::sync::Mutex<Held>>,
    holds: bool,
}

impl Gate for HoldGate {
    fn before(&mut self, cx: &mut Context<'_>, len: usize) -> Poll<io::Result<usize>> {
        if !self.holds {
            return Poll::Ready(Ok(len));
        }
        let mut held = self.state.lock().unwrap();
        if held.fail {
            return Poll::Ready(Err(io::ErrorKind::ConnectionReset.into()));
        }
        held.waiting = true;
        held.waker = Some(cx.waker().clone());
        Poll::Pending
    }

    fn after(&mut self, _written: usize) {}
}

impl PeerTransport for HeldThenFailed {
    fn connect(&self, tcp: TcpStream, _addr: &str) -> Wrapping {
        let holds = {
            let mut held = self.state.lock().unwrap();
            held.connections += 1;
            held.connections == 1
        };
        let gate = HoldGate {
            state: self.state.clone(),
            holds,
        };
        Box::pin(async move { Ok(Box::new(Link { tcp, gate }) as BoxedPeerStream) })
    }

    fn accept(&self, tcp: TcpStream) -> Wrapping {
        Box::pin(async move { Ok(Box::new(tcp) as BoxedPeerStream) })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_still_queued_when_a_connection_fails_never_left_and_are_safe_to_retry() {
    let (addr, _stop) = serve(Arc::new(Counted {
        open: Arc::new(AtomicU64::new(0)),
    }));
    let state = Arc::new(std::sync::Mutex::new(Held::default()));
    let pool =
        PeerPool::new(1, HashMap::from([(2, addr)])).with_transport(Arc::new(HeldThenFailed {
            state: state.clone(),
        }));
    let request = |n: u8| PeerRequest::App(vec![n; 16]);
    let long = Duration::from_secs(120);
    // The first call's request is being written when the link fails.
    let writing = pool
        .send_on(Lane::Messages, 2, request(1), long)
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !state.lock().unwrap().waiting {
        assert!(Instant::now() < deadline, "the first write never began");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Two more wait behind it, queued.
    let queued = [
        pool.send_on(Lane::Messages, 2, request(2), long)
            .await
            .unwrap(),
        pool.send_on(Lane::Messages, 2, request(3), long)
            .await
            .unwrap(),
    ];
    {
        let mut held = state.lock().unwrap();
        held.fail = true;
        held.waker.take().unwrap().wake();
    }
    // The request being written may have reached the peer: lost. Those behind it never
    // left: unreachable, which a caller may retry.
    match tokio::time::timeout(Duration::from_secs(30), writing.answer()).await {
        Ok(Err(PeerError::Lost(2))) => {}
        other => panic!("the call being written was answered {other:?}"),
    }
    for call in queued {
        match tokio::time::timeout(Duration::from_secs(30), call.answer()).await {
            Ok(Err(PeerError::Unreachable(2, why))) => {
                assert!(why.contains("before the request was sent"), "{why}")
            }
            other => panic!("a call queued behind it was answered {other:?}"),
        }
    }
    // The next call goes over a new connection.
    match pool.call_on(Lane::Messages, 2, request(4), long).await {
        Ok(PeerResponse::App(echo)) => assert_eq!(echo, vec![4; 16]),
        other => panic!("the call after the failure was answered {other:?}"),
    }
}

/// A connection whose reads are held back once `hold` is set: its reader task never sees
/// what the peer sent, its close included.
struct ReadsHeld {
    tcp: TcpStream,
    hold: Arc<std::sync::atomic::AtomicBool>,
}

impl tokio::io::AsyncRead for ReadsHeld {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.hold.load(Ordering::SeqCst) {
            // Never woken: the test ends with the reads still held.
            return Poll::Pending;
        }
        Pin::new(&mut self.tcp).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for ReadsHeld {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

struct HoldsReads(Arc<std::sync::atomic::AtomicBool>);

impl PeerTransport for HoldsReads {
    fn connect(&self, tcp: TcpStream, _addr: &str) -> Wrapping {
        let hold = self.0.clone();
        Box::pin(async move { Ok(Box::new(ReadsHeld { tcp, hold }) as BoxedPeerStream) })
    }

    fn accept(&self, tcp: TcpStream) -> Wrapping {
        Box::pin(async move { Ok(Box::new(tcp) as BoxedPeerStream) })
    }
}

/// A peer that closed its connection (it died, say) before a request was written to it
/// never read the request, even when the calling end has not yet read the close: the call
/// is unreachable, safe to retry — not lost (which a forwarded write would answer
/// `UNCERTAIN`), nor left to its timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_written_after_the_peer_closed_is_not_sent_even_before_the_close_is_read() {
    let open = Arc::new(AtomicU64::new(0));
    let (addr, stop) = serve(Arc::new(Counted { open: open.clone() }));
    let hold = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let pool = PeerPool::new(1, HashMap::from([(2, addr)]))
        .with_transport(Arc::new(HoldsReads(hold.clone())));
    let call = || {
        pool.call_on(
            Lane::Messages,
            2,
            PeerRequest::App(vec![5; 16]),
            Duration::from_secs(60),
        )
    };
    assert!(matches!(call().await, Ok(PeerResponse::App(_))));
    // The calling end stops reading; the peer closes the connection.
    hold.store(true, Ordering::SeqCst);
    stop.send(true).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while open.load(Ordering::SeqCst) != 0 {
        assert!(Instant::now() < deadline, "the server kept its connection");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Its close reaches this end's socket (loopback: at once; a margin all the same).
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    match call().await {
        Err(PeerError::Unreachable(2, _)) => {}
        other => panic!("a request written after the peer closed was answered {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the call waited {:?}",
        started.elapsed()
    );
}
