//! Golden packets for IPv6: frames run through the real lb_ingress (which hands IPv6 to
//! lb_ingress_v6, ICMP errors to lb_icmp_errors, IPv6 packets too big to lb_too_big6) and lb_decap
//! with BPF_PROG_TEST_RUN and real maps written by the real map writer. Each case states the
//! verdict, the exact output (built independently with etherparse, checksums included) and the
//! counters that must move. Needs root; the FIB lookups resolve in a namespace made here.

use etherparse::{Icmpv6Type, PacketBuilder};
use lb_common::program_names;
use lb_common::stats::{Counter, DecapCounter};
use lb_ctl::dataplane::load::{allow_decap_sources, load_decap, program};
use lb_tests::fixture::{B1, LB_ADDR, LB_MAC, balancer, mac_of};
use lb_tests::fixture6::*;
use lb_tests::golden::*;
use lb_tests::netns::ifindex;
use lb_tests::packets::{Frame, L4, Mac};
use lb_tests::privileges::require_root;

const HOP_BY_HOP: u8 = 0;
const ROUTING: u8 = 43;
const FRAGMENT: u8 = 44;
const DESTINATION_OPTIONS: u8 = 60;

/// The expected NAT66 output: one end rewritten, hop limit one less, the next hop's MACs.
fn nat6(input: &Frame6, src: ([u8; 16], u16), dst: ([u8; 16], u16), smac: Mac, dmac: Mac) -> Vec<u8> {
    input
        .with(|f| {
            (f.src, f.src_port) = src;
            (f.dst, f.dst_port) = dst;
            f.hop_limit -= 1;
            f.src_mac = smac;
            f.dst_mac = dmac;
        })
        .bytes()
}

fn octets6(addr: std::net::IpAddr) -> [u8; 16] {
    match addr {
        std::net::IpAddr::V6(a) => a.octets(),
        std::net::IpAddr::V4(_) => panic!("an IPv6 address was expected"),
    }
}

/// An ICMPv6 message of `kind` from `from` to `to`, quoting `quote`, behind `macs`.
fn icmp6(macs: (Mac, Mac), from: [u8; 16], to: [u8; 16], hop_limit: u8, kind: Icmpv6Type, quote: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ethernet2(macs.0, macs.1).ipv6(from, to, hop_limit).icmpv6(kind).write(&mut out, quote).unwrap();
    out
}

/// The answer to an IPv6 packet too big for its next hop: ICMPv6 "packet too big" (MTU `mtu`)
/// from the address it was sent to, quoting its first 128 bytes, MACs swapped, tag kept.
fn too_big6(frame: &[u8], l3: usize, mtu: u32) -> Vec<u8> {
    let (src, dst): ([u8; 16], [u8; 16]) =
        (frame[l3 + 8..l3 + 24].try_into().unwrap(), frame[l3 + 24..l3 + 40].try_into().unwrap());
    let answer = icmp6(
        (frame[..6].try_into().unwrap(), frame[6..12].try_into().unwrap()),
        dst,
        src,
        64,
        Icmpv6Type::PacketTooBig { mtu },
        &frame[l3..l3 + 128],
    );
    // Behind the original link header (a tag kept), MACs swapped.
    let mut out = frame[6..12].to_vec();
    out.extend_from_slice(&frame[..6]);
    out.extend_from_slice(&frame[12..l3]);
    out.extend_from_slice(&answer[14..]);
    out
}

#[test]
fn ipv6_golden_packets_through_lb_ingress() {
    if !require_root("ipv6_golden_packets_through_lb_ingress") {
        return;
    }
    let ns = lab6();
    let _inside = ns.enter();
    let g0 = ifindex("g0");
    let mut dp = balancer();
    let vips = vips6();
    configure6(&mut dp, &vips);
    let mut results = Vec::new();
    let mut run = |dp: &mut lb_ctl::dataplane::aya::AyaDataplane, c: Case| results.push((c.name, run_case(dp, g0, &c)));

    // ---- Not for a VIP: passed untouched, ND and router traffic included.
    run(
        &mut dp,
        case(
            "IPv6 TCP to the host (ssh): pass untouched",
            Frame6::tcp(CLIENT6, 40000, LB6, 22).bytes(),
            XDP_PASS,
            None,
            Counter::PassNotVip,
        ),
    );
    run(
        &mut dp,
        case(
            "IPv6 VIP port, other address: pass untouched",
            Frame6::tcp(CLIENT6, 40000, vip6(0x99), 80).bytes(),
            XDP_PASS,
            None,
            Counter::PassNotVip,
        ),
    );
    let vip_nat = vip6(0x10);
    let solicited_node = [0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0, 0, 0x10];
    let mut ns_body = vec![0, 0, 0, 0];
    ns_body.extend_from_slice(&vip_nat);
    let nd = icmp6(
        (mac6(CLIENT6), [0x33, 0x33, 0xff, 0, 0, 0x10]),
        CLIENT6,
        solicited_node,
        255,
        Icmpv6Type::Unknown { type_u8: 135, code_u8: 0, bytes5to8: [0; 4] },
        &vip_nat,
    );
    run(&mut dp, case("neighbour solicitation for a VIP: pass untouched", nd, XDP_PASS, None, Counter::PassNotVip));
    let ra = icmp6(
        (mac6(B6_1), [0x33, 0x33, 0, 0, 0, 1]),
        [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x11],
        [0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        255,
        Icmpv6Type::Unknown { type_u8: 134, code_u8: 0, bytes5to8: [64, 0, 7, 8] },
        &[0; 8],
    );
    run(&mut dp, case("router advertisement: pass untouched", ra, XDP_PASS, None, Counter::PassNotVip));
    let echo = {
        let mut out = Vec::new();
        PacketBuilder::ethernet2(mac6(CLIENT6), LB_MAC)
            .ipv6(CLIENT6, vip_nat, 64)
            .icmpv6_echo_request(1, 1)
            .write(&mut out, b"ping")
            .unwrap();
        out
    };
    run(&mut dp, case("ICMPv6 echo to a VIP: pass untouched", echo, XDP_PASS, None, Counter::PassNotVip));

    // ---- NAT66: forward, established, reply.
    let syn = Frame6::tcp(CLIENT6, 40000, vip_nat, 80);
    let (backend, port) = by_client(&vips[0], CLIENT6);
    let backend = octets6(backend);
    let mut c = case(
        "new flow, NAT66: destination becomes the backend, hop limit 63",
        syn.bytes(),
        XDP_TX,
        Some(nat6(&syn, (CLIENT6, 40000), (backend, port), LB_MAC, mac6(backend))),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::FlowNew];
    run(&mut dp, c);
    let ack = syn.with(|f| {
        f.l4 = L4::TcpAck;
        f.payload = b"GET / HTTP/1.1\r\n\r\n".to_vec()
    });
    let mut c = case(
        "established flow, NAT66: the same backend",
        ack.bytes(),
        XDP_TX,
        Some(nat6(&ack, (CLIENT6, 40000), (backend, port), LB_MAC, mac6(backend))),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::FlowHit];
    run(&mut dp, c);
    let mut c = case(
        "established flow, NAT66, a packet no larger than the last: the cached next hop",
        ack.bytes(),
        XDP_TX,
        Some(nat6(&ack, (CLIENT6, 40000), (backend, port), LB_MAC, mac6(backend))),
        Counter::ForwardTx,
    );
    c.unchanged = vec![Counter::NexthopLookup];
    run(&mut dp, c);
    let reply = Frame6::tcp(backend, port, CLIENT6, 40000).with(|f| {
        f.l4 = L4::TcpAck;
        f.src_mac = mac6(backend);
        f.payload = b"HTTP/1.1 200 OK\r\n\r\n".to_vec()
    });
    let mut c = case(
        "NAT66 reply: source becomes the VIP again",
        reply.bytes(),
        XDP_TX,
        Some(nat6(&reply, (vip_nat, 80), (CLIENT6, 40000), LB_MAC, mac6(CLIENT6))),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::NatReply];
    run(&mut dp, c);
    let tagged = ack.with(|f| f.vlan = Some(42));
    run(
        &mut dp,
        case(
            "802.1Q NAT66: tag kept",
            tagged.bytes(),
            XDP_TX,
            Some(nat6(&tagged, (CLIENT6, 40000), (backend, port), LB_MAC, mac6(backend))),
            Counter::ForwardTx,
        ),
    );
    let udp = Frame6::udp(CLIENT6, 5300, vip_nat, 53);
    run(
        &mut dp,
        case(
            "UDP, NAT66: destination and checksum rewritten",
            udp.bytes(),
            XDP_TX,
            Some(nat6(&udp, (CLIENT6, 5300), (B6_1, 5353), LB_MAC, mac6(B6_1))),
            Counter::ForwardTx,
        ),
    );
    let expiring = ack.with(|f| f.hop_limit = 1);
    run(
        &mut dp,
        case("hop limit 1: pass (the stack answers)", expiring.bytes(), XDP_PASS, None, Counter::PassTtlExpired),
    );
    run(
        &mut dp,
        case(
            "IPv6 VIP without backends: drop",
            Frame6::tcp(CLIENT6, 40000, vip6(0x30), 80).bytes(),
            XDP_DROP,
            None,
            Counter::DropNoBackend,
        ),
    );

    // ---- Extension headers: walked (and balanced) up to four; the others defined.
    let ext_in = with_extensions(&ack.bytes(), 14, &[(HOP_BY_HOP, padding(6)), (DESTINATION_OPTIONS, padding(14))]);
    let ext_out = with_extensions(
        &nat6(&ack, (CLIENT6, 40000), (backend, port), LB_MAC, mac6(backend)),
        14,
        &[(HOP_BY_HOP, padding(6)), (DESTINATION_OPTIONS, padding(14))],
    );
    run(
        &mut dp,
        case(
            "hop-by-hop and destination options: walked, NAT66 as usual",
            ext_in,
            XDP_TX,
            Some(ext_out),
            Counter::ForwardTx,
        ),
    );
    let routing_done = with_extensions(&ack.bytes(), 14, &[(ROUTING, vec![0, 0, 0, 0, 0, 0])]);
    let routing_done_out = with_extensions(
        &nat6(&ack, (CLIENT6, 40000), (backend, port), LB_MAC, mac6(backend)),
        14,
        &[(ROUTING, vec![0, 0, 0, 0, 0, 0])],
    );
    run(
        &mut dp,
        case(
            "routing header, no segments left: the destination is final, NAT66",
            routing_done,
            XDP_TX,
            Some(routing_done_out),
            Counter::ForwardTx,
        ),
    );
    let routing_left = with_extensions(&ack.bytes(), 14, &[(ROUTING, vec![0, 1, 0, 0, 0, 0])]);
    run(&mut dp, case("routing header with segments left: pass", routing_left, XDP_PASS, None, Counter::PassIpOptions));
    let fragment = with_extensions(&ack.bytes(), 14, &[(FRAGMENT, vec![0, 1, 0, 0, 0, 7])]);
    run(&mut dp, case("fragment header: pass untouched", fragment, XDP_PASS, None, Counter::PassFragment));
    let five: Vec<(u8, Vec<u8>)> = (0..5).map(|_| (DESTINATION_OPTIONS, padding(6))).collect();
    let too_many = with_extensions(&ack.bytes(), 14, &five);
    run(&mut dp, case("five extension headers: pass untouched", too_many, XDP_PASS, None, Counter::PassIpOptions));
    let mut truncated = ack.bytes();
    truncated.truncate(14 + 40 + 10);
    run(
        &mut dp,
        case("payload length past the frame: pass untouched", truncated, XDP_PASS, None, Counter::PassMalformed),
    );
    let mut cut_ext = with_extensions(&ack.bytes(), 14, &[(HOP_BY_HOP, padding(14))]);
    cut_ext.truncate(14 + 40 + 8);
    cut_ext[18..20].copy_from_slice(&8u16.to_be_bytes());
    run(&mut dp, case("extension header cut short: pass untouched", cut_ext, XDP_PASS, None, Counter::PassMalformed));

    // ---- DSR by IP in IP, in each combination of families.
    let label = |dp: &lb_ctl::dataplane::aya::AyaDataplane, key| dp.table_hash_of(&key);
    let dsyn = Frame6::tcp(CLIENT6, 41000, vip6(0x20), 80);
    let hash = label(&dp, flow_key6(CLIENT6, vip6(0x20), 41000, 80));
    let ip6ip6 = |f: &Frame6| {
        wrapped(&f.bytes(), f.l3_offset(), Wrap::Ip { src: v6(LB6), dst: v6(B6_1) }, hash, LB_MAC, mac6(B6_1))
    };
    let mut c = case(
        "new flow, IPv6 in IPv6: outer header to the backend",
        dsyn.bytes(),
        XDP_TX,
        Some(ip6ip6(&dsyn)),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::FlowNew];
    run(&mut dp, c);
    let dack = dsyn.with(|f| {
        f.l4 = L4::TcpAck;
        f.payload = vec![b'd'; 100]
    });
    let mut c = case(
        "established flow, IPv6 in IPv6: same flow label",
        dack.bytes(),
        XDP_TX,
        Some(ip6ip6(&dack)),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::FlowHit];
    run(&mut dp, c);
    let mut c = case(
        "established flow, IPv6 in IPv6, no larger than the last: the cached next hop",
        dack.bytes(),
        XDP_TX,
        Some(ip6ip6(&dack)),
        Counter::ForwardTx,
    );
    c.unchanged = vec![Counter::NexthopLookup];
    run(&mut dp, c);
    let dtag = dack.with(|f| f.vlan = Some(42));
    run(&mut dp, case("802.1Q IPv6 in IPv6: tag kept", dtag.bytes(), XDP_TX, Some(ip6ip6(&dtag)), Counter::ForwardTx));
    let dbig = dack.with(|f| f.payload = vec![0; 1470 - 20]);
    run(
        &mut dp,
        case(
            "IPv6 DSR packet too big once wrapped: ICMPv6 packet too big (MTU 1460)",
            dbig.bytes(),
            XDP_TX,
            Some(too_big6(&dbig.bytes(), 14, 1460)),
            Counter::ForwardIcmpTooBig,
        ),
    );
    // Without lb_too_big6 in JUMPS (a loader that did not fill it), the packet is not dropped
    // in silence: it passes as it came, and the failed jump is counted.
    let too_big_program = program(dp.ebpf_mut(), program_names::TOO_BIG6).unwrap().fd().unwrap().try_clone().unwrap();
    jumps(&mut dp).clear_index(&lb_common::jumps::TOO_BIG6).unwrap();
    run(
        &mut dp,
        case(
            "IPv6 DSR packet too big with lb_too_big6 missing: pass untouched",
            dbig.bytes(),
            XDP_PASS,
            None,
            Counter::PassJumpFailed,
        ),
    );
    jumps(&mut dp).set(lb_common::jumps::TOO_BIG6, &too_big_program, 0).unwrap();
    run(
        &mut dp,
        case(
            "IPv6 DSR packet too big, lb_too_big6 back: answered again",
            dbig.bytes(),
            XDP_TX,
            Some(too_big6(&dbig.bytes(), 14, 1460)),
            Counter::ForwardIcmpTooBig,
        ),
    );
    let s4 = Frame6::tcp(CLIENT6, 41001, vip6(0x21), 80);
    let six_in_four = wrapped(&s4.bytes(), 14, Wrap::Ip { src: v4(LB_ADDR), dst: v4(B1) }, 0, LB_MAC, mac_of(B1));
    run(
        &mut dp,
        case(
            "IPv6 VIP, IPv4 backend: IPv6 in IPv4 (protocol 41)",
            s4.bytes(),
            XDP_TX,
            Some(six_in_four),
            Counter::ForwardTx,
        ),
    );
    let f4 = Frame::tcp([192, 0, 2, 7], 41002, [203, 0, 113, 90], 80);
    let hash4 = dp.table_hash_of(&flow_key([192, 0, 2, 7], [203, 0, 113, 90], 41002, 80));
    let four_in_six = wrapped(&f4.bytes(), 14, Wrap::Ip { src: v6(LB6), dst: v6(B6_1) }, hash4, LB_MAC, mac6(B6_1));
    run(
        &mut dp,
        case(
            "IPv4 VIP, IPv6 backend: IPv4 in IPv6 (next header 4)",
            f4.bytes(),
            XDP_TX,
            Some(four_in_six),
            Counter::ForwardTx,
        ),
    );

    // ---- GUE over IPv6.
    let gsyn = Frame6::tcp(CLIENT6, 42000, vip6(0x22), 80);
    let ghash = label(&dp, flow_key6(CLIENT6, vip6(0x22), 42000, 80));
    let gport = lb_common::gue::source_port(ghash);
    let gue = |f: &Frame6| {
        wrapped(
            &f.bytes(),
            f.l3_offset(),
            Wrap::Gue { src: v6(LB6), dst: v6(B6_1), port: gport },
            ghash,
            LB_MAC,
            mac6(B6_1),
        )
    };
    let mut c = case(
        "new flow, GUE over IPv6: UDP to port 6080, source port from the hash",
        gsyn.bytes(),
        XDP_TX,
        Some(gue(&gsyn)),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::FlowNew];
    run(&mut dp, c);
    let gbig = gsyn.with(|f| {
        f.l4 = L4::TcpAck;
        f.payload = vec![0; 1460 - 20]
    });
    run(
        &mut dp,
        case(
            "GUE over IPv6, too big once wrapped: ICMPv6 packet too big (MTU 1452)",
            gbig.bytes(),
            XDP_TX,
            Some(too_big6(&gbig.bytes(), 14, 1452)),
            Counter::ForwardIcmpTooBig,
        ),
    );

    // ---- DSR by MAC rewrite.
    let lsyn = Frame6::tcp(CLIENT6, 43000, vip6(0x23), 80);
    let mut l2_out = lsyn.bytes();
    l2_out[0..6].copy_from_slice(&mac6(B6_1));
    l2_out[6..12].copy_from_slice(&LB_MAC);
    let mut c = case(
        "new flow, IPv6 dsr-l2: the packet unchanged to the backend's MAC",
        lsyn.bytes(),
        XDP_TX,
        Some(l2_out),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::FlowNew];
    run(&mut dp, c);
    run(
        &mut dp,
        case(
            "IPv6 dsr-l2 backend behind a gateway: drop",
            Frame6::tcp(CLIENT6, 43001, vip6(0x24), 80).bytes(),
            XDP_DROP,
            None,
            Counter::DropNotAdjacent,
        ),
    );

    // ---- NAT66 too big for the backend's path (h0, MTU 1400).
    let fbig = Frame6::tcp(CLIENT6, 44000, vip6(0x40), 80).with(|f| f.payload = vec![0; 1400 - 40 - 20 + 10]);
    run(
        &mut dp,
        case(
            "NAT66 packet too big for the backend's link: ICMPv6 packet too big (MTU 1400)",
            fbig.bytes(),
            XDP_TX,
            Some(too_big6(&fbig.bytes(), 14, 1400)),
            Counter::ForwardIcmpTooBig,
        ),
    );

    // ---- ICMPv6 errors about VIP flows go to the flow's backend.
    let router = seg(0xfe);
    let quoted = Frame6::tcp(vip_nat, 80, CLIENT6, 40000).with(|f| f.l4 = L4::TcpAck).bytes();
    let err = icmp6(
        (mac6(router), LB_MAC),
        router,
        vip_nat,
        64,
        Icmpv6Type::PacketTooBig { mtu: 1280 },
        &quoted[14..14 + 48],
    );
    // The quote: the IPv6 header and the first 8 bytes of TCP (ports, sequence number).
    let rewritten_quote = Frame6::tcp(backend, port, CLIENT6, 40000).with(|f| f.l4 = L4::TcpAck).bytes();
    let quote = rewritten_quote[14..14 + 48].to_vec();
    let err_out = icmp6((LB_MAC, mac6(backend)), router, backend, 63, Icmpv6Type::PacketTooBig { mtu: 1280 }, &quote);
    let mut c = case(
        "ICMPv6 error about a NAT66 flow: to its backend, as about its own packet",
        err,
        XDP_TX,
        Some(err_out),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::IcmpToBackend];
    run(&mut dp, c);
    let dquoted = Frame6::tcp(vip6(0x20), 80, CLIENT6, 41000).with(|f| f.l4 = L4::TcpAck).bytes();
    let derr = icmp6(
        (mac6(router), LB_MAC),
        router,
        vip6(0x20),
        64,
        Icmpv6Type::PacketTooBig { mtu: 1280 },
        &dquoted[14..14 + 48],
    );
    let derr_out = wrapped(&derr, 14, Wrap::Ip { src: v6(LB6), dst: v6(B6_1) }, 0, LB_MAC, mac6(B6_1));
    let mut c = case(
        "ICMPv6 error about a DSR flow: to its backend, wrapped untouched",
        derr.clone(),
        XDP_TX,
        Some(derr_out),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::IcmpToBackend];
    run(&mut dp, c);
    // Without lb_icmp6_errors in JUMPS, the error passes to the stack as it came, counted.
    let icmp6_program = program(dp.ebpf_mut(), program_names::ICMP6_ERRORS).unwrap().fd().unwrap().try_clone().unwrap();
    jumps(&mut dp).clear_index(&lb_common::jumps::ICMP6_ERRORS).unwrap();
    run(
        &mut dp,
        case(
            "ICMPv6 error about a DSR flow, lb_icmp6_errors missing: pass untouched",
            derr,
            XDP_PASS,
            None,
            Counter::PassJumpFailed,
        ),
    );
    jumps(&mut dp).set(lb_common::jumps::ICMP6_ERRORS, &icmp6_program, 0).unwrap();
    let unknown = Frame6::tcp(vip_nat, 80, CLIENT6, 49999).with(|f| f.l4 = L4::TcpAck).bytes();
    let stray = icmp6(
        (mac6(router), LB_MAC),
        router,
        vip_nat,
        64,
        Icmpv6Type::PacketTooBig { mtu: 1280 },
        &unknown[14..14 + 48],
    );
    run(&mut dp, case("ICMPv6 error about no known flow: pass untouched", stray, XDP_PASS, None, Counter::PassNotVip));

    let failed: Vec<String> =
        results.iter().filter_map(|(name, r)| r.as_ref().err().map(|e| format!("{name}: {e}"))).collect();
    assert!(failed.is_empty(), "failed cases:\n{}", failed.join("\n"));
}

#[test]
fn ipv6_golden_packets_through_lb_decap() {
    if !require_root("ipv6_golden_packets_through_lb_decap") {
        return;
    }
    let mut ebpf = load_decap().unwrap();
    allow_decap_sources(&mut ebpf, &["198.51.100.0/28".parse().unwrap(), "2001:db8::/120".parse().unwrap()]).unwrap();
    let inner6 = Frame6::tcp(CLIENT6, 40000, vip6(0x20), 80).with(|f| f.payload = b"hello".to_vec());
    let inner4 = Frame::tcp([192, 0, 2, 7], 40000, [203, 0, 113, 90], 80).with(|f| f.payload = b"hello".to_vec());
    // After decapsulation: the backend's frame addresses, the client's datagram, its EtherType.
    let opened = |wrapped: &[u8], inner: &[u8]| {
        let mut want = wrapped[..12].to_vec();
        want.extend_from_slice(&inner[12..]);
        want
    };
    let wrap = |inner: &[u8], l3, w| wrapped(inner, l3, w, 7, LB_MAC, mac6(B6_1));
    let ip6 = Wrap::Ip { src: v6(LB6), dst: v6(B6_1) };
    let six_in_six = wrap(&inner6.bytes(), 14, ip6);
    let four_in_six = wrap(&inner4.bytes(), 14, ip6);
    let six_in_four = wrap(&inner6.bytes(), 14, Wrap::Ip { src: v4(LB_ADDR), dst: v4(B1) });
    let gue6 = wrap(&inner6.bytes(), 14, Wrap::Gue { src: v6(LB6), dst: v6(B6_1), port: 50000 });
    let gue4_in6 = wrap(&inner4.bytes(), 14, Wrap::Gue { src: v6(LB6), dst: v6(B6_1), port: 50000 });
    let tagged = inner6.with(|f| f.vlan = Some(7));
    let six_tagged = wrap(&tagged.bytes(), 18, ip6);
    // 2001:db8::177: outside 2001:db8::/120.
    let outsider = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0x77];
    let stranger = wrap(&inner6.bytes(), 14, Wrap::Ip { src: v6(outsider), dst: v6(B6_1) });
    let cases: Vec<DecapCase> = vec![
        (
            "IPv6 in IPv6: outer header removed",
            six_in_six.clone(),
            opened(&six_in_six, &inner6.bytes()),
            DecapCounter::Decapsulated,
        ),
        (
            "IPv4 in IPv6: outer header removed, EtherType IPv4",
            four_in_six.clone(),
            opened(&four_in_six, &inner4.bytes()),
            DecapCounter::Decapsulated,
        ),
        (
            "IPv6 in IPv4: outer header removed, EtherType IPv6",
            six_in_four.clone(),
            opened(&six_in_four, &inner6.bytes()),
            DecapCounter::Decapsulated,
        ),
        (
            "GUE over IPv6: outer headers removed",
            gue6.clone(),
            opened(&gue6, &inner6.bytes()),
            DecapCounter::Decapsulated,
        ),
        (
            "IPv4 in GUE over IPv6: outer headers removed",
            gue4_in6.clone(),
            opened(&gue4_in6, &inner4.bytes()),
            DecapCounter::Decapsulated,
        ),
        (
            "802.1Q IPv6 in IPv6: tag kept",
            six_tagged.clone(),
            opened(&six_tagged, &tagged.bytes()),
            DecapCounter::Decapsulated,
        ),
        ("IPv6 in IPv6 from outside the allowed sources: untouched", stranger.clone(), stranger, DecapCounter::Refused),
        ("plain IPv6 TCP: untouched", inner6.bytes(), inner6.bytes(), DecapCounter::Passed),
    ];
    run_decap_cases(&mut ebpf, &cases);
}
