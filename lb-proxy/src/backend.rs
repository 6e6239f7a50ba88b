//! A backend at run time: its live state (health, weight, counters, outlier state, maxconn
//! gate, connection pool). `vip_backends.rs` holds a VIP's set of them.
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};

use crate::config::{BackendSpec, ProxyVipSpec};
use crate::limits::BackendGate;
use crate::outlier::{OutlierState, now_ms};
use crate::pool::Pool;
use crate::stats::{BackendCounters, BackendStats};

#[derive(Debug)]
pub(crate) struct Backend {
    pub(crate) addr: SocketAddr,
    /// Its value in the `sticky_cookie`: a hash of the address (with the VIP's seed), the same
    /// on every balancer of the VIP and across restarts, that does not show the address.
    pub(crate) sticky_token: u32,
    pub(crate) max_connections: Option<u32>,
    /// Written only by `VipBackends` (set_backends, set_health), like `healthy`.
    pub(crate) weight: AtomicU32,
    pub(crate) healthy: AtomicBool,
    pub(crate) counters: BackendCounters,
    pub(crate) outlier: OutlierState,
    pub(crate) gate: BackendGate,
    /// Idle connections, one pool per worker: a connection's socket is registered with the
    /// runtime of the worker that opened it, so only that worker reuses it.
    pools: Box<[Pool]>,
}

impl Backend {
    /// Counts a failed request or connect for outlier detection; an ejection is logged.
    pub(crate) fn record_failure(&self, cfg: &crate::config::Outlier) {
        if self.outlier.record_failure(cfg, now_ms()) {
            self.counters.ejections.fetch_add(1, Relaxed);
            tracing::info!(backend = %self.addr, "backend ejected by outlier detection");
        }
    }

    pub(crate) fn new(spec: &BackendSpec, vip: &ProxyVipSpec, workers: usize) -> Self {
        let max_connections = max_connections(spec, vip);
        let mut key = lb_common::ip_bytes(spec.addr.ip()).0.to_vec();
        key.extend_from_slice(&spec.addr.port().to_be_bytes());
        Backend {
            addr: spec.addr,
            sticky_token: lb_common::hash::bytes_hash(&key, u64::from(vip.hash_seed)) as u32,
            max_connections,
            weight: AtomicU32::new(spec.weight),
            healthy: AtomicBool::new(true),
            counters: BackendCounters::default(),
            outlier: OutlierState::default(),
            gate: BackendGate::new(max_connections, vip.options.limits.queue_per_backend),
            pools: (0..workers.max(1))
                .map(|_| Pool::new(vip.options.limits.pool_idle_per_backend, vip.options.timeouts.idle))
                .collect(),
        }
    }

    /// The current worker's pool of idle connections to this backend.
    pub(crate) fn pool(&self) -> &Pool {
        &self.pools[crate::workers::current() % self.pools.len()]
    }

    pub(crate) fn weight(&self) -> u32 {
        self.weight.load(Relaxed)
    }

    pub(crate) fn is_healthy(&self) -> bool {
        self.healthy.load(Relaxed)
    }

    /// May get new requests, ignoring outlier ejection: up and not draining.
    pub(crate) fn in_rotation(&self) -> bool {
        self.is_healthy() && self.weight() > 0
    }

    /// May take a new request now, with no second thought: in rotation, not ejected by
    /// outlier detection, and not among the backends this request already failed on.
    pub(crate) fn may_take(&self, now_ms: u64, tried: &Tried) -> bool {
        self.in_rotation() && !self.outlier.is_ejected(now_ms) && !tried.contains(&self.addr)
    }

    pub(crate) fn active(&self) -> u64 {
        self.counters.active.load(Relaxed)
    }

    /// Counts the request and marks it active until the guard drops.
    pub(crate) fn begin(self: &Arc<Self>) -> ActiveGuard {
        self.counters.requests.fetch_add(1, Relaxed);
        self.counters.active.fetch_add(1, Relaxed);
        ActiveGuard(self.clone())
    }

    pub(crate) fn stats(&self) -> BackendStats {
        BackendStats {
            addr: self.addr,
            weight: self.weight(),
            healthy: self.is_healthy(),
            ejected: self.outlier.is_ejected(now_ms()),
            requests: self.counters.requests.load(Relaxed),
            errors: self.counters.errors.load(Relaxed),
            active: self.active(),
            queued: self.gate.waiting() as u64,
            ejections: self.counters.ejections.load(Relaxed),
        }
    }
}

/// A backend's own limit, or the VIP's default one.
pub(crate) fn max_connections(spec: &BackendSpec, vip: &ProxyVipSpec) -> Option<u32> {
    spec.max_connections.or(vip.options.max_connections)
}

/// Backends a request already tried (and failed on), by address: retries go elsewhere.
pub(crate) type Tried = [std::net::SocketAddr];

/// Keeps a backend's `active` count raised while a request or relay uses it.
#[derive(Debug)]
pub(crate) struct ActiveGuard(pub(crate) Arc<Backend>);

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.counters.active.fetch_sub(1, Relaxed);
    }
}
