//! The fleet's metrics (`lb_fleet_*`): a node's link to etcd, the revision it applied, the
//! states it refused, and whether its rings differ from most nodes' (alert `LbFleetRingsDiffer`).
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::record::FleetView;

pub fn register(registry: &mut Registry, view: &FleetView) {
    let gauge = |registry: &mut Registry, name: &str, help: &str, value: i64| {
        let g: Gauge = Gauge::default();
        g.set(value);
        registry.register(name, help, g);
    };
    let counter = |registry: &mut Registry, name: &str, help: &str, value: u64| {
        let c: Counter = Counter::default();
        c.inc_by(value);
        registry.register(name, help, c);
    };
    gauge(registry, "fleet_connected", "1 while this node reaches the fleet's etcd", i64::from(view.connected));
    gauge(registry, "fleet_applied_revision", "The fleet revision this node's maps hold", view.applied_revision);
    gauge(
        registry,
        "fleet_rings_differ",
        "1 while a ring of this node differs from the one most nodes of the fleet have",
        i64::from(view.rings_differ),
    );
    counter(registry, "fleet_applied", "Fleet states applied", view.applied_total);
    counter(
        registry,
        "fleet_refused",
        "Fleet states refused (malformed, too large, invalid): the last good stays",
        view.refused_total,
    );
    counter(registry, "fleet_disconnects", "Times this node lost the fleet's etcd", view.disconnects_total);
}
