//! The lab set up for every peer at once: backends serving all three workloads (HTTP, iperf3,
//! a UDP counter), lb-ctl attached with its NAT and DSR VIPs, the DSR backends decapsulating,
//! HAProxy and nginx listening on their own addresses, and the nftables ruleset loaded around
//! its own runs only. Dropping it stops every process and removes everything.
use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};

use super::Run;
use super::observe::snapshot;
use super::peers::{self, Peer, STREAM_PORT};
use super::workloads::{self, Workload};
use crate::lab::{Daemon, LB_PORT, Lab, mac_of, sibling_bin};

pub const BACKENDS: usize = 3;
const CLIENTS: usize = 8;
/// Workers of each proxy: one per core, as an operator would.
const WORKERS: usize = 2;

pub struct Rig {
    pub configs: Vec<(String, String)>,
    trafgen_confs: Vec<(Peer, PathBuf)>,
    nft_ruleset: PathBuf,
    // Field order is drop order: the daemon and the decapsulators go before the lab, and the
    // configuration files after it (nginx removes its pid file when it stops).
    daemon: Daemon,
    _decaps: Decaps,
    lab: Lab,
    _files: tempfile::TempDir,
}

/// `lb-ctl decap attach` on the backends (pinned): detached on drop.
struct Decaps(Vec<String>);

impl Drop for Decaps {
    fn drop(&mut self) {
        for ns in &self.0 {
            let _ = Command::new("nsenter")
                .arg(format!("--net=/run/netns/{ns}"))
                .arg(crate::lb_ctl_bin())
                .args(["decap", "detach", "eth0"])
                .output();
        }
    }
}

impl Rig {
    pub fn build(balancer_queues: usize) -> Result<Rig> {
        let mut lab = Lab::new("", BACKENDS, CLIENTS);
        lab.tune_for_load();
        // The UDP generator goes through this qdisc (see `workloads::udp`).
        lab.client.exec(&["tc", "qdisc", "replace", "dev", "eth0", "root", "pfifo", "limit", "10000"]);
        if balancer_queues != 2 {
            // Both ends of the balancer's link, before any XDP program is attached to them.
            let queues = balancer_queues.to_string();
            lab.lb.exec(&["ethtool", "-L", "eth0", "rx", &queues, "tx", &queues]);
            lab.switch.exec(&["ethtool", "-L", LB_PORT, "rx", &queues, "tx", &queues]);
        }
        let files = tempfile::Builder::new().prefix("lb-bench-lab-").tempdir()?;
        let mut configs = Vec::new();
        for key in ["net.ipv4.tcp_tw_reuse=1", "net.ipv4.ip_local_port_range=1024 65000"] {
            lab.lb.exec(&["sysctl", "-qw", key]);
        }

        let backend_bin = sibling_bin("lb-test-backend");
        let counter = peers::backend_counter_ruleset();
        let counter_path = files.path().join("backend-counter.nft");
        std::fs::write(&counter_path, &counter)?;
        configs.push(("backends: nftables netdev counter".to_string(), counter));
        let mut decaps = Decaps(Vec::new());
        for i in 0..BACKENDS {
            let ns = lab.backends[i].name.clone();
            for port in [peers::HTTP_PORT, peers::NAT_HTTP_BACKEND_PORT] {
                let listen = format!("0.0.0.0:{port}");
                lab.spawn(&ns, &[backend_bin.to_str().context("utf-8 path")?, &listen, &format!("backend-{i}")]);
            }
            for port in [STREAM_PORT, peers::NAT_STREAM_BACKEND_PORT] {
                lab.spawn(&ns, &["iperf3", "-s", "-p", &port.to_string()]);
            }
            let b = &lab.backends[i];
            b.exec(&["nft", "-f", counter_path.to_str().context("utf-8 path")?]);
            // DSR: the VIP on lo, IPIP removed by lb_decap, and replies from the VIP straight to
            // the client on the shared segment (policy route), not back through the balancer.
            let dsr = Peer::LbDsr.address().to_string();
            b.exec(&["ip", "addr", "add", &format!("{dsr}/32"), "dev", "lo"]);
            b.exec(&["ip", "rule", "add", "from", &dsr, "table", "100"]);
            b.exec(&["ip", "route", "add", "192.0.2.0/24", "dev", "eth0", "table", "100"]);
            decaps.0.push(ns.clone());
            // nsenter enters only the network namespace, so the pin lands in the host's bpffs.
            crate::netns::sh(&[
                "nsenter",
                &format!("--net=/run/netns/{ns}"),
                crate::lb_ctl_bin().to_str().context("utf-8 path")?,
                "decap",
                "attach",
                "eth0",
                "--from",
                crate::lab::LB_BACKEND_SIDE,
                "--xdp-mode",
                "native",
            ]);
        }
        lab.pass_on_switch_port(LB_PORT);
        lab.resolve_backends();
        // The floor: the client reaches backend 0 by plain routing through the balancer.
        lab.client.exec(&["ip", "route", "add", "198.51.100.0/24", "via", crate::lab::LB_CLIENT_SIDE]);
        lab.client.exec(&["ping", "-c1", "-W2", &crate::lab::backend_addr(0).to_string()]);
        for peer in [Peer::HaproxyTcp, Peer::NginxStream] {
            lab.lb.exec(&["ip", "addr", "add", &format!("{}/32", peer.address()), "dev", "lo"]);
        }

        let mut daemon = Daemon::new(&lab.lb, "eth0", "ctl", &["--xdp-mode", "native", "--log-level", "warn"]);
        let toml = peers::lb_toml(&daemon.socket(), BACKENDS);
        daemon.write_config_text(&toml);
        daemon.start();
        configs.push(("lb-ctl: lb.toml (lb-ctl attach eth0 --xdp-mode native)".to_string(), toml));

        let ruleset = peers::nft_ruleset(BACKENDS);
        let nft_ruleset = files.path().join("dnat.nft");
        std::fs::write(&nft_ruleset, &ruleset)?;
        configs.push(("nftables DNAT (balancer namespace; loaded for its own runs only)".to_string(), ruleset));

        let haproxy = peers::haproxy_cfg(BACKENDS, WORKERS);
        let haproxy_path = files.path().join("haproxy.cfg");
        std::fs::write(&haproxy_path, &haproxy)?;
        let lb_ns = lab.lb.name.clone();
        lab.spawn(&lb_ns, &["haproxy", "-db", "-f", haproxy_path.to_str().context("utf-8 path")?]);
        configs.push(("HAProxy: haproxy.cfg".to_string(), haproxy));
        let nginx = peers::nginx_conf(files.path(), BACKENDS, WORKERS);
        let nginx_path = files.path().join("nginx.conf");
        std::fs::write(&nginx_path, &nginx)?;
        let dir = files.path().to_str().context("utf-8 path")?;
        lab.spawn(&lb_ns, &["nginx", "-c", nginx_path.to_str().context("utf-8 path")?, "-p", dir, "-e", "stderr"]);
        configs.push(("nginx: nginx.conf".to_string(), nginx));

        let client_mac = mac_of(&lab.client, "eth0");
        let lb_mac = mac_of(&lab.lb, "eth0");
        let mut trafgen_confs = Vec::new();
        for peer in peers::PEERS.into_iter().filter(|p| p.serves_udp()) {
            let path = files.path().join(format!("udp-{:?}.trafgen", peer));
            let text = workloads::trafgen_conf(&client_mac, &lb_mac, peer.address(), CLIENTS);
            std::fs::write(&path, &text)?;
            if peer == Peer::LbNat {
                configs.push(("trafgen (client; the destination is each peer's address)".to_string(), text));
            }
            trafgen_confs.push((peer, path));
        }
        wait_listening(&lab)?;
        Ok(Rig { configs, trafgen_confs, nft_ruleset, daemon, _decaps: decaps, _files: files, lab })
    }

    /// One run of `workload` through `peer`, observed.
    pub fn measure(&self, repetition: usize, workload: Workload, peer: Peer, secs: u64) -> Result<Run> {
        if peer == Peer::NftDnat {
            self.lab.lb.exec(&["nft", "-f", self.nft_ruleset.to_str().context("utf-8 path")?]);
        }
        let daemon = peer.is_lb_ctl().then_some(&self.daemon);
        let before = snapshot(&self.lab, daemon);
        let client = &self.lab.client.name;
        let generated = match workload {
            Workload::Udp => {
                let conf = &self.trafgen_confs.iter().find(|(p, _)| *p == peer).context("trafgen config")?.1;
                workloads::udp(client, conf, secs)
            }
            Workload::TcpRequests => workloads::requests(client, peer.address(), secs),
            Workload::TcpStreams => workloads::streams(client, peer.address(), secs),
        };
        let observed = snapshot(&self.lab, daemon).since(&before);
        if peer == Peer::NftDnat {
            self.lab.lb.exec(&["nft", "delete", "table", "ip", "lbbench"]);
        }
        let generated = generated?;
        let (value, sent, delivered) = match workload {
            Workload::Udp => {
                let delivered = observed.udp_delivered as f64;
                (delivered / secs as f64, observed.client_tx_packets as f64, delivered)
            }
            Workload::TcpRequests => (generated.rate, generated.done + generated.failed, generated.done),
            Workload::TcpStreams => (generated.rate, generated.done + generated.failed, generated.done),
        };
        Ok(Run { repetition, workload, peer, value, sent, delivered, observed })
    }
}

/// Waits until the HTTP port answers at every peer (HAProxy and nginx start in the
/// background and bind both their ports at once; a probe of the stream port would be taken
/// for an iperf3 test).
fn wait_listening(lab: &Lab) -> Result<()> {
    let _in = lab.client.enter();
    // nftables' rules are loaded for their own runs only.
    for peer in peers::PEERS.into_iter().filter(|p| *p != Peer::NftDnat) {
        {
            let addr = std::net::SocketAddr::from((peer.address(), peers::HTTP_PORT));
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_millis(300)).is_err() {
                if std::time::Instant::now() > deadline {
                    bail!("nothing answers at {addr} ({})", peer.name());
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
    }
    Ok(())
}
