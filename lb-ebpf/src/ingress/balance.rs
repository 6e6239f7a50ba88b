//! The balancer's decision for one packet: a VIP packet goes to its backend (NAT, IPIP, GUE or
//! MAC rewrite), a NAT backend's reply back to its client, ICMP errors about VIP flows to the
//! flow's backend; everything else passes untouched.
use aya_ebpf::bindings::xdp_action::XDP_PASS;
use aya_ebpf::programs::XdpContext;
use lb_common::config::port_flags;
use lb_common::family;
use lb_common::flow::REVERSE_DIRECT;
use lb_common::ip_proto;
use lb_common::stats::Counter;
use lb_common::vip::{VipKey, forwarding};

use crate::flow::{Flow, flow_key};
use crate::parse::Parsed;
use crate::verdict::Verdict;
use crate::{encap, icmp_error, l2, maps, nat, parse};

#[inline(always)]
pub fn try_balance(ctx: &XdpContext) -> Verdict {
    let pkt = match parse::parse(ctx) {
        Parsed::Ipv4(pkt) => pkt,
        Parsed::IcmpError(err) => return icmp_error::to_backend(ctx, &err),
        Parsed::NotIpv4 => return (XDP_PASS, Counter::PassNotIpv4),
        Parsed::NotTcpUdp => return (XDP_PASS, Counter::PassNotVip),
        Parsed::Fragment => return (XDP_PASS, Counter::PassFragment),
        Parsed::Options => return (XDP_PASS, Counter::PassIpOptions),
        Parsed::Malformed => return (XDP_PASS, Counter::PassMalformed),
    };
    // SAFETY: parse() checked that the IPv4 and L4 headers lie inside the packet.
    let (src_port, dst_port, protocol) = unsafe { (*pkt.src_port, *pkt.dst_port, (*pkt.ip).proto) };
    // Addresses are read only once a port says the packet may concern us: most traffic that
    // passes through is decided by the two port lookups alone.
    // SAFETY: as above.
    let addresses = || unsafe { ((*pkt.ip).src_addr, (*pkt.ip).dst_addr) };
    let (vip_bit, backend_bit) = if protocol == ip_proto::TCP {
        (port_flags::VIP_TCP, port_flags::NAT_BACKEND_TCP)
    } else {
        (port_flags::VIP_UDP, port_flags::NAT_BACKEND_UDP)
    };

    let dst_flags = maps::port_flags(u16::from_be(dst_port));
    if dst_flags & vip_bit != 0 {
        let (src, dst) = addresses();
        let vip_key = VipKey { addr: lb_common::ipv4_bytes(dst), port: dst_port, protocol, family: family::IPV4 };
        let key = flow_key(src, dst, src_port, dst_port, protocol);
        let tables = maps::tables();
        let hash = tables.map_or(0, |t| t.hash(&key));
        // An established flow costs no hash-map lookup: the connection table names its VIP by
        // id, and VIP_INFO (an array) confirms that VIP still exists. Otherwise look the VIP up.
        let found = tables.and_then(|t| maps::flow(&key, hash, &t));
        let (flow, new_period) = (found.map(|(slot, _)| slot), found.is_some_and(|(_, new_period)| new_period));
        // SAFETY: a valid map value pointer.
        let by_flow = flow.and_then(|slot| maps::vip_info(unsafe { (*slot).value.vip_id }));
        let vip = match by_flow {
            Some(vip) if vip.key == vip_key => Some(vip),
            _ => maps::vip(&vip_key),
        };
        if let Some(vip) = vip {
            let flow = Flow { key: &key, hash, slot: flow, new_period, tables };
            return match vip.forwarding {
                forwarding::DSR_IPIP | forwarding::DSR_GUE => encap::balance_encap(ctx, &pkt, vip, &flow),
                forwarding::DSR_L2 => l2::balance_l2(ctx, &pkt, vip, &flow),
                _ => nat::balance_nat(ctx, &pkt, vip, &flow),
            };
        }
    }
    // A connection opened straight to a NAT backend's port (not through a VIP): its replies
    // must pass untouched, whatever reply entry an earlier VIP connection left on its 4-tuple.
    if dst_flags & port_flags::NAT_BACKEND_TCP != 0
        && protocol == ip_proto::TCP
        && pkt.opens_connection()
        && let Some(t) = maps::tables()
    {
        let (src, dst) = addresses();
        nat::note_direct_connection(&flow_key(dst, src, dst_port, src_port, protocol), &t);
    }
    if maps::port_flags(u16::from_be(src_port)) & backend_bit != 0
        && let Some(t) = maps::tables()
    {
        let (src, dst) = addresses();
        let key = flow_key(src, dst, src_port, dst_port, protocol);
        if let Some(reverse) = maps::reverse_flow(&key, t.hash(&key), &t) {
            if reverse.vip_id == REVERSE_DIRECT {
                return (XDP_PASS, Counter::PassNotVip);
            }
            return nat::reply_to_client(ctx, &pkt, &reverse);
        }
        return nat::reply_without_entry(ctx, &pkt, &key);
    }
    (XDP_PASS, Counter::PassNotVip)
}
