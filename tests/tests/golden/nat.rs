//! Golden cases of NAT VIPs: TCP (hash = ip) with its replies and ICMP errors, hash = flow,
//! a reused 5-tuple, UDP, and established flows across backend changes.
use lb_common::backend::BACKEND_NONE;
use lb_common::hash::{client_hash, flow_hash};
use lb_common::stats::Counter;
use lb_common::{ip_proto, ipv4_bytes, program_names};
use lb_ctl::dataplane::Dataplane;
use lb_ctl::dataplane::load::program;
use lb_tests::fixture::*;
use lb_tests::golden::*;
use lb_tests::packets::*;

use super::*;

/// NAT, TCP, hash = ip: a flow, its replies, ICMP errors about it, a tagged SYN.
pub fn tcp(g: &mut Golden, vips: &[Vip]) {
    let web = &vips[0];
    let syn = web_syn();
    let b = by_hash(web, client_hash(&ipv4_bytes(CLIENT), SEED));
    let mut c = case(
        "new TCP flow (SYN), NAT: rewritten to its backend, XDP_TX",
        syn.bytes(),
        XDP_TX,
        Some(nat_out(&syn, (CLIENT, 40000), b, LB_MAC, mac_of(b.0))),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::FlowNew];
    g.run(c);
    let ack = web_ack();
    let mut c = case(
        "established TCP flow (ACK + data): same backend",
        ack.bytes(),
        XDP_TX,
        Some(nat_out(&ack, (CLIENT, 40000), b, LB_MAC, mac_of(b.0))),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::FlowHit];
    g.run(c);
    let other_port = syn.with(|f| f.src_port = 40001);
    g.run(case(
        "hash=ip: another connection of the client, same backend",
        other_port.bytes(),
        XDP_TX,
        Some(nat_out(&other_port, (CLIENT, 40001), b, LB_MAC, mac_of(b.0))),
        Counter::ForwardTx,
    ));
    let reply = Frame::tcp(b.0, b.1, CLIENT, 40000).with(|f| {
        f.l4 = L4::TcpAck;
        f.src_mac = mac_of(b.0);
        f.payload = b"HTTP/1.1 200 OK\r\n\r\n".to_vec()
    });
    let mut c = case(
        "NAT reply from the backend: source back to the VIP, XDP_TX",
        reply.bytes(),
        XDP_TX,
        Some(nat_out(&reply, (VIP_WEB, 80), (CLIENT, 40000), LB_MAC, CLIENT_MAC)),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::NatReply];
    g.run(c);
    // ICMP errors about the flow, from a router on the client's path to the VIP: to its backend.
    let router = [192, 0, 2, 254];
    let sent = |from: ([u8; 4], u16)| {
        Frame::tcp(from.0, from.1, CLIENT, 40000).with(|f| {
            f.l4 = L4::TcpAck;
            f.payload = vec![0; 1460]
        })
    };
    let err_in = icmp_frag_needed((CLIENT_MAC, LB_MAC), router, VIP_WEB, 64, 1400, &sent((VIP_WEB, 80)));
    let mut c = case(
        "ICMP fragmentation needed about a NAT flow: to its backend, quote rewritten",
        err_in.clone(),
        XDP_TX,
        Some(icmp_frag_needed((LB_MAC, mac_of(b.0)), router, b.0, 63, 1400, &sent(b))),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::IcmpToBackend];
    g.run(c);
    // Without lb_icmp_errors in JUMPS, the error passes to the stack as it came, counted.
    let icmp_program = program(g.dp.ebpf_mut(), program_names::ICMP_ERRORS).unwrap().fd().unwrap().try_clone().unwrap();
    jumps(&mut g.dp).clear_index(&lb_common::jumps::ICMP_ERRORS).unwrap();
    g.run(case(
        "ICMP error about a NAT flow, lb_icmp_errors missing: pass untouched",
        err_in,
        XDP_PASS,
        None,
        Counter::PassJumpFailed,
    ));
    jumps(&mut g.dp).set(lb_common::jumps::ICMP_ERRORS, &icmp_program, 0).unwrap();
    let unknown =
        icmp_frag_needed((CLIENT_MAC, LB_MAC), router, VIP_WEB, 64, 1400, &Frame::tcp(VIP_WEB, 80, CLIENT, 39999));
    g.run(case("ICMP error about no known flow: pass untouched", unknown, XDP_PASS, None, Counter::PassNotVip));
    let not_vip_port =
        icmp_frag_needed((CLIENT_MAC, LB_MAC), router, VIP_WEB, 64, 1400, &Frame::tcp(VIP_WEB, 22, CLIENT, 40000));
    g.run(case(
        "ICMP error quoting a port no VIP uses: pass untouched",
        not_vip_port,
        XDP_PASS,
        None,
        Counter::PassNotVip,
    ));
    let last_hop = icmp_frag_needed((CLIENT_MAC, LB_MAC), router, VIP_WEB, 1, 1400, &sent((VIP_WEB, 80)));
    g.run(case(
        "ICMP error about a NAT flow, TTL 1: pass to the stack",
        last_hop,
        XDP_PASS,
        None,
        Counter::PassTtlExpired,
    ));
    let tagged = syn.with(|f| {
        f.vlan = Some(100);
        f.src_port = 40100
    });
    g.run(case(
        "802.1Q-tagged SYN, NAT: tag kept, rewritten",
        tagged.bytes(),
        XDP_TX,
        Some(nat_out(&tagged, (CLIENT, 40100), b, LB_MAC, mac_of(b.0))),
        Counter::ForwardTx,
    ));
}

/// hash = flow: two connections of one client on different backends; then a new connection
/// reusing a 5-tuple follows the ring, not the old entry.
pub fn flow_hash_and_reused_tuple(g: &mut Golden, vips: &[Vip]) {
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
        g.run(case(
            name,
            f.bytes(),
            XDP_TX,
            Some(nat_out(&f, (CLIENT, port), pick(port), LB_MAC, mac_of(pick(port).0))),
            Counter::ForwardTx,
        ));
    }

    // ---- A new connection reusing a 5-tuple follows the ring, not the old entry.
    let (old_backend, other_backend) = {
        let first = flow_vip.backends.iter().find(|(_, a, p)| (*a, *p) == pick(p1)).unwrap();
        let other = flow_vip.backends.iter().find(|(id, _, _)| *id != first.0).unwrap();
        (*first, *other)
    };
    g.dp.write_ring(8, &vec![other_backend.0; RING as usize]).unwrap(); // as if old_backend were drained
    let p1_ack = Frame::tcp(CLIENT, p1, flow_addr, 80).with(|f| f.l4 = L4::TcpAck);
    let mut c = case(
        "ring changed: established connection keeps its backend",
        p1_ack.bytes(),
        XDP_TX,
        Some(nat_out(&p1_ack, (CLIENT, p1), (old_backend.1, old_backend.2), LB_MAC, mac_of(old_backend.1))),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::FlowHit];
    g.run(c);
    let p1_syn = Frame::tcp(CLIENT, p1, flow_addr, 80);
    let mut c = case(
        "SYN reusing that 5-tuple: a new connection, placed by the ring",
        p1_syn.bytes(),
        XDP_TX,
        Some(nat_out(&p1_syn, (CLIENT, p1), (other_backend.1, other_backend.2), LB_MAC, mac_of(other_backend.1))),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::FlowNew];
    g.run(c);
}

/// NAT, UDP (hash = flow).
pub fn udp(g: &mut Golden, vips: &[Vip]) {
    let dns = &vips[1];
    let q = Frame::udp(CLIENT, 5000, VIP_WEB, 53);
    let ub = by_hash(
        dns,
        flow_hash(&ipv4_bytes(CLIENT), &ipv4_bytes(VIP_WEB), 5000u16.to_be(), 53u16.to_be(), ip_proto::UDP, SEED),
    );
    let mut c = case(
        "new UDP flow, NAT: rewritten, UDP checksum updated",
        q.bytes(),
        XDP_TX,
        Some(nat_out(&q, (CLIENT, 5000), ub, LB_MAC, mac_of(ub.0))),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::FlowNew];
    g.run(c);
    let mut c = case(
        "established UDP flow: same backend",
        q.bytes(),
        XDP_TX,
        Some(nat_out(&q, (CLIENT, 5000), ub, LB_MAC, mac_of(ub.0))),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::FlowHit];
    g.run(c);
    let q0 = q.with(|f| {
        f.l4 = L4::UdpNoChecksum;
        f.src_port = 5001
    });
    let ub0 = by_hash(
        dns,
        flow_hash(&ipv4_bytes(CLIENT), &ipv4_bytes(VIP_WEB), 5001u16.to_be(), 53u16.to_be(), ip_proto::UDP, SEED),
    );
    let mut want = q0.with(|f| {
        (f.dst, f.dst_port) = ub0;
        f.ttl -= 1;
        f.src_mac = LB_MAC;
        f.dst_mac = mac_of(ub0.0)
    });
    want.l4 = L4::UdpNoChecksum;
    g.run(case("UDP without checksum: stays without one", q0.bytes(), XDP_TX, Some(want.bytes()), Counter::ForwardTx));
    let ureply = Frame::udp(ub.0, ub.1, CLIENT, 5000).with(|f| f.src_mac = mac_of(ub.0));
    let mut c = case(
        "UDP NAT reply: source back to the VIP",
        ureply.bytes(),
        XDP_TX,
        Some(nat_out(&ureply, (VIP_WEB, 53), (CLIENT, 5000), LB_MAC, CLIENT_MAC)),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::NatReply];
    g.run(c);
}

/// Backend changes: established flows keep their backend unless it is gone.
pub fn backend_changes(g: &mut Golden, vips: &[Vip]) {
    let web = &vips[0];
    let b = by_hash(web, client_hash(&ipv4_bytes(CLIENT), SEED));
    let ack = web_ack();
    let (gone_id, _, _) = *web.backends.iter().find(|(_, a, p)| (*a, *p) == b).unwrap();
    let (other_id, oa, op) = *web.backends.iter().find(|(id, _, _)| *id != gone_id).unwrap();
    let mut ring = vec![other_id; RING as usize];
    g.dp.write_ring(0, &ring).unwrap();
    let mut c = case(
        "ring changed, backend still there: established flow stays",
        ack.bytes(),
        XDP_TX,
        Some(nat_out(&ack, (CLIENT, 40000), b, LB_MAC, mac_of(b.0))),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::FlowHit];
    g.run(c);
    g.dp.remove_backend(gone_id).unwrap();
    let mut c = case(
        "its backend removed: flow re-placed on the ring",
        ack.bytes(),
        XDP_TX,
        Some(nat_out(&ack, (CLIENT, 40000), (oa, op), LB_MAC, mac_of(oa))),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::FlowRerouted];
    g.run(c);
    let reply2 = Frame::tcp(oa, op, CLIENT, 40000).with(|f| {
        f.l4 = L4::TcpAck;
        f.src_mac = mac_of(oa)
    });
    let mut c = case(
        "reply from the new backend: rewritten to the VIP",
        reply2.bytes(),
        XDP_TX,
        Some(nat_out(&reply2, (VIP_WEB, 80), (CLIENT, 40000), LB_MAC, CLIENT_MAC)),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::NatReply];
    g.run(c);
    ring.fill(BACKEND_NONE);
    g.dp.write_ring(0, &ring).unwrap();
    g.dp.remove_backend(other_id).unwrap();
    g.run(case("every backend removed: established flow dropped", ack.bytes(), XDP_DROP, None, Counter::DropNoBackend));
}
