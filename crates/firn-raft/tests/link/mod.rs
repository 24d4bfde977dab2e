//! A peer connection whose writes pass a gate first: the tests' links that are slow, or
//! that drop.

// Each test file uses what it needs of these.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use firn_raft::peer::PeerPool;
use firn_raft::transport::{BoxedPeerStream, PeerTransport, Wrapping};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// What a link does around each write.
pub trait Gate: Unpin + Send + 'static {
    /// Before a write of `len` bytes: how many may go now (at most `len`), an error that
    /// fails the write, or pending until the link lets bytes through.
    fn before(&mut self, cx: &mut Context<'_>, len: usize) -> Poll<io::Result<usize>>;
    /// After `written` bytes went.
    fn after(&mut self, written: usize);
}

/// A TCP connection whose writes go through `G`; reads are the connection's own.
pub struct Link<G> {
    pub tcp: TcpStream,
    pub gate: G,
}

impl<G: Gate> AsyncWrite for Link<G> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let take = std::task::ready!(self.gate.before(cx, buf.len()))?;
        let written = std::task::ready!(Pin::new(&mut self.tcp).poll_write(cx, &buf[..take]))?;
        self.gate.after(written);
        Poll::Ready(Ok(written))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

impl<G: Gate> AsyncRead for Link<G> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_read(cx, buf)
    }
}

/// Connections whose link drops: each fails the write that would take what it sent past
/// `after` bytes, until `times` drops in all have happened (`drops` counts them).
pub struct Dropping {
    pub after: u64,
    pub times: u64,
    pub drops: Arc<AtomicU64>,
}

impl Dropping {
    pub fn pool(self, id: u64, addrs: &HashMap<u64, String>) -> PeerPool {
        PeerPool::new(id, addrs.clone()).with_transport(Arc::new(self))
    }
}

/// The gate of one of [`Dropping`]'s connections.
struct DropGate {
    sent: u64,
    after: u64,
    times: u64,
    drops: Arc<AtomicU64>,
}

impl Gate for DropGate {
    fn before(&mut self, _cx: &mut Context<'_>, len: usize) -> Poll<io::Result<usize>> {
        let past = self.sent + len as u64 > self.after;
        let times = self.times;
        let drop = || {
            self.drops
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                    (n < times).then_some(n + 1)
                })
                .is_ok()
        };
        if past && drop() {
            return Poll::Ready(Err(io::ErrorKind::ConnectionReset.into()));
        }
        Poll::Ready(Ok(len))
    }

    fn after(&mut self, written: usize) {
        self.sent += written as u64;
    }
}

impl Dropping {
    fn link(&self, tcp: TcpStream) -> Wrapping {
        let gate = DropGate {
            sent: 0,
            after: self.after,
            times: self.times,
            drops: self.drops.clone(),
        };
        Box::pin(async move { Ok(Box::new(Link { tcp, gate }) as BoxedPeerStream) })
    }
}

/// The connections a node makes drop.
impl PeerTransport for Dropping {
    fn connect(&self, tcp: TcpStream, _addr: &str) -> Wrapping {
        self.link(tcp)
    }

    fn accept(&self, tcp: TcpStream) -> Wrapping {
        Box::pin(async move { Ok(Box::new(tcp) as BoxedPeerStream) })
    }
}

/// The connections a node accepts drop (the answers it sends).
pub struct DroppingAccepted(pub Dropping);

impl PeerTransport for DroppingAccepted {
    fn connect(&self, tcp: TcpStream, _addr: &str) -> Wrapping {
        Box::pin(async move { Ok(Box::new(tcp) as BoxedPeerStream) })
    }

    fn accept(&self, tcp: TcpStream) -> Wrapping {
        self.0.link(tcp)
    }
}
