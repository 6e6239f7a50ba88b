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
    /// Of those, refused by the per-client limits: connections of a client (address, IPv6 /64)
    /// that already held `limits.max_connections_per_client`, and requests (TCP VIPs: new
    /// connections) past its `requests_per_second_per_client`.
    pub clients_limited: u64,
    /// Requests that failed by the client's fault: refused heads (bad framing, Host), malformed
    /// or aborted bodies, uploads that stopped mid-way. Never counted against a backend.
    pub client_errors: u64,
    /// HTTP/1 clients answered 408 for not finishing a request head in time, and responses
    /// cut off (HTTP/1 connections, h2 streams) because the client took no byte of them for
    /// the send timeout.
    pub client_timeouts: u64,
    /// TLS handshakes that failed or timed out (TLS termination and SNI routing).
    pub tls_failures: u64,
    /// Whether the VIP still accepts connections (false once its listener failed for good).
    pub listening: bool,
    /// HTTP responses sent to clients (the backend's or the proxy's own), by status class.
    pub responses: StatusClasses,
    /// Attempts on another backend after a failed one (HTTP requests, TCP connections).
    pub retries: u64,
    /// Time from a request's head to its response's head (HTTP), errors included.
    pub response_time: LatencyHistogram,
    pub backends: Vec<BackendStats>,
}

/// Responses by status class: 1xx, 2xx, 3xx, 4xx, 5xx.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StatusClasses(pub [u64; 5]);

impl StatusClasses {
    /// The Prometheus label value of each class, in order.
    pub const LABELS: [&'static str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];
}

/// Upper bounds (seconds) of the response-time buckets: 1 ms to 10 s, as HAProxy's and
/// nginx's exporters use.
pub const RESPONSE_TIME_BOUNDS: [f64; 12] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];

/// A histogram snapshot: `counts[i]` observations in bucket i (not cumulative), the last
/// one above every bound.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LatencyHistogram {
    pub counts: Vec<u64>,
    pub sum_seconds: f64,
}

impl Eq for LatencyHistogram {}

impl LatencyHistogram {
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }
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
    /// Requests or relays waiting for a slot now (`max_connections` reached).
    pub queued: u64,
    /// Times passive outlier detection ejected it.
    pub ejections: u64,
}

/// Counters of one backend.
#[derive(Debug, Default)]
pub(crate) struct BackendCounters {
    pub(crate) requests: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) active: AtomicU64,
    pub(crate) ejections: AtomicU64,
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
    pub(crate) clients_limited: AtomicU64,
    pub(crate) client_errors: AtomicU64,
    pub(crate) client_timeouts: AtomicU64,
    pub(crate) tls_failures: AtomicU64,
    pub(crate) responses: [AtomicU64; 5],
    pub(crate) retries: AtomicU64,
    pub(crate) response_time: AtomicHistogram,
    /// The listener failed for good (closed or shut down under the VIP): nothing is accepted.
    pub(crate) listener_lost: std::sync::atomic::AtomicBool,
}

/// Response-time buckets as counters; observing is two atomic adds.
#[derive(Debug, Default)]
pub(crate) struct AtomicHistogram {
    counts: [AtomicU64; RESPONSE_TIME_BOUNDS.len() + 1],
    sum_micros: AtomicU64,
}

impl AtomicHistogram {
    pub(crate) fn observe(&self, took: std::time::Duration) {
        let seconds = took.as_secs_f64();
        let bucket = RESPONSE_TIME_BOUNDS.iter().position(|&b| seconds <= b).unwrap_or(RESPONSE_TIME_BOUNDS.len());
        self.counts[bucket].fetch_add(1, Relaxed);
        self.sum_micros.fetch_add(took.as_micros() as u64, Relaxed);
    }

    pub(crate) fn snapshot(&self) -> LatencyHistogram {
        LatencyHistogram {
            counts: self.counts.iter().map(|c| c.load(Relaxed)).collect(),
            sum_seconds: self.sum_micros.load(Relaxed) as f64 / 1e6,
        }
    }
}

impl VipCounters {
    /// One response sent to a client, `took` after its request's head arrived.
    pub(crate) fn responded(&self, status: http::StatusCode, took: std::time::Duration) {
        let class = (status.as_u16() / 100).clamp(1, 5) as usize - 1;
        self.responses[class].fetch_add(1, Relaxed);
        self.response_time.observe(took);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_land_in_their_class_and_bucket() {
        let c = VipCounters::default();
        c.responded(http::StatusCode::OK, std::time::Duration::from_micros(800));
        c.responded(http::StatusCode::BAD_GATEWAY, std::time::Duration::from_millis(30));
        c.responded(http::StatusCode::NOT_FOUND, std::time::Duration::from_secs(60));
        let classes: Vec<u64> = c.responses.iter().map(|a| a.load(Relaxed)).collect();
        assert_eq!(classes, [0, 1, 0, 1, 1]);
        let h = c.response_time.snapshot();
        assert_eq!(h.counts.len(), RESPONSE_TIME_BOUNDS.len() + 1);
        assert_eq!((h.counts[0], h.counts[5], h.counts[12]), (1, 1, 1), "{h:?}");
        assert!((h.sum_seconds - 60.0308).abs() < 1e-9);
    }
}
