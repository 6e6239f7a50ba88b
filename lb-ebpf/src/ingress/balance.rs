//! The balancer's decision for one packet, IPv4 or IPv6 alike: a VIP packet goes to its backend
//! (NAT, IP in IP, GUE or MAC rewrite), a NAT backend's reply back to its client, ICMP errors
//! about VIP flows to the flow's backend; everything else passes untouched.
use aya_ebpf::bindings::xdp_action::XDP_PASS;
use aya_ebpf::programs::XdpContext;
use lb_common::config::port_flags;
use lb_common::flow::{FlowKey, REVERSE_DIRECT};
use lb_common::stats::Counter;
use lb_common::trace::{TRACE_NONE, trace_kind};
use lb_common::vip::{VipKey, forwarding};
use lb_common::{family, ip_proto, jumps};

use crate::flow::Flow;
use crate::ip::IpPacket;
use crate::parse::Parsed;
use crate::trace::{self, Decided};
use crate::verdict::Verdict;
use crate::{encap, icmp_error, l2, maps, nat, parse, parse6, quic, select};

/// `lb_ingress`: IPv4 is balanced here; IPv6 frames and ICMP errors go on to their programs.
/// `dst_flags`: the destination port's PORT_FLAGS, when `parse::first_look` read them.
#[inline(always)]
pub fn try_balance(ctx: &XdpContext, dst_flags: Option<u32>) -> Verdict {
    match parse::parse(ctx) {
        Parsed::Ipv4(pkt) => balance(ctx, &pkt, dst_flags),
        Parsed::Ipv6Frame | Parsed::Ipv6(_) => maps::jump(ctx, jumps::IPV6),
        Parsed::IcmpError(_) => maps::jump(ctx, jumps::ICMP_ERRORS),
        other => not_balanced(other),
    }
}

/// `lb_ingress_v6`: an IPv6 frame.
#[inline(always)]
pub fn try_balance_v6(ctx: &XdpContext) -> Verdict {
    match parse6::parse_frame(ctx) {
        Parsed::Ipv6(pkt) => balance(ctx, &pkt, None),
        Parsed::Icmp6Error(_) => maps::jump(ctx, jumps::ICMP6_ERRORS),
        other => not_balanced(other),
    }
}

/// `lb_icmp_errors`: an ICMP error about a flow.
#[inline(always)]
pub fn try_icmp_error(ctx: &XdpContext) -> Verdict {
    match parse::parse(ctx) {
        Parsed::IcmpError(err) => icmp_error::handle(ctx, &err),
        other => not_balanced(other),
    }
}

/// `lb_icmp6_errors`: an ICMPv6 error about a flow.
#[inline(always)]
pub fn try_icmp6_error(ctx: &XdpContext) -> Verdict {
    match parse6::parse_frame(ctx) {
        Parsed::Icmp6Error(err) => icmp_error::handle(ctx, &err),
        other => not_balanced(other),
    }
}

/// The verdict of a frame that is not balanced.
#[inline(always)]
fn not_balanced(parsed: Parsed) -> Verdict {
    match parsed {
        Parsed::NotIp => (XDP_PASS, Counter::PassNotIp),
        Parsed::Fragment => (XDP_PASS, Counter::PassFragment),
        Parsed::Options => (XDP_PASS, Counter::PassIpOptions),
        Parsed::Malformed => (XDP_PASS, Counter::PassMalformed),
        // Not TCP/UDP, and (only where a program is handed what it does not handle) the rest.
        _ => (XDP_PASS, Counter::PassNotVip),
    }
}

/// `known_dst_flags`: the destination port's PORT_FLAGS if already read.
#[inline(always)]
fn balance<P: IpPacket>(ctx: &XdpContext, pkt: &P, known_dst_flags: Option<u32>) -> Verdict {
    let (src_port, dst_port) = pkt.ports();
    let protocol = pkt.protocol();
    // Parsed packets are TCP or UDP.
    let Some((vip_bit, backend_bit)) = port_flags::of_protocol(protocol) else {
        return (XDP_PASS, Counter::PassNotVip);
    };
    // Addresses are read only once a port says the packet may concern us: most traffic that
    // passes through is decided by the two port lookups alone.
    let flow_key = || {
        let (src, dst) = pkt.addresses();
        FlowKey::new(src, dst, src_port, dst_port, protocol, P::FAMILY)
    };

    let dst_flags = known_dst_flags.unwrap_or_else(|| maps::port_flags(u16::from_be(dst_port)));
    if dst_flags & vip_bit != 0 {
        let built = flow_key();
        let key = &built;
        let tables = maps::tables();
        let hash = tables.map_or(0, |t| t.hash(key));
        // An established flow costs no hash-map lookup: the connection table names its VIP by
        // id, and VIP_INFO (an array) confirms that VIP still exists. Otherwise look the VIP up.
        let found = tables.and_then(|t| maps::flow(key, hash, &t));
        let (flow, reply_check) = (found.map(|(slot, _)| slot), found.is_some_and(|(_, check)| check));
        // SAFETY: a valid map value pointer.
        let by_flow = flow.and_then(|slot| maps::vip_info(unsafe { (*slot).value.vip_id }));
        let vip_key = VipKey { addr: key.dst, port: dst_port, protocol, family: P::FAMILY };
        let vip = match by_flow {
            Some(vip) if vip.key == vip_key => Some(vip),
            _ if P::FAMILY == family::IPV4 => maps::vip_indexed(&vip_key),
            _ => maps::vip(&vip_key),
        };
        if let Some(vip) = vip {
            let server = quic::server(ctx, pkt, vip);
            let flow = Flow { key, hash, slot: flow, reply_check, tables, server };
            trace::start(&pkt.tcp());
            let verdict = match vip.forwarding {
                forwarding::DSR_IPIP | forwarding::DSR_GUE => encap::balance_encap(ctx, pkt, vip, &flow),
                forwarding::DSR_L2 => l2::balance_l2(ctx, pkt, vip, &flow),
                _ => nat::balance_nat(ctx, pkt, vip, &flow),
            };
            trace::done(ctx, &Decided { key, vip_id: vip.id, kind: trace_kind::VIP, verdict });
            return verdict;
        }
    }
    // A connection opened straight to a NAT backend's port (not through a VIP): its replies
    // must pass untouched, whatever reply entry an earlier VIP connection left on its 4-tuple.
    if dst_flags & port_flags::NAT_BACKEND_TCP != 0
        && protocol == ip_proto::TCP
        && pkt.tcp().opens_connection()
        && let Some(t) = maps::tables()
    {
        let reply = flow_key().reversed();
        nat::note_direct_connection(&reply, &t);
    }
    if maps::port_flags(u16::from_be(src_port)) & backend_bit != 0
        && let Some(t) = maps::tables()
    {
        let key = flow_key();
        trace::start(&pkt.tcp());
        let (verdict, vip_id) = match maps::reverse_way(&key, t.hash(&key), &t) {
            Some(way) => {
                // SAFETY: a valid map value pointer; the check has vouched for the value.
                let reverse = unsafe { (*way).value };
                if reverse.vip_id == REVERSE_DIRECT {
                    return (XDP_PASS, Counter::PassNotVip);
                }
                select::reply_seen(&key, way, &pkt.tcp(), &t);
                (nat::reply_to_client(ctx, pkt, &reverse, &t), reverse.vip_id)
            }
            None => (nat::reply_without_entry(ctx, pkt, &key, &t), TRACE_NONE),
        };
        trace::done(ctx, &Decided { key: &key, vip_id, kind: trace_kind::REPLY, verdict });
        return verdict;
    }
    (XDP_PASS, Counter::PassNotVip)
}
