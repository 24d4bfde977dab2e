//! TLS to a node started with `--tls-cert`: the CA its certificate is checked against, for
//! both the RESP connection ([`crate::Client::connect_with`]) and the HTTP calls
//! ([`crate::LogClient::with_tls`]). The certificate must name the host dialled.

use std::sync::Arc;

use tokio_rustls::rustls::client::WebPkiServerVerifier;
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_rustls::rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, Error, RootCertStore, SignatureScheme,
};

use crate::ClientError;

/// A CA bundle (PEM) that signs the nodes' certificates.
#[derive(Clone)]
pub struct TlsCa {
    pem: Arc<[u8]>,
    config: Arc<ClientConfig>,
}

impl std::fmt::Debug for TlsCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsCa").finish_non_exhaustive()
    }
}

impl TlsCa {
    /// Reads a PEM file of one or more CA certificates.
    pub fn load(path: &std::path::Path) -> Result<Self, ClientError> {
        let pem = std::fs::read(path)
            .map_err(|e| ClientError::Connection(format!("{}: {e}", path.display())))?;
        Self::from_pem(pem).map_err(|e| ClientError::Connection(format!("{}: {e}", path.display())))
    }

    pub fn from_pem(pem: Vec<u8>) -> Result<Self, ClientError> {
        let mut roots = RootCertStore::empty();
        let mut given = Vec::new();
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| ClientError::Connection(format!("not PEM: {e}")))?;
            given.push(cert.clone());
            roots
                .add(cert)
                .map_err(|e| ClientError::Connection(format!("not a CA certificate: {e}")))?;
        }
        if roots.is_empty() {
            return Err(ClientError::Connection("no certificate in the PEM".into()));
        }
        let webpki = WebPkiServerVerifier::builder(Arc::new(roots))
            .build()
            .map_err(|e| ClientError::Connection(format!("the CA bundle: {e}")))?;
        let config = ClientConfig::builder()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(GivenOrSigned { webpki, given }))
            .with_no_client_auth();
        Ok(TlsCa {
            pem: pem.into(),
            config: Arc::new(config),
        })
    }

    pub(crate) fn pem(&self) -> &[u8] {
        &self.pem
    }

    /// The rustls configuration for HTTPS calls (ureq's `tls_config`) and RESP connections.
    pub fn http_config(&self) -> Arc<ClientConfig> {
        self.config.clone()
    }
}

/// The node's certificate is checked as rustls checks it — signed by a CA of the bundle, for
/// the host dialled — except that a certificate the bundle holds itself is also taken as the
/// node's when it names the host: a self-signed certificate that is marked as a CA, as
/// `openssl req -x509` makes by default, which rustls refuses as an end entity
/// (`CaUsedAsEndEntity`) while OpenSSL clients (redis-cli, curl, Python) take it as given.
/// Only those exact bytes are taken: the user named the certificate itself as trusted.
#[derive(Debug)]
struct GivenOrSigned {
    webpki: Arc<WebPkiServerVerifier>,
    given: Vec<CertificateDer<'static>>,
}

impl ServerCertVerifier for GivenOrSigned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        match self
            .webpki
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(Error::InvalidCertificate(CertificateError::Other(e)))
                if format!("{e:?}").contains("CaUsedAsEndEntity")
                    && self.given.iter().any(|g| g.as_ref() == end_entity.as_ref()) =>
            {
                let parsed = tokio_rustls::rustls::server::ParsedCertificate::try_from(end_entity)?;
                tokio_rustls::rustls::client::verify_server_name(&parsed, server_name)?;
                Ok(ServerCertVerified::assertion())
            }
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// Where `addr` (`[user:password@]host:port`) points, for a TLS connection made here: its
/// connection settings (the credentials to sign in with), the host and port to dial, and the
/// name the node's certificate must carry.
pub(crate) struct TlsTarget {
    pub(crate) info: redis::ConnectionInfo,
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) name: tokio_rustls::rustls::pki_types::ServerName<'static>,
}

impl TlsTarget {
    pub(crate) fn of(addr: &str) -> crate::Result<TlsTarget> {
        let failed = |e: &dyn std::fmt::Display| ClientError::Connection(e.to_string());
        let info = redis::IntoConnectionInfo::into_connection_info(format!("redis://{addr}/"))
            .map_err(|e| failed(&e))?;
        let redis::ConnectionAddr::Tcp(host, port) = info.addr().clone() else {
            return Err(ClientError::Connection(format!(
                "{addr}: not a host and port"
            )));
        };
        let name = tokio_rustls::rustls::pki_types::ServerName::try_from(host.clone())
            .map_err(|e| failed(&e))?;
        Ok(TlsTarget {
            info,
            host,
            port,
            name,
        })
    }
}

/// The RESP connection over TLS to `addr` (`[user:password@]host:port`) with this crate's
/// own check of the node's certificate (see [`TlsCa`]): the TLS stream is made here and
/// handed to the redis crate, whose own TLS takes a CA bundle only.
pub async fn tls_connection(
    addr: &str,
    ca: &TlsCa,
    config: redis::AsyncConnectionConfig,
) -> crate::Result<redis::aio::MultiplexedConnection> {
    let failed = |e: &dyn std::fmt::Display| ClientError::Connection(e.to_string());
    let target = TlsTarget::of(addr)?;
    let tcp = tokio::net::TcpStream::connect((target.host.as_str(), target.port))
        .await
        .map_err(|e| failed(&e))?;
    let _ = tcp.set_nodelay(true);
    let (info, name) = (target.info, target.name);
    let stream = tokio_rustls::TlsConnector::from(ca.http_config())
        .connect(name, tcp)
        .await
        .map_err(|e| failed(&e))?;
    let (conn, driver) =
        redis::aio::MultiplexedConnection::new_with_config(info.redis_settings(), stream, config)
            .await
            .map_err(|e| failed(&e))?;
    tokio::spawn(driver);
    Ok(conn)
}
