//! Scale-out, end to end with BIRD: two balancer nodes run the real daemon (XDP attached) and
//! BIRD with the shipped `docs/bird.conf`; a router namespace runs BIRD with BGP, BFD and ECMP.
//! The router's route to the VIP must follow what the daemons announce: both nodes while each
//! has enough healthy backends, one after `node drain` or when the other's backends fall below
//! `min_healthy`, none after the last clean stop; and a node that dies (daemon killed, BIRD
//! frozen so that it sends nothing) leaves the route within BFD's detection time. Needs root and BIRD 2.
use std::time::Duration;

use lb_tests::cluster::{Cluster, VIP, node_addr};
use lb_tests::lab::Daemon;
use lb_tests::privileges::require_root;

/// BGP session set-up and route propagation; generous for a loaded CI machine.
const CONVERGE: Duration = Duration::from_secs(30);

fn config(socket: &std::path::Path, bird: &std::path::Path, node: usize) -> String {
    format!(
        "[daemon]\n\
         api_socket = \"{}\"\n\
         bird_socket = \"{}\"\n\
         \n\
         [[vip]]\n\
         name = \"web\"\n\
         address = \"{VIP}\"\n\
         port = 80\n\
         forwarding = \"dsr-ipip\"\n\
         encap_source = \"{}\"\n\
         announce = {{ min_healthy = 2 }}\n\
         backends = [ {{ address = \"198.51.100.11\" }}, {{ address = \"198.51.100.12\" }} ]\n",
        socket.display(),
        bird.display(),
        node_addr(node)
    )
}

#[test]
fn the_router_follows_what_the_nodes_announce() {
    if !require_root("the_router_follows_what_the_nodes_announce") {
        return;
    }
    let mut cluster = Cluster::new("an", 2, 0, 0);
    let mut daemons: Vec<Daemon> = (0..2)
        .map(|i| {
            let mut d = Daemon::new(&cluster.nodes[i], "eth0", &format!("an{i}"), &["--xdp-mode", "skb"]);
            d.write_config_text(&config(&d.socket(), &cluster.bird_socket(i), i));
            d.start();
            d
        })
        .collect();
    let both = [node_addr(0), node_addr(1)];
    let took = cluster.wait_next_hops(VIP, &both, CONVERGE);
    println!("the router had both nodes as next hops {} ms after the daemons started", took.as_millis());
    let table = cluster.nodes[0].exec(&["ip", "route", "show", "table", "4242", "proto", "249"]);
    assert!(String::from_utf8_lossy(&table.stdout).contains("203.0.113.10 dev lo"), "{table:?}");
    let announced_line =
        |d: &Daemon| d.ok(&["status"]).lines().find(|l| l.starts_with("announced")).map(str::to_string);
    let line = announced_line(&daemons[0]);
    assert!(line.as_deref().is_some_and(|l| l.ends_with("bird runs)")), "BIRD answers on its control socket: {line:?}");

    // Node drain: the route loses the node; undrain brings it back.
    daemons[0].ok(&["node", "drain"]);
    let took = cluster.wait_next_hops(VIP, &[node_addr(1)], CONVERGE);
    println!("node drain: the router dropped node 0 after {} ms", took.as_millis());
    daemons[0].ok(&["node", "undrain"]);
    cluster.wait_next_hops(VIP, &both, CONVERGE);

    // A route removed by hand (or a failed write) is put back at the next check of the table.
    let removed = cluster.nodes[0].exec(&["ip", "route", "del", "203.0.113.10", "table", "4242", "proto", "249"]);
    assert!(removed.status.success(), "{removed:?}");
    let removed_at = std::time::Instant::now();
    let in_table = || {
        let out = cluster.nodes[0].exec(&["ip", "route", "show", "table", "4242", "proto", "249"]);
        String::from_utf8_lossy(&out.stdout).contains("203.0.113.10")
    };
    while !in_table() {
        assert!(removed_at.elapsed() < lb_ctl::announce::CHECK_PERIOD * 3, "the removed route came back");
        std::thread::sleep(Duration::from_millis(50));
    }
    println!("a route removed by hand was back {} ms later", removed_at.elapsed().as_millis());
    cluster.wait_next_hops(VIP, &both, CONVERGE);

    // Fewer healthy backends than min_healthy on node 1: it withdraws.
    daemons[1].ok(&["backends", "drain", "web", "198.51.100.12"]);
    cluster.wait_next_hops(VIP, &[node_addr(0)], CONVERGE);
    daemons[1].ok(&["backends", "undrain", "web", "198.51.100.12"]);
    cluster.wait_next_hops(VIP, &both, CONVERGE);

    // Node 1 dies (daemon killed, BIRD frozen: no FIN, no BFD): BFD takes it out of the route.
    daemons[1].kill9();
    let table = |cluster: &Cluster, i: usize| {
        let out = cluster.nodes[i].exec(&["ip", "route", "show", "table", "4242", "proto", "249"]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(
        table(&cluster, 1).contains("203.0.113.10"),
        "a killed daemon leaves its routes (the program still forwards)"
    );
    cluster.freeze_bird(1);
    let took = cluster.wait_next_hops(VIP, &[node_addr(0)], Duration::from_secs(10));
    println!("node death: the router dropped node 1 after {} ms (BFD)", took.as_millis());
    // Taking the balancer off the killed node withdraws what its daemon left announced.
    let detached = daemons[1].detach().unwrap();
    assert!(detached.status.success(), "{}", String::from_utf8_lossy(&detached.stderr));
    assert!(String::from_utf8_lossy(&detached.stdout).contains("announced VIP routes withdrawn"));
    assert!(table(&cluster, 1).is_empty(), "detach withdrew the routes: {}", table(&cluster, 1));

    // Node 0's BIRD killed: the daemon tells from its control socket that BIRD is installed
    // but not running (the socket file stays, refusing), and says what to do.
    cluster.kill_bird(0);
    let line = announced_line(&daemons[0]).unwrap_or_default();
    println!("status with BIRD killed: {line}");
    assert!(
        line.contains("nobody announces them: BIRD is installed but not running (control socket")
            && line.contains("systemctl start bird"),
        "{line}"
    );
    cluster.wait_next_hops(VIP, &[], CONVERGE);

    // A clean stop withdraws the last node's route.
    assert!(daemons[0].stop().success());
    let table = cluster.nodes[0].exec(&["ip", "route", "show", "table", "4242", "proto", "249"]);
    assert!(table.stdout.is_empty(), "a clean stop leaves no VIP route: {table:?}");
    cluster.wait_next_hops(VIP, &[], CONVERGE);
}
