//! A served VIP: its spec, backends, balancer, limits and TLS, shared by all its connections.
use std::net::SocketAddr;
use std::sync::Arc;

use crate::backend::{Backend, Tried};
use crate::balance::Balancer;
use crate::config::{BackendSpec, HeaderRules, Mode, ProxyVipSpec, header_rules};
use crate::limits::{ConnLimit, PerClientLimit, PerClientRate};
use crate::pool::Dial;
use crate::stats::{VipCounters, VipStats};
use crate::tls::{TlsServer, name_matches};
use crate::vip_backends::VipBackends;

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
    /// `request_headers` and `response_headers`, parsed.
    pub(crate) request_headers: HeaderRules,
    pub(crate) response_headers: HeaderRules,
    /// Backend sets chosen by TLS server name (TCP VIPs with `sni`) or by Host and path
    /// (HTTP VIPs with `routes`), in order.
    pub(crate) routes: Vec<RouteGroup>,
    dial: Dial,
}

/// The backends serving some server names (SNI, or Host) and, for HTTP, paths.
#[derive(Debug)]
pub(crate) struct RouteGroup {
    names: Vec<String>,
    /// An HTTP route without hosts takes any Host (an SNI route without names takes none).
    any_name: bool,
    path_prefix: Option<String>,
    backends: VipBackends,
    balancer: Balancer,
}

impl RouteGroup {
    fn new(
        spec: &ProxyVipSpec,
        workers: usize,
        names: &[String],
        path_prefix: Option<&String>,
        backends: &[SocketAddr],
    ) -> Self {
        let mut group_spec = spec.clone();
        group_spec.backends = backends.iter().copied().map(BackendSpec::new).collect();
        RouteGroup {
            names: names.to_vec(),
            any_name: names.is_empty() && path_prefix.is_some(),
            path_prefix: path_prefix.cloned(),
            backends: VipBackends::new(&group_spec, workers),
            balancer: Balancer::default(),
        }
    }

    fn takes(&self, name: Option<&str>, path: &str) -> bool {
        let name_ok = self.any_name || name.is_some_and(|n| self.names.iter().any(|p| name_matches(p, n)));
        name_ok && self.path_prefix.as_ref().is_none_or(|p| path.starts_with(p.as_str()))
    }
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
        if let Some(mistake) = opts.mistakes(spec.mode).into_iter().next() {
            return Err(mistake);
        }
        let sni = opts
            .sni
            .iter()
            .flat_map(|s| &s.routes)
            .map(|r| RouteGroup::new(&spec, workers, &r.names, None, &r.backends));
        let http =
            opts.routes.iter().map(|r| RouteGroup::new(&spec, workers, &r.hosts, r.path_prefix.as_ref(), &r.backends));
        let routes = sni.chain(http).collect();
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
            request_headers: header_rules(&opts.request_headers)?,
            response_headers: header_rules(&opts.response_headers)?,
            tls,
            routes,
            local_addr,
            spec,
        })
    }

    /// Sets the health of `addr` wherever it serves: among the VIP's backends and in its
    /// routes. False when it is in none of them.
    pub(crate) fn set_health(&self, addr: SocketAddr, up: bool) -> bool {
        let mut found = self.backends.set_health(addr, up);
        for g in &self.routes {
            found |= g.backends.set_health(addr, up);
        }
        found
    }

    /// How backend connections are opened.
    pub(crate) fn dial(&self) -> Dial {
        self.dial.clone()
    }

    /// The route that takes a connection with TLS server name `name` (TCP) or a request for
    /// Host `name` and `path` (HTTP): the first that matches, None for the VIP's own backends.
    pub(crate) fn route(&self, name: Option<&str>, path: &str) -> Option<usize> {
        self.routes.iter().position(|g| g.takes(name, path))
    }

    /// The backends of `route` (the VIP's own for None) and their balancer.
    fn route_backends(&self, route: Option<usize>) -> (&VipBackends, &Balancer) {
        match route.and_then(|i| self.routes.get(i)) {
            Some(g) => (&g.backends, &g.balancer),
            None => (&self.backends, &self.balancer),
        }
    }

    /// The backend of `route` whose sticky token is `token`, if it may take the request now.
    pub(crate) fn sticky(&self, route: Option<usize>, token: u32, tried: &Tried) -> Option<Arc<Backend>> {
        let now = crate::outlier::now_ms();
        let set = self.route_backends(route).0.load();
        set.backends.iter().find(|b| b.sticky_token == token).filter(|b| b.may_take(now, tried)).cloned()
    }

    /// Chooses a backend of `route` for a request or connection whose hash key hashes to `hash`.
    pub(crate) fn pick_in_route(&self, route: Option<usize>, hash: u32, tried: &Tried) -> Option<Arc<Backend>> {
        let (backends, balancer) = self.route_backends(route);
        let set = backends.load();
        let i = balancer.pick(&self.spec.options.balance, &set, hash, tried)?;
        Some(set.backends[i].clone())
    }

    pub(crate) fn stats(&self) -> VipStats {
        use std::sync::atomic::Ordering::Relaxed;
        let mut backends = self.backends.stats();
        for g in &self.routes {
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
