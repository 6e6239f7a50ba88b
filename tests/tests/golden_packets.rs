//! Golden packets: a table of frames run through the real lb_ingress program (and lb_decap)
//! with BPF_PROG_TEST_RUN and real maps, written by the real map writer. Each case states the
//! verdict, the exact output bytes (built independently with etherparse, checksums included)
//! and the counters that must move. Needs root; the FIB lookups resolve in a namespace this
//! test creates, with static neighbours so MAC addresses are known.

use aya::programs::Xdp;
use lb_common::backend::BACKEND_NONE;
use lb_common::config::DataplaneConfig;
use lb_common::config::port_flags;
use lb_common::flow::FLOW_WAYS;
use lb_common::flow::SharedFlow;
use lb_common::hash::{client_hash, flow_hash};
use lb_common::stats::{Counter, DecapCounter};
use lb_common::vip::VipInfo;
use lb_common::{ip_proto, ipv4_bytes, program_names};
use lb_ctl::dataplane::Dataplane;
use lb_ctl::dataplane::aya::AyaDataplane;
use lb_ctl::dataplane::load::{allow_decap_sources, load_decap, program};
use lb_tests::fixture::*;
use lb_tests::golden::*;
use lb_tests::netns::ifindex;
use lb_tests::packets::{Frame, L4, Mac, gue_frame, icmp_frag_needed, ipip, ipip_frame, patch_ipv4};
use lb_tests::privileges::require_root;
use lb_tests::testrun::{RunResult, action_name, run_xdp};

/// The expected answer to a frame too big for its next hop: ICMP "fragmentation needed" from the
/// address it was sent to, quoting its IPv4 header and 8 bytes, MACs swapped, tag kept.
fn frag_needed(frame: &[u8], l3: usize, mtu: u16) -> Vec<u8> {
    use etherparse::{Icmpv4Header, Icmpv4Type, IpNumber, Ipv4Header, icmpv4::DestUnreachableHeader};
    let quote = &frame[l3..l3 + 28];
    let (original, _) = Ipv4Header::from_slice(&frame[l3..]).unwrap();
    let icmp = Icmpv4Header::with_checksum(
        Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::FragmentationNeeded { next_hop_mtu: mtu }),
        quote,
    );
    let mut ip = Ipv4Header::new(36, 64, IpNumber::ICMP, original.destination, original.source).unwrap();
    ip.dont_fragment = false;
    ip.header_checksum = ip.calc_header_checksum();
    let mut out = frame[6..12].to_vec();
    out.extend_from_slice(&frame[..6]);
    out.extend_from_slice(&frame[12..l3]);
    out.extend_from_slice(&ip.to_bytes());
    out.extend_from_slice(&icmp.to_bytes());
    out.extend_from_slice(quote);
    out
}

#[test]
fn golden_packets_through_lb_ingress() {
    if !require_root("golden_packets_through_lb_ingress") {
        return;
    }
    let ns = lab();
    let _inside = ns.enter();
    let g0 = ifindex("g0");
    let mut dp = balancer();
    let vips = vips();
    let web = &vips[0];
    let vip_web = [203, 0, 113, 10];

    let mut results = Vec::new();
    let mut run = |dp: &mut AyaDataplane, c: Case| results.push((c.name, run_case(dp, g0, &c)));

    // Before CONFIG is written, VIP packets go to the stack untouched.
    dp.set_port_flags(80, port_flags::VIP_TCP).unwrap();
    dp.upsert_vip(vip_key(web), VipInfo { id: 0, ..Default::default() }).unwrap();
    let syn = Frame::tcp(CLIENT, 40000, vip_web, 80);
    run(
        &mut dp,
        case("VIP packet before configuration: pass", syn.bytes(), XDP_PASS, None, Counter::PassNotConfigured),
    );

    configure(&mut dp, &vips);

    // ---- Not for a VIP: passed untouched.
    run(
        &mut dp,
        case(
            "non-VIP TCP to the host (ssh): pass untouched",
            Frame::tcp(CLIENT, 40000, [192, 0, 2, 1], 22).bytes(),
            XDP_PASS,
            None,
            Counter::PassNotVip,
        ),
    );
    run(
        &mut dp,
        case(
            "VIP address, other port: pass untouched",
            Frame::tcp(CLIENT, 40000, vip_web, 443).bytes(),
            XDP_PASS,
            None,
            Counter::PassNotVip,
        ),
    );
    run(
        &mut dp,
        case(
            "VIP port, other address: pass untouched",
            Frame::tcp(CLIENT, 40000, [203, 0, 113, 98], 80).bytes(),
            XDP_PASS,
            None,
            Counter::PassNotVip,
        ),
    );
    run(
        &mut dp,
        case(
            "UDP to a TCP VIP's port: pass untouched",
            Frame::udp(CLIENT, 40000, vip_web, 80).bytes(),
            XDP_PASS,
            None,
            Counter::PassNotVip,
        ),
    );
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
    arp.extend_from_slice(&vip_web);
    run(&mut dp, case("ARP request for the VIP: pass untouched", arp, XDP_PASS, None, Counter::PassNotIp));
    let mut icmp = Vec::new();
    etherparse::PacketBuilder::ethernet2(CLIENT_MAC, LB_MAC)
        .ipv4(CLIENT, vip_web, 64)
        .icmpv4_echo_request(1, 1)
        .write(&mut icmp, b"ping")
        .unwrap();
    run(&mut dp, case("ICMP echo to the VIP address: pass untouched", icmp, XDP_PASS, None, Counter::PassNotVip));
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
    run(
        &mut dp,
        case(
            "IPv6 TCP to a VIP's port, no IPv6 VIP there: pass untouched",
            v6.clone(),
            XDP_PASS,
            None,
            Counter::PassNotVip,
        ),
    );
    // Without its program in JUMPS (a loader that did not fill it), IPv6 passes untouched.
    let v6_program = program(dp.ebpf_mut(), program_names::INGRESS_V6).unwrap().fd().unwrap().try_clone().unwrap();
    jumps(&mut dp).clear_index(&lb_common::jumps::IPV6).unwrap();
    run(&mut dp, case("IPv6 with lb_ingress_v6 missing: pass untouched", v6, XDP_PASS, None, Counter::PassJumpFailed));
    jumps(&mut dp).set(lb_common::jumps::IPV6, &v6_program, 0).unwrap();
    // ---- From a NAT backend's port with no reply entry: never out with the backend's address.
    let stray = Frame::tcp(B1, 8080, CLIENT, 1234).with(|f| {
        f.l4 = L4::TcpAck;
        f.src_mac = mac_of(B1)
    });
    run(
        &mut dp,
        case(
            "NAT backend (of two VIPs) to a client, no reply entry: drop, not leaked",
            stray.bytes(),
            XDP_DROP,
            None,
            Counter::DropReplyNoFlow,
        ),
    );
    let far_vip = vips[4].addr;
    let lone = Frame::tcp(B_FAR, 8080, CLIENT, 1234).with(|f| {
        f.l4 = L4::TcpAck;
        f.src_mac = mac_of(B_FAR)
    });
    let mut c = case(
        "NAT backend of one VIP to a client, no reply entry: that VIP's reply",
        lone.bytes(),
        XDP_TX,
        Some(nat_out(&lone, (far_vip, 80), (CLIENT, 1234), LB_MAC, CLIENT_MAC)),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::NatReplyByBackend];
    run(&mut dp, c);
    // ---- Connections opened straight to a NAT backend (not through a VIP) across the balancer:
    // their replies are not a VIP's, whatever an earlier VIP connection on the 4-tuple left.
    let direct_syn = Frame::tcp(CLIENT, 1234, B_FAR, 8080).with(|f| f.src_mac = CLIENT_MAC);
    let mut c = case(
        "SYN straight to a NAT backend (not via a VIP): pass untouched, marked direct",
        direct_syn.bytes(),
        XDP_PASS,
        None,
        Counter::PassNotVip,
    );
    c.events = vec![Counter::DirectToBackend];
    run(&mut dp, c);
    let mut c = case(
        "that backend's answer on the direct connection: pass untouched, not taken for its VIP's reply",
        lone.bytes(),
        XDP_PASS,
        None,
        Counter::PassNotVip,
    );
    c.unchanged = vec![Counter::NatReplyByBackend, Counter::NatReply];
    run(&mut dp, c);
    // A VIP connection on client port 1235, then a direct one on the same 4-tuple.
    let vip_syn = Frame::tcp(CLIENT, 1235, far_vip, 80).with(|f| f.src_mac = CLIENT_MAC);
    // B_FAR sits behind the other interface.
    let to_far = nat_out(&vip_syn, (CLIENT, 1235), (B_FAR, 8080), LB_MAC_H, mac_of(B_FAR));
    run(
        &mut dp,
        case(
            "VIP SYN (one-backend VIP)",
            vip_syn.bytes(),
            XDP_REDIRECT,
            Some(to_far.clone()),
            Counter::ForwardRedirect,
        ),
    );
    let far_reply = Frame::tcp(B_FAR, 8080, CLIENT, 1235).with(|f| {
        f.l4 = L4::TcpAck;
        f.src_mac = mac_of(B_FAR)
    });
    let as_vip = nat_out(&far_reply, (far_vip, 80), (CLIENT, 1235), LB_MAC, CLIENT_MAC);
    let mut c = case("its reply: from the VIP", far_reply.bytes(), XDP_TX, Some(as_vip.clone()), Counter::ForwardTx);
    c.events = vec![Counter::NatReply];
    run(&mut dp, c);
    let reuse_syn = Frame::tcp(CLIENT, 1235, B_FAR, 8080).with(|f| f.src_mac = CLIENT_MAC);
    let mut c = case(
        "a later SYN straight to the backend on that 4-tuple: pass untouched, marked direct",
        reuse_syn.bytes(),
        XDP_PASS,
        None,
        Counter::PassNotVip,
    );
    c.events = vec![Counter::DirectToBackend];
    run(&mut dp, c);
    let mut c = case(
        "the backend's answer on it: pass untouched despite the VIP connection's reply entry",
        far_reply.bytes(),
        XDP_PASS,
        None,
        Counter::PassNotVip,
    );
    c.unchanged = vec![Counter::NatReply];
    run(&mut dp, c);
    run(
        &mut dp,
        case(
            "a new VIP SYN on the 4-tuple again",
            vip_syn.bytes(),
            XDP_REDIRECT,
            Some(to_far),
            Counter::ForwardRedirect,
        ),
    );
    let mut c = case("whose reply is the VIP's again", far_reply.bytes(), XDP_TX, Some(as_vip), Counter::ForwardTx);
    c.events = vec![Counter::NatReply];
    run(&mut dp, c);
    let health = Frame::tcp(B1, 8080, LB_ADDR, 1234).with(|f| {
        f.l4 = L4::TcpAck;
        f.src_mac = mac_of(B1)
    });
    run(
        &mut dp,
        case(
            "NAT backend to this host (health-check answer): pass untouched",
            health.bytes(),
            XDP_PASS,
            None,
            Counter::PassNotVip,
        ),
    );
    let stranger = Frame::tcp([198, 51, 100, 77], 8080, CLIENT, 1234).with(|f| f.l4 = L4::TcpAck);
    run(
        &mut dp,
        case(
            "another host's packet from a NAT backend port: pass untouched",
            stranger.bytes(),
            XDP_PASS,
            None,
            Counter::PassNotVip,
        ),
    );

    // ---- Malformed, fragments, options: passed untouched, counted.
    let good = syn.bytes();
    run(
        &mut dp,
        case("Ethernet header only: pass (malformed)", good[..14].to_vec(), XDP_PASS, None, Counter::PassMalformed),
    );
    run(
        &mut dp,
        case("truncated IPv4 header: pass (malformed)", good[..24].to_vec(), XDP_PASS, None, Counter::PassMalformed),
    );
    run(
        &mut dp,
        case(
            "truncated TCP header: pass (malformed)",
            good[..14 + 20 + 10].to_vec(),
            XDP_PASS,
            None,
            Counter::PassMalformed,
        ),
    );
    let mut long = good.clone();
    long[16..18].copy_from_slice(&200u16.to_be_bytes());
    run(
        &mut dp,
        case("IPv4 total length beyond the frame: pass (malformed)", long, XDP_PASS, None, Counter::PassMalformed),
    );
    let mut v5 = good.clone();
    v5[14] = 0x55;
    run(&mut dp, case("IP version 5 in an IPv4 frame: pass (malformed)", v5, XDP_PASS, None, Counter::PassMalformed));
    let mf = patch_ipv4(&good, 14, |h| h.more_fragments = true);
    run(&mut dp, case("first fragment (MF) to the VIP: pass untouched", mf, XDP_PASS, None, Counter::PassFragment));
    let later = patch_ipv4(&good, 14, |h| h.fragment_offset = etherparse::IpFragOffset::try_new(100).unwrap());
    run(&mut dp, case("later fragment to the VIP: pass untouched", later, XDP_PASS, None, Counter::PassFragment));
    let opts = patch_ipv4(&good, 14, |h| h.options = etherparse::Ipv4Options::try_from(&[1u8, 1, 1, 0][..]).unwrap());
    run(&mut dp, case("IPv4 options to the VIP: pass untouched", opts, XDP_PASS, None, Counter::PassIpOptions));
    let ttl1 = syn.with(|f| f.ttl = 1);
    run(
        &mut dp,
        case("TTL 1 to a NAT VIP: pass to the stack (ICMP)", ttl1.bytes(), XDP_PASS, None, Counter::PassTtlExpired),
    );

    // ---- NAT, TCP, hash = ip.
    let b = by_hash(web, client_hash(&ipv4_bytes(CLIENT), SEED));
    let mut c = case(
        "new TCP flow (SYN), NAT: rewritten to its backend, XDP_TX",
        syn.bytes(),
        XDP_TX,
        Some(nat_out(&syn, (CLIENT, 40000), b, LB_MAC, mac_of(b.0))),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::FlowNew];
    run(&mut dp, c);
    let ack = syn.with(|f| {
        f.l4 = L4::TcpAck;
        f.payload = b"GET / HTTP/1.1\r\n\r\n".to_vec()
    });
    let mut c = case(
        "established TCP flow (ACK + data): same backend",
        ack.bytes(),
        XDP_TX,
        Some(nat_out(&ack, (CLIENT, 40000), b, LB_MAC, mac_of(b.0))),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::FlowHit];
    run(&mut dp, c);
    let other_port = syn.with(|f| f.src_port = 40001);
    run(
        &mut dp,
        case(
            "hash=ip: another connection of the client, same backend",
            other_port.bytes(),
            XDP_TX,
            Some(nat_out(&other_port, (CLIENT, 40001), b, LB_MAC, mac_of(b.0))),
            Counter::ForwardTx,
        ),
    );
    let reply = Frame::tcp(b.0, b.1, CLIENT, 40000).with(|f| {
        f.l4 = L4::TcpAck;
        f.src_mac = mac_of(b.0);
        f.payload = b"HTTP/1.1 200 OK\r\n\r\n".to_vec()
    });
    let mut c = case(
        "NAT reply from the backend: source back to the VIP, XDP_TX",
        reply.bytes(),
        XDP_TX,
        Some(nat_out(&reply, (vip_web, 80), (CLIENT, 40000), LB_MAC, CLIENT_MAC)),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::NatReply];
    run(&mut dp, c);
    // ICMP errors about the flow, from a router on the client's path to the VIP: to its backend.
    let router = [192, 0, 2, 254];
    let sent = |from: ([u8; 4], u16)| {
        Frame::tcp(from.0, from.1, CLIENT, 40000).with(|f| {
            f.l4 = L4::TcpAck;
            f.payload = vec![0; 1460]
        })
    };
    let err_in = icmp_frag_needed((CLIENT_MAC, LB_MAC), router, vip_web, 64, 1400, &sent((vip_web, 80)));
    let mut c = case(
        "ICMP fragmentation needed about a NAT flow: to its backend, quote rewritten",
        err_in.clone(),
        XDP_TX,
        Some(icmp_frag_needed((LB_MAC, mac_of(b.0)), router, b.0, 63, 1400, &sent(b))),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::IcmpToBackend];
    run(&mut dp, c);
    // Without lb_icmp_errors in JUMPS, the error passes to the stack as it came, counted.
    let icmp_program = program(dp.ebpf_mut(), program_names::ICMP_ERRORS).unwrap().fd().unwrap().try_clone().unwrap();
    jumps(&mut dp).clear_index(&lb_common::jumps::ICMP_ERRORS).unwrap();
    run(
        &mut dp,
        case(
            "ICMP error about a NAT flow, lb_icmp_errors missing: pass untouched",
            err_in,
            XDP_PASS,
            None,
            Counter::PassJumpFailed,
        ),
    );
    jumps(&mut dp).set(lb_common::jumps::ICMP_ERRORS, &icmp_program, 0).unwrap();
    let unknown =
        icmp_frag_needed((CLIENT_MAC, LB_MAC), router, vip_web, 64, 1400, &Frame::tcp(vip_web, 80, CLIENT, 39999));
    run(&mut dp, case("ICMP error about no known flow: pass untouched", unknown, XDP_PASS, None, Counter::PassNotVip));
    let not_vip_port =
        icmp_frag_needed((CLIENT_MAC, LB_MAC), router, vip_web, 64, 1400, &Frame::tcp(vip_web, 22, CLIENT, 40000));
    run(
        &mut dp,
        case(
            "ICMP error quoting a port no VIP uses: pass untouched",
            not_vip_port,
            XDP_PASS,
            None,
            Counter::PassNotVip,
        ),
    );
    let last_hop = icmp_frag_needed((CLIENT_MAC, LB_MAC), router, vip_web, 1, 1400, &sent((vip_web, 80)));
    run(
        &mut dp,
        case(
            "ICMP error about a NAT flow, TTL 1: pass to the stack",
            last_hop,
            XDP_PASS,
            None,
            Counter::PassTtlExpired,
        ),
    );
    let tagged = syn.with(|f| {
        f.vlan = Some(100);
        f.src_port = 40100
    });
    run(
        &mut dp,
        case(
            "802.1Q-tagged SYN, NAT: tag kept, rewritten",
            tagged.bytes(),
            XDP_TX,
            Some(nat_out(&tagged, (CLIENT, 40100), b, LB_MAC, mac_of(b.0))),
            Counter::ForwardTx,
        ),
    );

    // ---- hash = flow: two connections of one client that hash to different backends.
    let flow_vip = &vips[8];
    let flow_addr = flow_vip.addr;
    let pick = |port: u16| {
        by_hash(
            flow_vip,
            flow_hash(&ipv4_bytes(CLIENT), &ipv4_bytes(flow_addr), port.to_be(), 80u16.to_be(), ip_proto::TCP, SEED),
        )
    };
    let p1 = 41000u16;
    let p2 = (41001..42000).find(|p| pick(*p) != pick(p1)).expect("some port hashes elsewhere");
    for (name, port) in [("hash=flow: first connection", p1), ("hash=flow: second connection, other backend", p2)] {
        let f = Frame::tcp(CLIENT, port, flow_addr, 80);
        run(
            &mut dp,
            case(
                name,
                f.bytes(),
                XDP_TX,
                Some(nat_out(&f, (CLIENT, port), pick(port), LB_MAC, mac_of(pick(port).0))),
                Counter::ForwardTx,
            ),
        );
    }

    // ---- A new connection reusing a 5-tuple follows the ring, not the old entry.
    let (old_backend, other_backend) = {
        let first = flow_vip.backends.iter().find(|(_, a, p)| (*a, *p) == pick(p1)).unwrap();
        let other = flow_vip.backends.iter().find(|(id, _, _)| *id != first.0).unwrap();
        (*first, *other)
    };
    dp.write_ring(8, &vec![other_backend.0; RING as usize]).unwrap(); // as if old_backend were drained
    let p1_ack = Frame::tcp(CLIENT, p1, flow_addr, 80).with(|f| f.l4 = L4::TcpAck);
    let mut c = case(
        "ring changed: established connection keeps its backend",
        p1_ack.bytes(),
        XDP_TX,
        Some(nat_out(&p1_ack, (CLIENT, p1), (old_backend.1, old_backend.2), LB_MAC, mac_of(old_backend.1))),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::FlowHit];
    run(&mut dp, c);
    let p1_syn = Frame::tcp(CLIENT, p1, flow_addr, 80);
    let mut c = case(
        "SYN reusing that 5-tuple: a new connection, placed by the ring",
        p1_syn.bytes(),
        XDP_TX,
        Some(nat_out(&p1_syn, (CLIENT, p1), (other_backend.1, other_backend.2), LB_MAC, mac_of(other_backend.1))),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::FlowNew];
    run(&mut dp, c);

    // ---- NAT, UDP (hash = flow).
    let dns = &vips[1];
    let q = Frame::udp(CLIENT, 5000, vip_web, 53);
    let ub = by_hash(
        dns,
        flow_hash(&ipv4_bytes(CLIENT), &ipv4_bytes(vip_web), 5000u16.to_be(), 53u16.to_be(), ip_proto::UDP, SEED),
    );
    let mut c = case(
        "new UDP flow, NAT: rewritten, UDP checksum updated",
        q.bytes(),
        XDP_TX,
        Some(nat_out(&q, (CLIENT, 5000), ub, LB_MAC, mac_of(ub.0))),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::FlowNew];
    run(&mut dp, c);
    let mut c = case(
        "established UDP flow: same backend",
        q.bytes(),
        XDP_TX,
        Some(nat_out(&q, (CLIENT, 5000), ub, LB_MAC, mac_of(ub.0))),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::FlowHit];
    run(&mut dp, c);
    let q0 = q.with(|f| {
        f.l4 = L4::UdpNoChecksum;
        f.src_port = 5001
    });
    let ub0 = by_hash(
        dns,
        flow_hash(&ipv4_bytes(CLIENT), &ipv4_bytes(vip_web), 5001u16.to_be(), 53u16.to_be(), ip_proto::UDP, SEED),
    );
    let mut want = q0.with(|f| {
        (f.dst, f.dst_port) = ub0;
        f.ttl -= 1;
        f.src_mac = LB_MAC;
        f.dst_mac = mac_of(ub0.0)
    });
    want.l4 = L4::UdpNoChecksum;
    run(
        &mut dp,
        case("UDP without checksum: stays without one", q0.bytes(), XDP_TX, Some(want.bytes()), Counter::ForwardTx),
    );
    let ureply = Frame::udp(ub.0, ub.1, CLIENT, 5000).with(|f| f.src_mac = mac_of(ub.0));
    let mut c = case(
        "UDP NAT reply: source back to the VIP",
        ureply.bytes(),
        XDP_TX,
        Some(nat_out(&ureply, (vip_web, 53), (CLIENT, 5000), LB_MAC, CLIENT_MAC)),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::NatReply];
    run(&mut dp, c);

    // ---- DSR over IPIP.
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
    run(&mut dp, c);
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
    run(&mut dp, c);
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
    run(&mut dp, c);
    let dtag = dsyn.with(|f| {
        f.vlan = Some(42);
        f.src_port = 42001
    });
    run(
        &mut dp,
        case(
            "802.1Q-tagged SYN, DSR: tag kept in front of the outer header",
            dtag.bytes(),
            XDP_TX,
            Some(ipip(&dtag, LB_ADDR, B1, LB_MAC, mac_of(B1))),
            Counter::ForwardTx,
        ),
    );
    let big = dsyn.with(|f| {
        f.src_port = 42002;
        f.payload = vec![0; 1490 - 40]
    });
    run(
        &mut dp,
        case(
            "DSR packet too big once wrapped, DF set: ICMP fragmentation needed (MTU 1480)",
            big.bytes(),
            XDP_TX,
            Some(frag_needed(&big.bytes(), 14, 1480)),
            Counter::ForwardIcmpTooBig,
        ),
    );
    let big_tagged = big.with(|f| f.vlan = Some(42));
    run(
        &mut dp,
        case(
            "802.1Q DSR packet too big, DF set: ICMP back behind the same tag",
            big_tagged.bytes(),
            XDP_TX,
            Some(frag_needed(&big_tagged.bytes(), 18, 1480)),
            Counter::ForwardIcmpTooBig,
        ),
    );
    let big_no_df = patch_ipv4(&big.bytes(), 14, |h| h.dont_fragment = false);
    run(&mut dp, case("DSR packet too big once wrapped, no DF: drop", big_no_df, XDP_DROP, None, Counter::DropTooBig));

    // ---- DSR over GUE: outer IPv4 + UDP to port 6080, source port from the flow's hash.
    let gsyn = Frame::tcp(CLIENT, 44000, vips[11].addr, 80);
    let gport = lb_common::gue::source_port(dp.table_hash_of(&flow_key(CLIENT, vips[11].addr, 44000, 80)));
    let gue = |f: &Frame, port: u16| gue_frame(&f.bytes(), f.l3_offset(), (LB_ADDR, B1), port, LB_MAC, mac_of(B1));
    let mut c = case(
        "new flow, DSR over GUE: UDP to the backend, inner packet untouched",
        gsyn.bytes(),
        XDP_TX,
        Some(gue(&gsyn, gport)),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::FlowNew];
    run(&mut dp, c);
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
    run(&mut dp, c);
    let gtag = gack.with(|f| f.vlan = Some(42));
    run(
        &mut dp,
        case(
            "802.1Q GUE: tag kept in front of the outer headers",
            gtag.bytes(),
            XDP_TX,
            Some(gue(&gtag, gport)),
            Counter::ForwardTx,
        ),
    );
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
    run(&mut dp, c);
    let gbig = gack.with(|f| f.payload = vec![0; 1480 - 40]);
    run(
        &mut dp,
        case(
            "GUE packet too big once wrapped, DF set: ICMP fragmentation needed (MTU 1472)",
            gbig.bytes(),
            XDP_TX,
            Some(frag_needed(&gbig.bytes(), 14, 1472)),
            Counter::ForwardIcmpTooBig,
        ),
    );

    // ---- DSR by MAC rewrite: from the IP header on, the frame leaves as it came.
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
    run(&mut dp, c);
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
    run(&mut dp, c);
    let mut c = case(
        "established flow, DSR by MAC, no larger than the last: the cached next hop",
        lack.bytes(),
        XDP_TX,
        Some(to_mac(&lack.bytes(), mac_of(B1))),
        Counter::ForwardTx,
    );
    c.unchanged = vec![Counter::NexthopLookup];
    run(&mut dp, c);
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
    run(&mut dp, c);
    run(
        &mut dp,
        case(
            "DSR by MAC to a backend behind a gateway: drop (its MAC is not reachable)",
            Frame::tcp(CLIENT, 43001, vips[10].addr, 80).bytes(),
            XDP_DROP,
            None,
            Counter::DropNotAdjacent,
        ),
    );

    // ---- Next hop cases.
    let far = Frame::tcp(CLIENT, 43000, vips[4].addr, 80);
    run(
        &mut dp,
        case(
            "backend behind another interface: XDP_REDIRECT",
            far.bytes(),
            XDP_REDIRECT,
            Some(nat_out(&far, (CLIENT, 43000), (B_FAR, 8080), LB_MAC_H, mac_of(B_FAR))),
            Counter::ForwardRedirect,
        ),
    );
    let far2 = Frame::tcp(CLIENT2, 43005, vips[4].addr, 80);
    let mut c = case(
        "another client, same NAT backend: the cached next hop serves it",
        far2.bytes(),
        XDP_REDIRECT,
        Some(nat_out(&far2, (CLIENT2, 43005), (B_FAR, 8080), LB_MAC_H, mac_of(B_FAR))),
        Counter::ForwardRedirect,
    );
    c.unchanged = vec![Counter::NexthopLookup];
    run(&mut dp, c);
    // h0 (towards B_FAR) has MTU 1400.
    let far_big = far.with(|f| {
        f.src_port = 43010;
        f.payload = vec![0; 1450 - 40]
    });
    run(
        &mut dp,
        case(
            "NAT packet too big for the backend's path, DF set: ICMP fragmentation needed (MTU 1400)",
            far_big.bytes(),
            XDP_TX,
            Some(frag_needed(&far_big.bytes(), 14, 1400)),
            Counter::ForwardIcmpTooBig,
        ),
    );
    let far_big_no_df = patch_ipv4(&far_big.bytes(), 14, |h| h.dont_fragment = false);
    run(&mut dp, case("NAT packet too big, no DF: drop", far_big_no_df, XDP_DROP, None, Counter::DropTooBig));
    let nn = Frame::tcp(CLIENT, 43001, vips[5].addr, 80);
    let nn_out = nn
        .with(|f| {
            f.dst = B_NO_NEIGH;
            f.dst_port = 8080
        })
        .bytes();
    run(
        &mut dp,
        case(
            "NAT backend without neighbour entry: rewritten, to the stack",
            nn.bytes(),
            XDP_PASS,
            Some(nn_out),
            Counter::PassNoNeighbour,
        ),
    );
    let nnd = Frame::tcp(CLIENT, 43002, vips[6].addr, 80);
    run(
        &mut dp,
        case("DSR backend without neighbour entry: drop", nnd.bytes(), XDP_DROP, None, Counter::DropNoNeighbour),
    );
    let nr = Frame::tcp(CLIENT, 43003, vips[7].addr, 80);
    run(&mut dp, case("backend without a route: drop", nr.bytes(), XDP_DROP, None, Counter::DropNoRoute));
    run(
        &mut dp,
        case(
            "VIP with no backend: drop",
            Frame::tcp(CLIENT, 43004, vips[3].addr, 80).bytes(),
            XDP_DROP,
            None,
            Counter::DropNoBackend,
        ),
    );

    // ---- Backend changes: established flows keep their backend unless it is gone.
    let (gone_id, _, _) = *web.backends.iter().find(|(_, a, p)| (*a, *p) == b).unwrap();
    let (other_id, oa, op) = *web.backends.iter().find(|(id, _, _)| *id != gone_id).unwrap();
    let mut ring = vec![other_id; RING as usize];
    dp.write_ring(0, &ring).unwrap();
    let mut c = case(
        "ring changed, backend still there: established flow stays",
        ack.bytes(),
        XDP_TX,
        Some(nat_out(&ack, (CLIENT, 40000), b, LB_MAC, mac_of(b.0))),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::FlowHit];
    run(&mut dp, c);
    dp.remove_backend(gone_id).unwrap();
    let mut c = case(
        "its backend removed: flow re-placed on the ring",
        ack.bytes(),
        XDP_TX,
        Some(nat_out(&ack, (CLIENT, 40000), (oa, op), LB_MAC, mac_of(oa))),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::FlowRerouted];
    run(&mut dp, c);
    let reply2 = Frame::tcp(oa, op, CLIENT, 40000).with(|f| {
        f.l4 = L4::TcpAck;
        f.src_mac = mac_of(oa)
    });
    let mut c = case(
        "reply from the new backend: rewritten to the VIP",
        reply2.bytes(),
        XDP_TX,
        Some(nat_out(&reply2, (vip_web, 80), (CLIENT, 40000), LB_MAC, CLIENT_MAC)),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::NatReply];
    run(&mut dp, c);
    ring.fill(BACKEND_NONE);
    dp.write_ring(0, &ring).unwrap();
    dp.remove_backend(other_id).unwrap();
    run(
        &mut dp,
        case("every backend removed: established flow dropped", ack.bytes(), XDP_DROP, None, Counter::DropNoBackend),
    );

    // ---- Next-hop cache: a neighbour change is seen after the next generation, not before.
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
    run(
        &mut dp,
        case(
            "neighbour changed, same cache generation: cached MAC",
            d1.bytes(),
            XDP_TX,
            Some(ipip(&d1, LB_ADDR, B1, LB_MAC, mac_of(B1))),
            Counter::ForwardTx,
        ),
    );
    dp.refresh_next_hops().unwrap();
    let d2 = dsyn.with(|f| f.src_port = 42004);
    run(
        &mut dp,
        case(
            "after refresh_next_hops: the new MAC",
            d2.bytes(),
            XDP_TX,
            Some(ipip(&d2, LB_ADDR, B1, LB_MAC, moved_mac)),
            Counter::ForwardTx,
        ),
    );

    // Per-VIP and per-backend traffic were counted.
    let t = dp.vip_traffic(2).unwrap();
    assert_eq!(t.packets, 6, "DSR VIP forwarded 5 packets and an ICMP error");
    assert_eq!(dp.backend_traffic(4).unwrap().packets, 6, "DSR backend got 6 packets");

    let counted = counters(&dp);
    let missing: Vec<&str> = Counter::ALL
        .iter()
        .filter(|c| is_verdict(**c) && !UNREACHABLE_HERE.contains(c) && counted[c] == 0)
        .map(|c| c.name())
        .collect();
    assert!(missing.is_empty(), "verdicts no golden case exercised: {missing:?}");

    let failed: Vec<_> = results.iter().filter_map(|(n, r)| r.as_ref().err().map(|e| format!("{n}: {e}"))).collect();
    println!("{} golden cases, {} failed", results.len(), failed.len());
    assert!(results.len() >= 25);
    assert!(failed.is_empty(), "failed cases:\n{}", failed.join("\n"));
}

/// The connection table, on a balancer of its own (its random table seed must not put the
/// flows of other cases in the set under test): a full set gives its least recently used way
/// to a new flow.
#[test]
fn connection_table_set_evicts_its_least_recently_used_flow() {
    if !require_root("connection_table_set_evicts_its_least_recently_used_flow") {
        return;
    }
    let ns = lab();
    let _inside = ns.enter();
    let g0 = ifindex("g0");
    let mut dp = balancer();
    let vips = vips();
    configure(&mut dp, &vips);
    let flow_vip = &vips[8];
    let flow_addr = flow_vip.addr;
    let pick = |port: u16| {
        by_hash(
            flow_vip,
            flow_hash(&ipv4_bytes(CLIENT), &ipv4_bytes(flow_addr), port.to_be(), 80u16.to_be(), ip_proto::TCP, SEED),
        )
    };
    let set_of = |port: u16| dp.flow_set_of(&flow_key(CLIENT, flow_addr, port, 80));
    let same_set: Vec<u16> = (50000..=u16::MAX).filter(|p| set_of(*p) == set_of(50000)).take(FLOW_WAYS + 1).collect();
    let nat_flow = |port: u16, l4: L4| {
        let f = Frame::tcp(CLIENT, port, flow_addr, 80).with(|f| f.l4 = l4);
        let out = nat_out(&f, (CLIENT, port), pick(port), LB_MAC, mac_of(pick(port).0));
        (f, out)
    };
    let mut failed = Vec::new();
    let mut run = |dp: &mut AyaDataplane, c: Case| {
        if let Err(e) = run_case(dp, g0, &c) {
            failed.push(format!("{}: {e}", c.name));
        }
    };
    // Ways are stamped with the kernel tick (jiffies): 25 ms is several ticks at any HZ >= 100.
    let tick = || std::thread::sleep(std::time::Duration::from_millis(25));
    for (i, &port) in same_set[..FLOW_WAYS].iter().enumerate() {
        let (f, out) = nat_flow(port, L4::TcpSyn);
        let mut c = case(
            [
                "table: 1st flow of a set",
                "table: 2nd flow of the set",
                "table: 3rd flow of the set",
                "table: 4th flow, the set is full",
            ][i],
            f.bytes(),
            XDP_TX,
            Some(out),
            Counter::ForwardTx,
        );
        c.events = vec![Counter::FlowNew];
        run(&mut dp, c);
        tick();
    }
    let (f, out) = nat_flow(same_set[0], L4::TcpAck);
    let mut c =
        case("table: the 1st flow sends again (now the most recent)", f.bytes(), XDP_TX, Some(out), Counter::ForwardTx);
    c.events = vec![Counter::FlowHit];
    run(&mut dp, c);
    tick();
    let (f, out) = nat_flow(same_set[FLOW_WAYS], L4::TcpSyn);
    let mut c = case(
        "table: a 5th flow evicts the least recently used (2nd)",
        f.bytes(),
        XDP_TX,
        Some(out),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::FlowTableFull];
    run(&mut dp, c);
    assert!(failed.is_empty(), "failed cases:\n{}", failed.join("\n"));
    let recorded = |port: u16| dp.lookup_flow(&flow_key(CLIENT, flow_addr, port, 80)).unwrap().is_some();
    let kept: Vec<bool> = same_set.iter().map(|p| recorded(*p)).collect();
    assert_eq!(kept, [true, false, true, true, true], "ways after the eviction, ports {same_set:?}");
}

#[test]
fn golden_packets_through_lb_decap() {
    if !require_root("golden_packets_through_lb_decap") {
        return;
    }
    let mut ebpf = load_decap().unwrap();
    allow_decap_sources(&mut ebpf, &["198.51.100.0/28".parse().unwrap()]).unwrap();
    let inner = Frame::tcp(CLIENT, 40000, [203, 0, 113, 20], 80).with(|f| f.payload = b"hello".to_vec());
    let wrapped = ipip(&inner, LB_ADDR, B1, LB_MAC, mac_of(B1));
    // After decapsulation: the backend's frame addresses, the client's datagram.
    let mut want = wrapped[..12].to_vec();
    want.extend_from_slice(&[0x08, 0x00]);
    want.extend_from_slice(&inner.bytes()[14..]);
    let tagged = inner.with(|f| f.vlan = Some(7));
    let wrapped_tagged = ipip(&tagged, LB_ADDR, B1, LB_MAC, mac_of(B1));
    let mut want_tagged = wrapped_tagged[..18].to_vec();
    want_tagged.extend_from_slice(&tagged.bytes()[18..]);
    let stranger = ipip(&inner, [198, 51, 100, 77], B1, LB_MAC, mac_of(B1));
    let gue =
        |f: &Frame, from: [u8; 4], port| gue_frame(&f.bytes(), f.l3_offset(), (from, B1), port, LB_MAC, mac_of(B1));
    let gue_wrapped = gue(&inner, LB_ADDR, 50000);
    let gue_tagged = gue(&tagged, LB_ADDR, 50000);
    let gue_stranger = gue(&inner, [198, 51, 100, 77], 50000);
    // UDP to another port from an allowed source: not ours to open.
    let mut other_port = gue_wrapped.clone();
    other_port[36..38].copy_from_slice(&6081u16.to_be_bytes());
    let (want_gue, want_gue_tagged) = (want.clone(), want_tagged.clone());
    let mut short = wrapped[..14 + 20 + 8].to_vec();
    short[16..18].copy_from_slice(&28u16.to_be_bytes());

    let cases: Vec<DecapCase> = vec![
        ("IPIP: outer header removed", wrapped.clone(), want, DecapCounter::Decapsulated),
        ("802.1Q IPIP: outer header removed, tag kept", wrapped_tagged, want_tagged, DecapCounter::Decapsulated),
        ("plain TCP: untouched", inner.bytes(), inner.bytes(), DecapCounter::Passed),
        ("IPIP too short for an inner header: untouched", short.clone(), short, DecapCounter::Malformed),
        ("IPIP from outside the allowed sources: untouched", stranger.clone(), stranger, DecapCounter::Refused),
        ("GUE: outer IPv4 and UDP headers removed", gue_wrapped, want_gue, DecapCounter::Decapsulated),
        ("802.1Q GUE: outer headers removed, tag kept", gue_tagged, want_gue_tagged, DecapCounter::Decapsulated),
        ("GUE from outside the allowed sources: untouched", gue_stranger.clone(), gue_stranger, DecapCounter::Refused),
        ("UDP to another port: untouched", other_port.clone(), other_port, DecapCounter::Passed),
    ];
    run_decap_cases(&mut ebpf, &cases);
}

/// Flow sharing: with `share_flows` on, each flow the program records is reported on
/// FLOW_EVENTS (key, backend id, VIP id), and a flow recorded from a peer
/// (`record_shared_flows`) is followed even where this node's ring would choose otherwise.
#[test]
fn flows_are_reported_for_sharing_and_shared_flows_are_followed() {
    if !require_root("flows_are_reported_for_sharing_and_shared_flows_are_followed") {
        return;
    }
    let ns = lab();
    let _inside = ns.enter();
    let g0 = ifindex("g0");
    let mut dp = balancer();
    let vips = vips();
    configure(&mut dp, &vips);
    let two = &vips[12];
    let mut events = dp.take_flow_events().expect("FLOW_EVENTS");
    let ingress = |dp: &mut AyaDataplane, frame: &Frame| {
        let prog: &Xdp = program(dp.ebpf_mut(), program_names::INGRESS).unwrap();
        run_xdp(prog, &frame.bytes(), g0)
    };

    // Off (the default): nothing reported.
    ingress(&mut dp, &Frame::tcp(CLIENT, 41000, two.addr, 80));
    assert!(events.next().is_none(), "no events while sharing is off");
    let on = DataplaneConfig {
        ring_size: RING,
        hash_seed: SEED,
        nexthop_generation: 1,
        share_flows: 1,
        ..Default::default()
    };
    dp.set_config(on).unwrap();
    let syn = Frame::tcp(CLIENT, 41001, two.addr, 80);
    assert_eq!(ingress(&mut dp, &syn).action, XDP_TX);
    let item = events.next().expect("the recorded flow is reported");
    // SAFETY: the program writes whole SharedFlow records.
    let event: SharedFlow = unsafe { std::ptr::read_unaligned(item.as_ptr().cast()) };
    drop(item);
    let chosen = by_hash(two, client_hash(&ipv4_bytes(CLIENT), SEED)).0;
    let chosen_id = if chosen == B1 { 14 } else { 15 };
    assert_eq!(event, SharedFlow { key: flow_key(CLIENT, two.addr, 41001, 80), backend_id: chosen_id, vip_id: 12 });
    // An established packet of a known flow records nothing new.
    ingress(&mut dp, &syn.with(|f| f.l4 = L4::TcpAck));
    assert!(events.next().is_none(), "only recorded flows are reported");

    // A peer placed this client's flow on the other backend: the entry wins over the ring.
    let (other, other_id) = if chosen == B1 { (B2, 15) } else { (B1, 14) };
    let shared = SharedFlow { key: flow_key(CLIENT, two.addr, 41002, 80), backend_id: other_id, vip_id: 12 };
    assert_eq!(dp.record_shared_flows(&[shared]).unwrap(), 1);
    assert_eq!(dp.record_shared_flows(&[shared]).unwrap(), 0, "a flow the table holds keeps its entry");
    let ack = Frame::tcp(CLIENT, 41002, two.addr, 80).with(|f| f.l4 = L4::TcpAck);
    let r = ingress(&mut dp, &ack);
    assert_eq!(r.action, XDP_TX);
    assert_eq!(r.output, ipip(&ack, LB_ADDR, other, LB_MAC, mac_of(other)), "sent to the shared flow's backend");
    assert!(events.next().is_none(), "a shared flow is not reported again (no echo between peers)");
}

/// Mutated frames (a fixed-seed generator: truncations, flipped bytes, random lengths, based
/// on every kind of valid frame above) never abort, are always counted under exactly one
/// verdict, and whatever is passed to the stack without being a rewritten VIP packet is
/// passed byte for byte as it came.
#[test]
fn mutated_frames_get_a_defined_counted_verdict() {
    if !require_root("mutated_frames_get_a_defined_counted_verdict") {
        return;
    }
    let ns = lab();
    let _inside = ns.enter();
    let g0 = ifindex("g0");
    let mut dp = balancer();
    let vips = vips();
    configure(&mut dp, &vips);
    let web = vips[0].addr;
    let seeds: Vec<Vec<u8>> = vec![
        Frame::tcp(CLIENT, 40000, web, 80).bytes(),
        Frame::tcp(CLIENT, 40000, web, 80).with(|f| f.vlan = Some(9)).bytes(),
        Frame::udp(CLIENT, 5000, web, 53).bytes(),
        Frame::tcp(CLIENT, 42000, vips[2].addr, 80).bytes(),
        Frame::tcp(B1, 8080, CLIENT, 40000).with(|f| f.l4 = L4::TcpAck).bytes(),
        Frame::tcp(CLIENT, 40000, [192, 0, 2, 1], 22).bytes(),
    ];
    // xorshift64*: deterministic, so a failure reproduces.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    let prog = program(dp.ebpf_mut(), program_names::INGRESS).unwrap() as *const Xdp;
    let mut by_action = [0u32; 5];
    for round in 0..3000 {
        let mut frame = seeds[round % seeds.len()].clone();
        match next() % 4 {
            0 => frame.truncate(14 + (next() as usize % (frame.len() - 13))),
            1 => {
                for _ in 0..1 + next() % 4 {
                    let at = 12 + next() as usize % (frame.len() - 12);
                    frame[at] ^= 1 << (next() % 8);
                }
            }
            2 => frame.extend((0..next() % 64).map(|_| next() as u8)),
            _ => {
                let at = 14 + next() as usize % 24;
                if at < frame.len() {
                    frame[at] = next() as u8;
                }
            }
        }
        let before = counters(&dp);
        // SAFETY: the program lives in dp, which outlives this loop and is not moved.
        let RunResult { action, output } = run_xdp(unsafe { &*prog }, &frame, g0);
        let after = counters(&dp);
        assert!(
            (1..=4).contains(&action),
            "round {round}: verdict {action} ({}) for {}",
            action_name(action),
            hex(&frame)
        );
        by_action[action as usize] += 1;
        let moved: Vec<Counter> =
            Counter::ALL.iter().copied().filter(|c| is_verdict(*c) && after[c] != before[c]).collect();
        assert_eq!(moved.len(), 1, "round {round}: verdict counters moved: {moved:?} for {}", hex(&frame));
        let rewritten_to_stack = moved[0] == Counter::PassNoNeighbour;
        if action == XDP_PASS && !rewritten_to_stack {
            assert_eq!(output, frame, "round {round}: passed frame altered ({:?})", moved[0]);
        }
    }
    println!(
        "3000 mutated frames: drop {}, pass {}, tx {}, redirect {}",
        by_action[1], by_action[2], by_action[3], by_action[4]
    );
}

/// COUNTERS pinned by an older build (an upgrade's restart keeps the pinned maps) holds fewer
/// counters than this build names: reading them must still work, the newer ones as 0.
#[test]
fn counters_of_an_older_pinned_map_read_as_zero() {
    if !require_root("counters_of_an_older_pinned_map_read_as_zero") {
        return;
    }
    let older = Counter::COUNT - 1;
    let ebpf = aya::EbpfLoader::new()
        .map_max_entries(lb_common::map_names::COUNTERS, older)
        .load(lb_ctl::dataplane::objects::INGRESS)
        .unwrap();
    let dp = AyaDataplane::new(ebpf, RING);
    let counters = dp.counters().expect("counters of a smaller map");
    assert_eq!(counters.len(), Counter::ALL.len());
    assert!(counters.iter().all(|(_, n)| *n == 0), "{counters:?}");
    let per_cpu = dp.counters_per_cpu().expect("per-CPU counters of a smaller map");
    assert!(per_cpu.iter().all(|cpu| cpu.len() == Counter::ALL.len()), "{per_cpu:?}");
}
