//! Per-second rates from two successive `stats` answers: what `stats --watch` prints (and what a
//! live view would draw).
use serde::Serialize;

use crate::api::types::{StatsView, TrafficView};

/// The rate of one VIP, backend or CPU.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Rate {
    pub name: String,
    /// Packets per second (XDP VIPs; for a CPU, every packet the program saw).
    pub pps: f64,
    /// Bits per second (XDP VIPs; for a CPU, VIP traffic only).
    pub bps: f64,
    /// Proxy VIPs: requests per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rps: Option<f64>,
    /// Proxy VIPs: errors per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errors_per_sec: Option<f64>,
}

/// One drop reason with a nonzero rate.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DropRate {
    pub reason: String,
    pub pps: f64,
}

/// Rates over one interval.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Rates {
    /// The length of the interval the rates are measured over.
    pub seconds: f64,
    pub vips: Vec<Rate>,
    pub backends: Vec<Rate>,
    pub cpus: Vec<Rate>,
    /// Drop counters that grew, largest first.
    pub drops: Vec<DropRate>,
}

/// Per second, over `seconds`: the growth from `before` to `after`. A counter that went back
/// (a backend removed and added again starts from zero) counts as no growth; rows only in
/// `after` (added since) start from zero.
pub fn rates(before: &StatsView, after: &StatsView, seconds: f64) -> Rates {
    let seconds = seconds.max(1e-3);
    let per_sec = |now: u64, then: u64| now.saturating_sub(then) as f64 / seconds;
    let traffic = |now: &[TrafficView], then: &[TrafficView]| -> Vec<Rate> {
        now.iter()
            .map(|n| {
                let t = then.iter().find(|t| t.name == n.name).cloned().unwrap_or_default();
                let both = |a: Option<u64>, b: Option<u64>| a.map(|a| per_sec(a, b.unwrap_or(0)));
                Rate {
                    name: n.name.clone(),
                    pps: per_sec(n.packets, t.packets),
                    bps: per_sec(n.bytes, t.bytes) * 8.0,
                    rps: both(n.requests, t.requests),
                    errors_per_sec: both(n.errors, t.errors),
                }
            })
            .collect()
    };
    let cpus = after
        .cpus
        .iter()
        .map(|n| {
            let t = before.cpus.iter().find(|t| t.cpu == n.cpu);
            Rate {
                name: format!("cpu{}", n.cpu),
                pps: per_sec(n.packets, t.map_or(0, |t| t.packets)),
                bps: per_sec(n.vip_bytes, t.map_or(0, |t| t.vip_bytes)) * 8.0,
                rps: None,
                errors_per_sec: None,
            }
        })
        .collect();
    let mut drops: Vec<DropRate> = after
        .counters
        .iter()
        .filter(|c| c.name.starts_with("drop_"))
        .map(|c| {
            let then = before.counters.iter().find(|t| t.name == c.name).map_or(0, |t| t.value);
            DropRate { reason: c.name.clone(), pps: per_sec(c.value, then) }
        })
        .filter(|d| d.pps > 0.0)
        .collect();
    drops.sort_by(|a, b| b.pps.total_cmp(&a.pps));
    Rates {
        seconds,
        vips: traffic(&after.vips, &before.vips),
        backends: traffic(&after.backends, &before.backends),
        cpus,
        drops,
    }
}

/// A rate for people: `0`, `950`, `12.3k`, `4.56M`, `1.20G`.
pub fn human(value: f64) -> String {
    match value {
        v if v >= 1e9 => format!("{:.2}G", v / 1e9),
        v if v >= 1e6 => format!("{:.2}M", v / 1e6),
        v if v >= 1e4 => format!("{:.1}k", v / 1e3),
        v => format!("{v:.0}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::types::{CounterView, CpuView};

    fn sample(packets: u64, drops: u64, requests: u64) -> StatsView {
        StatsView {
            counters: vec![
                CounterView { name: "drop_no_backend".into(), value: drops },
                CounterView { name: "drop_no_route".into(), value: 5 },
                CounterView { name: "forward_tx".into(), value: packets },
            ],
            vips: vec![
                TrafficView { name: "web".into(), packets, bytes: packets * 100, ..Default::default() },
                TrafficView { name: "api".into(), requests: Some(requests), errors: Some(1), ..Default::default() },
            ],
            backends: vec![TrafficView {
                name: "web 198.51.100.1:80".into(),
                packets,
                bytes: packets * 100,
                ..Default::default()
            }],
            cpus: vec![
                CpuView { cpu: 0, packets, vip_packets: packets, vip_bytes: packets * 100 },
                CpuView { cpu: 1, packets: 7, vip_packets: 0, vip_bytes: 0 },
            ],
        }
    }

    #[test]
    fn rates_are_growth_per_second() {
        let r = rates(&sample(1000, 10, 50), &sample(3000, 30, 250), 2.0);
        assert_eq!(
            r.vips[0],
            Rate { name: "web".into(), pps: 1000.0, bps: 800_000.0, rps: None, errors_per_sec: None }
        );
        assert_eq!(r.vips[1].rps, Some(100.0));
        assert_eq!(r.vips[1].errors_per_sec, Some(0.0));
        assert_eq!(r.backends[0].pps, 1000.0);
        assert_eq!(r.cpus[0].name, "cpu0");
        assert_eq!(r.cpus[0].pps, 1000.0);
        assert_eq!(r.cpus[1].pps, 0.0);
        // Only the drop reason that grew.
        assert_eq!(r.drops, vec![DropRate { reason: "drop_no_backend".into(), pps: 10.0 }]);
    }

    #[test]
    fn counters_that_went_back_or_are_new_do_not_go_negative() {
        let mut before = sample(5000, 0, 0);
        before.backends.clear();
        let r = rates(&before, &sample(1000, 0, 0), 1.0);
        assert_eq!(r.vips[0].pps, 0.0);
        assert_eq!(r.backends[0].pps, 1000.0);
    }

    #[test]
    fn human_rates() {
        assert_eq!(human(0.4), "0");
        assert_eq!(human(950.0), "950");
        assert_eq!(human(12_345.0), "12.3k");
        assert_eq!(human(4_560_000.0), "4.56M");
        assert_eq!(human(1.2e9), "1.20G");
    }
}
