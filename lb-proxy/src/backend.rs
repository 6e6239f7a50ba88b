//! A VIP's backends at run time: each backend's live state (health, weight, counters, outlier
//! state, maxconn gate, connection pool), and the immutable `BackendSet` the hot path reads.
//! Changes build a new set and swap it in (ArcSwap): requests never take a lock to pick.
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};

use arc_swap::ArcSwap;

use crate::balance::Schedule;
use crate::config::{BackendSpec, Balance, ProxyVipSpec};
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
    weight: AtomicU32,
    healthy: AtomicBool,
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

    fn new(spec: &BackendSpec, vip: &ProxyVipSpec, workers: usize) -> Self {
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
    pub(crate) fn may_take(&self, now_ms: u64, tried: &crate::balance::Tried) -> bool {
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
fn max_connections(spec: &BackendSpec, vip: &ProxyVipSpec) -> Option<u32> {
    spec.max_connections.or(vip.options.max_connections)
}

/// Keeps a backend's `active` count raised while a request or relay uses it.
#[derive(Debug)]
pub(crate) struct ActiveGuard(pub(crate) Arc<Backend>);

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.counters.active.fetch_sub(1, Relaxed);
    }
}

/// A snapshot of a VIP's backends plus the precomputed schedule (WRR sequence, Maglev ring).
#[derive(Debug)]
pub(crate) struct BackendSet {
    pub(crate) backends: Vec<Arc<Backend>>,
    pub(crate) schedule: Schedule,
}

/// The swappable backend set of a VIP.
#[derive(Debug)]
pub(crate) struct VipBackends {
    spec: ProxyVipSpec,
    workers: usize,
    current: ArcSwap<BackendSet>,
    /// Serializes writers (API, health checker); readers never touch it.
    write: std::sync::Mutex<()>,
}

impl VipBackends {
    pub(crate) fn new(spec: &ProxyVipSpec, workers: usize) -> Self {
        let backends = spec.backends.iter().map(|b| Arc::new(Backend::new(b, spec, workers))).collect();
        let set = build_set(&spec.options.balance, backends);
        VipBackends {
            spec: spec.clone(),
            workers,
            current: ArcSwap::from_pointee(set),
            write: std::sync::Mutex::new(()),
        }
    }

    pub(crate) fn load(&self) -> arc_swap::Guard<Arc<BackendSet>> {
        self.current.load()
    }

    /// Replaces the backend list. Backends that stay (same address and max_connections) keep
    /// their counters, pool and outlier state; removed ones finish their in-flight requests.
    pub(crate) fn set_backends(&self, specs: &[BackendSpec]) {
        let _w = self.write.lock().unwrap_or_else(|e| e.into_inner());
        let old = self.current.load_full();
        let backends = specs
            .iter()
            .map(|spec| {
                match old
                    .backends
                    .iter()
                    .find(|b| b.addr == spec.addr && b.max_connections == max_connections(spec, &self.spec))
                {
                    Some(b) => {
                        b.weight.store(spec.weight, Relaxed);
                        b.clone()
                    }
                    None => Arc::new(Backend::new(spec, &self.spec, self.workers)),
                }
            })
            .collect();
        self.current.store(Arc::new(build_set(&self.spec.options.balance, backends)));
    }

    /// Returns false when there is no backend at `addr`.
    pub(crate) fn set_health(&self, addr: SocketAddr, up: bool) -> bool {
        let _w = self.write.lock().unwrap_or_else(|e| e.into_inner());
        let old = self.current.load_full();
        let Some(b) = old.backends.iter().find(|b| b.addr == addr) else {
            return false;
        };
        if b.healthy.swap(up, Relaxed) != up {
            // The schedule only holds backends in rotation: rebuild it.
            self.current.store(Arc::new(build_set(&self.spec.options.balance, old.backends.clone())));
        }
        true
    }

    pub(crate) fn stats(&self) -> Vec<BackendStats> {
        self.load().backends.iter().map(|b| b.stats()).collect()
    }
}

fn build_set(balance: &Balance, backends: Vec<Arc<Backend>>) -> BackendSet {
    let schedule = Schedule::build(balance, &backends);
    BackendSet { backends, schedule }
}
