//! TLS for a node (rustls, the `ring` provider): the configurations the `--tls-*` flags
//! describe, built from their PEM files and checked before any port is bound; the first
//! step of every connection on the RESP and HTTP listeners (TLS or plain text, as its first
//! byte says, and the refusal of plain text where TLS is required); and the mutual-TLS
//! transport of peer connections. It never reads a request: what it returns is a stream.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use firn_raft::transport::{BoxedPeerStream, PeerTransport, Wrapping};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore, ServerConfig, crypto};
use tokio_rustls::{TlsAcceptor, TlsConnector, server};

/// Longest a TLS handshake may take before its connection is closed: a client that opens
/// connections and stalls must not hold them (and their tasks) for ever.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// The first byte of every TLS connection (a handshake record). No RESP command (`*`, or
/// an inline command's letter) and no HTTP request line starts with it.
const TLS_HANDSHAKE_BYTE: u8 = 0x16;
/// What a plain-text RESP client is told where TLS is required, before the close.
pub const RESP_TLS_REQUIRED: &[u8] =
    b"-ERR TLS is required on this port (connect with TLS, e.g. redis-cli --tls)\r\n";
/// What a plain-text HTTP client is told where TLS is required, before the close.
pub const HTTP_TLS_REQUIRED: &[u8] = b"HTTP/1.1 400 Bad Request\r\n\
content-type: text/plain; charset=utf-8\r\nconnection: close\r\ncontent-length: 52\r\n\r\n\
TLS is required on this port: use https:// instead.\n";
/// How long a refused plain-text connection is kept to read why.
const REFUSAL_WAIT: Duration = Duration::from_secs(1);
/// Accepted HTTP connections that finished their handshake and wait for the server.
const HTTP_ACCEPTED_QUEUE: usize = 64;

/// The `--tls-*` flags: off when all are unset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsSettings {
    /// The node's certificate chain (PEM), on the client listeners and toward peers.
    pub cert: Option<PathBuf>,
    /// Its private key (PEM).
    pub key: Option<PathBuf>,
    /// CA bundle (PEM): with it, peer connections are mutual TLS verified against it.
    pub ca: Option<PathBuf>,
    /// Refuse plain-text clients on the RESP and HTTP listeners.
    pub required: bool,
}

/// What the TLS settings built: how the client listeners accept, and the peer transport
/// (`None`: plain TCP).
#[derive(Clone, Default)]
pub struct NodeTls {
    pub clients: ClientTls,
    pub peers: Option<Arc<dyn PeerTransport>>,
}

impl TlsSettings {
    /// Reads and checks the files; the error names the flag and says what is wrong.
    pub fn load(&self) -> Result<NodeTls, String> {
        let (cert, key) = match (&self.cert, &self.key) {
            (None, None) => {
                if self.required {
                    return Err("--tls-required needs --tls-cert and --tls-key".into());
                }
                if self.ca.is_some() {
                    return Err(
                        "--tls-ca needs --tls-cert and --tls-key: a node presents its own \
                         certificate to its peers"
                            .into(),
                    );
                }
                return Ok(NodeTls::default());
            }
            (Some(_), None) => return Err("--tls-cert needs --tls-key (its private key)".into()),
            (None, Some(_)) => return Err("--tls-key needs --tls-cert (its certificate)".into()),
            (Some(cert), Some(key)) => (cert, key),
        };
        let chain = read_certs(cert, "--tls-cert")?;
        let key_der = read_key(key)?;
        let provider = Arc::new(crypto::ring::default_provider());
        let mismatch = |e| match e {
            rustls::Error::InconsistentKeys(_) => format!(
                "--tls-key {} is not the private key of --tls-cert {}",
                key.display(),
                cert.display()
            ),
            e => format!(
                "--tls-cert {} / --tls-key {}: {e}",
                cert.display(),
                key.display()
            ),
        };
        let clients = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(chain.clone(), key_der.clone_key())
            .map_err(mismatch)?;
        let clients = ClientTls {
            acceptor: Some(TlsAcceptor::from(Arc::new(clients))),
            required: self.required,
        };
        let Some(ca) = &self.ca else {
            return Ok(NodeTls {
                clients,
                peers: None,
            });
        };
        let mut roots = RootCertStore::empty();
        for c in read_certs(ca, "--tls-ca")? {
            roots
                .add(c)
                .map_err(|e| format!("--tls-ca {}: {e}", ca.display()))?;
        }
        let roots = Arc::new(roots);
        let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .build()
            .map_err(|e| format!("--tls-ca {}: {e}", ca.display()))?;
        let accepting = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), key_der.clone_key())
            .map_err(mismatch)?;
        let connecting = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key_der)
            .map_err(mismatch)?;
        Ok(NodeTls {
            clients,
            peers: Some(Arc::new(MutualTls {
                acceptor: TlsAcceptor::from(Arc::new(accepting)),
                connector: TlsConnector::from(Arc::new(connecting)),
            })),
        })
    }
}

fn read_pem(path: &Path, flag: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{flag} {}: cannot read it: {e}", path.display()))
}

fn read_certs(path: &Path, flag: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = read_pem(path, flag)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{flag} {}: not valid PEM: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{flag} {}: no certificate in it (PEM, -----BEGIN CERTIFICATE-----, expected)",
            path.display()
        ));
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let pem = read_pem(path, "--tls-key")?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        format!(
            "--tls-key {}: no private key in it (PEM, PKCS#8, PKCS#1 or SEC1, expected): {e}",
            path.display()
        )
    })
}

/// Which listener a connection came to, as metrics and refusals name it.
#[derive(Clone, Copy, Debug)]
pub enum ClientListener {
    Resp,
    Http,
    Mqtt,
}

impl ClientListener {
    fn label(self) -> &'static str {
        match self {
            ClientListener::Resp => "resp",
            ClientListener::Http => "http",
            ClientListener::Mqtt => "mqtt",
        }
    }

    fn tls_required(self) -> &'static [u8] {
        match self {
            ClientListener::Resp => RESP_TLS_REQUIRED,
            ClientListener::Http => HTTP_TLS_REQUIRED,
            // MQTT has no way to say it before a CONNECT: the connection just closes.
            ClientListener::Mqtt => b"",
        }
    }
}

/// Counts a connection refused for TLS (`firn_tls_refused_total{listener}`).
fn refused(listener: &'static str, why: &dyn std::fmt::Display) {
    metrics::counter!("firn_tls_refused_total", "listener" => listener).increment(1);
    // Peer refusals mean a misconfigured cluster, so they are logged, but at most once a
    // minute: a refused peer reconnects many times a second. Client ones are only counted.
    static LAST_WARNED_S: AtomicU64 = AtomicU64::new(0);
    if listener == "peer" {
        let now_s = std::time::UNIX_EPOCH.elapsed().map_or(0, |d| d.as_secs());
        let last = LAST_WARNED_S.load(Ordering::Relaxed);
        if now_s >= last + 60
            && LAST_WARNED_S
                .compare_exchange(last, now_s, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!("peer connection refused: {why} (more are only counted for a minute)");
            return;
        }
    }
    tracing::debug!(listener, "connection refused: {why}");
}

/// How the RESP and HTTP listeners take a connection (the default: plain text only).
#[derive(Clone, Default)]
pub struct ClientTls {
    acceptor: Option<TlsAcceptor>,
    required: bool,
}

impl ClientTls {
    pub fn is_on(&self) -> bool {
        self.acceptor.is_some()
    }

    /// The connection as TLS or plain text, as its first byte says; `None` when it closed
    /// first, failed its handshake, or was plain text where TLS is required (then it was
    /// told why). Waits for the client's first byte as long as it takes, as a plain
    /// listener waits for a first request; the handshake gets [`TLS_HANDSHAKE_TIMEOUT`].
    pub async fn accept(&self, tcp: TcpStream, listener: ClientListener) -> Option<ClientStream> {
        let Some(acceptor) = &self.acceptor else {
            return Some(ClientStream::Plain(tcp));
        };
        let mut first = [0u8; 1];
        if tcp.peek(&mut first).await.ok()? == 0 {
            return None;
        }
        if first[0] != TLS_HANDSHAKE_BYTE {
            if !self.required {
                return Some(ClientStream::Plain(tcp));
            }
            refused(listener.label(), &"plain text where TLS is required");
            tell_and_close(tcp, listener.tls_required()).await;
            return None;
        }
        match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
            Ok(Ok(tls)) => Some(ClientStream::Tls(Box::new(tls))),
            Ok(Err(e)) => {
                refused(listener.label(), &e);
                None
            }
            Err(_) => {
                refused(listener.label(), &"the TLS handshake timed out");
                None
            }
        }
    }
}

/// Writes why a connection is refused and closes it, reading what the client sent until it
/// closes: closing with unread input would reset the connection, and the client could lose
/// the answer before reading it.
async fn tell_and_close(mut tcp: TcpStream, why: &[u8]) {
    let told = async {
        tcp.write_all(why).await?;
        tcp.shutdown().await?;
        let mut sink = [0u8; 512];
        while tcp.read(&mut sink).await? > 0 {}
        Ok::<(), io::Error>(())
    };
    let _ = tokio::time::timeout(REFUSAL_WAIT, told).await;
}

/// A client connection, in TLS or plain text.
pub enum ClientStream {
    Plain(TcpStream),
    Tls(Box<server::TlsStream<TcpStream>>),
}

impl ClientStream {
    pub fn set_nodelay(&self, on: bool) -> io::Result<()> {
        match self {
            ClientStream::Plain(s) => s.set_nodelay(on),
            ClientStream::Tls(s) => s.get_ref().0.set_nodelay(on),
        }
    }

    /// Waits until a read would find something. A TLS stream may hold decrypted bytes
    /// already: it is always ready.
    pub async fn readable(&self) -> io::Result<()> {
        match self {
            ClientStream::Plain(s) => s.readable().await,
            ClientStream::Tls(_) => Ok(()),
        }
    }
}

impl AsyncRead for ClientStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            ClientStream::Tls(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ClientStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ClientStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            ClientStream::Tls(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ClientStream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            ClientStream::Tls(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            ClientStream::Plain(s) => s.is_write_vectored(),
            ClientStream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Plain(s) => Pin::new(s).poll_flush(cx),
            ClientStream::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            ClientStream::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// The HTTP listener with TLS: connections are accepted, and their handshakes run, in a
/// task of its own (one stalled handshake holds up no other); the server takes them done.
pub struct TlsHttpListener {
    accepted: mpsc::Receiver<(ClientStream, SocketAddr)>,
    local_addr: SocketAddr,
    /// The accepting task, ended (with the handshakes in progress) when the server drops
    /// the listener.
    accepting: JoinHandle<()>,
}

impl Drop for TlsHttpListener {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

impl TlsHttpListener {
    pub fn new(tcp: TcpListener, tls: ClientTls) -> io::Result<Self> {
        let local_addr = tcp.local_addr()?;
        let (tx, accepted) = mpsc::channel(HTTP_ACCEPTED_QUEUE);
        let accepting = tokio::spawn(async move {
            let mut handshakes = JoinSet::new();
            loop {
                tokio::select! {
                    a = tcp.accept() => match a {
                        Ok((stream, peer)) => {
                            let (tls, tx) = (tls.clone(), tx.clone());
                            handshakes.spawn(async move {
                                if let Some(stream) = tls.accept(stream, ClientListener::Http).await {
                                    let _ = stream.set_nodelay(true);
                                    let _ = tx.send((stream, peer)).await;
                                }
                            });
                        }
                        // Out of file descriptors, most likely: wait rather than spin.
                        Err(e) => {
                            tracing::warn!("http accept: {e}");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    },
                    Some(_) = handshakes.join_next(), if !handshakes.is_empty() => {}
                    _ = tx.closed() => return,
                }
            }
        });
        Ok(TlsHttpListener {
            accepted,
            local_addr,
            accepting,
        })
    }
}

impl axum::serve::Listener for TlsHttpListener {
    type Io = ClientStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.accepted.recv().await {
            Some(accepted) => accepted,
            // The accepting task ended (it does not, while the listener lives): accept
            // nothing more; the server still stops when told.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local_addr)
    }
}

/// Peer connections in mutual TLS: each side presents the node's certificate and checks
/// the other's against the CA bundle.
struct MutualTls {
    acceptor: TlsAcceptor,
    connector: TlsConnector,
}

/// The name a peer's certificate must hold: the host of its peer address (an IP or a DNS
/// name).
fn server_name(addr: &str) -> io::Result<ServerName<'static>> {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _port)| host);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_string()).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("peer address {addr}: {e}"),
        )
    })
}

impl PeerTransport for MutualTls {
    fn connect(&self, tcp: TcpStream, addr: &str) -> Wrapping {
        let (connector, name) = (self.connector.clone(), server_name(addr));
        Box::pin(async move {
            match connector.connect(name?, tcp).await {
                Ok(tls) => Ok(Box::new(tls) as BoxedPeerStream),
                Err(e) => {
                    refused("peer", &e);
                    Err(io::Error::other(format!("TLS: {e}")))
                }
            }
        })
    }

    fn accept(&self, tcp: TcpStream) -> Wrapping {
        let acceptor = self.acceptor.clone();
        Box::pin(async move {
            let tls: io::Result<server::TlsStream<TcpStream>> =
                match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(handshake) => handshake,
                    Err(_) => Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the TLS handshake timed out",
                    )),
                };
            tls.map(|s| Box::new(s) as BoxedPeerStream)
                .inspect_err(|e| refused("peer", e))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_name_is_the_host_of_the_peer_address() {
        assert_eq!(
            format!("{:?}", server_name("127.0.0.1:7381").unwrap()),
            format!("{:?}", ServerName::try_from("127.0.0.1").unwrap())
        );
        assert!(server_name("firn-0.firn-peers:7381").is_ok());
        assert!(server_name("[::1]:7381").is_ok());
        assert!(server_name("bad name:1").is_err());
    }

    #[test]
    fn half_of_a_key_pair_or_required_without_a_cert_is_refused() {
        let s = |cert: bool, key: bool, ca: bool, required: bool| TlsSettings {
            cert: cert.then(|| "c.pem".into()),
            key: key.then(|| "k.pem".into()),
            ca: ca.then(|| "ca.pem".into()),
            required,
        };
        let err = |t: TlsSettings| t.load().err().unwrap_or_default();
        assert!(err(s(true, false, false, false)).contains("--tls-cert needs --tls-key"));
        assert!(err(s(false, true, false, false)).contains("--tls-key needs --tls-cert"));
        assert!(err(s(false, false, false, true)).contains("--tls-required needs"));
        assert!(err(s(false, false, true, false)).contains("--tls-ca needs"));
        assert!(err(s(true, true, false, false)).contains("cannot read it"));
        assert!(!TlsSettings::default().load().unwrap().clients.is_on());
    }

    #[test]
    fn the_http_refusal_states_its_own_length() {
        let text = std::str::from_utf8(HTTP_TLS_REQUIRED).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("content-length: {}", body.len())));
    }
}
