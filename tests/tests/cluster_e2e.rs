//! Scale-out with traffic (the scenario of `cargo xtask demo cluster`): four nodes behind a
//! BIRD router with ECMP and BFD, sharing flows, DSR backends decapsulating with `lb-ctl
//! decap`. While long-lived connections stream, node 1 is killed, node 2 is drained, then a
//! backend is removed on every node and node 3 is killed; before that, node 0 is sent messages
//! with a wrong key and a flood from a peer. Needs root and BIRD 2.
use lb_tests::cluster::scenario;
use lb_tests::privileges::require_root;

#[test]
fn no_connection_breaks_when_nodes_die_drain_or_lose_a_backend() {
    if !require_root("no_connection_breaks_when_nodes_die_drain_or_lose_a_backend") {
        return;
    }
    let options = scenario::Options { bfd: true, share: true, bad_peers: true };
    let (mut cluster, mut daemons) = scenario::start("cl", env!("CARGO_BIN_EXE_lb-test-backend"), options);
    let out = scenario::run(&mut cluster, &mut daemons, options, &mut |line| println!("{line}"));
    assert!(out.rings.windows(2).all(|w| w[0] == w[1]), "every node built the same ring: {:?}", out.rings);
    assert!(out.large_exact, "a 1 MiB response through the VIP arrives byte-exact");
    assert!(out.nodes_used >= 3, "ECMP spread the connections over the nodes: {out:?}");

    // Bad peers: every wrong-key message refused as such (sent 1 ms apart, well under the
    // rate bound), the flood cut by the rate bound, node 0 forwarding all along.
    let bad = out.bad_peers.as_ref().expect("bad peers step ran");
    assert_eq!(bad.refused_bad_key, bad.wrong_key_sent, "{bad:?}");
    assert!(bad.refused_rate > 0, "the flood went over max_messages_per_second: {bad:?}");
    assert!(
        bad.connections > 0 && bad.packets_forwarded > 0 && bad.broken.is_empty(),
        "node 0 kept forwarding its connections: {bad:?}"
    );

    // Step 3 demonstrates flow sharing only if some moved flows had to cross to node 0.
    assert_eq!(out.moved_opened, scenario::CLIENTS, "{out:?}");
    assert!(out.moved_to_survivor > 0, "ECMP sent some of the moved flows to node 3: {out:?}");
    assert_eq!(out.moved_broken, 0, "flows kept on their backend by shared entries: {out:?}");
    assert!(out.shared_recorded > 0, "node 0 recorded flows its peers shared: {out:?}");
    assert_eq!(out.connections, 3 * scenario::CLIENTS, "{out:?}");
    assert!(out.broken.is_empty(), "{} of {} connections broke: {:#?}", out.broken.len(), out.connections, out.broken);
    let bytes = 2 * scenario::CLIENTS * scenario::STREAM_SECS + out.moved_opened * scenario::MOVED_STREAM_SECS;
    assert_eq!((out.bytes_lost, out.bytes), (0, bytes), "byte-exact streams");
}
