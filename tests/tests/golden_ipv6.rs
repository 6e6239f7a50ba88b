//! Golden packets for IPv6: frames run through the real lb_ingress (which hands IPv6 to
//! lb_ingress_v6, ICMP errors to lb_icmp_errors, IPv6 packets too big to lb_too_big6) and lb_decap
//! with BPF_PROG_TEST_RUN and real maps written by the real map writer. Each case states the
//! verdict, the exact output (built independently with etherparse, checksums included) and the
//! counters that must move. Needs root; the FIB lookups resolve in a namespace made here.

use lb_common::stats::DecapCounter;
use lb_ctl::dataplane::load::{allow_decap_sources, load_decap};
use lb_tests::fixture::{B1, LB_ADDR, LB_MAC, balancer};
use lb_tests::fixture6::*;
use lb_tests::golden::*;
use lb_tests::netns::ifindex;
use lb_tests::packets::Frame;
use lb_tests::privileges::require_root;

mod golden6;

#[test]
fn ipv6_golden_packets_through_lb_ingress() {
    if !require_root("ipv6_golden_packets_through_lb_ingress") {
        return;
    }
    let ns = lab6();
    let _inside = ns.enter();
    let mut g = Golden { dp: balancer(), ingress: ifindex("g0"), results: Vec::new() };
    let vips = vips6();
    configure6(&mut g.dp, &vips);

    golden6::not_vip::not_for_a_vip(&mut g);
    golden6::nat::nat66(&mut g, &vips);
    golden6::nat::extension_headers(&mut g, &vips);
    golden6::dsr::ip_in_ip(&mut g);
    golden6::dsr::gue(&mut g);
    golden6::dsr::by_mac(&mut g);
    golden6::nat::too_big(&mut g);
    golden6::icmp::errors_about_flows(&mut g, &vips);
    golden6::icmp::errors_to_clients(&mut g, &vips);

    let failed = g.failures();
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
