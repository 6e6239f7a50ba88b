//! A routed lab for scale-out: a router namespace, N balancer nodes, DSR backends and a client,
//! every node and the router running BIRD 2 (`docs/bird.conf` on the nodes, with their
//! addresses), the router with ECMP over the nodes that announce a VIP. Everything is named
//! with the run's prefix and removed on drop; BIRD processes die with the test.
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::netns::{Netns, die_with_parent, run_name};

pub mod ring;
pub mod scenario;

/// The router's configuration: BGP from every node with BFD, and equal routes merged into one
/// multipath kernel route (ECMP).
const ROUTER_CONF: &str = "\
router id 198.51.100.254;
protocol device {}
protocol bfd { interface \"*\" { min rx interval 100 ms; min tx interval 100 ms; multiplier 3; }; }
protocol kernel { merge paths on; ipv4 { import none; export all; }; }
template bgp balancer {
    local as 65000;
    bfd on;
    hold time 3;
    keepalive time 1;
    connect retry time 1;
    ipv4 { import all; export none; };
}
";

/// The VIP the cluster lab serves.
pub const VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);
/// The router's address on the balancers' and backends' segment (their BGP neighbour and
/// default gateway).
pub const ROUTER: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 254);
/// The router's address on the client link.
const ROUTER_CLIENT_SIDE: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 254);

/// Node `i`'s address on the segment (also its router id and `encap_source`).
pub fn node_addr(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 51, 100, (1 + i) as u8)
}

/// Backend `j`'s address on the segment.
pub fn backend_addr(j: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 51, 100, (11 + j) as u8)
}

/// Client address `k` (one client namespace holds them all).
pub fn client_addr(k: usize) -> Ipv4Addr {
    Ipv4Addr::new(192, 0, 2, (1 + k) as u8)
}

/// The lab: the router has a bridge (`br0`) that the nodes and the backends plug into, and a
/// link to the client namespace; VIP traffic goes client → router → (ECMP) node → (DSR) backend,
/// and replies backend → router → client.
pub struct Cluster {
    pub router: Netns,
    pub client: Netns,
    pub nodes: Vec<Netns>,
    pub backends: Vec<Netns>,
    dir: PathBuf,
    router_bird: Option<Child>,
    node_birds: Vec<Option<Child>>,
    children: Vec<Child>,
    /// Pins of the decapsulators attached on backends, detached on drop.
    decaps: Vec<lb_ctl::paths::AttachPaths>,
}

impl Cluster {
    /// Builds the lab with `nodes` balancer nodes (BIRD started on each and on the router),
    /// `backends` backend namespaces (plumbed, nothing started) and `clients` client addresses.
    pub fn new(tag: &str, nodes: usize, backends: usize, clients: usize) -> Cluster {
        Cluster::with_bfd(tag, nodes, backends, clients, true)
    }

    /// [`Cluster::new`]; without `bfd`, BIRD runs with BFD off everywhere (a dead node is
    /// found by the BGP hold time alone, 3 s here), for comparison.
    pub fn with_bfd(tag: &str, nodes: usize, backends: usize, clients: usize, bfd: bool) -> Cluster {
        let dir = std::env::temp_dir().join(run_name(&format!("{tag}-bird")));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let router = Netns::new(&format!("{tag}r"));
        for key in ["net.ipv4.ip_forward=1", "net.ipv4.fib_multipath_hash_policy=1"] {
            router.exec(&["sysctl", "-qw", key]);
        }
        router.exec(&["ip", "link", "add", "br0", "type", "bridge"]);
        router.exec(&["ip", "addr", "add", &format!("{ROUTER}/24"), "dev", "br0"]);
        router.exec(&["ip", "link", "set", "br0", "up"]);
        let cluster = Cluster {
            client: Netns::new(&format!("{tag}c")),
            nodes: (0..nodes).map(|i| Netns::new(&format!("{tag}n{i}"))).collect(),
            backends: (0..backends).map(|j| Netns::new(&format!("{tag}b{j}"))).collect(),
            router,
            dir,
            router_bird: None,
            node_birds: Vec::new(),
            children: Vec::new(),
            decaps: Vec::new(),
        };
        cluster.link(&cluster.client, "rc", None);
        cluster.router.exec(&["ip", "addr", "add", &format!("{ROUTER_CLIENT_SIDE}/24"), "dev", "rc"]);
        for k in 0..clients {
            cluster.client.exec(&["ip", "addr", "add", &format!("{}/24", client_addr(k)), "dev", "eth0"]);
        }
        if clients > 0 {
            cluster.client.exec(&["ip", "route", "add", "default", "via", &ROUTER_CLIENT_SIDE.to_string()]);
        }
        for (i, node) in cluster.nodes.iter().enumerate() {
            cluster.link(node, &format!("p-n{i}"), Some(node_addr(i)));
            node.exec(&["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
        }
        for (j, backend) in cluster.backends.iter().enumerate() {
            cluster.link(backend, &format!("p-b{j}"), Some(backend_addr(j)));
            backend.exec(&["ip", "addr", "add", &format!("{VIP}/32"), "dev", "lo"]);
            // The VIP on lo must not be answered for on eth0; IPIP from the nodes arrives
            // with sources rp_filter would refuse.
            for key in [
                "net.ipv4.conf.all.arp_ignore=1",
                "net.ipv4.conf.all.arp_announce=2",
                "net.ipv4.conf.all.rp_filter=0",
                "net.ipv4.conf.eth0.rp_filter=0",
            ] {
                backend.exec(&["sysctl", "-qw", key]);
            }
        }
        let mut cluster = cluster;
        let bfd_off = |conf: String| if bfd { conf } else { conf.replace("bfd on;", "bfd off;") };
        let mut router_conf = ROUTER_CONF.to_string();
        for i in 0..nodes {
            router_conf
                .push_str(&format!("protocol bgp node{i} from balancer {{ neighbor {} as 65001; }}\n", node_addr(i)));
        }
        cluster.router_bird = Some(cluster.bird(&cluster.router.name.clone(), "router", &bfd_off(router_conf)));
        for i in 0..nodes {
            let child = cluster.bird(&cluster.nodes[i].name.clone(), &format!("node{i}"), &bfd_off(node_conf(i)));
            cluster.node_birds.push(Some(child));
        }
        cluster
    }

    /// Links `host` to the router: `eth0` in the host; with `addr`, the router end is a port
    /// of `br0` and the host gets `addr`/24 with the router as default gateway; without, the
    /// router end is `port` itself (addressed by the caller).
    fn link(&self, host: &Netns, port: &str, addr: Option<Ipv4Addr>) {
        self.router.exec(&["ip", "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", &host.name]);
        if addr.is_some() {
            self.router.exec(&["ip", "link", "set", port, "master", "br0"]);
        }
        self.router.exec(&["ip", "link", "set", port, "up"]);
        host.exec(&["ip", "link", "set", "eth0", "up"]);
        // Complete, MTU-sized frames for XDP on the other side.
        host.exec(&["ethtool", "-K", "eth0", "tx", "off", "tso", "off", "gso", "off"]);
        if let Some(addr) = addr {
            host.exec(&["ip", "addr", "add", &format!("{addr}/24"), "dev", "eth0"]);
            host.exec(&["ip", "route", "add", "default", "via", &ROUTER.to_string()]);
        }
    }

    /// Starts `args` in namespace `ns` in the background, stopped when the lab is dropped.
    pub fn spawn(&mut self, ns: &str, args: &[&str]) -> u32 {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", ns]).args(args).stdin(Stdio::null()).stdout(Stdio::null());
        let child = die_with_parent(&mut command).spawn().unwrap_or_else(|e| panic!("spawn {args:?}: {e}"));
        let pid = child.id();
        self.children.push(child);
        pid
    }

    /// `lb-ctl decap attach eth0 --from FROM` on backend `j`, as an operator runs it. nsenter
    /// enters only the network namespace, so the pin lands in the host's bpffs and outlives
    /// the command (`ip netns exec` would pin into a private /sys that goes with it).
    pub fn attach_decap(&mut self, j: usize, from: &str) {
        let ns = &self.backends[j].name;
        let lb_ctl = crate::lb_ctl_bin();
        let net = format!("--net=/run/netns/{ns}");
        let args =
            [net.as_str(), lb_ctl.to_str().unwrap(), "decap", "attach", "eth0", "--from", from, "--xdp-mode", "skb"];
        let mut command = vec!["nsenter"];
        command.extend(args);
        crate::netns::sh(&command);
        let _in = self.backends[j].enter();
        self.decaps.push(lb_ctl::paths::AttachPaths::decap("eth0"));
    }

    /// Takes node `i` off the network as a crash would: its link goes down and its BIRD
    /// freezes (no BGP withdrawal, no TCP FIN, no BFD). Only BFD can tell the router.
    pub fn crash_node(&mut self, i: usize) {
        self.freeze_bird(i);
        self.nodes[i].exec(&["ip", "link", "set", "eth0", "down"]);
    }

    /// Kills node `i` as a power loss would: its link goes down first (so nothing it sends on
    /// the way out, not even BIRD's TCP FIN, reaches the router), then its BIRD gets SIGKILL.
    /// The caller kills the node's daemon (`Daemon::kill9`). Only BFD, or the BGP hold time,
    /// can tell the router.
    pub fn kill_node(&mut self, i: usize) {
        self.nodes[i].exec(&["ip", "link", "set", "eth0", "down"]);
        self.kill_bird(i);
    }

    /// SIGKILL to node `i`'s BIRD (its control socket file stays, answering nothing).
    pub fn kill_bird(&mut self, i: usize) {
        if let Some(mut child) = self.node_birds[i].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The control socket of node `i`'s BIRD (`bird -s`), for `[daemon] bird_socket`.
    pub fn bird_socket(&self, i: usize) -> PathBuf {
        self.dir.join(format!("node{i}.ctl"))
    }

    /// Starts BIRD in the foreground in namespace `ns` with `conf`.
    fn bird(&self, ns: &str, name: &str, conf: &str) -> Child {
        let conf_path = self.dir.join(format!("{name}.conf"));
        std::fs::write(&conf_path, conf).unwrap();
        let log = std::fs::File::create(self.dir.join(format!("{name}.log"))).unwrap();
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", ns, "bird", "-f", "-c"])
            .arg(&conf_path)
            .arg("-s")
            .arg(self.dir.join(format!("{name}.ctl")))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        die_with_parent(&mut command).spawn().unwrap_or_else(|e| panic!("starting bird (apt-get install bird2): {e}"))
    }

    /// Freezes node `i`'s BIRD (SIGSTOP): it sends nothing more, not even a TCP FIN, as on a
    /// node that hung or lost power; only BFD (or the BGP hold time) can tell the router.
    pub fn freeze_bird(&mut self, i: usize) {
        let child = self.node_birds[i].as_ref().expect("node BIRD running");
        // SAFETY: kill(2) on the pid of a child this lab started.
        assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGSTOP) }, 0);
    }

    /// The next hops of the router's route to `vip` (empty: no route).
    pub fn next_hops(&self, vip: Ipv4Addr) -> Vec<Ipv4Addr> {
        let out = self.router.exec(&["ip", "-o", "route", "show", "exact", &format!("{vip}/32")]);
        let text = String::from_utf8_lossy(&out.stdout);
        let words: Vec<&str> = text.split_whitespace().collect();
        let mut hops: Vec<Ipv4Addr> =
            words.windows(2).filter(|w| w[0] == "via").filter_map(|w| w[1].parse().ok()).collect();
        hops.sort();
        hops
    }

    /// Waits until the router's next hops to `vip` are `want` (sorted); returns how long it took.
    pub fn wait_next_hops(&self, vip: Ipv4Addr, want: &[Ipv4Addr], within: Duration) -> Duration {
        let started = Instant::now();
        loop {
            let hops = self.next_hops(vip);
            if hops == want {
                return started.elapsed();
            }
            assert!(
                started.elapsed() < within,
                "the router's next hops to {vip} are {hops:?}, not {want:?}, after {within:?}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The router's route to `vip`, as `ip route` prints it (one line).
    pub fn route_text(&self, vip: Ipv4Addr) -> String {
        let out = self.router.exec(&["ip", "-o", "route", "show", "exact", &format!("{vip}/32")]);
        String::from_utf8_lossy(&out.stdout).split_whitespace().collect::<Vec<_>>().join(" ")
    }

    /// Every BIRD log, for failure messages.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for entry in std::fs::read_dir(&self.dir).unwrap().flatten() {
            if entry.path().extension().is_some_and(|e| e == "log") {
                let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
                out.push_str(&format!("--- {}\n{text}", entry.path().display()));
            }
        }
        out
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// `docs/bird.conf` with node `i`'s addresses.
pub fn node_conf(i: usize) -> String {
    let shipped = include_str!("../../../docs/bird.conf");
    let mut out = String::new();
    for line in shipped.lines() {
        let line = if line.starts_with("define NODE =") {
            format!("define NODE = {};", node_addr(i))
        } else if line.starts_with("define ROUTER =") {
            format!("define ROUTER = {ROUTER};")
        } else {
            line.to_string()
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in self.children.drain(..) {
            crate::lab::stop(child);
        }
        for paths in &self.decaps {
            let _ = lb_ctl::dataplane::attach::detach_decap_at(paths);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        for child in self.node_birds.iter_mut().chain(std::iter::once(&mut self.router_bird)).flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
