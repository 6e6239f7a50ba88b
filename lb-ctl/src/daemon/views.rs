//! Read-only answers: status, VIPs, backends, counters.
use super::writer::Writer;
use crate::api::ApiError;
use crate::api::types::{BackendView, CounterView, CpuView, StatsView, StatusView, TrafficView, VipView};
use crate::state::plan::{ring_digest, ring_input};
use crate::state::{Health, Origin, VipState};

impl Writer {
    pub(super) fn status(&self) -> StatusView {
        let backends = || self.state.vips.iter().flat_map(|v| v.backends.iter());
        // Whether BIRD runs, asked only when something is to be announced (a connection to its
        // control socket).
        let (routing_daemon, routing_problem) = if self.state.vips.iter().any(|v| v.announce.is_some()) {
            match crate::announce::Bird::check(&self.config.daemon.bird_socket).problem() {
                None => (Some("bird".to_string()), None),
                Some(problem) => (None, Some(problem)),
            }
        } else {
            (None, None)
        };
        StatusView {
            version: env!("CARGO_PKG_VERSION").into(),
            interface: self.options.interface.clone(),
            xdp_mode: self.options.xdp_mode.clone(),
            config: self.config.source.display().to_string(),
            uptime_secs: self.started.elapsed().as_secs(),
            vips: self.state.vips.len(),
            backends: backends().count(),
            backends_up: backends().filter(|b| b.health.is_usable()).count(),
            backends_down: backends().filter(|b| !b.health.is_usable()).count(),
            backends_draining: backends().filter(|b| b.effective_weight() == 0).count(),
            health_checkers: self.checkers.len(),
            ring_size: self.state.ring_size,
            last_reload: self.last_reload.clone(),
            api_changes: self.state.api_changes().len(),
            node_drained: self.state.node_drained,
            announced: self.routes_announced(),
            announce_table: self.config.daemon.announce_table,
            routing_daemon,
            routing_problem,
            flow_sharing: self
                .sharing
                .as_ref()
                .map(|(_, counters)| counters.values().into_iter().map(|(k, v)| (k.to_string(), v)).collect()),
            pin_dir: self.options.pin_dir.as_ref().map(|d| d.display().to_string()),
            pins_restored: self.pins_restored.0,
            pins_restored_at_unix: self.pins_restored.1,
            xdp_detached: self.detached,
            xdp_attached_again: self.attached_again.0,
            xdp_attached_again_at_unix: self.attached_again.1,
            fleet: self.options.fleet.as_ref().map(|(_, view)| view.lock().unwrap().clone()),
        }
    }

    pub(super) fn vips(&self) -> Result<Vec<VipView>, ApiError> {
        let proxy_stats = self.proxy.as_ref().map(|p| p.handle().stats()).unwrap_or_default();
        self.state
            .vips
            .iter()
            .map(|v| {
                let traffic = if v.forwarding.is_xdp() { self.dp.vip_traffic(v.id)? } else { Default::default() };
                Ok(VipView {
                    id: v.id,
                    name: v.name.clone(),
                    address: v.address,
                    port: v.port,
                    protocol: v.protocol.as_str().into(),
                    forwarding: v.forwarding.as_str().into(),
                    encap_source: v.encap_source,
                    hash: match (&v.proxy, v.forwarding.is_xdp()) {
                        (_, true) => v.hash.as_str().into(),
                        (options, false) => proxy_balance(&options.clone().unwrap_or_default().balance),
                    },
                    all_down_policy: v.all_down.as_str().into(),
                    all_down: crate::state::plan::all_down(v),
                    backends: v.backends.len(),
                    healthy: v.backends.iter().filter(|b| b.health.is_usable() && b.effective_weight() > 0).count(),
                    packets: traffic.packets,
                    bytes: traffic.bytes,
                    listening: proxy_stats.iter().find(|s| s.name == v.label()).map(|s| s.listening),
                    ring_digest: self.applier.ring(v.id).filter(|_| v.forwarding.is_xdp()).map(|r| ring_digest(r, v)),
                })
            })
            .collect()
    }

    pub(super) fn backends(&self, vip: Option<&str>) -> Result<Vec<BackendView>, ApiError> {
        let vips: Vec<&VipState> = match vip {
            Some(r) => vec![self.state.find_vip(r)?],
            None => self.state.vips.iter().collect(),
        };
        let flows = self.dp.flows_per_backend()?;
        let proxy_stats = self.proxy.as_ref().map(|p| p.handle().stats()).unwrap_or_default();
        let mut out = Vec::new();
        for v in vips {
            let ring = ring_input(v);
            let label = v.label();
            let proxied = proxy_stats.iter().find(|s| s.name == label);
            for b in &v.backends {
                let traffic = if v.forwarding.is_xdp() { self.dp.backend_traffic(b.id)? } else { Default::default() };
                let by_proxy = proxied.and_then(|s| s.backends.iter().find(|pb| pb.addr == b.address));
                let transition = self.transitions.get(&b.id);
                let ejected = by_proxy.is_some_and(|pb| pb.ejected) && b.effective_weight() > 0;
                out.push(BackendView {
                    vip: v.label(),
                    id: b.id,
                    address: b.address,
                    host: b.host.clone(),
                    weight: b.weight,
                    health: b.health,
                    state: match (ejected, b.vanished) {
                        (true, _) => "ejected".into(),
                        (false, Some(_)) => "unresolved".into(),
                        (false, None) => b.admin_state().into(),
                    },
                    origin: b.origin,
                    in_ring: ring.members.iter().any(|(id, w, _)| *id == b.id && *w > 0),
                    packets: traffic.packets,
                    bytes: traffic.bytes,
                    active_flows: match by_proxy {
                        Some(pb) => pb.active,
                        None => flows.get(&b.id).copied().unwrap_or(0),
                    },
                    requests: by_proxy.map(|pb| pb.requests),
                    errors: by_proxy.map(|pb| pb.errors),
                    health_since_unix: transition.map(|t| t.at_unix),
                    health_reason: transition.map(|t| t.reason.clone()),
                    health_transitions: transition.map_or(0, |t| t.count),
                });
            }
            out.extend(proxied.map(|p| route_backends(v, p)).unwrap_or_default());
        }
        Ok(out)
    }

    pub(super) fn stats(&self) -> Result<StatsView, ApiError> {
        // A daemon without an XDP program (`lb-ctl proxy`) has no XDP counters to show, only
        // the in-memory map writer's zeros.
        let counters = match self.options.xdp_mode.is_some() || self.state.vips.iter().any(|v| v.forwarding.is_xdp()) {
            true => {
                self.dp.counters()?.into_iter().map(|(c, value)| CounterView { name: c.name().into(), value }).collect()
            }
            false => Vec::new(),
        };
        let proxy_stats = self.proxy.as_ref().map(|p| p.handle().stats()).unwrap_or_default();
        let mut vips = Vec::new();
        let mut backends = Vec::new();
        for v in &self.state.vips {
            if !v.forwarding.is_xdp() {
                let label = v.label();
                if let Some(p) = proxy_stats.iter().find(|s| s.name == label) {
                    vips.push(proxy_vip_traffic(p));
                    backends.extend(p.backends.iter().map(|b| TrafficView {
                        name: format!("{label} {}", b.addr),
                        requests: Some(b.requests),
                        errors: Some(b.errors),
                        ..Default::default()
                    }));
                }
                continue;
            }
            let t = self.dp.vip_traffic(v.id)?;
            vips.push(TrafficView { name: v.label(), packets: t.packets, bytes: t.bytes, ..Default::default() });
            for b in &v.backends {
                let t = self.dp.backend_traffic(b.id)?;
                backends.push(TrafficView {
                    name: format!("{} {}", v.label(), b.address),
                    packets: t.packets,
                    bytes: t.bytes,
                    ..Default::default()
                });
            }
        }
        Ok(StatsView { counters, vips, backends, cpus: self.cpus()? })
    }

    /// Per-CPU packets (every verdict) and VIP traffic; none when no VIP is served by XDP.
    fn cpus(&self) -> Result<Vec<CpuView>, ApiError> {
        let xdp_vips: Vec<u32> = self.state.vips.iter().filter(|v| v.forwarding.is_xdp()).map(|v| v.id).collect();
        if xdp_vips.is_empty() {
            return Ok(Vec::new());
        }
        let is_verdict = |name: &str| ["pass_", "drop_", "forward_"].iter().any(|p| name.starts_with(p));
        let mut cpus: Vec<CpuView> = self
            .dp
            .counters_per_cpu()?
            .into_iter()
            .enumerate()
            .map(|(cpu, counters)| CpuView {
                cpu: cpu as u32,
                packets: counters.iter().filter(|(c, _)| is_verdict(c.name())).map(|(_, v)| v).sum(),
                vip_packets: 0,
                vip_bytes: 0,
            })
            .collect();
        for id in xdp_vips {
            for (cpu, t) in self.dp.vip_traffic_per_cpu(id)?.into_iter().enumerate() {
                if let Some(c) = cpus.get_mut(cpu) {
                    c.vip_packets += t.packets;
                    c.vip_bytes += t.bytes;
                }
            }
        }
        Ok(cpus)
    }
}

/// The backends only a proxy VIP's routes name (`[vip.proxy] routes`, `[vip.proxy.sni]
/// routes`): the proxy's alone, with no id and no ring slot; their health is what the route
/// checks last told the proxy.
fn route_backends(v: &VipState, p: &lb_proxy::stats::VipStats) -> Vec<BackendView> {
    let own = |addr: &std::net::SocketAddr| v.backends.iter().any(|b| b.address == *addr);
    let mut seen = std::collections::BTreeSet::new();
    p.backends
        .iter()
        .filter(|pb| !own(&pb.addr) && seen.insert(pb.addr))
        .map(|pb| BackendView {
            vip: v.label(),
            id: crate::api::types::NO_ID,
            address: pb.addr,
            host: None,
            weight: pb.weight,
            health: match (v.health.is_some(), pb.healthy) {
                (false, _) => Health::Unchecked,
                (true, true) => Health::Up,
                (true, false) => Health::Down,
            },
            state: if pb.ejected { "ejected".into() } else { "route".into() },
            origin: Origin::Config,
            in_ring: false,
            packets: 0,
            bytes: 0,
            active_flows: pb.active,
            requests: Some(pb.requests),
            errors: Some(pb.errors),
            health_since_unix: None,
            health_reason: None,
            health_transitions: 0,
        })
        .collect()
}

/// A proxy VIP's requests and errors: its backends' plus the client connections it refused
/// or lost.
fn proxy_vip_traffic(p: &lb_proxy::stats::VipStats) -> TrafficView {
    let backend_errors: u64 = p.backends.iter().map(|b| b.errors).sum();
    TrafficView {
        name: p.name.clone(),
        requests: Some(p.backends.iter().map(|b| b.requests).sum()),
        errors: Some(backend_errors + p.rejected + p.client_errors + p.client_timeouts + p.tls_failures),
        ..Default::default()
    }
}

/// How a proxy VIP picks backends, in the words of its `[vip.proxy] balance` key (the XDP
/// `hash` key does not apply to it).
fn proxy_balance(balance: &lb_proxy::Balance) -> String {
    use lb_proxy::{Balance, HashKey};
    match balance {
        Balance::RoundRobin => "round_robin".into(),
        Balance::WeightedRoundRobin => "weighted_round_robin".into(),
        Balance::LeastConnections => "least_connections".into(),
        Balance::PowerOfTwo => "power_of_two".into(),
        Balance::ConsistentHash { key: HashKey::ClientIp } => "consistent_hash client_ip".into(),
        Balance::ConsistentHash { key: HashKey::Header(h) } => format!("consistent_hash header {h}"),
        Balance::ConsistentHash { key: HashKey::Cookie(c) } => format!("consistent_hash cookie {c}"),
    }
}
