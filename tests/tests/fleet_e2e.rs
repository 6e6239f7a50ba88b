//! A fleet end to end, with XDP: three nodes behind a BIRD router with ECMP, DSR backends, and
//! a three-member etcd cluster on the same segment (each member in a namespace of its own).
//! The nodes' files hold no VIP: the operator pushed the fleet's state once, and every node
//! follows it. The steps ([`lb_tests::fleet::scenario`], which `cargo xtask demo cluster`
//! shows too), each while long-lived connections stream and new ones are made through the VIP:
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
use lb_tests::fleet::scenario;
use lb_tests::privileges::require_root;

#[test]
fn the_fleet_converges_through_a_leader_kill_a_partition_and_a_bad_value_with_no_connection_broken() {
    if !require_root("the_fleet_converges_through_a_leader_kill_a_partition_and_a_bad_value_with_no_connection_broken")
    {
        return;
    }
    let mut lab = scenario::start("fl", env!("CARGO_BIN_EXE_lb-test-backend"), 3);
    let out = scenario::run(&mut lab, &mut |line| println!("{line}"));
    assert_eq!(out.steps.len(), 4, "{out:?}");
    for (step, tally) in &out.steps {
        assert!(tally.connections > 12, "{step}: traffic ran: {tally:?}");
        assert!(tally.broken.is_empty(), "{step}: {} connections broke: {:#?}", tally.broken.len(), tally.broken);
        assert_eq!(tally.bytes_lost, 0, "{step}: byte-exact streams");
    }
}
