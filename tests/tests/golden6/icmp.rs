//! IPv6 golden cases of ICMPv6 errors about VIP flows: to the flow's backend (NAT66 and DSR),
//! passed when their program is missing or the flow unknown.
use etherparse::Icmpv6Type;
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
