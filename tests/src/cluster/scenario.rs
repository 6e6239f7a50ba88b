//! The scale-out scenario the demo shows and the e2e test asserts: three nodes announce a DSR
//! VIP over BGP and share the flows they place (`[cluster]`), the router spreads long-lived
//! connections over them (ECMP), then, while the connections stream, a backend is added on
//! every node (which moves ring slots), a node crashes, and another is drained. Every
//! connection must finish byte-exact: a flow ECMP moves to another node reaches the backend it
//! had, by the same ring, or (for the slots the new backend took) by the entry its first node
//! shared.
use std::net::{SocketAddr, SocketAddrV4};
use std::time::{Duration, Instant};

use super::{Cluster, VIP, backend_addr, client_addr, node_addr};
use crate::lab::{Daemon, Hold, http_get, pattern_byte, wait_for_listener};

pub const NODES: usize = 3;
/// Backends in the nodes' configuration; one more is started, and added mid-stream.
pub const BACKENDS: usize = 3;
/// Client addresses; one long-lived connection from each, per phase.
pub const CLIENTS: usize = 24;
/// Seconds each long-lived connection streams (one byte a second).
const STREAM_SECS: usize = 8;
/// BGP sessions coming up, routes propagating: generous for a loaded machine.
const CONVERGE: Duration = Duration::from_secs(30);
/// The port the nodes share flows on (`[cluster] listen`).
const SHARE_PORT: u16 = 7946;

/// The lab's options.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// BFD between the router and the nodes (off: the BGP hold time finds a dead node).
    pub bfd: bool,
    /// Flow sharing between the nodes (`[cluster]`).
    pub share: bool,
}

/// What the scenario measured.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Long-lived connections opened, and how many did not finish byte-exact.
    pub connections: usize,
    pub broken: Vec<String>,
    /// Nodes that forwarded VIP packets before the crash (ECMP spread).
    pub nodes_used: usize,
    /// From the crash to the router's route without the node.
    pub crash_failover: Duration,
    /// From `node drain` to the router's route without the node.
    pub drain_failover: Duration,
    /// A 1 MiB response through the VIP arrived byte-exact.
    pub large_exact: bool,
    /// Each node's ring digest once every node announced.
    pub rings: Vec<String>,
    /// Flows the surviving nodes recorded from their peers (flow sharing).
    pub shared_recorded: u64,
}

fn vip() -> SocketAddrV4 {
    SocketAddrV4::new(VIP, 80)
}

fn cluster_table(node: usize) -> String {
    let peers: Vec<String> =
        (0..NODES).filter(|i| *i != node).map(|i| format!("\"{}:{SHARE_PORT}\"", node_addr(i))).collect();
    format!(
        "[cluster]\nlisten = \"{}:{SHARE_PORT}\"\npeers = [ {} ]\nkey_file = \"cluster.key\"\n\n",
        node_addr(node),
        peers.join(", ")
    )
}

fn node_config(socket: &std::path::Path, node: usize, share: bool) -> String {
    let backends: Vec<String> = (0..BACKENDS).map(|j| format!("{{ address = \"{}\" }}", backend_addr(j))).collect();
    format!(
        "[daemon]\n\
         api_socket = \"{}\"\n\
         \n\
         {}\
         [[vip]]\n\
         name = \"web\"\n\
         address = \"{VIP}\"\n\
         port = 80\n\
         forwarding = \"dsr-ipip\"\n\
         encap_source = \"{}\"\n\
         health = {{ kind = \"http\", path = \"/health\", interval = \"200ms\", timeout = \"100ms\" }}\n\
         announce = {{ min_healthy = 2 }}\n\
         backends = [ {} ]\n",
        socket.display(),
        if share { cluster_table(node) } else { String::new() },
        node_addr(node),
        backends.join(", ")
    )
}

/// Builds the lab, starts backends (with `lb-ctl decap`) and the node daemons.
pub fn start(tag: &str, backend_bin: &str, options: Options) -> (Cluster, Vec<Daemon>) {
    let mut cluster = Cluster::with_bfd(tag, NODES, BACKENDS + 1, CLIENTS, options.bfd);
    for j in 0..=BACKENDS {
        let ns = cluster.backends[j].name.clone();
        cluster.spawn(&ns, &[backend_bin, "0.0.0.0:80", &format!("backend-{j}")]);
        // As an operator sets up a DSR backend: accept IPIP from the nodes' addresses only.
        cluster.attach_decap(j, "198.51.100.0/29");
        let _in = cluster.backends[j].enter();
        wait_for_listener(SocketAddr::from((backend_addr(j), 80)), Duration::from_secs(15));
    }
    let daemons = (0..NODES)
        .map(|i| {
            let mut d = Daemon::new(&cluster.nodes[i], "eth0", &format!("{tag}{i}"), &["--xdp-mode", "skb"]);
            // The shared key: the same on every node.
            std::fs::write(d.dir().join("cluster.key"), "lab-cluster-key-0123456789abcdef\n").unwrap();
            d.write_config_text(&node_config(&d.socket(), i, options.share));
            d.start();
            d
        })
        .collect();
    (cluster, daemons)
}

/// Runs the scenario on a started lab; `say` narrates.
pub fn run(cluster: &mut Cluster, daemons: &mut [Daemon], say: &mut dyn FnMut(String)) -> Outcome {
    let mut out = Outcome::default();
    let all: Vec<_> = (0..NODES).map(node_addr).collect();
    let took = cluster.wait_next_hops(VIP, &all, CONVERGE);
    say(format!("router: {VIP}/32 via {} next hops ({} ms after the daemons answered)", all.len(), took.as_millis()));
    say(format!("router route: {}", cluster.route_text(VIP)));
    let rings: Vec<String> = daemons.iter().map(ring_digest).collect();
    say(format!("ring digest per node: {rings:?} (the same backends give the same ring)"));
    out.rings = rings;

    let (status, body) = {
        let _in = cluster.client.enter();
        http_get(client_addr(0), vip(), "/bytes/1048576").expect("1 MiB through the VIP")
    };
    out.large_exact =
        status == 200 && body.len() == 1 << 20 && body.iter().enumerate().all(|(i, b)| *b == pattern_byte(i));
    say(format!("1 MiB through the VIP: status {status}, byte-exact {}", out.large_exact));

    // Phase 1: a backend is added on every node, then a node crashes, while connections stream.
    let holds: Vec<Hold> =
        (0..CLIENTS).map(|k| Hold::open(&cluster.client.name, vip(), client_addr(k), STREAM_SECS)).collect();
    out.connections += holds.len();
    let packets: Vec<u64> = daemons.iter().map(vip_packets).collect();
    out.nodes_used = packets.iter().filter(|p| **p > 0).count();
    say(format!("{} connections streaming; VIP packets per node {packets:?}", holds.len()));
    let added = SocketAddr::from((backend_addr(BACKENDS), 80));
    for d in daemons.iter() {
        d.ok(&["backends", "add", "web", &added.to_string()]);
    }
    for d in daemons.iter() {
        d.wait_for_backend(added, Duration::from_secs(10), "up and in the ring", |b| b.in_ring);
    }
    say(format!("backend {added} added on every node: it took ring slots from the others"));
    daemons[1].kill9();
    cluster.crash_node(1);
    let survivors = [node_addr(0), node_addr(2)];
    out.crash_failover = cluster.wait_next_hops(VIP, &survivors, Duration::from_secs(15));
    say(format!(
        "node 1 crashed (link down, daemon and BIRD dead): the router dropped it after {} ms",
        out.crash_failover.as_millis()
    ));
    finish(holds, &mut out, "after the backend change and the crash", say);
    out.shared_recorded = [0, 2].iter().map(|i| shared_recorded(&daemons[*i])).sum();
    say(format!("flows the survivors recorded from their peers: {}", out.shared_recorded));

    // Phase 2: a node is drained while connections stream.
    let holds: Vec<Hold> =
        (0..CLIENTS).map(|k| Hold::open(&cluster.client.name, vip(), client_addr(k), STREAM_SECS)).collect();
    out.connections += holds.len();
    std::thread::sleep(Duration::from_secs(1));
    let drained = Instant::now();
    daemons[2].ok(&["node", "drain"]);
    cluster.wait_next_hops(VIP, &[node_addr(0)], CONVERGE);
    out.drain_failover = drained.elapsed();
    say(format!(
        "node 2 drained: the router dropped it after {} ms; route: {}",
        out.drain_failover.as_millis(),
        cluster.route_text(VIP)
    ));
    finish(holds, &mut out, "after the drain", say);
    out
}

fn finish(holds: Vec<Hold>, out: &mut Outcome, phase: &str, say: &mut dyn FnMut(String)) {
    let count = holds.len();
    let broken: Vec<String> = holds.into_iter().filter_map(|h| h.outcome().err()).collect();
    say(format!(
        "{phase}: {} of {count} connections finished byte-exact, {} broken",
        count - broken.len(),
        broken.len()
    ));
    out.broken.extend(broken.into_iter().map(|e| format!("{phase}: {e}")));
}

fn vips_json(d: &Daemon) -> serde_json::Value {
    serde_json::from_str(&d.ok(&["vips", "list", "--json"])).expect("vips list --json")
}

fn ring_digest(d: &Daemon) -> String {
    vips_json(d)[0]["ring_digest"].as_str().unwrap_or("-")[..8].to_string()
}

fn vip_packets(d: &Daemon) -> u64 {
    vips_json(d)[0]["packets"].as_u64().unwrap_or(0)
}

fn shared_recorded(d: &Daemon) -> u64 {
    let status: serde_json::Value = serde_json::from_str(&d.ok(&["status", "--json"])).expect("status --json");
    status["flow_sharing"]["flows_recorded"].as_u64().unwrap_or(0)
}
