//! `/v1/metrics`: the daemon's state and the data plane's counters for Prometheus, in the
//! OpenMetrics text format (which Prometheus scrapes natively), built from the same reads as
//! `backends list`, `vips list` and `stats`.
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use lb_common::flow::FLOW_WAYS;

use super::metric_family::family;
use super::writer::Writer;
use crate::api::ApiError;
use crate::state::Health;

impl Writer {
    pub(super) fn metrics(&self) -> Result<String, ApiError> {
        let mut registry = Registry::with_prefix("lb");
        let uptime: Gauge = Gauge::default();
        registry.register("daemon_uptime_seconds", "Seconds since the daemon started", uptime.clone());
        uptime.set(self.started.elapsed().as_secs() as i64);
        let reloads = family::<Counter>(&mut registry, "daemon_reloads", "Reloads, by result (ok, refused)");
        reloads.get_or_create(&vec![("result", "ok".into())]).inc_by(self.reloads.0);
        reloads.get_or_create(&vec![("result", "refused".into())]).inc_by(self.reloads.1);
        let pins: Counter = Counter::default();
        registry.register(
            "pins_restored",
            "Times the balancer's pins were found removed under the running daemon and pinned again",
            pins.clone(),
        );
        pins.inc_by(self.pins_restored.0);
        let attached_again: Counter = Counter::default();
        registry.register(
            "xdp_attached_again",
            "Times the XDP program was found off its interface under the running daemon and attached again",
            attached_again.clone(),
        );
        attached_again.inc_by(self.attached_again.0);

        let verdicts =
            family::<Counter>(&mut registry, "dataplane_packets", "Packets the XDP program handled, by verdict");
        for (counter, value) in self.dp.counters()? {
            verdicts.get_or_create(&vec![("verdict", counter.name().to_string())]).inc_by(value);
        }

        let vip_packets = family::<Counter>(&mut registry, "vip_packets", "Packets to the VIP (XDP VIPs)");
        let vip_bytes = family::<Counter>(&mut registry, "vip_bytes", "Bytes to the VIP (XDP VIPs)");
        let vip_healthy = family::<Gauge>(&mut registry, "vip_healthy_backends", "Backends that may take new flows");
        let vip_announced = family::<Gauge>(
            &mut registry,
            "vip_announced",
            "1 while this node announces the VIP's address (VIPs with [vip.announce])",
        );
        let announced = self.routes_announced();
        for v in self.vips()? {
            let labels = vec![(
                "vip",
                v.name.clone().unwrap_or_else(|| std::net::SocketAddr::new(v.address, v.port).to_string()),
            )];
            vip_packets.get_or_create(&labels).inc_by(v.packets);
            vip_bytes.get_or_create(&labels).inc_by(v.bytes);
            vip_healthy.get_or_create(&labels).set(v.healthy as i64);
            if self.state.vips.iter().any(|s| s.id == v.id && s.announce.is_some()) {
                vip_announced.get_or_create(&labels).set(i64::from(announced.contains(&v.address)));
            }
        }
        if let Some((_, counters)) = &self.sharing {
            let share = family::<Counter>(
                &mut registry,
                "flow_share",
                "Flow sharing ([cluster]): messages and flows sent, received, recorded, and messages refused, by what",
            );
            for (what, value) in counters.values() {
                share.get_or_create(&vec![("what", what.to_string())]).inc_by(value);
            }
        }
        let drained: Gauge = Gauge::default();
        registry.register("node_drained", "1 while the node is drained (`lb-ctl node drain`)", drained.clone());
        drained.set(i64::from(self.state.node_drained));

        let ways = lb_common::flow::flow_sets(self.config.daemon.flow_table_size) as i64 * FLOW_WAYS as i64;
        let capacity: Gauge = Gauge::default();
        registry.register("flow_table_capacity", "Connection-table ways (flows it can hold)", capacity.clone());
        capacity.set(ways);
        let entries: Gauge = Gauge::default();
        registry.register("flow_table_entries", "Connection-table ways holding a current flow", entries.clone());
        entries.set(self.dp.flows_per_backend()?.values().sum::<u64>() as i64);

        let packets = family::<Counter>(&mut registry, "backend_packets", "Packets sent to the backend (XDP VIPs)");
        let bytes = family::<Counter>(&mut registry, "backend_bytes", "Bytes sent to the backend (XDP VIPs)");
        let flows = family::<Gauge>(
            &mut registry,
            "backend_flows",
            "Connection-table entries (XDP) or requests in progress (proxy)",
        );
        let up = family::<Gauge>(
            &mut registry,
            "backend_up",
            "1 when the backend's health allows new flows (up or unchecked)",
        );
        let in_ring = family::<Gauge>(&mut registry, "backend_in_ring", "1 when the backend takes new flows");
        registry.register(
            "health_check_duration_seconds",
            "How long health checks took, by VIP and backend",
            self.checkers.latency.clone(),
        );
        let transitions = family::<Counter>(
            &mut registry,
            "backend_health_transitions",
            "Health transitions of the backend since the daemon started",
        );
        let requests = family::<Counter>(&mut registry, "proxy_requests", "Requests the proxy sent to the backend");
        let errors = family::<Counter>(&mut registry, "proxy_errors", "Failed requests to the backend (proxy VIPs)");
        for b in self.backends(None)? {
            let labels = vec![("vip", b.vip.clone()), ("backend", b.address.to_string())];
            packets.get_or_create(&labels).inc_by(b.packets);
            bytes.get_or_create(&labels).inc_by(b.bytes);
            flows.get_or_create(&labels).set(b.active_flows as i64);
            up.get_or_create(&labels).set(i64::from(matches!(b.health, Health::Up | Health::Unchecked)));
            in_ring.get_or_create(&labels).set(i64::from(b.in_ring));
            transitions.get_or_create(&labels).inc_by(b.health_transitions);
            if let Some(n) = b.requests {
                requests.get_or_create(&labels).inc_by(n);
            }
            if let Some(n) = b.errors {
                errors.get_or_create(&labels).inc_by(n);
            }
        }
        registry.register(
            "map_write_duration_seconds",
            "How long the map writes of one change (API, health, reload) took",
            self.map_writes.clone(),
        );
        if let Some(proxy) = &self.proxy {
            super::proxy_metrics::register(&mut registry, proxy.handle().stats());
        }
        if let Some((_, view)) = &self.options.fleet {
            crate::fleet::metrics::register(&mut registry, &view.lock().unwrap());
        }
        let mut out = String::new();
        encode(&mut out, &registry).map_err(|e| ApiError::internal(format!("encoding metrics: {e}")))?;
        Ok(out)
    }
}
