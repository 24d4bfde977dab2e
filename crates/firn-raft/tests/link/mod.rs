//! A peer connection whose writes pass a gate first: the tests' links that are slow, or
//! that drop.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

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
