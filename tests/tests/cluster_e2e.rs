//! Scale-out with traffic (the scenario of `cargo xtask demo cluster`): three nodes behind a
//! BIRD router with ECMP and BFD, sharing flows, DSR backends decapsulating with `lb-ctl
//! decap`, long-lived connections streaming while a backend is added on every node, a node
//! crashes, and another is drained. Needs root and BIRD 2.
use lb_tests::cluster::scenario;
use lb_tests::privileges::require_root;

#[test]
fn no_connection_breaks_when_a_node_crashes_or_drains() {
    if !require_root("no_connection_breaks_when_a_node_crashes_or_drains") {
        return;
    }
    let (mut cluster, mut daemons) =
        scenario::start("cl", env!("CARGO_BIN_EXE_lb-test-backend"), scenario::Options { bfd: true, share: true });
    let out = scenario::run(&mut cluster, &mut daemons, &mut |line| println!("{line}"));
    assert!(out.rings.windows(2).all(|w| w[0] == w[1]), "every node built the same ring: {:?}", out.rings);
    assert!(out.large_exact, "a 1 MiB response through the VIP arrives byte-exact");
    assert!(out.nodes_used >= 2, "ECMP spread the connections over several nodes: {out:?}");
    assert!(out.shared_recorded > 0, "the surviving nodes recorded flows their peers shared: {out:?}");
    assert!(out.broken.is_empty(), "{} of {} connections broke: {:#?}", out.broken.len(), out.connections, out.broken);
}
