//! Golden cases of packets from a NAT backend's port: a reply with no entry never leaves with
//! the backend's address, and connections opened straight to a backend (not through a VIP)
//! are not taken for a VIP's replies.
use lb_common::stats::Counter;
use lb_tests::fixture::*;
use lb_tests::golden::*;
use lb_tests::packets::*;

/// From a NAT backend's port with no reply entry, and connections straight to a NAT backend.
pub fn from_nat_backend_ports(g: &mut Golden, vips: &[Vip]) {
    // ---- From a NAT backend's port with no reply entry: never out with the backend's address.
    let stray = Frame::tcp(B1, 8080, CLIENT, 1234).with(|f| {
        f.l4 = L4::TcpAck;
        f.src_mac = mac_of(B1)
    });
    g.run(case(
        "NAT backend (of two VIPs) to a client, no reply entry: drop, not leaked",
        stray.bytes(),
        XDP_DROP,
        None,
        Counter::DropReplyNoFlow,
    ));
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
    g.run(c);
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
    g.run(c);
    let mut c = case(
        "that backend's answer on the direct connection: pass untouched, not taken for its VIP's reply",
        lone.bytes(),
        XDP_PASS,
        None,
        Counter::PassNotVip,
    );
    c.unchanged = vec![Counter::NatReplyByBackend, Counter::NatReply];
    g.run(c);
    // A VIP connection on client port 1235, then a direct one on the same 4-tuple.
    let vip_syn = Frame::tcp(CLIENT, 1235, far_vip, 80).with(|f| f.src_mac = CLIENT_MAC);
    // B_FAR sits behind the other interface.
    let to_far = nat_out(&vip_syn, (CLIENT, 1235), (B_FAR, 8080), LB_MAC_H, mac_of(B_FAR));
    g.run(case(
        "VIP SYN (one-backend VIP)",
        vip_syn.bytes(),
        XDP_REDIRECT,
        Some(to_far.clone()),
        Counter::ForwardRedirect,
    ));
    let far_reply = Frame::tcp(B_FAR, 8080, CLIENT, 1235).with(|f| {
        f.l4 = L4::TcpAck;
        f.src_mac = mac_of(B_FAR)
    });
    let as_vip = nat_out(&far_reply, (far_vip, 80), (CLIENT, 1235), LB_MAC, CLIENT_MAC);
    let mut c = case("its reply: from the VIP", far_reply.bytes(), XDP_TX, Some(as_vip.clone()), Counter::ForwardTx);
    c.events = vec![Counter::NatReply];
    g.run(c);
    let reuse_syn = Frame::tcp(CLIENT, 1235, B_FAR, 8080).with(|f| f.src_mac = CLIENT_MAC);
    let mut c = case(
        "a later SYN straight to the backend on that 4-tuple: pass untouched, marked direct",
        reuse_syn.bytes(),
        XDP_PASS,
        None,
        Counter::PassNotVip,
    );
    c.events = vec![Counter::DirectToBackend];
    g.run(c);
    let mut c = case(
        "the backend's answer on it: pass untouched despite the VIP connection's reply entry",
        far_reply.bytes(),
        XDP_PASS,
        None,
        Counter::PassNotVip,
    );
    c.unchanged = vec![Counter::NatReply];
    g.run(c);
    g.run(case(
        "a new VIP SYN on the 4-tuple again",
        vip_syn.bytes(),
        XDP_REDIRECT,
        Some(to_far),
        Counter::ForwardRedirect,
    ));
    let mut c = case("whose reply is the VIP's again", far_reply.bytes(), XDP_TX, Some(as_vip), Counter::ForwardTx);
    c.events = vec![Counter::NatReply];
    g.run(c);
    let health = Frame::tcp(B1, 8080, LB_ADDR, 1234).with(|f| {
        f.l4 = L4::TcpAck;
        f.src_mac = mac_of(B1)
    });
    g.run(case(
        "NAT backend to this host (health-check answer): pass untouched",
        health.bytes(),
        XDP_PASS,
        None,
        Counter::PassNotVip,
    ));
    let stranger = Frame::tcp([198, 51, 100, 77], 8080, CLIENT, 1234).with(|f| f.l4 = L4::TcpAck);
    g.run(case(
        "another host's packet from a NAT backend port: pass untouched",
        stranger.bytes(),
        XDP_PASS,
        None,
        Counter::PassNotVip,
    ));
}
