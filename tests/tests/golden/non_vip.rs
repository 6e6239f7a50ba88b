//! Golden cases that are not the balancer's to touch: packets before configuration, traffic
//! for no VIP (the host's own, ARP, ICMP, IPv6 with no IPv6 VIP), and malformed, fragmented
//! or optioned IPv4. Each passes untouched, counted under its reason.
use lb_common::config::port_flags;
use lb_common::program_names;
use lb_common::stats::Counter;
use lb_common::vip::VipInfo;
use lb_ctl::dataplane::Dataplane;
use lb_ctl::dataplane::load::program;
use lb_tests::fixture::*;
use lb_tests::golden::*;
use lb_tests::packets::*;

use super::*;

/// Before CONFIG is written, VIP packets go to the stack untouched.
pub fn before_configuration(g: &mut Golden, vips: &[Vip]) {
    let web = &vips[0];
    g.dp.set_port_flags(80, port_flags::VIP_TCP).unwrap();
    g.dp.upsert_vip(vip_key(web), VipInfo { id: 0, ..Default::default() }).unwrap();
    let syn = Frame::tcp(CLIENT, 40000, VIP_WEB, 80);
    g.run(case("VIP packet before configuration: pass", syn.bytes(), XDP_PASS, None, Counter::PassNotConfigured));
}

/// Not for a VIP: passed untouched.
pub fn not_for_a_vip(g: &mut Golden) {
    g.run(case(
        "non-VIP TCP to the host (ssh): pass untouched",
        Frame::tcp(CLIENT, 40000, [192, 0, 2, 1], 22).bytes(),
        XDP_PASS,
        None,
        Counter::PassNotVip,
    ));
    g.run(case(
        "VIP address, other port: pass untouched",
        Frame::tcp(CLIENT, 40000, VIP_WEB, 443).bytes(),
        XDP_PASS,
        None,
        Counter::PassNotVip,
    ));
    g.run(case(
        "VIP port, other address: pass untouched",
        Frame::tcp(CLIENT, 40000, [203, 0, 113, 98], 80).bytes(),
        XDP_PASS,
        None,
        Counter::PassNotVip,
    ));
    g.run(case(
        "UDP to a TCP VIP's port: pass untouched",
        Frame::udp(CLIENT, 40000, VIP_WEB, 80).bytes(),
        XDP_PASS,
        None,
        Counter::PassNotVip,
    ));
    // ARP request "who has the VIP": Ethernet + the 28-byte ARP body.
    let mut arp = etherparse::Ethernet2Header {
        source: CLIENT_MAC,
        destination: [0xff; 6],
        ether_type: etherparse::EtherType::ARP,
    }
    .to_bytes()
    .to_vec();
    arp.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
    arp.extend_from_slice(&CLIENT_MAC);
    arp.extend_from_slice(&CLIENT);
    arp.extend_from_slice(&[0; 6]);
    arp.extend_from_slice(&VIP_WEB);
    g.run(case("ARP request for the VIP: pass untouched", arp, XDP_PASS, None, Counter::PassNotIp));
    let mut icmp = Vec::new();
    etherparse::PacketBuilder::ethernet2(CLIENT_MAC, LB_MAC)
        .ipv4(CLIENT, VIP_WEB, 64)
        .icmpv4_echo_request(1, 1)
        .write(&mut icmp, b"ping")
        .unwrap();
    g.run(case("ICMP echo to the VIP address: pass untouched", icmp, XDP_PASS, None, Counter::PassNotVip));
    let mut v6 = Vec::new();
    etherparse::PacketBuilder::ethernet2(CLIENT_MAC, LB_MAC)
        .ipv6(
            [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7],
            [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10],
            64,
        )
        .tcp(40000, 80, 1, 100)
        .syn()
        .write(&mut v6, &[])
        .unwrap();
    g.run(case(
        "IPv6 TCP to a VIP's port, no IPv6 VIP there: pass untouched",
        v6.clone(),
        XDP_PASS,
        None,
        Counter::PassNotVip,
    ));
    // Without its program in JUMPS (a loader that did not fill it), IPv6 passes untouched.
    let v6_program = program(g.dp.ebpf_mut(), program_names::INGRESS_V6).unwrap().fd().unwrap().try_clone().unwrap();
    jumps(&mut g.dp).clear_index(&lb_common::jumps::IPV6).unwrap();
    g.run(case("IPv6 with lb_ingress_v6 missing: pass untouched", v6, XDP_PASS, None, Counter::PassJumpFailed));
    jumps(&mut g.dp).set(lb_common::jumps::IPV6, &v6_program, 0).unwrap();
}

/// Malformed, fragments, options: passed untouched, counted.
pub fn malformed(g: &mut Golden) {
    let syn = web_syn();
    let good = syn.bytes();
    g.run(case("Ethernet header only: pass (malformed)", good[..14].to_vec(), XDP_PASS, None, Counter::PassMalformed));
    g.run(case("truncated IPv4 header: pass (malformed)", good[..24].to_vec(), XDP_PASS, None, Counter::PassMalformed));
    g.run(case(
        "truncated TCP header: pass (malformed)",
        good[..14 + 20 + 10].to_vec(),
        XDP_PASS,
        None,
        Counter::PassMalformed,
    ));
    let mut long = good.clone();
    long[16..18].copy_from_slice(&200u16.to_be_bytes());
    g.run(case("IPv4 total length beyond the frame: pass (malformed)", long, XDP_PASS, None, Counter::PassMalformed));
    let mut v5 = good.clone();
    v5[14] = 0x55;
    g.run(case("IP version 5 in an IPv4 frame: pass (malformed)", v5, XDP_PASS, None, Counter::PassMalformed));
    let mf = patch_ipv4(&good, 14, |h| h.more_fragments = true);
    g.run(case("first fragment (MF) to the VIP: pass untouched", mf, XDP_PASS, None, Counter::PassFragment));
    let later = patch_ipv4(&good, 14, |h| h.fragment_offset = etherparse::IpFragOffset::try_new(100).unwrap());
    g.run(case("later fragment to the VIP: pass untouched", later, XDP_PASS, None, Counter::PassFragment));
    let opts = patch_ipv4(&good, 14, |h| h.options = etherparse::Ipv4Options::try_from(&[1u8, 1, 1, 0][..]).unwrap());
    g.run(case("IPv4 options to the VIP: pass untouched", opts, XDP_PASS, None, Counter::PassIpOptions));
    let ttl1 = syn.with(|f| f.ttl = 1);
    g.run(case("TTL 1 to a NAT VIP: pass to the stack (ICMP)", ttl1.bytes(), XDP_PASS, None, Counter::PassTtlExpired));
}

/// Traffic for no VIP that lb_ingress's first check (an untagged, whole IPv4 TCP/UDP datagram
/// with room for a TCP header, ports no VIP or NAT backend uses) does not decide: the whole
/// parse gives each its own verdict, as to a VIP's port (`malformed`), never `pass_not_vip`
/// for a malformed frame or a balanced one for a frame that is not a VIP's.
pub fn not_decided_by_the_first_check(g: &mut Golden) {
    let ssh = Frame::tcp(CLIENT, 40000, [192, 0, 2, 1], 22);
    let good = ssh.bytes();
    let mut long = good.clone();
    long[16..18].copy_from_slice(&200u16.to_be_bytes());
    g.run(case(
        "non-VIP, total length beyond the frame: pass (malformed)",
        long,
        XDP_PASS,
        None,
        Counter::PassMalformed,
    ));
    let mut short = good.clone();
    short[16..18].copy_from_slice(&30u16.to_be_bytes());
    g.run(case("non-VIP, total length short of TCP: pass (malformed)", short, XDP_PASS, None, Counter::PassMalformed));
    let mut v5 = good.clone();
    v5[14] = 0x55;
    g.run(case("non-VIP, IP version 5: pass (malformed)", v5, XDP_PASS, None, Counter::PassMalformed));
    let mf = patch_ipv4(&good, 14, |h| h.more_fragments = true);
    g.run(case("non-VIP first fragment: pass untouched", mf, XDP_PASS, None, Counter::PassFragment));
    let opts = patch_ipv4(&good, 14, |h| h.options = etherparse::Ipv4Options::try_from(&[1u8, 1, 1, 0][..]).unwrap());
    g.run(case("non-VIP with IPv4 options: pass untouched", opts, XDP_PASS, None, Counter::PassIpOptions));
    let tagged = ssh.with(|f| f.vlan = Some(7)).bytes();
    g.run(case("non-VIP behind an 802.1Q tag: pass untouched", tagged, XDP_PASS, None, Counter::PassNotVip));
    // 14 + 20 + 8 bytes: shorter than the first check's window, decided by the whole parse.
    let tiny = Frame::udp(CLIENT, 40000, [192, 0, 2, 1], 53).with(|f| f.payload.clear()).bytes();
    assert_eq!(tiny.len(), 42);
    g.run(case("non-VIP UDP datagram in a 42-byte frame: pass untouched", tiny, XDP_PASS, None, Counter::PassNotVip));
}
