//! The userspace proxy's side of the daemon: proxy VIPs of lb.toml become lb-proxy specs, and
//! the running proxy follows the daemon's state (reloads, API changes, health), so
//! `backends add/remove/drain` and the health checker work for proxy VIPs as for XDP ones.
pub mod route_checks;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use lb_proxy::{BackendSpec, ProxyError, ProxyHandle, ProxyOptions, ProxyVipSpec};

use crate::config::Protocol;
use crate::state::plan::ring_input;
use crate::state::{State, VipState};

/// How long a removed proxy VIP's in-flight requests may take to finish.
const REMOVE_GRACE: Duration = Duration::from_secs(5);

/// The backends as the proxy should see them: the VIP's backends with their weights (0 when
/// drained), and whether each may take new requests (healthy, or the all-down policy says
/// forward to all) — the same rule the XDP ring follows.
pub fn backends(vip: &VipState, max_connections: Option<u32>) -> Vec<(BackendSpec, bool)> {
    let usable: Vec<u32> = ring_input(vip).members.iter().map(|(id, _, _)| *id).collect();
    vip.backends
        .iter()
        .map(|b| {
            let spec = BackendSpec { addr: b.address, weight: b.effective_weight(), max_connections };
            (spec, usable.contains(&b.id))
        })
        .collect()
}

/// The lb-proxy spec of a proxy VIP.
pub fn spec(vip: &VipState, hash_seed: u32) -> ProxyVipSpec {
    let options = vip.proxy.clone().unwrap_or_default();
    let mut spec = ProxyVipSpec::new(vip.label(), SocketAddr::new(vip.address, vip.port), vip.protocol.proxy_mode());
    spec.hash_seed = hash_seed;
    spec.backends = backends(vip, options.max_connections).into_iter().map(|(b, _)| b).collect();
    spec.options = options;
    spec
}

/// What a running proxy VIP was started from: a change means restarting that VIP.
#[derive(Clone, Debug, PartialEq)]
struct Started {
    listen: SocketAddr,
    protocol: Protocol,
    options: Option<ProxyOptions>,
    hash_seed: u32,
}

/// The proxy running inside the daemon, kept in step with its state.
pub struct ProxyRuntime {
    handle: ProxyHandle,
    runtime: tokio::runtime::Handle,
    running: HashMap<String, Started>,
    /// The backends (and whether each is usable) last handed to each running VIP.
    applied: HashMap<String, Vec<(BackendSpec, bool)>>,
    /// What the last `sync` changed, in words (empty: nothing).
    last_changes: Vec<String>,
    /// Health checks of the VIPs' route backends (SNI and HTTP routes).
    route_checks: route_checks::RouteChecks,
}

impl ProxyRuntime {
    /// A proxy with no VIP yet. Called within the daemon's tokio runtime.
    /// A proxy with `workers` worker threads (None: one per CPU).
    pub fn new(runtime: tokio::runtime::Handle, workers: Option<usize>) -> Result<Self, ProxyError> {
        let mut builder = lb_proxy::Proxy::builder();
        if let Some(n) = workers {
            builder = builder.workers(n);
        }
        let handle = runtime.block_on(builder.start(Vec::new()))?;
        Ok(Self {
            handle,
            runtime,
            running: HashMap::new(),
            applied: HashMap::new(),
            last_changes: Vec::new(),
            route_checks: Default::default(),
        })
    }

    pub fn handle(&self) -> &ProxyHandle {
        &self.handle
    }

    /// What the last `sync` changed (VIPs started, restarted or stopped, backends changed),
    /// in words; empty when it changed nothing. The map report does not see proxy VIPs.
    pub fn last_changes(&self) -> &[String] {
        &self.last_changes
    }

    /// Starts, restarts or stops proxy VIPs so they match `state`, then hands every proxy VIP
    /// its backends and their health. Called from the writer (a blocking thread).
    pub fn sync(&mut self, state: &State) -> Result<(), ProxyError> {
        let wanted: HashMap<String, &VipState> =
            state.vips.iter().filter(|v| !v.forwarding.is_xdp()).map(|v| (v.label(), v)).collect();
        let stale: Vec<String> = self
            .running
            .iter()
            .filter(|(name, started)| wanted.get(*name).is_none_or(|v| started_from(v, state.hash_seed) != **started))
            .map(|(name, _)| name.clone())
            .collect();
        self.last_changes.clear();
        for name in stale {
            self.route_checks.stop(&name);
            self.runtime.block_on(self.handle.remove_vip(&name, REMOVE_GRACE))?;
            self.running.remove(&name);
            self.applied.remove(&name);
            let what = if wanted.contains_key(&name) { "restarted" } else { "stopped" };
            self.last_changes.push(format!("proxy VIP {name} {what}"));
        }
        for (name, vip) in &wanted {
            if !self.running.contains_key(name) {
                self.runtime.block_on(self.handle.add_vip(spec(vip, state.hash_seed)))?;
                self.running.insert(name.clone(), started_from(vip, state.hash_seed));
                if !self.last_changes.iter().any(|c| c == &format!("proxy VIP {name} restarted")) {
                    self.last_changes.push(format!("proxy VIP {name} started"));
                }
            } else {
                // Certificates are read again on every sync (reload): new handshakes get the
                // files' current contents, established connections keep theirs.
                self.handle.reload_tls(name)?;
            }
            self.route_checks.sync(name, vip, &self.handle, &self.runtime);
            let max_connections = vip.proxy.as_ref().and_then(|o| o.max_connections);
            let backends = backends(vip, max_connections);
            if self.applied.get(name) == Some(&backends) {
                continue;
            }
            self.handle.set_backends(name, backends.iter().map(|(b, _)| b.clone()).collect())?;
            for (b, up) in &backends {
                self.handle.set_backend_health(name, b.addr, *up)?;
            }
            if self.applied.insert(name.clone(), backends).is_some() {
                self.last_changes.push(format!("proxy VIP {name} backends updated"));
            }
        }
        Ok(())
    }

    /// Stops accepting and lets in-flight requests finish within `grace`.
    pub fn shutdown(&mut self, grace: Duration) {
        self.route_checks.stop_all();
        self.runtime.block_on(self.handle.shutdown(grace));
    }
}

fn started_from(vip: &VipState, hash_seed: u32) -> Started {
    Started {
        listen: SocketAddr::new(vip.address, vip.port),
        protocol: vip.protocol,
        options: vip.proxy.clone(),
        hash_seed,
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::Config;
    use crate::testing::ports::free_port;

    fn state(port: u16, weight: u32, backend_port: u16, extra: &str) -> State {
        let text = format!(
            "[[vip]]\nname = \"web\"\naddress = \"127.0.0.1\"\nport = {port}\nprotocol = \"http\"\n\
             forwarding = \"proxy\"\nbackends = [ {{ address = \"127.0.0.1\", port = {backend_port}, weight = {weight} }} ]\n{extra}"
        );
        let config = Config::parse(&text, Path::new("lb.toml")).unwrap_or_else(|e| panic!("{e}"));
        State::from_config(&config, &State::default()).unwrap()
    }

    #[test]
    fn sync_reports_what_changed_for_backend_weight_and_port() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let mut proxy = ProxyRuntime::new(rt.handle().clone(), Some(2)).unwrap();
        let port = free_port();
        proxy.sync(&state(port, 1, 8081, "")).unwrap();
        assert_eq!(proxy.last_changes(), ["proxy VIP web started"]);
        proxy.sync(&state(port, 1, 8081, "")).unwrap();
        assert!(proxy.last_changes().is_empty(), "{:?}", proxy.last_changes());
        proxy.sync(&state(port, 5, 8081, "")).unwrap();
        assert_eq!(proxy.last_changes(), ["proxy VIP web backends updated"], "weight");
        proxy.sync(&state(port, 5, 8082, "")).unwrap();
        assert_eq!(proxy.last_changes(), ["proxy VIP web backends updated"], "backend port");
        proxy.sync(&state(port, 5, 8082, "[vip.proxy]\nretries = { max = 1 }\n")).unwrap();
        assert_eq!(proxy.last_changes(), ["proxy VIP web restarted"], "options");
        proxy.shutdown(Duration::from_secs(1));
    }
}
