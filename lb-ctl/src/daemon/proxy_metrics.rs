//! The userspace proxy's own figures in `/v1/metrics`: responses by status class, the
//! response-time histogram, retries, refusals (and those by the per-client cap), client
//! errors, client timeouts, TLS failures and connections per VIP, and
//! queue depth and outlier ejections per backend.
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric as _};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use lb_proxy::VipStats;
use lb_proxy::stats::{RESPONSE_TIME_BOUNDS, StatusClasses};

use super::metric_family::{Labels, family};

pub(super) fn register(registry: &mut Registry, stats: Vec<VipStats>) {
    let responses = family::<Counter>(registry, "proxy_responses", "HTTP responses sent to clients, by status class");
    let retries = family::<Counter>(registry, "proxy_retries", "Attempts on another backend after a failed one");
    let rejected = family::<Counter>(
        registry,
        "proxy_rejected",
        "Requests refused before a backend: limits, no backend, full queue",
    );
    let client_errors = family::<Counter>(
        registry,
        "proxy_client_errors",
        "Requests that failed by the client's fault (never a backend's)",
    );
    let clients_limited = family::<Counter>(
        registry,
        "proxy_clients_limited",
        "Connections refused because their client held max_connections_per_client (in proxy_rejected too)",
    );
    let client_timeouts = family::<Counter>(
        registry,
        "proxy_client_timeouts",
        "Clients answered 408 for a slow request head, and responses cut for a client that took none of them",
    );
    let tls_failures = family::<Counter>(registry, "proxy_tls_failures", "TLS handshakes that failed or timed out");
    let connections = family::<Gauge>(registry, "proxy_client_connections", "Client connections open now");
    let queued =
        family::<Gauge>(registry, "proxy_queue_depth", "Requests waiting for a backend slot (max_connections)");
    let ejections =
        family::<Counter>(registry, "proxy_outlier_ejections", "Times outlier detection ejected the backend");
    for vip in &stats {
        let labels: Labels = vec![("vip", vip.name.clone())];
        for (class, n) in StatusClasses::LABELS.iter().zip(vip.responses.0) {
            let mut by_class = labels.clone();
            by_class.push(("class", class.to_string()));
            responses.get_or_create(&by_class).inc_by(n);
        }
        retries.get_or_create(&labels).inc_by(vip.retries);
        rejected.get_or_create(&labels).inc_by(vip.rejected);
        client_errors.get_or_create(&labels).inc_by(vip.client_errors);
        clients_limited.get_or_create(&labels).inc_by(vip.clients_limited);
        client_timeouts.get_or_create(&labels).inc_by(vip.client_timeouts);
        tls_failures.get_or_create(&labels).inc_by(vip.tls_failures);
        connections.get_or_create(&labels).set(vip.client_connections as i64);
        for b in &vip.backends {
            let labels: Labels = vec![("vip", vip.name.clone()), ("backend", b.addr.to_string())];
            queued.get_or_create(&labels).set(b.queued as i64);
            ejections.get_or_create(&labels).inc_by(b.ejections);
        }
    }
    registry.register_collector(Box::new(ResponseTimes(stats)));
}

/// `lb_proxy_response_seconds`: the proxy keeps its own bucket counters (two atomic adds a
/// request), encoded here as a histogram family by VIP.
#[derive(Debug)]
struct ResponseTimes(Vec<VipStats>);

impl prometheus_client::collector::Collector for ResponseTimes {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut family = encoder.encode_descriptor(
            "proxy_response_seconds",
            "Time from a request's head to its response's head (HTTP), by VIP",
            None,
            MetricType::Histogram,
        )?;
        for vip in &self.0 {
            let h = &vip.response_time;
            let bounds = RESPONSE_TIME_BOUNDS.iter().copied().chain([f64::INFINITY]);
            let buckets: Vec<(f64, u64)> = bounds.zip(h.counts.iter().copied()).collect();
            let labels: Labels = vec![("vip", vip.name.clone())];
            let metric = family.encode_family(&labels)?;
            ConstHistogram { sum: h.sum_seconds, count: h.count(), buckets: &buckets }.encode(metric)?;
        }
        Ok(())
    }
}

struct ConstHistogram<'a> {
    sum: f64,
    count: u64,
    buckets: &'a [(f64, u64)],
}

impl prometheus_client::encoding::EncodeMetric for ConstHistogram<'_> {
    fn encode(&self, mut encoder: prometheus_client::encoding::MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_histogram::<prometheus_client::encoding::NoLabelSet>(self.sum, self.count, self.buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}
