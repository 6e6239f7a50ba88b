//! TLS options: termination on HTTP VIPs, TLS to backends, and passthrough routing by server
//! name on TCP VIPs.
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

/// `[vip.proxy.tls]`: the proxy terminates TLS from clients.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsTermination {
    /// Chosen by the client's server name (SNI) against each certificate's names (wildcards
    /// included); the first one serves clients that send no name or a name none has.
    pub certificates: Vec<CertificateFiles>,
    /// ALPN protocols offered, in preference order (`h2`, `http/1.1`).
    #[serde(default = "default_alpn")]
    pub alpn: Vec<String>,
    /// Oldest TLS version accepted: `"1.2"` (default) or `"1.3"`.
    #[serde(default = "default_min_version")]
    pub min_version: String,
}

fn default_alpn() -> Vec<String> {
    vec!["h2".into(), "http/1.1".into()]
}

fn default_min_version() -> String {
    "1.2".into()
}

/// A certificate chain (PEM, leaf first) and its private key (PEM: PKCS#8, PKCS#1 or SEC1).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CertificateFiles {
    pub chain: PathBuf,
    pub key: PathBuf,
}

/// `[vip.proxy.backend_tls]`: the proxy speaks TLS to the backends.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendTls {
    /// PEM file of the certificate authorities the backends' certificates must chain to.
    pub ca_file: PathBuf,
    /// The name checked against the backends' certificates and sent as SNI.
    pub server_name: String,
}

/// `[vip.proxy.sni]`: TLS passthrough routed by the server name of the client's ClientHello,
/// read without terminating TLS (HAProxy's `req.ssl_sni`). Names no route lists go to the
/// VIP's own backends.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SniRouting {
    #[serde(default)]
    pub routes: Vec<SniRoute>,
}

/// Server names (exact, or `*.example.org` for one label) and the backends serving them.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SniRoute {
    pub names: Vec<String>,
    pub backends: Vec<SocketAddr>,
}
