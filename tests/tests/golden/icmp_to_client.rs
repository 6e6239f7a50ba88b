//! Golden cases of ICMP errors about NAT flows' packets to their backends (client → backend):
//! sent to the client as if about the packet the client sent, the backend replaced by the VIP;
//! never sent on naming the backend. Run after `nat::tcp` and `nat::udp` (their flows) and
//! `reply::from_nat_backend_ports` (its direct connection).
use etherparse::Icmpv4Type;
use etherparse::icmpv4::{DestUnreachableHeader, TimeExceededCode};
use lb_common::hash::{client_hash, flow_hash};
use lb_common::stats::Counter;
use lb_common::{ip_proto, ipv4_bytes};
use lb_tests::fixture::*;
use lb_tests::golden::*;
use lb_tests::packets::*;

use super::*;

const PORT_UNREACHABLE: Icmpv4Type = Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::Port);

pub fn errors_to_clients(g: &mut Golden, vips: &[Vip]) {
    // ---- UDP (hash = flow): the backend's "port unreachable" about the client's datagram.
    let dns = &vips[1];
    let flow = |port: u16| {
        by_hash(
            dns,
            flow_hash(&ipv4_bytes(CLIENT), &ipv4_bytes(VIP_WEB), port.to_be(), 53u16.to_be(), ip_proto::UDP, SEED),
        )
    };
    let ub = flow(5000);
    let as_sent = Frame::udp(CLIENT, 5000, ub.0, ub.1).with(|f| f.ttl = 63);
    let as_client_sent = Frame::udp(CLIENT, 5000, VIP_WEB, 53).with(|f| f.ttl = 63);
    let err = icmp_error((mac_of(ub.0), LB_MAC), (ub.0, CLIENT, 64), PORT_UNREACHABLE, &as_sent);
    let want = icmp_error((LB_MAC, CLIENT_MAC), (VIP_WEB, CLIENT, 63), PORT_UNREACHABLE, &as_client_sent);
    sent_to_client(
        g,
        "UDP NAT backend's port unreachable: to the client from the VIP, quote (and its UDP checksum) as the client sent it",
        err,
        want,
    );
    // The datagram of `nat::udp` that had no UDP checksum: its quote keeps none.
    let ub0 = flow(5001);
    let bare = |dst: ([u8; 4], u16)| {
        let mut f = Frame::udp(CLIENT, 5001, dst.0, dst.1).with(|f| f.ttl = 63);
        f.l4 = L4::UdpNoChecksum;
        f
    };
    let err = icmp_error((mac_of(ub0.0), LB_MAC), (ub0.0, CLIENT, 64), PORT_UNREACHABLE, &bare(ub0));
    let want = icmp_error((LB_MAC, CLIENT_MAC), (VIP_WEB, CLIENT, 63), PORT_UNREACHABLE, &bare((VIP_WEB, 53)));
    sent_to_client(
        g,
        "port unreachable quoting UDP without a checksum: to the client, the quote keeps none",
        err,
        want,
    );
    // The other way, for the same flow: the client's port unreachable about the VIP's reply goes
    // to the backend with the quote's UDP checksum rewritten too.
    let reply_as_sent = Frame::udp(VIP_WEB, 53, CLIENT, 5000).with(|f| f.ttl = 63);
    let reply_as_backend_sent = Frame::udp(ub.0, ub.1, CLIENT, 5000).with(|f| f.ttl = 63);
    let err = icmp_error((CLIENT_MAC, LB_MAC), (CLIENT, VIP_WEB, 64), PORT_UNREACHABLE, &reply_as_sent);
    let want = icmp_error((LB_MAC, mac_of(ub.0)), (CLIENT, ub.0, 63), PORT_UNREACHABLE, &reply_as_backend_sent);
    let mut c = case(
        "client's port unreachable about a UDP NAT reply: to the backend, the quote's UDP checksum rewritten",
        err,
        XDP_TX,
        Some(want),
        Counter::ForwardTx,
    );
    c.events = vec![Counter::IcmpToBackend];
    g.run(c);

    // ---- TCP (hash = ip): a router between the balancer and the backend.
    let web = &vips[0];
    let b = by_hash(web, client_hash(&ipv4_bytes(CLIENT), SEED));
    let router = [198, 51, 100, 254];
    let segment = |dst: ([u8; 4], u16)| {
        Frame::tcp(CLIENT, 40000, dst.0, dst.1).with(|f| {
            f.l4 = L4::TcpAck;
            f.ttl = 62;
            f.payload = vec![0; 1460]
        })
    };
    let err = icmp_frag_needed((mac_of(b.0), LB_MAC), router, CLIENT, 64, 1400, &segment(b));
    let want = icmp_frag_needed((LB_MAC, CLIENT_MAC), router, CLIENT, 63, 1400, &segment((VIP_WEB, 80)));
    sent_to_client(
        g,
        "router's fragmentation needed about a NAT flow's segment to its backend: to the client, quote as it sent it",
        err,
        want,
    );
    let expired = Icmpv4Type::TimeExceeded(TimeExceededCode::TtlExceededInTransit);
    let err = icmp_error((mac_of(b.0), LB_MAC), (router, CLIENT, 64), expired.clone(), &segment(b));
    let want = icmp_error((LB_MAC, CLIENT_MAC), (router, CLIENT, 63), expired, &segment((VIP_WEB, 80)));
    sent_to_client(
        g,
        "router's time exceeded about a NAT flow's segment (traceroute through the VIP): to the client, quote as it sent it",
        err,
        want,
    );
    let last_hop = icmp_frag_needed((mac_of(b.0), LB_MAC), router, CLIENT, 1, 1400, &segment(b));
    g.run(case("that error with TTL 1: pass to the stack", last_hop, XDP_PASS, None, Counter::PassTtlExpired));

    // ---- No reply entry: the VIP the backend alone serves, or dropped; never out naming it.
    let far_vip = vips[4].addr;
    let to_far = |port: u16, dst: ([u8; 4], u16)| Frame::tcp(CLIENT, port, dst.0, dst.1).with(|f| f.l4 = L4::TcpAck);
    let err = icmp_error((mac_of(B_FAR), LB_MAC), (B_FAR, CLIENT, 64), PORT_UNREACHABLE, &to_far(1299, (B_FAR, 8080)));
    let want = icmp_error((LB_MAC, CLIENT_MAC), (far_vip, CLIENT, 63), PORT_UNREACHABLE, &to_far(1299, (far_vip, 80)));
    sent_to_client(g, "error from a NAT backend of one VIP, no reply entry: to the client from that VIP", err, want);
    let to_b1 = Frame::tcp(CLIENT, 1299, B1, 8080).with(|f| f.l4 = L4::TcpAck);
    let shared = icmp_error((mac_of(B1), LB_MAC), (B1, CLIENT, 64), PORT_UNREACHABLE, &to_b1);
    g.run(case(
        "error from a NAT backend of two VIPs, no reply entry: drop, not leaked",
        shared,
        XDP_DROP,
        None,
        Counter::DropReplyNoFlow,
    ));
    let health = Frame::tcp(LB_ADDR, 1299, B1, 8080).with(|f| f.l4 = L4::TcpAck);
    let to_us = icmp_error((mac_of(B1), LB_MAC), (B1, LB_ADDR, 64), PORT_UNREACHABLE, &health);
    g.run(case(
        "error from a NAT backend to this host (about a health check): pass untouched",
        to_us,
        XDP_PASS,
        None,
        Counter::PassNotVip,
    ));
    let stranger = [198, 51, 100, 77];
    let to_stranger = Frame::tcp(CLIENT, 1299, stranger, 8080).with(|f| f.l4 = L4::TcpAck);
    let not_ours = icmp_error((mac_of(stranger), LB_MAC), (stranger, CLIENT, 64), PORT_UNREACHABLE, &to_stranger);
    g.run(case(
        "error from another host on a NAT backend port, no reply entry: pass untouched",
        not_ours,
        XDP_PASS,
        None,
        Counter::PassNotVip,
    ));
    // `reply::from_nat_backend_ports` opened CLIENT:1234 → B_FAR:8080 straight to the backend.
    let direct =
        icmp_error((mac_of(B_FAR), LB_MAC), (B_FAR, CLIENT, 64), PORT_UNREACHABLE, &to_far(1234, (B_FAR, 8080)));
    let mut c = case(
        "error about a connection opened straight to a NAT backend: pass untouched",
        direct,
        XDP_PASS,
        None,
        Counter::PassNotVip,
    );
    c.unchanged = vec![Counter::IcmpToClient];
    g.run(c);

    // ---- The way back to the client: without a neighbour entry, or too narrow for the error.
    // Each client's segment through the VIP first, so that its flow has a reply entry.
    // On the clients' segment, with no neighbour entry: the stack resolves it and sends the
    // error on, rewritten (its TTL is the stack's to decrement).
    let unresolved = [198, 51, 100, 63];
    let (b, as_sent, as_client_sent) = through_nat_vip(g, web, unresolved, 0);
    let err = icmp_error((mac_of(b.0), LB_MAC), (b.0, unresolved, 64), PORT_UNREACHABLE, &as_sent);
    let want = icmp_error((mac_of(b.0), LB_MAC), (VIP_WEB, unresolved, 64), PORT_UNREACHABLE, &as_client_sent);
    let mut c = case(
        "NAT backend's error to a client without a neighbour entry: rewritten, to the stack",
        err,
        XDP_PASS,
        Some(want),
        Counter::PassNoNeighbour,
    );
    c.events = vec![Counter::IcmpToClient];
    g.run(c);
    // Behind h0 (MTU 1400), and an error quoting more than that of a full-sized segment: never
    // an ICMP error about an ICMP error, so dropped.
    let narrow = [198, 51, 100, 150];
    let (b, as_sent, _) = through_nat_vip(g, web, narrow, 1400);
    let err = icmp_error_quoting((mac_of(b.0), LB_MAC), (b.0, narrow, 64), PORT_UNREACHABLE, &as_sent, 1420);
    let mut c = case(
        "NAT backend's error too big for the client's path: drop, never an error about an error",
        err,
        XDP_DROP,
        None,
        Counter::DropTooBig,
    );
    c.unchanged = vec![Counter::IcmpToClient];
    g.run(c);
}

/// Runs a client's segment (ACK, `payload` bytes) through NAT VIP `web` on port 80; returns
/// its backend, the segment as the balancer sent it on and as the client sent it (each as
/// quoted, TTL 63).
fn through_nat_vip(g: &mut Golden, web: &Vip, client: [u8; 4], payload: usize) -> (([u8; 4], u16), Frame, Frame) {
    let b = by_hash(web, client_hash(&ipv4_bytes(client), SEED));
    let segment = |dst: ([u8; 4], u16)| {
        Frame::tcp(client, 41000, dst.0, dst.1).with(|f| {
            f.l4 = L4::TcpAck;
            f.payload = vec![0; payload]
        })
    };
    let sent = segment((web.addr, 80));
    g.run(case(
        "a client's segment through a NAT VIP (for the errors about it)",
        sent.bytes(),
        XDP_TX,
        Some(nat_out(&sent, (client, 41000), b, LB_MAC, mac_of(b.0))),
        Counter::ForwardTx,
    ));
    (b, segment(b).with(|f| f.ttl = 63), segment((web.addr, 80)).with(|f| f.ttl = 63))
}

/// A case whose error goes to the client (XDP_TX), rewritten as `want`.
fn sent_to_client(g: &mut Golden, name: &'static str, err: Vec<u8>, want: Vec<u8>) {
    let mut c = case(name, err, XDP_TX, Some(want), Counter::ForwardTx);
    c.events = vec![Counter::IcmpToClient];
    g.run(c);
}
