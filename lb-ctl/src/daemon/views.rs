//! Read-only answers: status, VIPs, backends, counters.
use super::writer::Writer;
use crate::api::ApiError;
use crate::api::types::{BackendView, CounterView, StatsView, StatusView, TrafficView, VipView};
use crate::state::VipState;
use crate::state::plan::ring_input;

impl Writer {
    pub(super) fn status(&self) -> StatusView {
        let backends = || self.state.vips.iter().flat_map(|v| v.backends.iter());
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
        }
    }

    pub(super) fn vips(&self) -> Result<Vec<VipView>, ApiError> {
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
                    hash: v.hash.as_str().into(),
                    all_down_policy: v.all_down.as_str().into(),
                    all_down: crate::state::plan::all_down(v),
                    backends: v.backends.len(),
                    healthy: v.backends.iter().filter(|b| b.health.is_usable() && b.effective_weight() > 0).count(),
                    packets: traffic.packets,
                    bytes: traffic.bytes,
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
                out.push(BackendView {
                    vip: v.label(),
                    id: b.id,
                    address: b.address,
                    weight: b.weight,
                    health: b.health,
                    state: b.admin_state().into(),
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
                });
            }
        }
        Ok(out)
    }

    pub(super) fn stats(&self) -> Result<StatsView, ApiError> {
        let counters =
            self.dp.counters()?.into_iter().map(|(c, value)| CounterView { name: c.name().into(), value }).collect();
        let mut vips = Vec::new();
        let mut backends = Vec::new();
        for v in self.state.vips.iter().filter(|v| v.forwarding.is_xdp()) {
            let t = self.dp.vip_traffic(v.id)?;
            vips.push(TrafficView { name: v.label(), packets: t.packets, bytes: t.bytes });
            for b in &v.backends {
                let t = self.dp.backend_traffic(b.id)?;
                backends.push(TrafficView {
                    name: format!("{} {}", v.label(), b.address),
                    packets: t.packets,
                    bytes: t.bytes,
                });
            }
        }
        Ok(StatsView { counters, vips, backends })
    }
}
