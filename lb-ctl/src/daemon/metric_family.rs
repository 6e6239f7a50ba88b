//! A labelled family of Prometheus counters or gauges: what `metrics` (the daemon's and data
//! plane's figures) and `proxy_metrics` (lb-proxy's) both register, below both.
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

pub(super) type Labels = Vec<(&'static str, String)>;

/// A family of counters or gauges, registered under `name`.
pub(super) fn family<M>(registry: &mut Registry, name: &str, help: &str) -> Family<Labels, M>
where
    M: prometheus_client::metrics::TypedMetric
        + prometheus_client::encoding::EncodeMetric
        + std::fmt::Debug
        + Default
        + Clone
        + Send
        + Sync
        + 'static,
{
    let family = Family::<Labels, M>::default();
    registry.register(name, help, family.clone());
    family
}
