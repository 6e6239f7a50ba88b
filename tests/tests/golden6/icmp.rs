//! IPv6 golden cases of ICMPv6 errors about VIP flows: to the flow's backend (NAT66 and DSR),
//! passed when their program is missing or the flow unknown; and about a NAT66 flow's packets
//! to its backend: to the client, as about the packet it sent.
use etherparse::{Icmpv6Type, icmpv6::DestUnreachableCode};
use lb_common::program_names;
use lb_common::stats::Counter;
use lb_ctl::dataplane::load::program;
use lb_tests::fixture::LB_MAC;
use lb_tests::fixture6::*;
use lb_tests::golden::*;
use lb_tests::packets::L4;

use super::*;

/// ICMPv6 errors about VIP flows go to the flow's backend.
pub fn errors_about_flows(g: &mut Golden, vips: &[Vip6]) {
    let (backend, port) = by_client(&vips[0], CLIENT6);
    let backend = octets6(backend);
    let router = seg(0xfe);
    let quoted = Frame6::tcp(VIP_NAT, 80, CLIENT6, 40000).with(|f| f.l4 = L4::TcpAck).bytes();
    let err = icmp6(
        (mac6(router), LB_MAC),
        router,
        VIP_NAT,
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
    g.run(c);
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
    g.run(c);
    // Without lb_icmp6_errors in JUMPS, the error passes to the stack as it came, counted.
    let icmp6_program =
        program(g.dp.ebpf_mut(), program_names::ICMP6_ERRORS).unwrap().fd().unwrap().try_clone().unwrap();
    jumps(&mut g.dp).clear_index(&lb_common::jumps::ICMP6_ERRORS).unwrap();
    g.run(case(
        "ICMPv6 error about a DSR flow, lb_icmp6_errors missing: pass untouched",
        derr,
        XDP_PASS,
        None,
        Counter::PassJumpFailed,
    ));
    jumps(&mut g.dp).set(lb_common::jumps::ICMP6_ERRORS, &icmp6_program, 0).unwrap();
    let unknown = Frame6::tcp(VIP_NAT, 80, CLIENT6, 49999).with(|f| f.l4 = L4::TcpAck).bytes();
    let stray = icmp6(
        (mac6(router), LB_MAC),
        router,
        VIP_NAT,
        64,
        Icmpv6Type::PacketTooBig { mtu: 1280 },
        &unknown[14..14 + 48],
    );
    g.run(case("ICMPv6 error about no known flow: pass untouched", stray, XDP_PASS, None, Counter::PassNotVip));
}

/// ICMPv6 errors about a NAT66 flow's packet as sent on to its backend go to the client, the
/// backend replaced by the VIP (outer source, quote, and the quoted TCP checksum where quoted).
pub fn errors_to_clients(g: &mut Golden, vips: &[Vip6]) {
    let (backend, port) = by_client(&vips[0], CLIENT6);
    let backend = octets6(backend);
    let segment = |dst: ([u8; 16], u16)| {
        Frame6::tcp(CLIENT6, 40000, dst.0, dst.1)
            .with(|f| {
                f.l4 = L4::TcpAck;
                f.payload = b"GET / HTTP/1.1\r\n\r\n".to_vec()
            })
            .bytes()
    };
    let unreachable = Icmpv6Type::DestinationUnreachable(DestUnreachableCode::Port);
    // The whole segment quoted: its TCP checksum is rewritten too.
    let err = icmp6((mac6(backend), LB_MAC), backend, CLIENT6, 64, unreachable, &segment((backend, port))[14..]);
    let want = icmp6((LB_MAC, mac6(CLIENT6)), VIP_NAT, CLIENT6, 63, unreachable, &segment((VIP_NAT, 80))[14..]);
    let mut c = case(
        "NAT66 backend's ICMPv6 error about the client's segment: to the client from the VIP, quote as it sent it",
        err,
        XDP_TX,
        Some(want),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::IcmpToClient];
    g.run(c);
    let router = seg(0xfd);
    let too_big = Icmpv6Type::PacketTooBig { mtu: 1280 };
    let err = icmp6((mac6(router), LB_MAC), router, CLIENT6, 64, too_big, &segment((backend, port))[14..14 + 48]);
    let want = icmp6((LB_MAC, mac6(CLIENT6)), router, CLIENT6, 63, too_big, &segment((VIP_NAT, 80))[14..14 + 48]);
    let mut c = case(
        "router's packet too big about a NAT66 flow's segment to its backend: to the client, source kept",
        err,
        XDP_TX,
        Some(want),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::IcmpToClient];
    g.run(c);
}
