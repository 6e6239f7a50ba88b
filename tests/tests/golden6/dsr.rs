//! IPv6 golden cases of DSR: IP in IP in each combination of families, GUE over IPv6 and
//! MAC rewrite (dsr-l2).
use lb_common::program_names;
use lb_common::stats::Counter;
use lb_ctl::dataplane::load::program;
use lb_tests::fixture::{B1, LB_ADDR, LB_MAC, mac_of};
use lb_tests::fixture6::*;
use lb_tests::golden::*;
use lb_tests::packets::{Frame, L4};

use super::*;

/// DSR by IP in IP, in each combination of families.
pub fn ip_in_ip(g: &mut Golden) {
    let label = |dp: &lb_ctl::dataplane::aya::AyaDataplane, key| dp.table_hash_of(&key);
    let dsyn = Frame6::tcp(CLIENT6, 41000, vip6(0x20), 80);
    let hash = label(&g.dp, flow_key6(CLIENT6, vip6(0x20), 41000, 80));
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
    g.run(c);
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
    g.run(c);
    let mut c = case(
        "established flow, IPv6 in IPv6, no larger than the last: the cached next hop",
        dack.bytes(),
        XDP_TX,
        Some(ip6ip6(&dack)),
        Counter::ForwardTx,
    );
    c.unchanged = vec![Counter::NexthopLookup];
    g.run(c);
    let dtag = dack.with(|f| f.vlan = Some(42));
    g.run(case("802.1Q IPv6 in IPv6: tag kept", dtag.bytes(), XDP_TX, Some(ip6ip6(&dtag)), Counter::ForwardTx));
    let dbig = dack.with(|f| f.payload = vec![0; 1470 - 20]);
    g.run(case(
        "IPv6 DSR packet too big once wrapped: ICMPv6 packet too big (MTU 1460)",
        dbig.bytes(),
        XDP_TX,
        Some(too_big6(&dbig.bytes(), 14, 1460)),
        Counter::ForwardIcmpTooBig,
    ));
    // Without lb_too_big6 in JUMPS (a loader that did not fill it), the packet is not dropped
    // in silence: it passes as it came, and the failed jump is counted.
    let too_big_program = program(g.dp.ebpf_mut(), program_names::TOO_BIG6).unwrap().fd().unwrap().try_clone().unwrap();
    jumps(&mut g.dp).clear_index(&lb_common::jumps::TOO_BIG6).unwrap();
    g.run(case(
        "IPv6 DSR packet too big with lb_too_big6 missing: pass untouched",
        dbig.bytes(),
        XDP_PASS,
        None,
        Counter::PassJumpFailed,
    ));
    jumps(&mut g.dp).set(lb_common::jumps::TOO_BIG6, &too_big_program, 0).unwrap();
    g.run(case(
        "IPv6 DSR packet too big, lb_too_big6 back: answered again",
        dbig.bytes(),
        XDP_TX,
        Some(too_big6(&dbig.bytes(), 14, 1460)),
        Counter::ForwardIcmpTooBig,
    ));
    let s4 = Frame6::tcp(CLIENT6, 41001, vip6(0x21), 80);
    let six_in_four = wrapped(&s4.bytes(), 14, Wrap::Ip { src: v4(LB_ADDR), dst: v4(B1) }, 0, LB_MAC, mac_of(B1));
    g.run(case(
        "IPv6 VIP, IPv4 backend: IPv6 in IPv4 (protocol 41)",
        s4.bytes(),
        XDP_TX,
        Some(six_in_four),
        Counter::ForwardTx,
    ));
    let f4 = Frame::tcp([192, 0, 2, 7], 41002, [203, 0, 113, 90], 80);
    let hash4 = g.dp.table_hash_of(&flow_key([192, 0, 2, 7], [203, 0, 113, 90], 41002, 80));
    let four_in_six = wrapped(&f4.bytes(), 14, Wrap::Ip { src: v6(LB6), dst: v6(B6_1) }, hash4, LB_MAC, mac6(B6_1));
    g.run(case(
        "IPv4 VIP, IPv6 backend: IPv4 in IPv6 (next header 4)",
        f4.bytes(),
        XDP_TX,
        Some(four_in_six),
        Counter::ForwardTx,
    ));
}

/// GUE over IPv6.
pub fn gue(g: &mut Golden) {
    let label = |dp: &lb_ctl::dataplane::aya::AyaDataplane, key| dp.table_hash_of(&key);
    let gsyn = Frame6::tcp(CLIENT6, 42000, vip6(0x22), 80);
    let ghash = label(&g.dp, flow_key6(CLIENT6, vip6(0x22), 42000, 80));
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
    g.run(c);
    let gbig = gsyn.with(|f| {
        f.l4 = L4::TcpAck;
        f.payload = vec![0; 1460 - 20]
    });
    g.run(case(
        "GUE over IPv6, too big once wrapped: ICMPv6 packet too big (MTU 1452)",
        gbig.bytes(),
        XDP_TX,
        Some(too_big6(&gbig.bytes(), 14, 1452)),
        Counter::ForwardIcmpTooBig,
    ));
}

/// DSR by MAC rewrite.
pub fn by_mac(g: &mut Golden) {
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
    g.run(c);
    g.run(case(
        "IPv6 dsr-l2 backend behind a gateway: drop",
        Frame6::tcp(CLIENT6, 43001, vip6(0x24), 80).bytes(),
        XDP_DROP,
        None,
        Counter::DropNotAdjacent,
    ));
}
