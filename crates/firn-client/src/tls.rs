//! TLS to a node started with `--tls-cert`: the CA its certificate is checked against, for
//! both the RESP connection ([`crate::Client::connect_with`]) and the HTTP calls
//! ([`crate::LogClient::with_tls`]). The certificate must name the host dialled.

use std::sync::Arc;

use tokio_rustls::rustls::pki_types::CertificateDer;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::{ClientConfig, RootCertStore};

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
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| ClientError::Connection(format!("not PEM: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| ClientError::Connection(format!("not a CA certificate: {e}")))?;
        }
        if roots.is_empty() {
            return Err(ClientError::Connection("no certificate in the PEM".into()));
        }
        let config = ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(TlsCa {
            pem: pem.into(),
            config: Arc::new(config),
        })
    }

    pub(crate) fn pem(&self) -> &[u8] {
        &self.pem
    }

    /// The rustls configuration for HTTPS calls (ureq's `tls_config`).
    pub fn http_config(&self) -> Arc<ClientConfig> {
        self.config.clone()
    }
}
