//! TLS from the proxy to a VIP's backends: their certificates must chain to the configured CA
//! file and carry the configured server name (also sent as SNI).
use std::sync::Arc;

use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::config::BackendTls;

#[derive(Clone)]
pub(crate) struct BackendConnector {
    connector: TlsConnector,
    name: ServerName<'static>,
}

impl std::fmt::Debug for BackendConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackendConnector").field("name", &self.name).finish()
    }
}

/// Builds the connector; the error says which file or name is wrong.
pub(crate) fn connector(t: &BackendTls) -> Result<BackendConnector, String> {
    let pem = std::fs::read(&t.ca_file)
        .map_err(|e| format!("backend_tls.ca_file {}: cannot read: {e}", t.ca_file.display()))?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| format!("backend_tls.ca_file {}: {e}", t.ca_file.display()))?;
        roots.add(cert).map_err(|e| format!("backend_tls.ca_file {}: {e}", t.ca_file.display()))?;
    }
    if roots.is_empty() {
        return Err(format!("backend_tls.ca_file {}: no PEM certificate in it", t.ca_file.display()));
    }
    let name = ServerName::try_from(t.server_name.clone())
        .map_err(|e| format!("backend_tls.server_name {:?}: {e}", t.server_name))?;
    let mut config = ClientConfig::builder_with_provider(super::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(BackendConnector { connector: TlsConnector::from(Arc::new(config)), name })
}

impl BackendConnector {
    pub(crate) async fn connect(&self, stream: TcpStream) -> std::io::Result<TlsStream<TcpStream>> {
        self.connector.connect(self.name.clone(), stream).await
    }
}
