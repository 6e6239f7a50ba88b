//! A served VIP: its spec, backends, balancer and limits, shared by all its connections.
use std::net::SocketAddr;
use std::sync::Arc;

use crate::backend::{Backend, VipBackends};
use crate::balance::{Balancer, Tried};
use crate::config::ProxyVipSpec;
use crate::limits::ConnLimit;
use crate::stats::{VipCounters, VipStats};

#[derive(Debug)]
pub(crate) struct Vip {
    pub(crate) spec: ProxyVipSpec,
    /// The address actually bound (port 0 resolved).
    pub(crate) local_addr: SocketAddr,
    pub(crate) backends: VipBackends,
    pub(crate) balancer: Balancer,
    pub(crate) counters: VipCounters,
    pub(crate) conn_limit: ConnLimit,
}

impl Vip {
    /// `workers`: how many workers serve it (each has its own backend connection pools).
    pub(crate) fn new(spec: ProxyVipSpec, local_addr: SocketAddr, workers: usize) -> Self {
        Vip {
            backends: VipBackends::new(&spec, workers),
            balancer: Balancer::default(),
            counters: VipCounters::default(),
            conn_limit: ConnLimit::new(spec.limits.max_connections),
            local_addr,
            spec,
        }
    }

    /// Chooses a backend for a request or connection whose hash key hashes to `hash`.
    pub(crate) fn pick(&self, hash: u32, tried: &Tried) -> Option<Arc<Backend>> {
        let set = self.backends.load();
        let i = self.balancer.pick(&self.spec.balance, &set, hash, tried)?;
        Some(set.backends[i].clone())
    }

    pub(crate) fn stats(&self) -> VipStats {
        use std::sync::atomic::Ordering::Relaxed;
        VipStats {
            name: self.spec.name.clone(),
            client_connections: self.counters.client_connections.load(Relaxed),
            rejected: self.counters.rejected.load(Relaxed),
            backends: self.backends.stats(),
        }
    }
}
