//! TLS fixtures: a test CA and certificates generated at test time (rcgen), written as PEM
//! files; TLS clients and a TLS backend trusting that CA.
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore, ServerConfig};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use super::loopback;

pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
    pub dir: tempfile::TempDir,
}

/// A leaf certificate's files and DER.
pub struct Leaf {
    pub chain: PathBuf,
    pub key: PathBuf,
    pub der: CertificateDer<'static>,
}

impl Ca {
    pub fn new() -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, "lb-proxy test CA");
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Ca { issuer, dir: tempfile::tempdir().unwrap() }
    }

    /// Writes the CA certificate as PEM; returns its path.
    pub fn ca_file(&self) -> PathBuf {
        let p = self.dir.path().join("ca.pem");
        std::fs::write(&p, self.issuer.pem()).unwrap();
        p
    }

    /// A certificate for `names`, written to `<file>.crt` / `<file>.key`.
    pub fn leaf(&self, file: &str, names: &[&str]) -> Leaf {
        let key = KeyPair::generate().unwrap();
        let params = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let chain = self.dir.path().join(format!("{file}.crt"));
        let key_path = self.dir.path().join(format!("{file}.key"));
        std::fs::write(&chain, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        Leaf { chain, key: key_path, der: cert.der().clone() }
    }

    pub fn roots(&self) -> RootCertStore {
        let mut roots = RootCertStore::empty();
        roots.add(self.issuer.der().clone()).unwrap();
        roots
    }

    pub fn client_config(&self, alpn: &[&str]) -> Arc<ClientConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut c = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(self.roots())
            .with_no_client_auth();
        c.alpn_protocols = alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
        Arc::new(c)
    }
}

pub fn certificate_files(leaf: &Leaf) -> lb_proxy::CertificateFiles {
    lb_proxy::CertificateFiles { chain: leaf.chain.clone(), key: leaf.key.clone() }
}

/// TLS termination with `leaf`'s certificate, offering `alpn`, TLS 1.2 and up.
pub fn termination(leaf: &Leaf, alpn: &[&str]) -> lb_proxy::TlsTermination {
    lb_proxy::TlsTermination {
        certificates: vec![certificate_files(leaf)],
        alpn: alpn.iter().map(|a| a.to_string()).collect(),
        min_version: "1.2".into(),
    }
}

/// A TLS connection to `addr` with SNI `name`.
pub async fn connect(
    config: Arc<ClientConfig>,
    addr: std::net::SocketAddr,
    name: &str,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from(name.to_string()).unwrap();
    TlsConnector::from(config).connect(name, tcp).await
}

/// The certificate the server presented on a TLS connection.
pub fn peer_leaf(s: &tokio_rustls::client::TlsStream<TcpStream>) -> CertificateDer<'static> {
    s.get_ref().1.peer_certificates().unwrap()[0].clone().into_owned()
}

/// A TLS server (for passthrough tests) that answers every connection with `id` and closes.
pub async fn tls_id_server(leaf: &Leaf, id: &'static str) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let acceptor = acceptor(&leaf.chain, &leaf.key);
    let l = TcpListener::bind(loopback()).await.unwrap();
    let addr = l.local_addr().unwrap();
    let task = tokio::spawn(async move {
        loop {
            let Ok((s, _)) = l.accept().await else {
                continue;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(mut s) = acceptor.accept(s).await {
                    let mut buf = [0u8; 64];
                    let _ = s.read(&mut buf).await;
                    let _ = s.write_all(id.as_bytes()).await;
                    let _ = s.shutdown().await;
                }
            });
        }
    });
    (addr, task)
}

pub fn acceptor(chain: &Path, key: &Path) -> TlsAcceptor {
    use rustls_pki_types::PrivateKeyDer;
    use rustls_pki_types::pem::PemObject;
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(chain).unwrap().map(Result::unwrap).collect();
    let key = PrivateKeyDer::from_pem_file(key).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    TlsAcceptor::from(Arc::new(config))
}
