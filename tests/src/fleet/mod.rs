//! The fleet lab (`[fleet]`, docs/scale-out.md): the scale-out lab ([`crate::cluster`]: a
//! BIRD router with ECMP over the nodes, DSR backends), a three-member etcd cluster on its
//! segment ([`etcd`]), and node daemons whose files hold no VIP: they follow the fleet's state
//! in etcd, which an operator wrote once with `lb-ctl fleet push`.
use std::net::{SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::cluster::{Cluster, VIP, backend_addr, node_addr};
use crate::lab::{Daemon, wait_for_listener};

pub mod etcd;
pub mod scenario;
pub mod traffic;

pub use etcd::EtcdCluster;

/// The fleet's key prefix.
pub const PREFIX: &str = "/lb/lab";
/// The etcd key of the lab's VIP.
pub fn vip_key() -> String {
    format!("{PREFIX}/state/vips/{VIP}:80/tcp")
}
/// Routes, BGP sessions, etcd elections: generous for a loaded machine.
const CONVERGE: Duration = Duration::from_secs(30);

pub fn vip() -> SocketAddrV4 {
    SocketAddrV4::new(VIP, 80)
}

/// Backend `j` as the fleet names it.
pub fn backend(j: usize) -> SocketAddr {
    SocketAddr::from((backend_addr(j), 80))
}

fn fleet_table(etcd: &EtcdCluster, node: &str, extra: &str) -> String {
    let endpoints: Vec<String> = etcd.endpoints().iter().map(|e| format!("\"{e}\"")).collect();
    format!("[fleet]\nendpoints = [ {} ]\nprefix = \"{PREFIX}\"\nnode = \"{node}\"\n{extra}\n", endpoints.join(", "))
}

/// The file the operator pushes: the DSR VIP with backends `0..initial`.
fn operator_file(etcd: &EtcdCluster, initial: usize) -> String {
    format!("{}\n{}", fleet_table(etcd, "operator", ""), crate::cluster::scenario::web_vip(0, initial))
}

/// Node `i`'s own file: its daemon settings and `[fleet]`, no VIP.
fn node_file(etcd: &EtcdCluster, daemon: &Daemon, bird: &std::path::Path, i: usize) -> String {
    format!(
        "[daemon]\napi_socket = \"{}\"\nbird_socket = \"{}\"\n\n{}",
        daemon.socket().display(),
        bird.display(),
        fleet_table(etcd, &format!("n{i}"), &format!("encap_source = [ \"{}\" ]", node_addr(i)))
    )
}

pub struct FleetLab {
    // Dropped in this order: the daemons (detached), etcd, then the namespaces.
    pub daemons: Vec<Daemon>,
    pub etcd: EtcdCluster,
    pub cluster: Cluster,
    /// The operator's file (`lb-ctl fleet push`, `fleet status -c`).
    pub operator: PathBuf,
}

impl FleetLab {
    /// The lab with `nodes` nodes and `backends` backends (serving, with `lb-ctl decap`);
    /// the fleet holds the VIP with backends `0..initial`, pushed once; every node follows it
    /// and the router has a route to the VIP through each.
    pub fn start(
        tag: &str,
        backend_bin: &str,
        nodes: usize,
        backends: usize,
        initial: usize,
        clients: usize,
    ) -> FleetLab {
        let mut cluster = Cluster::new(tag, nodes, backends, clients);
        for j in 0..backends {
            let ns = cluster.backends[j].name.clone();
            cluster.spawn(&ns, &[backend_bin, "0.0.0.0:80", &format!("backend-{j}")]);
            cluster.attach_decap(j, "198.51.100.0/29");
            let _in = cluster.backends[j].enter();
            wait_for_listener(backend(j), Duration::from_secs(15));
        }
        let etcd = EtcdCluster::start(&cluster.router, tag);
        let operator = cluster.dir().join("operator.toml");
        std::fs::write(&operator, operator_file(&etcd, initial)).unwrap();
        let mut lab = FleetLab { daemons: Vec::new(), etcd, cluster, operator };
        let pushed = lab.lb_ctl(&["fleet", "push", lab.operator.to_str().unwrap()]);
        assert!(pushed.status.success(), "fleet push: {}", String::from_utf8_lossy(&pushed.stderr));
        for i in 0..nodes {
            let mut d = Daemon::new(&lab.cluster.nodes[i], "eth0", &format!("{tag}{i}"), &["--xdp-mode", "skb"]);
            d.write_config_text(&node_file(&lab.etcd, &d, &lab.cluster.bird_socket(i), i));
            d.start();
            lab.daemons.push(d);
        }
        let all: Vec<_> = (0..nodes).map(node_addr).collect();
        lab.cluster.wait_next_hops(VIP, &all, CONVERGE);
        lab
    }

    /// `lb-ctl ARGS` (no daemon: `fleet push|diff|status`) in node 0's namespace, which
    /// reaches etcd.
    pub fn lb_ctl(&self, args: &[&str]) -> Output {
        Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", self.cluster.nodes[0].name))
            .arg(crate::lb_ctl_bin())
            .args(args)
            .output()
            .expect("running lb-ctl")
    }

    /// `lb-ctl fleet status --json`.
    pub fn fleet_status(&self) -> serde_json::Value {
        let out = self.lb_ctl(&["fleet", "status", "-c", self.operator.to_str().unwrap(), "--json"]);
        assert!(out.status.success(), "fleet status: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("fleet status --json")
    }

    /// `lb-ctl fleet status` as a person reads it.
    pub fn fleet_status_text(&self) -> String {
        let out = self.lb_ctl(&["fleet", "status", "-c", self.operator.to_str().unwrap()]);
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    }

    /// Node `i`'s ring digest of the VIP, from its maps (`vips list`).
    pub fn ring(&self, i: usize) -> String {
        let vips: serde_json::Value =
            serde_json::from_str(&self.daemons[i].ok(&["vips", "list", "--json"])).expect("vips list --json");
        vips[0]["ring_digest"].as_str().unwrap_or("-").to_string()
    }

    /// Every node's ring digest.
    pub fn rings(&self) -> Vec<String> {
        (0..self.daemons.len()).map(|i| self.ring(i)).collect()
    }

    /// Node `i`'s VIP packets.
    pub fn vip_packets(&self, i: usize) -> u64 {
        let vips: serde_json::Value =
            serde_json::from_str(&self.daemons[i].ok(&["vips", "list", "--json"])).expect("vips list --json");
        vips[0]["packets"].as_u64().unwrap_or(0)
    }

    /// Node `i`'s `status --json` fleet view.
    pub fn fleet_view(&self, i: usize) -> serde_json::Value {
        let status: serde_json::Value =
            serde_json::from_str(&self.daemons[i].ok(&["status", "--json"])).expect("status --json");
        status["fleet"].clone()
    }

    /// Node `i`'s backends of the VIP, `ADDR:PORT state`, sorted.
    pub fn backends(&self, i: usize) -> Vec<String> {
        let mut out: Vec<String> =
            self.daemons[i].backends().iter().map(|b| format!("{} {}", b.address, b.state)).collect();
        out.sort();
        out
    }

    /// Waits until every node in `nodes` passes `done`, and `fleet status` shows every node
    /// current with equal rings; returns the rings.
    pub fn wait_converged(&self, what: &str, nodes: &[usize], done: impl Fn(&FleetLab, usize) -> bool) -> Vec<String> {
        let started = Instant::now();
        loop {
            let ready = nodes.iter().all(|i| done(self, *i));
            let rings = self.rings();
            if ready && rings.windows(2).all(|w| w[0] == w[1]) && self.fleet_agrees() {
                return rings;
            }
            assert!(
                started.elapsed() < CONVERGE,
                "{what}: not within {CONVERGE:?}; rings {rings:?}\n{}\n{}",
                self.fleet_status_text(),
                self.etcd.logs()
            );
            crate::lab::stop_if_interrupted();
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `fleet status`: every node recorded, current, rings equal.
    fn fleet_agrees(&self) -> bool {
        let status = self.fleet_status();
        let nodes = status["nodes"].as_array().cloned().unwrap_or_default();
        nodes.len() == self.daemons.len()
            && nodes.iter().all(|n| n["current"] == true && n["rings_agree"] == true)
            && nodes.windows(2).all(|w| w[0]["record"]["rings"] == w[1]["record"]["rings"])
    }
}
