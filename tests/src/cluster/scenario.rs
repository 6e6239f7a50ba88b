//! The scale-out scenario the demo shows and the e2e test asserts: four nodes announce a DSR
//! VIP over BGP and share the flows they place (`[cluster]`), the router spreads long-lived
//! connections over them (ECMP; the VIP hashes the 5-tuple, so step 3 can choose its flows).
//! Optionally first, node 0 is sent bad flow-sharing messages ([`bad_peers`]). Then three
//! steps, each while connections stream:
//!
//! 1. **Crash**: node 1 dies (link down, then `kill -9` of its daemon and its BIRD). Its flows
//!    land on the others, whose rings (the same backends) send them to the same backend.
//! 2. **Drain**: `lb-ctl node drain` on node 2; the router's route keeps 2 next hops.
//! 3. **Backend removed, then a node killed**: connections are opened on flows whose backend
//!    stays but whose ring slot the removal of backend 2 hands to another backend; backend 2
//!    is removed on every node, then node 3 is killed. Its flows land on node 0, whose new
//!    ring names another backend: only the entries node 3 shared (flow sharing) keep them on
//!    their backend. (The removed backend's own flows cannot continue anywhere, so none are
//!    opened.)
//!
//! Every connection must finish byte-exact. Why four nodes, not three with the crashed one
//! restarted: each step then starts from nodes that ran throughout (no wait for a BGP session
//! and BFD to come back, which costs seconds of the e2e test's run time, and no node whose
//! connection table missed what its peers shared while it was down), and the drain still
//! leaves the route with 2 next hops, as the demo shows.
use std::net::{SocketAddr, SocketAddrV4};
use std::time::{Duration, Instant};

use super::{Cluster, VIP, backend_addr, client_addr, node_addr};
use crate::lab::{Daemon, Ending, Hold, http_get, pattern_byte, wait_for_listener};

pub const NODES: usize = 4;
/// Backends in the nodes' configuration; the last one is removed in step 3.
pub const BACKENDS: usize = 3;
/// Client addresses; one long-lived connection from each, per phase.
pub const CLIENTS: usize = 24;
/// Seconds each long-lived connection streams (one byte a second).
pub const STREAM_SECS: usize = 8;
/// The same for step 3's connections, opened one at a time (each asked where it was placed).
pub const MOVED_STREAM_SECS: usize = 12;
/// BGP sessions coming up, routes propagating: generous for a loaded machine.
const CONVERGE: Duration = Duration::from_secs(30);
/// The port the nodes share flows on (`[cluster] listen`).
const SHARE_PORT: u16 = 7946;
/// The nodes' shared key (`cluster.key`).
const CLUSTER_KEY: &[u8] = b"lab-cluster-key-0123456789abcdef";
/// The backend step 3 removes.
const REMOVED: usize = BACKENDS - 1;

/// The lab's options.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// BFD between the router and the nodes (off: the BGP hold time finds a dead node).
    pub bfd: bool,
    /// Flow sharing between the nodes (`[cluster]`).
    pub share: bool,
    /// Before the steps, node 0 is sent messages signed with a wrong key and a flood from a
    /// peer ([`bad_peers`]).
    pub bad_peers: bool,
}

/// What the scenario measured.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Long-lived connections opened, and how many did not finish byte-exact.
    pub connections: usize,
    pub broken: Vec<String>,
    /// Body bytes those connections were sent, and how many of them did not arrive.
    pub bytes: usize,
    pub bytes_lost: usize,
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
    /// Flows node 0 recorded from its peers (flow sharing).
    pub shared_recorded: u64,
    /// Step 3: connections opened on flows the backend removal moves on the ring (their
    /// backend stays), those of them ECMP had sent to the node then killed (broken without
    /// flow sharing), and how many of the latter broke.
    pub moved_opened: usize,
    pub moved_to_survivor: usize,
    pub moved_broken: usize,
    /// Step 3: from the kill to the router's route without the node.
    pub kill_failover: Duration,
    /// What node 0 counted while peers misbehaved ([`bad_peers`]), when run.
    pub bad_peers: Option<BadPeers>,
}

/// What [`bad_peers`] found on node 0.
#[derive(Debug, Default)]
pub struct BadPeers {
    /// Messages sent from node 1's address signed with a wrong key, and those node 0 refused
    /// as such.
    pub wrong_key_sent: u64,
    pub refused_bad_key: u64,
    /// Messages sent as fast as one thread can from node 2's address (the right key), and those
    /// node 0 refused as over `max_messages_per_second`.
    pub flood_sent: u64,
    pub refused_rate: u64,
    /// VIP packets node 0 forwarded during those, and its connections' outcome.
    pub packets_forwarded: u64,
    pub connections: usize,
    pub broken: Vec<String>,
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

fn node_config(socket: &std::path::Path, bird: &std::path::Path, node: usize, share: bool) -> String {
    format!(
        "[daemon]\napi_socket = \"{}\"\nbird_socket = \"{}\"\n\n{}{}",
        socket.display(),
        bird.display(),
        if share { cluster_table(node) } else { String::new() },
        web_vip(node, BACKENDS)
    )
}

/// The lab's `[[vip]]` table: the DSR VIP `web`, encapsulated from node `node`, with backends
/// `0..backends` (the cluster's node files, and the file the fleet's operator pushes).
pub fn web_vip(node: usize, backends: usize) -> String {
    let backends: Vec<String> = (0..backends).map(|j| format!("{{ address = \"{}\" }}", backend_addr(j))).collect();
    format!(
        "[[vip]]\n\
         name = \"web\"\n\
         address = \"{VIP}\"\n\
         port = 80\n\
         forwarding = \"dsr-ipip\"\n\
         hash = \"flow\"\n\
         encap_source = \"{}\"\n\
         health = {{ kind = \"http\", path = \"/health\", interval = \"200ms\", timeout = \"100ms\" }}\n\
         announce = {{ min_healthy = 2 }}\n\
         backends = [ {} ]\n",
        node_addr(node),
        backends.join(", ")
    )
}

/// Builds the lab, starts backends (with `lb-ctl decap`) and the node daemons.
pub fn start(tag: &str, backend_bin: &str, options: Options) -> (Cluster, Vec<Daemon>) {
    let mut cluster = Cluster::with_bfd(tag, NODES, BACKENDS, CLIENTS, options.bfd);
    for j in 0..BACKENDS {
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
            std::fs::write(d.dir().join("cluster.key"), format!("{}\n", String::from_utf8_lossy(CLUSTER_KEY))).unwrap();
            d.write_config_text(&node_config(&d.socket(), &cluster.bird_socket(i), i, options.share));
            d.start();
            d
        })
        .collect();
    (cluster, daemons)
}

/// Runs the scenario on a started lab; `say` narrates.
pub fn run(cluster: &mut Cluster, daemons: &mut [Daemon], options: Options, say: &mut dyn FnMut(String)) -> Outcome {
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

    if options.bad_peers {
        out.bad_peers = Some(bad_peers(cluster, daemons, say));
    }

    // Step 1: node 1 is killed while connections stream (once their flows reached the peers:
    // on a loaded host sharing can lag the 500 ms the connections are given).
    let shared_before = options.share.then(|| sharing_totals(daemons));
    let holds: Vec<Hold> =
        (0..CLIENTS).map(|k| Hold::open(&cluster.client.name, vip(), client_addr(k), STREAM_SECS)).collect();
    std::thread::sleep(Duration::from_millis(500));
    if let Some(before) = shared_before {
        match wait_shared(daemons, before, CLIENTS as u64) {
            Some(took) => say(format!("their flows recorded by every peer within {} ms", took.as_millis())),
            None => say("their flows not all recorded by every peer within 10 s: killing node 1 anyway".into()),
        }
    }
    let packets: Vec<u64> = daemons.iter().map(vip_packets).collect();
    out.nodes_used = packets.iter().filter(|p| **p > 0).count();
    say(format!("{} connections streaming; VIP packets per node {packets:?}", holds.len()));
    cluster.kill_node(1);
    daemons[1].kill9();
    let survivors = [node_addr(0), node_addr(2), node_addr(3)];
    out.crash_failover = cluster.wait_next_hops(VIP, &survivors, Duration::from_secs(15));
    say(format!(
        "node 1 killed (link down, kill -9 of its daemon and BIRD): the router dropped it after {} ms",
        out.crash_failover.as_millis()
    ));
    finish(holds, &mut out, "after node 1 died", say);

    // Step 2: node 2 is drained while connections stream.
    let holds: Vec<Hold> =
        (0..CLIENTS).map(|k| Hold::open(&cluster.client.name, vip(), client_addr(k), STREAM_SECS)).collect();
    std::thread::sleep(Duration::from_secs(1));
    let drained = Instant::now();
    daemons[2].ok(&["node", "drain"]);
    cluster.wait_next_hops(VIP, &[node_addr(0), node_addr(3)], CONVERGE);
    out.drain_failover = drained.elapsed();
    say(format!("node 2 drained: the router dropped it after {} ms", out.drain_failover.as_millis()));
    say(format!("router route: {}", cluster.route_text(VIP)));
    finish(holds, &mut out, "after the drain", say);

    // Step 3: connections on flows the removal of a backend moves on the ring; the backend is
    // removed on every running node, then node 3 is killed.
    let removed = SocketAddr::from((backend_addr(REMOVED), 80));
    let flows = moved_flows(&daemons[0]);
    // Opened one by one, each asked which node placed it (ECMP's choice is the router's).
    let (holds, to_killed): (Vec<Hold>, Vec<bool>) = flows
        .iter()
        .map(|f| {
            let (hold, node) = open_placed(cluster, daemons, &[0, 3], f.client, MOVED_STREAM_SECS, options.share);
            (hold, node == Some(3))
        })
        .unzip();
    out.moved_opened = flows.len();
    out.moved_to_survivor = to_killed.iter().filter(|k| **k).count();
    say(format!(
        "{} connections streaming on flows whose backend stays but whose ring slot removing {removed} hands to another backend (e.g. {}: {} now, {} on the new ring); ECMP sent {} of them to node 3",
        holds.len(),
        flows[0].client,
        flows[0].before,
        flows[0].after,
        out.moved_to_survivor
    ));
    // The flows reach the peers (batches leave at least every 100 ms).
    std::thread::sleep(Duration::from_secs(1));
    for i in [0, 2, 3] {
        daemons[i].ok(&["backends", "remove", "web", &removed.to_string()]);
    }
    say(format!("backend {removed} removed on every running node: node 0's ring now sends those flows elsewhere"));
    cluster.kill_node(3);
    daemons[3].kill9();
    out.kill_failover = cluster.wait_next_hops(VIP, &[node_addr(0)], Duration::from_secs(15));
    say(format!("node 3 killed: the router dropped it after {} ms", out.kill_failover.as_millis()));
    let mut moved_broken = Vec::new();
    let mut phase = Outcome::default();
    for ((hold, flow), killed) in holds.into_iter().zip(&flows).zip(&to_killed) {
        let ending = hold.ending();
        if *killed && ending.result.is_err() {
            moved_broken.push(flow.client);
        }
        record(&mut phase, ending, "after the removal and node 3's death");
    }
    out.moved_broken = moved_broken.len();
    add_phase(&mut out, phase, "after the removal and node 3's death", say);
    say(format!(
        "flows that ECMP moved to node 0 and that its new ring would have sent to another backend: {}; broken: {} ({})",
        out.moved_to_survivor,
        out.moved_broken,
        if options.share { "node 3 had shared them with node 0" } else { "flow sharing off" }
    ));
    out.shared_recorded = shared_counter(&daemons[0], "flows_recorded");
    say(format!("flows node 0 recorded from its peers: {}", out.shared_recorded));
    say(format!(
        "in all: {} connections, {} broken, {} of {} bytes lost",
        out.connections,
        out.broken.len(),
        out.bytes_lost,
        out.bytes
    ));
    out
}

/// A flow chosen for step 3: from `client`, its backend before the removal (`before`, kept)
/// and the one the ring without the removed backend gives (`after`).
#[derive(Debug)]
struct MovedFlow {
    client: SocketAddrV4,
    before: SocketAddr,
    after: SocketAddr,
}

/// Up to [`CLIENTS`] flows whose backend is not the one step 3 removes but whose ring slot the
/// removal hands to another backend ([`super::ring::RingModel`]); the choice before the
/// removal is checked against the node's own `explain`.
fn moved_flows(node: &Daemon) -> Vec<MovedFlow> {
    let removed = SocketAddr::from((backend_addr(REMOVED), 80));
    let before = super::ring::RingModel::web(BACKENDS);
    let after = before.without(removed);
    // Maglev's minimal disruption: removing one of three backends hands only about 10 of the
    // 65537 slots of the two others to another backend, so such flows are searched for (source
    // ports below the client's ephemeral range; the VIP hashes the 5-tuple), not met by chance.
    let mut flows = Vec::new();
    'search: for port in 1024..20_000u16 {
        for k in 0..CLIENTS {
            let client = SocketAddrV4::new(client_addr(k), port);
            let (b, a) = (before.backend_of(client), after.backend_of(client));
            if b != removed && a != b {
                flows.push(MovedFlow { client, before: b, after: a });
                if flows.len() == CLIENTS {
                    break 'search;
                }
            }
        }
    }
    assert!(flows.len() >= CLIENTS / 2, "only {} flows found whose ring slot the removal moves", flows.len());
    for f in &flows {
        let view = node.explain("web", &f.client.to_string());
        assert_eq!(
            view["backend"].as_str(),
            Some(f.before.to_string().as_str()),
            "the node places {} as computed here: {view}",
            f.client
        );
    }
    flows
}

/// Node 0 is sent, from node 1's address, messages signed with a wrong key, then from node 2's
/// address a flood of well-signed ones as fast as one thread sends (bounded in count and
/// time), while connections through node 0 stream. It must refuse and count them and keep
/// forwarding. The flood names a backend no node has, so nothing it carries is recorded.
pub fn bad_peers(cluster: &Cluster, daemons: &[Daemon], say: &mut dyn FnMut(String)) -> BadPeers {
    use lb_ctl::cluster::wire::{MAX_FLOWS, WireFlow, encode};
    const WRONG_KEY: u64 = 100;
    const FLOOD: u64 = 50_000;
    /// Connections through node 0 wanted; at most twice [`CLIENTS`] are opened to get them.
    const THROUGH_NODE0: usize = 4;
    let node0 = &daemons[0];
    let mut out = BadPeers { wrong_key_sent: WRONG_KEY, ..BadPeers::default() };
    // Connections streaming, until enough of them go through node 0 (ECMP chooses).
    let all: Vec<usize> = (0..NODES).collect();
    let mut holds = Vec::new();
    for k in 0..2 * CLIENTS {
        let client = SocketAddrV4::new(client_addr(k % CLIENTS), 0);
        let (hold, node) = open_placed(cluster, daemons, &all, client, STREAM_SECS, true);
        if node == Some(0) {
            holds.push(hold);
            if holds.len() == THROUGH_NODE0 {
                break;
            }
        } else {
            drop(hold);
        }
    }
    let packets = vip_packets(node0);
    let target = SocketAddr::from((node_addr(0), SHARE_PORT));
    let flows: Vec<WireFlow> = (0..MAX_FLOWS as u16)
        .map(|i| WireFlow {
            protocol: 6,
            client: SocketAddr::from(([203, 0, 113, 200], 30_000 + i)),
            vip: SocketAddr::from((VIP, 80)),
            backend: SocketAddr::from(([198, 51, 100, 99], 80)),
        })
        .collect();
    let micros = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as u64;
    let socket_in = |node: usize| {
        let _in = cluster.nodes[node].enter();
        std::net::UdpSocket::bind(SocketAddr::from((node_addr(node), 0))).expect("bind in the node's namespace")
    };
    let wrong = socket_in(1);
    for _ in 0..WRONG_KEY {
        wrong.send_to(&encode(micros(), &flows, b"not-the-cluster-key-0123456789ab"), target).unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    let flood = socket_in(2);
    let started = Instant::now();
    while out.flood_sent < FLOOD && started.elapsed() < Duration::from_secs(3) {
        if flood.send_to(&encode(micros(), &flows, CLUSTER_KEY), target).is_ok() {
            out.flood_sent += 1;
        }
    }
    std::thread::sleep(Duration::from_millis(200));
    out.refused_bad_key = shared_counter(node0, "refused_bad_key");
    out.refused_rate = shared_counter(node0, "refused_rate");
    out.connections = holds.len();
    out.broken = holds.into_iter().filter_map(|h| h.outcome().err()).collect();
    out.packets_forwarded = vip_packets(node0) - packets;
    say(format!(
        "bad peers: node 0 refused {} of {} messages signed with a wrong key (from node 1's address) and {} of {} flooded from node 2's address as over max_messages_per_second; meanwhile it forwarded {} VIP packets, {} of {} connections through it byte-exact",
        out.refused_bad_key,
        out.wrong_key_sent,
        out.refused_rate,
        out.flood_sent,
        out.packets_forwarded,
        out.connections - out.broken.len(),
        out.connections
    ));
    say(format!("node 0 status: {}", status_line(node0, "flow share")));
    out
}

/// Opens a long-lived connection from `client` (port 0: any) and tells which of `nodes` placed
/// it: with flow sharing, the node whose count of flows sent to its peers rose (a node reports
/// only the flows it places itself); without, the node whose connection table holds it.
fn open_placed(
    cluster: &Cluster,
    daemons: &[Daemon],
    nodes: &[usize],
    client: SocketAddrV4,
    secs: usize,
    share: bool,
) -> (Hold, Option<usize>) {
    let sent = |i: usize| shared_counter(&daemons[i], "flows_sent");
    let before: Vec<u64> = if share { nodes.iter().map(|i| sent(*i)).collect() } else { Vec::new() };
    let hold = Hold::open_from(&cluster.client.name, vip(), client, secs);
    if !share {
        let local = hold.local().to_string();
        let node = nodes.iter().copied().find(|i| daemons[*i].explain("web", &local)["decision"] == "conntrack");
        return (hold, node);
    }
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        if let Some(node) = nodes.iter().zip(&before).find(|(i, b)| sent(**i) > **b).map(|(i, _)| *i) {
            return (hold, Some(node));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    (hold, None)
}

/// The line of `lb-ctl status` that starts with `prefix`.
fn status_line(d: &Daemon, prefix: &str) -> String {
    d.ok(&["status"]).lines().find(|l| l.starts_with(prefix)).unwrap_or("(none)").trim().to_string()
}

fn finish(holds: Vec<Hold>, out: &mut Outcome, phase: &str, say: &mut dyn FnMut(String)) {
    let mut this = Outcome::default();
    for hold in holds {
        record(&mut this, hold.ending(), phase);
    }
    add_phase(out, this, phase, say);
}

/// Says how a phase's connections ended and adds them to the run's outcome.
fn add_phase(out: &mut Outcome, this: Outcome, phase: &str, say: &mut dyn FnMut(String)) {
    say(format!(
        "{phase}: {} of {} connections finished byte-exact, {} broken, {} of {} bytes lost",
        this.connections - this.broken.len(),
        this.connections,
        this.broken.len(),
        this.bytes_lost,
        this.bytes
    ));
    out.connections += this.connections;
    out.broken.extend(this.broken);
    out.bytes += this.bytes;
    out.bytes_lost += this.bytes_lost;
}

fn record(out: &mut Outcome, ending: Ending, phase: &str) {
    out.connections += 1;
    out.bytes += ending.expected;
    out.bytes_lost += ending.lost();
    if let Err(e) = ending.result {
        out.broken.push(format!("{phase}: {e}"));
    }
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

/// Flows the nodes sent to their peers and flows they recorded from them, over all nodes.
fn sharing_totals(daemons: &[Daemon]) -> (u64, u64) {
    let total = |name| daemons.iter().map(|d| shared_counter(d, name)).sum::<u64>();
    (total("flows_sent"), total("flows_recorded"))
}

/// Waits (10 s at most: the connections' endings tell what a lag broke) until `flows` more
/// flows were sent since `before`, and each was recorded by every other node; how long that
/// took.
fn wait_shared(daemons: &[Daemon], before: (u64, u64), flows: u64) -> Option<Duration> {
    let peers = daemons.len() as u64 - 1;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(10) {
        let (sent, recorded) = sharing_totals(daemons);
        if sent >= before.0 + flows && recorded >= before.1 + flows * peers {
            return Some(started.elapsed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

fn shared_counter(d: &Daemon, name: &str) -> u64 {
    let status: serde_json::Value = serde_json::from_str(&d.ok(&["status", "--json"])).expect("status --json");
    status["flow_sharing"][name].as_u64().unwrap_or(0)
}
