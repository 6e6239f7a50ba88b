//! A fleet end to end, with XDP: three nodes behind a BIRD router with ECMP, DSR backends, and
//! a three-member etcd cluster on the same segment (each member in a namespace of its own).
//! The nodes' files hold no VIP: the operator pushed the fleet's state once, and every node
//! follows it. While long-lived connections stream and new ones are made through the VIP:
//!
//! - (a) a backend added once (`lb-ctl backends add` on node 0) reaches every node, and
//!   `fleet status` shows every node current with equal rings;
//! - (b) the etcd leader is killed (made the first member listed, which every node talks to
//!   first): no node's forwarding changes, and after the election the fleet takes writes
//!   again (a drain and an undrain made on node 1 reach every node, `fleet status` answers);
//! - (c) node 2 is cut off from etcd by nftables drops (the node keeps running and
//!   forwarding), a backend is removed from the fleet meanwhile: node 2 keeps its last state
//!   and says it lost etcd (status and metrics), then rejoins and converges;
//! - (d) a malformed value written straight into etcd is refused by every node and changes
//!   nothing.
//!
//! Every step: 0 broken connections, 0 bytes lost. Needs root, BIRD 2 and etcd.
use std::time::{Duration, Instant};

use lb_tests::cluster::client_addr;
use lb_tests::fleet::traffic::{Churn, Tally};
use lb_tests::fleet::{FleetLab, backend, etcd, vip, vip_key};
use lb_tests::lab::Hold;
use lb_tests::privileges::require_root;

const NODES: usize = 3;
/// Backends serving; the fleet starts with the first two, (a) adds the third.
const BACKENDS: usize = 3;
/// Long-lived connections per step, each from a client address of its own.
const HOLDS: usize = 12;
/// Client addresses the churn of new connections cycles through (after the holds').
const CHURN_ADDRS: usize = 4;
/// Waits for a node to notice something (a lost etcd, a refusal): generous.
const NOTICE: Duration = Duration::from_secs(30);

fn holds(lab: &FleetLab, secs: usize) -> Vec<Hold> {
    (0..HOLDS).map(|k| Hold::open(&lab.cluster.client.name, vip(), client_addr(k), secs)).collect()
}

fn churn(lab: &FleetLab) -> Churn {
    Churn::start(&lab.cluster.client.name, vip(), HOLDS, CHURN_ADDRS)
}

fn wait(what: &str, lab: &FleetLab, done: impl Fn() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < NOTICE, "{what}: not within {NOTICE:?}\n{}", lab.fleet_status_text());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Says how a step's traffic ended and asserts none of it broke.
fn settle(step: &str, tally: Tally) {
    println!("{step}: {}", tally.line());
    assert!(tally.connections > HOLDS, "{step}: traffic ran: {tally:?}");
    assert!(tally.broken.is_empty(), "{step}: {} connections broke: {:#?}", tally.broken.len(), tally.broken);
    assert_eq!(tally.bytes_lost, 0, "{step}: byte-exact streams");
}

#[test]
fn the_fleet_converges_through_a_leader_kill_a_partition_and_a_bad_value_with_no_connection_broken() {
    if !require_root("the_fleet_converges_through_a_leader_kill_a_partition_and_a_bad_value_with_no_connection_broken")
    {
        return;
    }
    let mut lab = FleetLab::start("fl", env!("CARGO_BIN_EXE_lb-test-backend"), NODES, BACKENDS, 2, HOLDS + CHURN_ADDRS);
    let all: Vec<usize> = (0..NODES).collect();
    let start = lab.wait_converged("the pushed state on every node", &all, |_, _| true);
    println!("fleet pushed once; ring digest on every node: {}", &start[0][..12]);

    // (a) A backend added once, on node 0, while traffic runs.
    let (h, c) = (holds(&lab, 8), churn(&lab));
    let added = backend(2);
    let said = lab.daemons[0].ok(&["backends", "add", "web", &added.to_string()]);
    assert!(said.contains("added in the fleet /lb/lab"), "{said}");
    let rings = lab.wait_converged("the added backend on every node", &all, |lab, i| {
        lab.daemons[i].find_backend(added).is_some_and(|b| b.in_ring)
    });
    assert_ne!(rings, start, "the new backend changed every ring");
    println!("(a) {added} added on node 0: in every node's ring, `fleet status` equal: {}", &rings[0][..12]);
    settle("(a) backend added once", Tally::of(h, c));

    // (b) The etcd leader killed while traffic runs: forwarding unchanged, writes go on.
    let (h, c) = (holds(&lab, 10), churn(&lab));
    let packets: Vec<u64> = all.iter().map(|i| lab.vip_packets(*i)).collect();
    // States applied (a reconnect re-reads the state but applies nothing that is unchanged).
    let applied = |lab: &FleetLab| -> Vec<serde_json::Value> {
        all.iter().map(|i| lab.fleet_view(*i)["applied_total"].clone()).collect()
    };
    let applied_before = applied(&lab);
    // The leader is made the first member listed, the one every node and the CLI reach
    // first: its death takes their connections too, not only the leadership.
    let leader = 0;
    lab.etcd.move_leader(leader);
    lab.etcd.kill(leader);
    let next = lab.etcd.wait_for_leader(Some(leader));
    println!("(b) etcd leader m{leader} killed (SIGKILL); m{next} elected");
    assert_eq!(lab.rings(), rings, "killing the leader changed no node's ring");
    assert_eq!(applied(&lab), applied_before, "no node applied anything");
    let drained = backend(0);
    let said = lab.daemons[1].ok(&["backends", "drain", "web", &drained.to_string()]);
    assert!(said.contains("drained in the fleet"), "{said}");
    lab.wait_converged("the drain after the election on every node", &all, |lab, i| {
        lab.backends(i).contains(&format!("{drained} draining"))
    });
    lab.daemons[1].ok(&["backends", "undrain", "web", &drained.to_string()]);
    let after = lab.wait_converged("the undrain on every node", &all, |lab, i| {
        lab.backends(i).contains(&format!("{drained} active"))
    });
    assert_eq!(after, rings, "drained and undrained: the same ring");
    for (i, before) in packets.iter().enumerate() {
        assert!(lab.vip_packets(i) > *before, "node {i} forwarded throughout");
    }
    println!("(b) after the election: a drain and an undrain written on node 1 reached every node");
    lab.etcd.restart(leader);
    lab.etcd.wait_for_leader(None);
    settle("(b) etcd leader killed", Tally::of(h, c));

    // (c) Node 2 cut off from etcd; the added backend removed from the fleet meanwhile. The
    // long-lived connections are on flows the ring sends to other backends (the removed one's
    // own flows move, by design, wherever it is removed).
    let cut = 2;
    let mut port = 20_000;
    let flows: Vec<_> = (0..HOLDS).map(|k| lab.flow_avoiding(k, added, &mut port)).collect();
    let h: Vec<Hold> = flows.iter().map(|f| Hold::open_from(&lab.cluster.client.name, vip(), *f, 25)).collect();
    let c = churn(&lab);
    etcd::partition(&lab.cluster.nodes[cut]);
    wait("node 2 says it lost etcd", &lab, || lab.fleet_view(cut)["connected"] == false);
    let status = lab.daemons[cut].ok(&["status"]);
    assert!(status.contains("etcd LOST"), "{status}");
    let metrics = metrics(&lab, cut);
    assert!(metrics.contains("lb_fleet_connected 0"), "{metrics}");
    let before = lab.vip_packets(cut);
    lab.daemons[0].ok(&["backends", "remove", "web", &added.to_string()]);
    wait("the removal on nodes 0 and 1", &lab, || [0, 1].iter().all(|i| lab.daemons[*i].find_backend(added).is_none()));
    assert!(lab.daemons[cut].find_backend(added).is_some(), "node 2 keeps its last state");
    assert_eq!(lab.ring(cut), rings[cut], "node 2's ring is the last one it applied");
    assert_ne!(lab.ring(0), rings[0], "node 0 applied the removal");
    wait("node 2 forwarding while cut off", &lab, || lab.vip_packets(cut) > before);
    println!(
        "(c) node 2 cut off from etcd (nftables drops): `status` says etcd LOST, lb_fleet_connected 0; {added} removed from the fleet on node 0: nodes 0 and 1 applied it, node 2 forwards on its last ring"
    );
    etcd::heal(&lab.cluster.nodes[cut]);
    let healed = lab.wait_converged("node 2 rejoining", &all, |lab, i| lab.daemons[i].find_backend(added).is_none());
    assert_eq!(healed[cut], lab.ring(0));
    assert_eq!(lab.fleet_view(cut)["connected"], true);
    println!("(c) node 2 rejoined and converged: rings {}", &healed[0][..12]);
    settle("(c) node cut off from etcd, backend removed", Tally::of(h, c));

    // (d) A malformed value written straight into etcd: refused everywhere, nothing changes.
    let (h, c) = (holds(&lab, 8), churn(&lab));
    let backends: Vec<Vec<String>> = all.iter().map(|i| lab.backends(*i)).collect();
    lab.etcd.ctl(&["put", &vip_key(), "address = "]);
    for i in 0..NODES {
        wait("the refusal on every node", &lab, || {
            lab.fleet_view(i)["refused"].as_str().is_some_and(|r| r.contains("not a TOML table"))
        });
    }
    assert_eq!(lab.rings(), healed, "the refused value changed no ring");
    assert_eq!(all.iter().map(|i| lab.backends(*i)).collect::<Vec<_>>(), backends);
    let text = lab.fleet_status_text();
    assert!(text.contains("refused"), "{text}");
    println!("(d) a malformed value put into etcd: refused by every node, rings unchanged");
    settle("(d) malformed value", Tally::of(h, c));
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
