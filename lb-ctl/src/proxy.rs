//! The userspace proxy's side of the daemon: proxy VIPs of lb.toml become lb-proxy specs, and
//! the running proxy follows the daemon's state (reloads, API changes, health), so
//! `backends add/remove/drain` and the health checker work for proxy VIPs as for XDP ones.
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use lb_proxy::{
    BackendSpec, Balance, ForwardedHeaders, Limits, Mode, Outlier, ProxyHandle, ProxyProtocol,
    ProxyVipSpec, Retries, Timeouts,
};
use serde::Deserialize;

use crate::config::Protocol;
use crate::state::plan::ring_input;
use crate::state::{State, VipState};

/// How long a removed proxy VIP's in-flight requests may take to finish.
const REMOVE_GRACE: Duration = Duration::from_secs(5);

/// The `[vip.proxy]` table: lb-proxy's settings for one VIP (every key optional).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxySettings {
    #[serde(default)]
    pub balance: Balance,
    #[serde(default)]
    pub timeouts: Timeouts,
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    pub forwarded: ForwardedHeaders,
    #[serde(default)]
    pub proxy_protocol: ProxyProtocol,
    #[serde(default)]
    pub retries: Retries,
    #[serde(default)]
    pub outlier: Outlier,
    /// Most concurrent requests/connections per backend (more wait in a bounded queue).
    #[serde(default)]
    pub max_connections: Option<u32>,
}

/// Reads a `[vip.proxy]` table; the error says which key is wrong.
pub fn settings(table: Option<&toml::Table>) -> Result<ProxySettings, String> {
    match table {
        None => Ok(ProxySettings::default()),
        Some(t) => toml::Value::Table(t.clone()).try_into().map_err(|e: toml::de::Error| e.message().to_string()),
    }
}

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
pub fn spec(vip: &VipState, hash_seed: u32) -> Result<ProxyVipSpec, String> {
    let s = settings(vip.proxy.as_ref())?;
    let mode = if vip.protocol == Protocol::Http { Mode::Http } else { Mode::Tcp };
    let mut spec = ProxyVipSpec::new(vip.label(), SocketAddr::new(vip.address, vip.port), mode);
    spec.balance = s.balance;
    spec.timeouts = s.timeouts;
    spec.limits = s.limits;
    spec.forwarded = s.forwarded;
    spec.proxy_protocol = s.proxy_protocol;
    spec.retries = s.retries;
    spec.outlier = s.outlier;
    spec.hash_seed = hash_seed;
    spec.backends = backends(vip, s.max_connections).into_iter().map(|(b, _)| b).collect();
    Ok(spec)
}

/// What a running proxy VIP was started from: a change means restarting that VIP.
#[derive(Clone, Debug, PartialEq)]
struct Started {
    listen: SocketAddr,
    protocol: Protocol,
    settings: Option<toml::Table>,
    hash_seed: u32,
}

/// The proxy running inside the daemon, kept in step with its state.
pub struct ProxyRuntime {
    handle: ProxyHandle,
    runtime: tokio::runtime::Handle,
    running: HashMap<String, Started>,
}

impl ProxyRuntime {
    /// A proxy with no VIP yet. Called within the daemon's tokio runtime.
    pub fn new(runtime: tokio::runtime::Handle) -> Result<Self, String> {
        let handle = runtime.block_on(lb_proxy::Proxy::start(Vec::new())).map_err(|e| e.to_string())?;
        Ok(Self { handle, runtime, running: HashMap::new() })
    }

    pub fn handle(&self) -> &ProxyHandle {
        &self.handle
    }

    /// Starts, restarts or stops proxy VIPs so they match `state`, then hands every proxy VIP
    /// its backends and their health. Called from the writer (a blocking thread).
    pub fn sync(&mut self, state: &State) -> Result<(), String> {
        let wanted: HashMap<String, &VipState> =
            state.vips.iter().filter(|v| !v.forwarding.is_xdp()).map(|v| (v.label(), v)).collect();
        let stale: Vec<String> = self
            .running
            .iter()
            .filter(|(name, started)| wanted.get(*name).is_none_or(|v| started_from(v, state.hash_seed) != **started))
            .map(|(name, _)| name.clone())
            .collect();
        for name in stale {
            self.runtime.block_on(self.handle.remove_vip(&name, REMOVE_GRACE)).map_err(|e| e.to_string())?;
            self.running.remove(&name);
        }
        for (name, vip) in &wanted {
            if !self.running.contains_key(name) {
                let spec = spec(vip, state.hash_seed)?;
                self.runtime
                    .block_on(self.handle.add_vip(spec))
                    .map_err(|e| format!("proxy VIP {name}: {e}"))?;
                self.running.insert(name.clone(), started_from(vip, state.hash_seed));
            }
            let s = settings(vip.proxy.as_ref())?;
            let backends = backends(vip, s.max_connections);
            self.handle
                .set_backends(name, backends.iter().map(|(b, _)| b.clone()).collect())
                .map_err(|e| e.to_string())?;
            for (b, up) in &backends {
                self.handle.set_backend_health(name, b.addr, *up).map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    }

    /// Stops accepting and lets in-flight requests finish within `grace`.
    pub fn shutdown(&self, grace: Duration) {
        self.runtime.block_on(self.handle.shutdown(grace));
    }
}

fn started_from(vip: &VipState, hash_seed: u32) -> Started {
    Started { listen: SocketAddr::new(vip.address, vip.port), protocol: vip.protocol, settings: vip.proxy.clone(), hash_seed }
}
