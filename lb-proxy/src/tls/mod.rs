//! TLS with rustls: termination for HTTP VIPs (several certificates chosen by the client's
//! server name, ALPN, reload without touching established connections), TLS to backends, and
//! reading the server name of a ClientHello for passthrough routing.
mod backend;
mod sni;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::ServerConfig;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

pub(crate) use backend::{BackendConnector, connector};
pub(crate) use sni::{ClientHelloError, name_matches, read_server_name};

use crate::config::{CertificateFiles, TlsTermination};

/// Loads the TLS files `opts` names (certificates and keys, the backends' CA) as a VIP's start
/// would, so a configuration check reports a missing, unreadable or mismatched file first.
pub fn check_files(opts: &crate::ProxyOptions) -> Result<(), String> {
    if let Some(t) = &opts.tls {
        TlsServer::new(t)?;
    }
    if let Some(b) = &opts.backend_tls {
        connector(b)?;
    }
    Ok(())
}

/// The crypto provider of every TLS config here (ring; see Cargo.toml).
pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    let mut provider = rustls::crypto::ring::default_provider();
    // The SHA-384 suites go last (the server's order decides, see `ignore_client_order`): ring
    // runs SHA-256 on the CPU's SHA extensions but SHA-512/384 in plain code on AMD CPUs, and
    // SHA-384's HKDF was 11% of a handshake's CPU (`bench proxy`, TLS new connection).
    // AES-128-GCM is what Go's crypto/tls and most CDNs prefer too.
    use rustls::CipherSuite::{
        TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384, TLS13_AES_256_GCM_SHA384,
    };
    provider.cipher_suites.sort_by_key(|s| {
        matches!(
            s.suite(),
            TLS13_AES_256_GCM_SHA384 | TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384 | TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384
        )
    });
    Arc::new(provider)
}

/// A VIP's TLS termination: the acceptor, and the certificates it can swap.
pub(crate) struct TlsServer {
    acceptor: TlsAcceptor,
    certificates: Arc<Certificates>,
    files: Vec<CertificateFiles>,
}

impl std::fmt::Debug for TlsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsServer").field("files", &self.files).finish()
    }
}

impl TlsServer {
    /// Loads every certificate and key; the error names the file and what is wrong with it.
    pub(crate) fn new(t: &TlsTermination) -> Result<TlsServer, String> {
        if t.certificates.is_empty() {
            return Err("tls.certificates is empty: at least one chain and key are needed".into());
        }
        let versions: &[&rustls::SupportedProtocolVersion] = match t.min_version.as_str() {
            "1.2" => &[&rustls::version::TLS13, &rustls::version::TLS12],
            "1.3" => &[&rustls::version::TLS13],
            other => {
                return Err(format!("tls.min_version {other:?}: expected \"1.2\" or \"1.3\""));
            }
        };
        for p in &t.alpn {
            if p != "h2" && p != "http/1.1" {
                return Err(format!("tls.alpn {p:?}: expected \"h2\" or \"http/1.1\""));
            }
        }
        let certificates = Arc::new(Certificates(ArcSwap::from_pointee(load_all(&t.certificates)?)));
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(versions)
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_cert_resolver(certificates.clone());
        config.alpn_protocols = t.alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
        config.ignore_client_order = true;
        Ok(TlsServer { acceptor: TlsAcceptor::from(Arc::new(config)), certificates, files: t.certificates.clone() })
    }

    /// Reads the certificate files again and serves them to new handshakes; established
    /// connections keep their session. Nothing changes if any file is wrong.
    pub(crate) fn reload(&self) -> Result<(), String> {
        let loaded = load_all(&self.files)?;
        self.certificates.0.store(Arc::new(loaded));
        Ok(())
    }
}

/// Completes the handshake within `timeout`; returns the stream and whether ALPN chose h2.
pub(crate) async fn accept(
    tls: &TlsServer,
    stream: TcpStream,
    timeout: Duration,
) -> Option<(TlsStream<TcpStream>, bool)> {
    match tokio::time::timeout(timeout, tls.acceptor.accept(stream)).await {
        Ok(Ok(s)) => {
            let h2 = s.get_ref().1.alpn_protocol() == Some(b"h2");
            Some((s, h2))
        }
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "TLS handshake failed");
            None
        }
        Err(_) => {
            tracing::debug!("TLS handshake timed out");
            None
        }
    }
}

/// The certificates of a VIP, first one the default.
#[derive(Debug)]
struct Certificates(ArcSwap<Vec<Arc<CertifiedKey>>>);

impl ResolvesServerCert for Certificates {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let all = self.0.load();
        let named = hello.server_name().and_then(|n| ServerName::try_from(n.to_string()).ok());
        if let Some(name) = named {
            let fits = |ck: &&Arc<CertifiedKey>| {
                ck.end_entity_cert().ok().is_some_and(|der| {
                    webpki::EndEntityCert::try_from(der)
                        .is_ok_and(|ee| ee.verify_is_valid_for_subject_name(&name).is_ok())
                })
            };
            if let Some(ck) = all.iter().find(fits) {
                return Some(ck.clone());
            }
        }
        all.first().cloned()
    }
}

fn load_all(files: &[CertificateFiles]) -> Result<Vec<Arc<CertifiedKey>>, String> {
    files.iter().map(|f| load(f).map(Arc::new)).collect()
}

/// One chain and its key, checked to belong together.
fn load(f: &CertificateFiles) -> Result<CertifiedKey, String> {
    let chain_pem = read(&f.chain, "certificate chain")?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&chain_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("certificate chain {}: {e}", f.chain.display()))?;
    if chain.is_empty() {
        return Err(format!("certificate chain {}: no PEM certificate in it", f.chain.display()));
    }
    let key_pem = read(&f.key, "private key")?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| format!("private key {}: no usable PEM private key ({e})", f.key.display()))?;
    let signing =
        provider().key_provider.load_private_key(key).map_err(|e| format!("private key {}: {e}", f.key.display()))?;
    let ck = CertifiedKey::new(chain, signing);
    ck.keys_match().map_err(|e| {
        format!("private key {} does not belong to the certificate in {}: {e}", f.key.display(), f.chain.display())
    })?;
    Ok(ck)
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{what} {}: cannot read: {e}", path.display()))
}
