//! A VIP's backends: the immutable `BackendSet` the hot path reads. Changes build a new set and
//! swap it in (ArcSwap): requests never take a lock to pick.
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use arc_swap::ArcSwap;

use crate::backend::{Backend, max_connections};
use crate::balance::{BackendSet, Schedule};
use crate::config::{BackendSpec, Balance, ProxyVipSpec};
use crate::stats::BackendStats;

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
