//! A routed lab for scale-out: a router namespace and N balancer nodes, each on its own /30
//! link to the router, every one running BIRD 2 (`docs/bird.conf` on the nodes, with their
//! addresses), the router with ECMP over the nodes that announce a VIP. Everything is named
//! with the run's prefix and removed on drop; BIRD processes die with the test.
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::netns::{Netns, die_with_parent, run_name};

/// The router's configuration: BGP from every node with BFD, and equal routes merged into one
/// multipath kernel route (ECMP).
const ROUTER_CONF: &str = "\
router id 192.0.2.254;
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

/// Node `i`'s address on its link (the router's is the next one).
pub fn node_addr(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(192, 0, 2, (4 * i + 1) as u8)
}

fn router_side(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(192, 0, 2, (4 * i + 2) as u8)
}

pub struct Cluster {
    pub router: Netns,
    pub nodes: Vec<Netns>,
    dir: PathBuf,
    router_bird: Option<Child>,
    node_birds: Vec<Option<Child>>,
}

impl Cluster {
    /// Builds the links and starts BIRD everywhere.
    pub fn new(tag: &str, nodes: usize) -> Cluster {
        let dir = std::env::temp_dir().join(run_name(&format!("{tag}-bird")));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let router = Netns::new(&format!("{tag}r"));
        router.exec(&["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
        router.exec(&["sysctl", "-qw", "net.ipv4.fib_multipath_hash_policy=1"]);
        let nodes: Vec<Netns> = (0..nodes).map(|i| Netns::new(&format!("{tag}n{i}"))).collect();
        let mut router_conf = ROUTER_CONF.to_string();
        for (i, node) in nodes.iter().enumerate() {
            let port = format!("r{i}");
            router.exec(&["ip", "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", &node.name]);
            router.exec(&["ip", "addr", "add", &format!("{}/30", router_side(i)), "dev", &port]);
            router.exec(&["ip", "link", "set", &port, "up"]);
            node.exec(&["ip", "addr", "add", &format!("{}/30", node_addr(i)), "dev", "eth0"]);
            node.exec(&["ip", "link", "set", "eth0", "up"]);
            node.exec(&["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
            router_conf.push_str(&format!("protocol bgp node{i} from balancer {{ neighbor {} as 65001; }}\n", node_addr(i)));
        }
        let mut cluster = Cluster { router, nodes, dir, router_bird: None, node_birds: Vec::new() };
        cluster.router_bird = Some(cluster.bird(&cluster.router.name.clone(), "router", &router_conf));
        for i in 0..cluster.nodes.len() {
            let child = cluster.bird(&cluster.nodes[i].name.clone(), &format!("node{i}"), &node_conf(i));
            cluster.node_birds.push(Some(child));
        }
        cluster
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
    let shipped = include_str!("../../docs/bird.conf");
    let mut out = String::new();
    for line in shipped.lines() {
        let line = if line.starts_with("define NODE =") {
            format!("define NODE = {};", node_addr(i))
        } else if line.starts_with("define ROUTER =") {
            format!("define ROUTER = {};", router_side(i))
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
        for child in self.node_birds.iter_mut().chain(std::iter::once(&mut self.router_bird)).flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
