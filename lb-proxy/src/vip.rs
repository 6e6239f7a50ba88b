//! A served VIP: its spec, backends, balancer, limits and TLS, shared by all its connections.
use std::net::SocketAddr;
use std::sync::Arc;

use crate::backend::{Backend, VipBackends};
use crate::balance::{Balancer, Tried};
use crate::config::{BackendSpec, Mode, ProxyVipSpec};
use crate::limits::{ConnLimit, PerClientLimit, PerClientRate};
use crate::pool::Dial;
use crate::stats::{VipCounters, VipStats};
use crate::tls::{TlsServer, name_matches};

#[derive(Debug)]
pub(crate) struct Vip {
    pub(crate) spec: ProxyVipSpec,
    /// The address actually bound (port 0 resolved).
    pub(crate) local_addr: SocketAddr,
    pub(crate) backends: VipBackends,
    pub(crate) balancer: Balancer,
    pub(crate) counters: VipCounters,
    pub(crate) conn_limit: ConnLimit,
    /// `limits.max_connections_per_client`.
    pub(crate) per_client: Option<Arc<PerClientLimit>>,
    /// `limits.requests_per_second_per_client`.
    pub(crate) per_client_rate: Option<PerClientRate>,
    /// TLS termination (HTTP VIPs with `tls`).
    pub(crate) tls: Option<TlsServer>,
    /// Backend sets chosen by TLS server name (TCP VIPs with `sni`).
    pub(crate) sni_routes: Vec<SniGroup>,
    dial: Dial,
}

/// The backends serving some server names.
#[derive(Debug)]
pub(crate) struct SniGroup {
    names: Vec<String>,
    backends: VipBackends,
    balancer: Balancer,
}

impl Vip {
    /// `workers`: how many workers serve it (each has its own backend connection pools).
    /// Loads the VIP's certificates and CA files; the error says which one is wrong.
    pub(crate) fn new(spec: ProxyVipSpec, local_addr: SocketAddr, workers: usize) -> Result<Self, String> {
        let opts = &spec.options;
        let tls = opts.tls.as_ref().map(TlsServer::new).transpose()?;
        let backend_tls = opts.backend_tls.as_ref().map(crate::tls::connector).transpose()?;
        if spec.mode == Mode::Tcp && (tls.is_some() || backend_tls.is_some()) {
            return Err("tls and backend_tls apply to HTTP VIPs; TCP VIPs pass TLS through (sni)".into());
        }
        if spec.mode == Mode::Http && opts.sni.is_some() {
            return Err("sni routing applies to TCP VIPs (TLS passthrough)".into());
        }
        let sni_routes = opts
            .sni
            .iter()
            .flat_map(|s| &s.routes)
            .map(|r| {
                let mut group_spec = spec.clone();
                group_spec.backends = r.backends.iter().copied().map(BackendSpec::new).collect();
                SniGroup {
                    names: r.names.clone(),
                    backends: VipBackends::new(&group_spec, workers),
                    balancer: Balancer::default(),
                }
            })
            .collect();
        Ok(Vip {
            backends: VipBackends::new(&spec, workers),
            balancer: Balancer::default(),
            counters: VipCounters::default(),
            conn_limit: ConnLimit::new(opts.limits.max_connections),
            per_client: opts.limits.max_connections_per_client.map(|n| PerClientLimit::new(n.get())),
            per_client_rate: opts
                .limits
                .requests_per_second_per_client
                .map(|rate| PerClientRate::new(rate, opts.limits.burst_per_client.unwrap_or(rate))),
            dial: Dial {
                connect_timeout: opts.timeouts.connect,
                keepalive: opts.timeouts.tcp_keepalive,
                tls: backend_tls,
            },
            tls,
            sni_routes,
            local_addr,
            spec,
        })
    }

    /// Sets the health of `addr` wherever it serves: among the VIP's backends and in its SNI
    /// routes. False when it is in none of them.
    pub(crate) fn set_health(&self, addr: SocketAddr, up: bool) -> bool {
        let mut found = self.backends.set_health(addr, up);
        for g in &self.sni_routes {
            found |= g.backends.set_health(addr, up);
        }
        found
    }

    /// How backend connections are opened.
    pub(crate) fn dial(&self) -> Dial {
        self.dial.clone()
    }

    /// Chooses a backend for a request or connection whose hash key hashes to `hash`.
    pub(crate) fn pick(&self, hash: u32, tried: &Tried) -> Option<Arc<Backend>> {
        pick_in(&self.backends, &self.balancer, &self.spec, hash, tried)
    }

    /// Like `pick`, among the backends routed to a TLS server name (the VIP's own backends
    /// for names no route lists, and for clients that sent none).
    pub(crate) fn pick_for_name(&self, name: Option<&str>, hash: u32, tried: &Tried) -> Option<Arc<Backend>> {
        let group = name.and_then(|n| self.sni_routes.iter().find(|g| g.names.iter().any(|p| name_matches(p, n))));
        match group {
            Some(g) => pick_in(&g.backends, &g.balancer, &self.spec, hash, tried),
            None => self.pick(hash, tried),
        }
    }

    pub(crate) fn stats(&self) -> VipStats {
        use std::sync::atomic::Ordering::Relaxed;
        let mut backends = self.backends.stats();
        for g in &self.sni_routes {
            backends.extend(g.backends.stats());
        }
        VipStats {
            name: self.spec.name.clone(),
            client_connections: self.counters.client_connections.load(Relaxed),
            rejected: self.counters.rejected.load(Relaxed),
            clients_limited: self.counters.clients_limited.load(Relaxed),
            client_errors: self.counters.client_errors.load(Relaxed),
            client_timeouts: self.counters.client_timeouts.load(Relaxed),
            tls_failures: self.counters.tls_failures.load(Relaxed),
            listening: !self.counters.listener_lost.load(Relaxed),
            responses: crate::stats::StatusClasses(self.counters.responses.each_ref().map(|c| c.load(Relaxed))),
            retries: self.counters.retries.load(Relaxed),
            response_time: self.counters.response_time.snapshot(),
            backends,
        }
    }
}

fn pick_in(
    backends: &VipBackends,
    balancer: &Balancer,
    spec: &ProxyVipSpec,
    hash: u32,
    tried: &Tried,
) -> Option<Arc<Backend>> {
    let set = backends.load();
    let i = balancer.pick(&spec.options.balance, &set, hash, tried)?;
    Some(set.backends[i].clone())
}
