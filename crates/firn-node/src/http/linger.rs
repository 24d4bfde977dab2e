//! Lingering close: an HTTP connection the server ends while its client may still be
//! sending is read to its end (bounded) before it is closed.
//!
//! A request refused before its body is read — a body over the limit, a bad path segment, a
//! bad header — is answered at once, and the HTTP server then ends the connection, the rest
//! of the body unread. Closing a socket with unread data makes the kernel reset the
//! connection: a client still writing the body gets a broken pipe (or a reset) instead of
//! the answer already on its way, and may report that rather than the refusal. So the socket
//! is not closed when the server drops it: its write side is shut (the client sees the
//! answer end) and what still arrives is read and discarded until the client closes, for at
//! most [`LINGER_FOR`] and [`LINGER_BYTES_MAX`] — as web servers do (nginx's
//! `lingering_close`). A connection its client closed first ends at once.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

/// Longest a connection is read after the server is done with it.
pub const LINGER_FOR: Duration = Duration::from_secs(5);
/// Most bytes read and discarded after the server is done with a connection (a body past
/// them is cut off: the client then sees the connection reset).
pub const LINGER_BYTES_MAX: usize = 256 << 20;

/// A listener whose connections linger (see the module).
pub struct Lingering<L>(pub L);

impl<L: axum::serve::Listener> axum::serve::Listener for Lingering<L> {
    type Io = LingeringIo<L::Io>;
    type Addr = L::Addr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (io, addr) = self.0.accept().await;
        (LingeringIo(Some(io)), addr)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

/// A connection that lingers when dropped (see the module).
pub struct LingeringIo<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(Option<S>);

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> LingeringIo<S> {
    fn inner(&mut self) -> Pin<&mut S> {
        Pin::new(
            self.0
                .as_mut()
                .expect("a connection is only taken when dropped"),
        )
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> Drop for LingeringIo<S> {
    fn drop(&mut self) {
        if let (Some(io), Ok(runtime)) = (self.0.take(), tokio::runtime::Handle::try_current()) {
            runtime.spawn(linger(io));
        }
    }
}

/// Shuts the write side, then reads until the client closes (or the bounds are reached).
async fn linger<S: AsyncRead + AsyncWrite + Unpin>(mut io: S) {
    let _ = tokio::time::timeout(LINGER_FOR, async {
        let _ = io.shutdown().await;
        let mut buf = vec![0u8; 64 * 1024];
        let mut read = 0;
        while read < LINGER_BYTES_MAX {
            match io.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => read += n,
            }
        }
    })
    .await;
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> AsyncRead for LingeringIo<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.inner().poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> AsyncWrite for LingeringIo<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.inner().poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.inner().poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.as_ref().is_some_and(|s| s.is_write_vectored())
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.inner().poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.inner().poll_shutdown(cx)
    }
}
