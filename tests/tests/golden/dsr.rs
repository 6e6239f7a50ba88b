//! Golden cases of DSR VIPs: IP in IP, GUE and MAC rewrite (dsr-l2), each with its established
//! flows, ICMP errors, 802.1Q tags and packets too big once wrapped.
use lb_common::stats::Counter;
use lb_tests::fixture::*;
use lb_tests::golden::*;
use lb_tests::packets::*;

use super::*;

/// DSR over IPIP.
pub fn ip_in_ip(g: &mut Golden, vips: &[Vip]) {
    let dsr_addr = vips[2].addr;
    let dsyn = Frame::tcp(CLIENT, 42000, dsr_addr, 80);
    let mut c = case(
        "new flow, DSR: IPIP to the backend, inner packet untouched",
        dsyn.bytes(),
        XDP_TX,
        Some(ipip(&dsyn, LB_ADDR, B1, LB_MAC, mac_of(B1))),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::FlowNew];
    g.run(c);
    let dack = dsyn.with(|f| {
        f.l4 = L4::TcpAck;
        f.payload = vec![b'x'; 100]
    });
    let mut c = case(
        "established flow, DSR: IPIP again",
        dack.bytes(),
        XDP_TX,
        Some(ipip(&dack, LB_ADDR, B1, LB_MAC, mac_of(B1))),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::FlowHit];
    g.run(c);
    let dsr_vip = dsyn.dst;
    let dsr_err = icmp_frag_needed(
        (CLIENT_MAC, LB_MAC),
        [192, 0, 2, 254],
        dsr_vip,
        64,
        1400,
        &Frame::tcp(dsr_vip, 80, CLIENT, dsyn.src_port),
    );
    let mut c = case(
        "ICMP error about a DSR flow: to its backend, encapsulated untouched",
        dsr_err.clone(),
        XDP_TX,
        Some(ipip_frame(&dsr_err, 14, LB_ADDR, B1, LB_MAC, mac_of(B1))),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::IcmpToBackend];
    g.run(c);
    let dtag = dsyn.with(|f| {
        f.vlan = Some(42);
        f.src_port = 42001
    });
    g.run(case(
        "802.1Q-tagged SYN, DSR: tag kept in front of the outer header",
        dtag.bytes(),
        XDP_TX,
        Some(ipip(&dtag, LB_ADDR, B1, LB_MAC, mac_of(B1))),
        Counter::ForwardTx,
    ));
    let big = dsyn.with(|f| {
        f.src_port = 42002;
        f.payload = vec![0; 1490 - 40]
    });
    g.run(case(
        "DSR packet too big once wrapped, DF set: ICMP fragmentation needed (MTU 1480)",
        big.bytes(),
        XDP_TX,
        Some(frag_needed(&big.bytes(), 14, 1480)),
        Counter::ForwardIcmpTooBig,
    ));
    let big_tagged = big.with(|f| f.vlan = Some(42));
    g.run(case(
        "802.1Q DSR packet too big, DF set: ICMP back behind the same tag",
        big_tagged.bytes(),
        XDP_TX,
        Some(frag_needed(&big_tagged.bytes(), 18, 1480)),
        Counter::ForwardIcmpTooBig,
    ));
    let big_no_df = patch_ipv4(&big.bytes(), 14, |h| h.dont_fragment = false);
    g.run(case("DSR packet too big once wrapped, no DF: drop", big_no_df, XDP_DROP, None, Counter::DropTooBig));
}

/// DSR over GUE: outer IPv4 + UDP to port 6080, source port from the flow's hash.
pub fn gue(g: &mut Golden, vips: &[Vip]) {
    let gsyn = Frame::tcp(CLIENT, 44000, vips[11].addr, 80);
    let gport = lb_common::gue::source_port(g.dp.table_hash_of(&flow_key(CLIENT, vips[11].addr, 44000, 80)));
    let gue = |f: &Frame, port: u16| gue_frame(&f.bytes(), f.l3_offset(), (LB_ADDR, B1), port, LB_MAC, mac_of(B1));
    let mut c = case(
        "new flow, DSR over GUE: UDP to the backend, inner packet untouched",
        gsyn.bytes(),
        XDP_TX,
        Some(gue(&gsyn, gport)),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::FlowNew];
    g.run(c);
    let gack = gsyn.with(|f| {
        f.l4 = L4::TcpAck;
        f.payload = vec![b'g'; 100]
    });
    let mut c = case(
        "established flow, DSR over GUE: the same outer source port",
        gack.bytes(),
        XDP_TX,
        Some(gue(&gack, gport)),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::FlowHit];
    g.run(c);
    let gtag = gack.with(|f| f.vlan = Some(42));
    g.run(case(
        "802.1Q GUE: tag kept in front of the outer headers",
        gtag.bytes(),
        XDP_TX,
        Some(gue(&gtag, gport)),
        Counter::ForwardTx,
    ));
    let gue_err = icmp_frag_needed(
        (CLIENT_MAC, LB_MAC),
        [192, 0, 2, 254],
        gsyn.dst,
        64,
        1400,
        &Frame::tcp(gsyn.dst, 80, CLIENT, gsyn.src_port),
    );
    let mut c = case(
        "ICMP error about a GUE flow: to its backend, encapsulated untouched",
        gue_err.clone(),
        XDP_TX,
        Some(gue_frame(&gue_err, 14, (LB_ADDR, B1), lb_common::gue::source_port(0), LB_MAC, mac_of(B1))),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::IcmpToBackend];
    g.run(c);
    let gbig = gack.with(|f| f.payload = vec![0; 1480 - 40]);
    g.run(case(
        "GUE packet too big once wrapped, DF set: ICMP fragmentation needed (MTU 1472)",
        gbig.bytes(),
        XDP_TX,
        Some(frag_needed(&gbig.bytes(), 14, 1472)),
        Counter::ForwardIcmpTooBig,
    ));
}

/// DSR by MAC rewrite: from the IP header on, the frame leaves as it came.
pub fn by_mac(g: &mut Golden, vips: &[Vip]) {
    let to_mac = |frame: &[u8], dmac: Mac| {
        let mut out = frame.to_vec();
        out[0..6].copy_from_slice(&dmac);
        out[6..12].copy_from_slice(&LB_MAC);
        out
    };
    let lsyn = Frame::tcp(CLIENT, 43000, vips[9].addr, 80);
    let mut c = case(
        "new flow, DSR by MAC: the packet unchanged, to the backend's MAC",
        lsyn.bytes(),
        XDP_TX,
        Some(to_mac(&lsyn.bytes(), mac_of(B1))),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::FlowNew];
    g.run(c);
    let lack = lsyn.with(|f| {
        f.l4 = L4::TcpAck;
        f.payload = vec![b'y'; 1400]
    });
    let mut c = case(
        "established flow, DSR by MAC: unchanged again (no encapsulation, so no MTU cost)",
        lack.bytes(),
        XDP_TX,
        Some(to_mac(&lack.bytes(), mac_of(B1))),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::FlowHit];
    g.run(c);
    let mut c = case(
        "established flow, DSR by MAC, no larger than the last: the cached next hop",
        lack.bytes(),
        XDP_TX,
        Some(to_mac(&lack.bytes(), mac_of(B1))),
        Counter::ForwardTx,
    );
    c.unchanged = vec![Counter::NexthopLookup];
    g.run(c);
    let l2_err = icmp_frag_needed(
        (CLIENT_MAC, LB_MAC),
        [192, 0, 2, 254],
        lsyn.dst,
        64,
        1400,
        &Frame::tcp(lsyn.dst, 80, CLIENT, lsyn.src_port),
    );
    let mut c = case(
        "ICMP error about a DSR-by-MAC flow: to its backend's MAC, unchanged",
        l2_err.clone(),
        XDP_TX,
        Some(to_mac(&l2_err, mac_of(B1))),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::IcmpToBackend];
    g.run(c);
    g.run(case(
        "DSR by MAC to a backend behind a gateway: drop (its MAC is not reachable)",
        Frame::tcp(CLIENT, 43001, vips[10].addr, 80).bytes(),
        XDP_DROP,
        None,
        Counter::DropNotAdjacent,
    ));
}
