//! Golden cases of the next hop: another interface (redirect), the cached next hop, MTU,
//! no neighbour, no route, no backend, and the cache's generation.
use lb_common::stats::Counter;
use lb_ctl::dataplane::Dataplane;
use lb_tests::fixture::*;
use lb_tests::golden::*;
use lb_tests::netns::Netns;
use lb_tests::packets::*;

use super::*;

/// Next hop cases.
pub fn next_hop(g: &mut Golden, vips: &[Vip]) {
    let far = Frame::tcp(CLIENT, 43000, vips[4].addr, 80);
    g.run(case(
        "backend behind another interface: XDP_REDIRECT",
        far.bytes(),
        XDP_REDIRECT,
        Some(nat_out(&far, (CLIENT, 43000), (B_FAR, 8080), LB_MAC_H, mac_of(B_FAR))),
        Counter::ForwardRedirect,
    ));
    let far2 = Frame::tcp(CLIENT2, 43005, vips[4].addr, 80);
    let mut c = case(
        "another client, same NAT backend: the cached next hop serves it",
        far2.bytes(),
        XDP_REDIRECT,
        Some(nat_out(&far2, (CLIENT2, 43005), (B_FAR, 8080), LB_MAC_H, mac_of(B_FAR))),
        Counter::ForwardRedirect,
    );
    c.unchanged = vec![Counter::NexthopLookup];
    g.run(c);
    // h0 (towards B_FAR) has MTU 1400.
    let far_big = far.with(|f| {
        f.src_port = 43010;
        f.payload = vec![0; 1450 - 40]
    });
    g.run(case(
        "NAT packet too big for the backend's path, DF set: ICMP fragmentation needed (MTU 1400)",
        far_big.bytes(),
        XDP_TX,
        Some(frag_needed(&far_big.bytes(), 14, 1400)),
        Counter::ForwardIcmpTooBig,
    ));
    let far_big_no_df = patch_ipv4(&far_big.bytes(), 14, |h| h.dont_fragment = false);
    g.run(case("NAT packet too big, no DF: drop", far_big_no_df, XDP_DROP, None, Counter::DropTooBig));
    let nn = Frame::tcp(CLIENT, 43001, vips[5].addr, 80);
    let nn_out = nn
        .with(|f| {
            f.dst = B_NO_NEIGH;
            f.dst_port = 8080
        })
        .bytes();
    g.run(case(
        "NAT backend without neighbour entry: rewritten, to the stack",
        nn.bytes(),
        XDP_PASS,
        Some(nn_out),
        Counter::PassNoNeighbour,
    ));
    let nnd = Frame::tcp(CLIENT, 43002, vips[6].addr, 80);
    g.run(case("DSR backend without neighbour entry: drop", nnd.bytes(), XDP_DROP, None, Counter::DropNoNeighbour));
    let nr = Frame::tcp(CLIENT, 43003, vips[7].addr, 80);
    g.run(case("backend without a route: drop", nr.bytes(), XDP_DROP, None, Counter::DropNoRoute));
    g.run(case(
        "VIP with no backend: drop",
        Frame::tcp(CLIENT, 43004, vips[3].addr, 80).bytes(),
        XDP_DROP,
        None,
        Counter::DropNoBackend,
    ));
}

/// Next-hop cache: a neighbour change is seen after the next generation, not before.
pub fn cache(g: &mut Golden, vips: &[Vip], ns: &Netns) {
    let dsyn = Frame::tcp(CLIENT, 42000, vips[2].addr, 80);
    let moved_mac: Mac = [2, 0, 0, 0, 0x7e, 0x11];
    ns.exec(&[
        "ip",
        "neigh",
        "replace",
        "198.51.100.11",
        "lladdr",
        "02:00:00:00:7e:11",
        "dev",
        "g0",
        "nud",
        "permanent",
    ]);
    let d1 = dsyn.with(|f| f.src_port = 42003);
    g.run(case(
        "neighbour changed, same cache generation: cached MAC",
        d1.bytes(),
        XDP_TX,
        Some(ipip(&d1, LB_ADDR, B1, LB_MAC, mac_of(B1))),
        Counter::ForwardTx,
    ));
    g.dp.refresh_next_hops().unwrap();
    let d2 = dsyn.with(|f| f.src_port = 42004);
    g.run(case(
        "after refresh_next_hops: the new MAC",
        d2.bytes(),
        XDP_TX,
        Some(ipip(&d2, LB_ADDR, B1, LB_MAC, moved_mac)),
        Counter::ForwardTx,
    ));
}
