//! IPv6 golden cases of NAT66: a flow, its replies, extension headers (walked and balanced up
//! to four; the others defined) and a packet too big for the backend's path.
use lb_common::stats::Counter;
use lb_tests::fixture::LB_MAC;
use lb_tests::fixture6::*;
use lb_tests::golden::*;
use lb_tests::packets::L4;

use super::*;

/// NAT66: forward, established, reply.
pub fn nat66(g: &mut Golden, vips: &[Vip6]) {
    let syn = Frame6::tcp(CLIENT6, 40000, VIP_NAT, 80);
    let (backend, port) = by_client(&vips[0], CLIENT6);
    let backend = octets6(backend);
    let mut c = case(
        "new flow, NAT66: destination becomes the backend, hop limit 63",
        syn.bytes(),
        XDP_TX,
        Some(nat_out(&syn, (CLIENT6, 40000), (backend, port), LB_MAC, mac6(backend))),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::FlowNew];
    g.run(c);
    let ack = nat66_ack();
    let mut c = case(
        "established flow, NAT66: the same backend",
        ack.bytes(),
        XDP_TX,
        Some(nat_out(&ack, (CLIENT6, 40000), (backend, port), LB_MAC, mac6(backend))),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::FlowHit];
    g.run(c);
    let mut c = case(
        "established flow, NAT66, a packet no larger than the last: the cached next hop",
        ack.bytes(),
        XDP_TX,
        Some(nat_out(&ack, (CLIENT6, 40000), (backend, port), LB_MAC, mac6(backend))),
        Counter::ForwardTx,
    );
    c.unchanged = vec![Counter::NexthopLookup];
    g.run(c);
    let reply = Frame6::tcp(backend, port, CLIENT6, 40000).with(|f| {
        f.l4 = L4::TcpAck;
        f.src_mac = mac6(backend);
        f.payload = b"HTTP/1.1 200 OK\r\n\r\n".to_vec()
    });
    let mut c = case(
        "NAT66 reply: source becomes the VIP again",
        reply.bytes(),
        XDP_TX,
        Some(nat_out(&reply, (VIP_NAT, 80), (CLIENT6, 40000), LB_MAC, mac6(CLIENT6))),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::NatReply];
    g.run(c);
    let tagged = ack.with(|f| f.vlan = Some(42));
    g.run(case(
        "802.1Q NAT66: tag kept",
        tagged.bytes(),
        XDP_TX,
        Some(nat_out(&tagged, (CLIENT6, 40000), (backend, port), LB_MAC, mac6(backend))),
        Counter::ForwardTx,
    ));
    let udp = Frame6::udp(CLIENT6, 5300, VIP_NAT, 53);
    g.run(case(
        "UDP, NAT66: destination and checksum rewritten",
        udp.bytes(),
        XDP_TX,
        Some(nat_out(&udp, (CLIENT6, 5300), (B6_1, 5353), LB_MAC, mac6(B6_1))),
        Counter::ForwardTx,
    ));
    let expiring = ack.with(|f| f.ttl = 1);
    g.run(case("hop limit 1: pass (the stack answers)", expiring.bytes(), XDP_PASS, None, Counter::PassTtlExpired));
    g.run(case(
        "IPv6 VIP without backends: drop",
        Frame6::tcp(CLIENT6, 40000, vip6(0x30), 80).bytes(),
        XDP_DROP,
        None,
        Counter::DropNoBackend,
    ));
}

/// Extension headers: walked (and balanced) up to four; the others defined.
pub fn extension_headers(g: &mut Golden, vips: &[Vip6]) {
    let (backend, port) = by_client(&vips[0], CLIENT6);
    let backend = octets6(backend);
    let ack = nat66_ack();
    let ext_in = with_extensions(&ack.bytes(), 14, &[(HOP_BY_HOP, padding(6)), (DESTINATION_OPTIONS, padding(14))]);
    let ext_out = with_extensions(
        &nat_out(&ack, (CLIENT6, 40000), (backend, port), LB_MAC, mac6(backend)),
        14,
        &[(HOP_BY_HOP, padding(6)), (DESTINATION_OPTIONS, padding(14))],
    );
    g.run(case(
        "hop-by-hop and destination options: walked, NAT66 as usual",
        ext_in,
        XDP_TX,
        Some(ext_out),
        Counter::ForwardTx,
    ));
    let routing_done = with_extensions(&ack.bytes(), 14, &[(ROUTING, vec![0, 0, 0, 0, 0, 0])]);
    let routing_done_out = with_extensions(
        &nat_out(&ack, (CLIENT6, 40000), (backend, port), LB_MAC, mac6(backend)),
        14,
        &[(ROUTING, vec![0, 0, 0, 0, 0, 0])],
    );
    g.run(case(
        "routing header, no segments left: the destination is final, NAT66",
        routing_done,
        XDP_TX,
        Some(routing_done_out),
        Counter::ForwardTx,
    ));
    let routing_left = with_extensions(&ack.bytes(), 14, &[(ROUTING, vec![0, 1, 0, 0, 0, 0])]);
    g.run(case("routing header with segments left: pass", routing_left, XDP_PASS, None, Counter::PassIpOptions));
    let fragment = with_extensions(&ack.bytes(), 14, &[(FRAGMENT, vec![0, 1, 0, 0, 0, 7])]);
    g.run(case("fragment header: pass untouched", fragment, XDP_PASS, None, Counter::PassFragment));
    let five: Vec<(u8, Vec<u8>)> = (0..5).map(|_| (DESTINATION_OPTIONS, padding(6))).collect();
    let too_many = with_extensions(&ack.bytes(), 14, &five);
    g.run(case("five extension headers: pass untouched", too_many, XDP_PASS, None, Counter::PassIpOptions));
    let mut truncated = ack.bytes();
    truncated.truncate(14 + 40 + 10);
    g.run(case("payload length past the frame: pass untouched", truncated, XDP_PASS, None, Counter::PassMalformed));
    let mut cut_ext = with_extensions(&ack.bytes(), 14, &[(HOP_BY_HOP, padding(14))]);
    cut_ext.truncate(14 + 40 + 8);
    cut_ext[18..20].copy_from_slice(&8u16.to_be_bytes());
    g.run(case("extension header cut short: pass untouched", cut_ext, XDP_PASS, None, Counter::PassMalformed));
}

/// NAT66 too big for the backend's path (h0, MTU 1400).
pub fn too_big(g: &mut Golden) {
    let fbig = Frame6::tcp(CLIENT6, 44000, vip6(0x40), 80).with(|f| f.payload = vec![0; 1400 - 40 - 20 + 10]);
    g.run(case(
        "NAT66 packet too big for the backend's link: ICMPv6 packet too big (MTU 1400)",
        fbig.bytes(),
        XDP_TX,
        Some(too_big6(&fbig.bytes(), 14, 1400)),
        Counter::ForwardIcmpTooBig,
    ));
}
