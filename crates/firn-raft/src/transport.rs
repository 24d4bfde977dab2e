//! What a peer connection runs over: plain TCP by default, or what the node wraps a TCP
//! stream in (mutual TLS, see `firn_node::tls`). This crate reads no certificates and knows
//! no TLS; it only hands each connected or accepted TCP stream to the node's transport.

use std::future::Future;
use std::io;
use std::pin::Pin;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// A byte stream a peer connection's frames travel over.
pub trait PeerStream: AsyncRead + AsyncWrite + Unpin + Send + 'static {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> PeerStream for T {}

pub type BoxedPeerStream = Box<dyn PeerStream>;

pub type Wrapping = Pin<Box<dyn Future<Output = io::Result<BoxedPeerStream>> + Send>>;

/// Wraps the TCP streams of peer connections. An error refuses the connection: the caller
/// closes it (and, connecting, reports the peer unreachable).
pub trait PeerTransport: Send + Sync + 'static {
    /// A connection this node made to the peer at `addr` (`host:port`, as the layout
    /// names it).
    fn connect(&self, tcp: TcpStream, addr: &str) -> Wrapping;
    /// A connection a peer made to this node.
    fn accept(&self, tcp: TcpStream) -> Wrapping;
}

/// Peer frames straight over TCP.
pub struct PlainTcp;

impl PeerTransport for PlainTcp {
    fn connect(&self, tcp: TcpStream, _addr: &str) -> Wrapping {
        Box::pin(async move { Ok(Box::new(tcp) as BoxedPeerStream) })
    }

    fn accept(&self, tcp: TcpStream) -> Wrapping {
        Box::pin(async move { Ok(Box::new(tcp) as BoxedPeerStream) })
    }
}
