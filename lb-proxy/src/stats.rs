//! Counters exported through `ProxyHandle::stats()` (the daemon's API and metrics read them).
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use serde::Serialize;

/// One VIP's figures.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct VipStats {
    pub name: String,
    /// Client connections open now.
    pub client_connections: u64,
    /// Requests (HTTP) or connections (TCP) refused before reaching a backend:
    /// limits, no backend, full queues.
    pub rejected: u64,
    /// Requests that failed by the client's fault: refused heads (bad framing, Host), malformed
    /// or aborted bodies, uploads that stopped mid-way. Never counted against a backend.
    pub client_errors: u64,
    /// HTTP/1 clients answered 408 for not finishing a request head in time.
    pub client_timeouts: u64,
    /// TLS handshakes that failed or timed out (TLS termination and SNI routing).
    pub tls_failures: u64,
    /// Whether the VIP still accepts connections (false once its listener failed for good).
    pub listening: bool,
    pub backends: Vec<BackendStats>,
}

/// One backend's figures. Counters start when the backend is added and survive weight and
/// health changes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BackendStats {
    pub addr: SocketAddr,
    pub weight: u32,
    /// As last set by the health checker (`set_backend_health`).
    pub healthy: bool,
    /// Ejected by passive outlier detection right now.
    pub ejected: bool,
    /// Requests (HTTP) or relayed connections (TCP) sent to it.
    pub requests: u64,
    /// Connect failures, timeouts, broken responses and 5xx.
    pub errors: u64,
    /// Requests or relays in progress now.
    pub active: u64,
}

/// Counters of one backend.
#[derive(Debug, Default)]
pub(crate) struct BackendCounters {
    pub(crate) requests: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) active: AtomicU64,
}

impl BackendCounters {
    pub(crate) fn error(&self) {
        self.errors.fetch_add(1, Relaxed);
    }
}

/// Counters of one VIP.
#[derive(Debug, Default)]
pub(crate) struct VipCounters {
    pub(crate) client_connections: AtomicU64,
    pub(crate) rejected: AtomicU64,
    pub(crate) client_errors: AtomicU64,
    pub(crate) client_timeouts: AtomicU64,
    pub(crate) tls_failures: AtomicU64,
    /// The listener failed for good (closed or shut down under the VIP): nothing is accepted.
    pub(crate) listener_lost: std::sync::atomic::AtomicBool,
}
