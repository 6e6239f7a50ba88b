//! What a run leaves behind besides its figure, so each figure says what limited it: packets
//! and drops on every interface of the lab, the softnet backlog drops, per-CPU busy time, the
//! UDP datagrams counted at the backends and the balancer's counters.
use std::collections::BTreeMap;

use serde::Serialize;

use crate::lab::{Daemon, Lab};
use crate::netns::Netns;

/// Counters read at one moment.
#[derive(Clone, Default)]
pub struct Snapshot {
    /// `namespace/interface` → (rx packets, tx packets, rx dropped, tx dropped).
    interfaces: BTreeMap<String, [u64; 4]>,
    softnet_dropped: u64,
    /// Per CPU: (busy, softirq, total) jiffies.
    cpus: Vec<[u64; 3]>,
    udp_delivered: u64,
    balancer: BTreeMap<String, u64>,
}

/// What happened between two snapshots.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Observed {
    /// Interfaces that dropped packets: `namespace/interface` → dropped (rx + tx).
    pub interface_drops: BTreeMap<String, u64>,
    pub softnet_dropped: u64,
    /// Per CPU: busy and softirq share of the run, in percent.
    pub cpu_busy_pct: Vec<f64>,
    pub cpu_softirq_pct: Vec<f64>,
    /// UDP datagrams counted at the backends' ingress (nftables netdev counters).
    pub udp_delivered: u64,
    /// Packets the client sent (its eth0).
    pub client_tx_packets: u64,
    /// The balancer's counters that moved (lb-ctl rows only).
    pub balancer: BTreeMap<String, u64>,
}

/// The short name of a lab namespace (`lbb-123-b0` → `b0`).
fn short(ns: &Netns) -> &str {
    ns.name.rsplit('-').next().unwrap_or(&ns.name)
}

pub fn snapshot(lab: &Lab, daemon: Option<&Daemon>) -> Snapshot {
    let mut s = Snapshot::default();
    let hosts = [&lab.switch, &lab.lb, &lab.client].into_iter().chain(lab.backends.iter());
    for ns in hosts {
        let out = ns.exec(&["ip", "-s", "-j", "link", "show"]);
        let links: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        for link in links.as_array().into_iter().flatten() {
            let name = link["ifname"].as_str().unwrap_or("?");
            if name == "lo" {
                continue;
            }
            let stat = |dir: &str, what: &str| link["stats64"][dir][what].as_u64().unwrap_or(0);
            s.interfaces.insert(
                format!("{}/{name}", short(ns)),
                [stat("rx", "packets"), stat("tx", "packets"), stat("rx", "dropped"), stat("tx", "dropped")],
            );
        }
    }
    let softnet = std::fs::read_to_string("/proc/net/softnet_stat").unwrap_or_default();
    // Second column: packets dropped because the backlog queue was full, per CPU.
    s.softnet_dropped =
        softnet.lines().filter_map(|l| u64::from_str_radix(l.split_whitespace().nth(1)?, 16).ok()).sum();
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    for line in stat.lines().filter(|l| l.starts_with("cpu") && !l.starts_with("cpu ")) {
        let v: Vec<u64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
        // user nice system idle iowait irq softirq steal
        let total: u64 = v.iter().take(8).sum();
        let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
        s.cpus.push([total - idle, v.get(6).copied().unwrap_or(0), total]);
    }
    s.udp_delivered = lab.backends.iter().map(udp_counter).sum();
    if let Some(d) = daemon {
        let stats: lb_ctl::api::types::StatsView =
            serde_json::from_str(&d.ok(&["stats", "--json"])).expect("lb-ctl stats --json");
        s.balancer = stats.counters.into_iter().map(|c| (c.name, c.value)).collect();
    }
    s
}

/// The backend's nftables netdev counter of UDP datagrams to the benchmark port.
fn udp_counter(backend: &Netns) -> u64 {
    let out = backend.exec(&["nft", "list", "counter", "netdev", "lbbench", "udp_in"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let words: Vec<&str> = text.split_whitespace().collect();
    words.windows(2).find(|w| w[0] == "packets").and_then(|w| w[1].parse().ok()).unwrap_or(0)
}

impl Snapshot {
    pub fn since(&self, before: &Snapshot) -> Observed {
        let mut o = Observed {
            softnet_dropped: self.softnet_dropped.saturating_sub(before.softnet_dropped),
            udp_delivered: self.udp_delivered.saturating_sub(before.udp_delivered),
            ..Observed::default()
        };
        for (name, now) in &self.interfaces {
            let was = before.interfaces.get(name).copied().unwrap_or_default();
            let dropped = (now[2] + now[3]).saturating_sub(was[2] + was[3]);
            if dropped > 0 {
                o.interface_drops.insert(name.clone(), dropped);
            }
            if name == "c/eth0" {
                o.client_tx_packets = now[1].saturating_sub(was[1]);
            }
        }
        for (now, was) in self.cpus.iter().zip(&before.cpus) {
            let total = now[2].saturating_sub(was[2]).max(1) as f64;
            o.cpu_busy_pct.push(100.0 * now[0].saturating_sub(was[0]) as f64 / total);
            o.cpu_softirq_pct.push(100.0 * now[1].saturating_sub(was[1]) as f64 / total);
        }
        for (name, now) in &self.balancer {
            let moved = now.saturating_sub(before.balancer.get(name).copied().unwrap_or(0));
            if moved > 0 {
                o.balancer.insert(name.clone(), moved);
            }
        }
        o
    }
}

impl Observed {
    /// One line: drops, backlog, CPUs.
    pub fn summary(&self) -> String {
        let drops: u64 = self.interface_drops.values().sum();
        let cpus: Vec<String> =
            self.cpu_busy_pct.iter().zip(&self.cpu_softirq_pct).map(|(b, s)| format!("{b:.0}%({s:.0}% si)")).collect();
        format!("if drops {drops}, backlog drops {}, cpu {}", self.softnet_dropped, cpus.join(" "))
    }
}
