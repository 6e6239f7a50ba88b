//! The fleet's scenario (`tests/fleet_e2e.rs` asserts it, `cargo xtask demo cluster` shows
//! it) on a started [`FleetLab`]. While long-lived connections stream and new ones are made
//! through the VIP, each step checked as it goes (a failed check panics with what it saw):
//!
//! - (a) a backend added once (`lb-ctl backends add` on node 0) reaches every node, and
//!   `fleet status` shows every node current with equal rings;
//! - (b) the etcd leader is killed (made the first member listed, which every node talks to
//!   first): no node's forwarding changes, and after the election the fleet takes writes
//!   again (a drain and an undrain made on node 1 reach every node, `fleet status` answers);
//! - (c) the last node is cut off from etcd by nftables drops (it keeps running and
//!   forwarding), a backend is removed from the fleet meanwhile: that node keeps its last
//!   state and says it lost etcd (status and metrics), then rejoins and converges;
//! - (d) a malformed value written straight into etcd is refused by every node and changes
//!   nothing.
//!
//! Each step's connections broken and bytes lost are returned (and said).
use std::net::{SocketAddr, SocketAddrV4};
use std::time::{Duration, Instant};

use super::traffic::{Churn, Tally};
use super::{FleetLab, backend, etcd, vip, vip_key};
use crate::cluster::client_addr;
use crate::cluster::ring::RingModel;
use crate::lab::Hold;

/// Backends serving; the fleet starts with the first two, (a) adds the third.
pub const BACKENDS: usize = 3;
/// Backends the fleet holds when pushed.
pub const INITIAL: usize = 2;
/// Long-lived connections per step, each from a client address of its own.
const HOLDS: usize = 12;
/// Client addresses the churn of new connections cycles through (after the holds').
const CHURN_ADDRS: usize = 4;
/// Client addresses the lab needs.
pub const CLIENTS: usize = HOLDS + CHURN_ADDRS;
/// Waits for a node to notice something (a lost etcd, a refusal): generous.
const NOTICE: Duration = Duration::from_secs(30);

/// Each step's traffic.
#[derive(Debug, Default)]
pub struct Outcome {
    pub steps: Vec<(String, Tally)>,
}

impl Outcome {
    fn settle(&mut self, say: &mut dyn FnMut(String), step: &str, tally: Tally) {
        say(format!("{step}: {}", tally.line()));
        self.steps.push((step.to_string(), tally));
    }

    /// Whether every step had traffic and none of it broke.
    pub fn clean(&self) -> bool {
        self.steps.iter().all(|(_, t)| t.connections > HOLDS && t.broken.is_empty() && t.bytes_lost == 0)
    }
}

/// Builds the lab with `nodes` nodes.
pub fn start(tag: &str, backend_bin: &str, nodes: usize) -> FleetLab {
    FleetLab::start(tag, backend_bin, nodes, BACKENDS, INITIAL, CLIENTS)
}

fn holds(lab: &FleetLab, secs: usize) -> Vec<Hold> {
    (0..HOLDS).map(|k| Hold::open(&lab.cluster.client.name, vip(), client_addr(k), secs)).collect()
}

fn churn(lab: &FleetLab) -> Churn {
    Churn::start(&lab.cluster.client.name, vip(), HOLDS, CHURN_ADDRS)
}

/// Flows that the ring of every backend sends to a backend other than `avoid`, computed with
/// the daemon's own ring code ([`RingModel`]): for the holds, one per hold client address
/// (source ports from 20000); for the churn, every one from the churn's client addresses
/// (source ports above the holds' and below the client's ephemeral range, each used once). A few
/// of each are checked against node 0's `explain`.
fn flows_avoiding(lab: &FleetLab, avoid: SocketAddr) -> (Vec<SocketAddrV4>, Vec<SocketAddrV4>) {
    let ring = RingModel::web(BACKENDS);
    let avoids = |f: &SocketAddrV4| ring.backend_of(*f) != avoid;
    let holds: Vec<SocketAddrV4> = (0..HOLDS)
        .map(|k| {
            (20_000..21_000u16)
                .map(|port| SocketAddrV4::new(client_addr(k), port))
                .find(avoids)
                .expect("a hold flow avoiding the backend")
        })
        .collect();
    let churn: Vec<SocketAddrV4> = (21_000..32_000u16)
        .flat_map(|port| (HOLDS..CLIENTS).map(move |k| SocketAddrV4::new(client_addr(k), port)))
        .filter(avoids)
        .collect();
    for f in holds.iter().chain(churn.iter().step_by(churn.len() / 4)) {
        let view = lab.daemons[0].explain("web", &f.to_string());
        assert_eq!(view["backend"].as_str(), Some(ring.backend_of(*f).to_string().as_str()), "{f}: {view}");
    }
    (holds, churn)
}

fn wait(lab: &FleetLab, what: &str, done: impl Fn() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < NOTICE, "{what}: not within {NOTICE:?}\n{}", lab.fleet_status_text());
        crate::lab::stop_if_interrupted();
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Node `i`'s metrics, from its control socket.
fn metrics(lab: &FleetLab, i: usize) -> String {
    let out = std::process::Command::new("curl")
        .args(["-sf", "--unix-socket"])
        .arg(lab.daemons[i].socket())
        .arg("http://lb/v1/metrics")
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs the steps; `say` narrates.
pub fn run(lab: &mut FleetLab, say: &mut dyn FnMut(String)) -> Outcome {
    let nodes = lab.daemons.len();
    let all: Vec<usize> = (0..nodes).collect();
    let mut out = Outcome::default();
    let start = lab.wait_converged("the pushed state on every node", &all, |_, _| true);
    say(format!("fleet pushed once; ring digest on every node: {}", &start[0][..12]));

    // (a) A backend added once, on node 0, while traffic runs.
    let (h, c) = (holds(lab, 8), churn(lab));
    let added = backend(2);
    let said = lab.daemons[0].ok(&["backends", "add", "web", &added.to_string()]);
    assert!(said.contains("added in the fleet /lb/lab"), "{said}");
    let rings = lab.wait_converged("the added backend on every node", &all, |lab, i| {
        lab.daemons[i].find_backend(added).is_some_and(|b| b.in_ring)
    });
    assert_ne!(rings, start, "the new backend changed every ring");
    say(format!("(a) {added} added on node 0: in every node's ring, `fleet status` equal: {}", &rings[0][..12]));
    out.settle(say, "(a) backend added once", Tally::of(h, c));

    // (b) The etcd leader killed while traffic runs: forwarding unchanged, writes go on.
    let (h, c) = (holds(lab, 10), churn(lab));
    let packets: Vec<u64> = all.iter().map(|i| lab.vip_packets(*i)).collect();
    // States applied (a reconnect re-reads the state but applies nothing that is unchanged).
    let applied = |lab: &FleetLab| -> Vec<serde_json::Value> {
        all.iter().map(|i| lab.fleet_view(*i)["applied_total"].clone()).collect()
    };
    let applied_before = applied(lab);
    // The leader is made the first member listed, the one every node and the CLI reach
    // first: its death takes their connections too, not only the leadership.
    let leader = 0;
    lab.etcd.move_leader(leader);
    lab.etcd.kill(leader);
    let next = lab.etcd.wait_for_leader(Some(leader));
    say(format!("(b) etcd leader m{leader} killed (SIGKILL); m{next} elected"));
    assert_eq!(lab.rings(), rings, "killing the leader changed no node's ring");
    assert_eq!(applied(lab), applied_before, "no node applied anything");
    let drained = backend(0);
    let said = lab.daemons[1 % nodes].ok(&["backends", "drain", "web", &drained.to_string()]);
    assert!(said.contains("drained in the fleet"), "{said}");
    lab.wait_converged("the drain after the election on every node", &all, |lab, i| {
        lab.backends(i).contains(&format!("{drained} draining"))
    });
    lab.daemons[1 % nodes].ok(&["backends", "undrain", "web", &drained.to_string()]);
    let after = lab.wait_converged("the undrain on every node", &all, |lab, i| {
        lab.backends(i).contains(&format!("{drained} active"))
    });
    assert_eq!(after, rings, "drained and undrained: the same ring");
    for (i, before) in packets.iter().enumerate() {
        assert!(lab.vip_packets(i) > *before, "node {i} forwarded throughout");
    }
    say(format!("(b) after the election: a drain and an undrain written on node {} reached every node", 1 % nodes));
    lab.etcd.restart(leader);
    lab.etcd.wait_for_leader(None);
    out.settle(say, "(b) etcd leader killed", Tally::of(h, c));

    // (c) The last node cut off from etcd; the added backend removed from the fleet meanwhile. The
    // long-lived and the new connections are on flows the ring sends to other backends (the
    // removed one's own flows move, by design, wherever it is removed: a new connection in
    // flight there as a node applies the removal is reset).
    let cut = nodes - 1;
    let (hold_flows, churn_flows) = flows_avoiding(lab, added);
    let h: Vec<Hold> = hold_flows.iter().map(|f| Hold::open_from(&lab.cluster.client.name, vip(), *f, 25)).collect();
    let c = Churn::over(&lab.cluster.client.name, vip(), churn_flows);
    etcd::partition(&lab.cluster.nodes[cut]);
    wait(lab, "the cut-off node says it lost etcd", || lab.fleet_view(cut)["connected"] == false);
    let status = lab.daemons[cut].ok(&["status"]);
    assert!(status.contains("etcd LOST"), "{status}");
    let metrics = metrics(lab, cut);
    assert!(metrics.contains("lb_fleet_connected 0"), "{metrics}");
    let before = lab.vip_packets(cut);
    lab.daemons[0].ok(&["backends", "remove", "web", &added.to_string()]);
    wait(lab, "the removal on the other nodes", || (0..cut).all(|i| lab.daemons[i].find_backend(added).is_none()));
    assert!(lab.daemons[cut].find_backend(added).is_some(), "the cut-off node keeps its last state");
    assert_eq!(lab.ring(cut), rings[cut], "the cut-off node's ring is the last one it applied");
    assert_ne!(lab.ring(0), rings[0], "node 0 applied the removal");
    wait(lab, "the cut-off node forwarding", || lab.vip_packets(cut) > before);
    say(format!(
        "(c) node {cut} cut off from etcd (nftables drops): `status` says etcd LOST, lb_fleet_connected 0; {added} removed from the fleet on node 0: the other nodes applied it, node {cut} forwards on its last ring"
    ));
    etcd::heal(&lab.cluster.nodes[cut]);
    let healed =
        lab.wait_converged("the cut-off node rejoining", &all, |lab, i| lab.daemons[i].find_backend(added).is_none());
    assert_eq!(healed[cut], lab.ring(0));
    assert_eq!(lab.fleet_view(cut)["connected"], true);
    say(format!("(c) node {cut} rejoined and converged: rings {}", &healed[0][..12]));
    out.settle(say, "(c) node cut off from etcd, backend removed", Tally::of(h, c));

    // (d) A malformed value written straight into etcd: refused everywhere, nothing changes.
    let (h, c) = (holds(lab, 8), churn(lab));
    let backends: Vec<Vec<String>> = all.iter().map(|i| lab.backends(*i)).collect();
    lab.etcd.ctl(&["put", &vip_key(), "address = "]);
    for i in 0..nodes {
        wait(lab, "the refusal on every node", || {
            lab.fleet_view(i)["refused"].as_str().is_some_and(|r| r.contains("not a TOML table"))
        });
    }
    assert_eq!(lab.rings(), healed, "the refused value changed no ring");
    assert_eq!(all.iter().map(|i| lab.backends(*i)).collect::<Vec<_>>(), backends);
    // `fleet status` reads the nodes' records in etcd, which each node rewrites after it
    // refused: wait for them rather than read them once.
    wait(lab, "`fleet status` showing the refusal", || lab.fleet_status_text().contains("refused"));
    say("(d) a malformed value put into etcd: refused by every node, rings unchanged".into());
    out.settle(say, "(d) malformed value", Tally::of(h, c));
    out
}
