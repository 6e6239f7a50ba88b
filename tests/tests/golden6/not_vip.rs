//! IPv6 golden cases that are not the balancer's to touch: the host's own traffic, neighbour
//! discovery and router traffic, and ICMPv6 informational messages pass untouched.
use etherparse::PacketBuilder;
use lb_common::stats::Counter;
use lb_tests::fixture::LB_MAC;
use lb_tests::fixture6::*;
use lb_tests::golden::*;

use super::*;

/// Not for a VIP: passed untouched, ND and router traffic included.
pub fn not_for_a_vip(g: &mut Golden) {
    g.run(case(
        "IPv6 TCP to the host (ssh): pass untouched",
        Frame6::tcp(CLIENT6, 40000, LB6, 22).bytes(),
        XDP_PASS,
        None,
        Counter::PassNotVip,
    ));
    g.run(case(
        "IPv6 VIP port, other address: pass untouched",
        Frame6::tcp(CLIENT6, 40000, vip6(0x99), 80).bytes(),
        XDP_PASS,
        None,
        Counter::PassNotVip,
    ));
    let solicited_node = [0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0, 0, 0x10];
    let mut ns_body = vec![0, 0, 0, 0];
    ns_body.extend_from_slice(&VIP_NAT);
    let nd = icmp6(
        (mac6(CLIENT6), [0x33, 0x33, 0xff, 0, 0, 0x10]),
        CLIENT6,
        solicited_node,
        255,
        Icmpv6Type::Unknown { type_u8: 135, code_u8: 0, bytes5to8: [0; 4] },
        &VIP_NAT,
    );
    g.run(case("neighbour solicitation for a VIP: pass untouched", nd, XDP_PASS, None, Counter::PassNotVip));
    let ra = icmp6(
        (mac6(B6_1), [0x33, 0x33, 0, 0, 0, 1]),
        [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x11],
        [0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        255,
        Icmpv6Type::Unknown { type_u8: 134, code_u8: 0, bytes5to8: [64, 0, 7, 8] },
        &[0; 8],
    );
    g.run(case("router advertisement: pass untouched", ra, XDP_PASS, None, Counter::PassNotVip));
    let echo = {
        let mut out = Vec::new();
        PacketBuilder::ethernet2(mac6(CLIENT6), LB_MAC)
            .ipv6(CLIENT6, VIP_NAT, 64)
            .icmpv6_echo_request(1, 1)
            .write(&mut out, b"ping")
            .unwrap();
        out
    };
    g.run(case("ICMPv6 echo to a VIP: pass untouched", echo, XDP_PASS, None, Counter::PassNotVip));
}
