//! DSR by MAC rewrite (`dsr-l2`, IPVS's "direct routing"): the client's packet goes unchanged
//! from its IP header on to the backend's MAC address. The backend, on this segment, holds the
//! VIP on `lo` and answers the client directly. No encapsulation: no overhead and no MTU
//! change, but the backend must be a neighbour of the balancer.
use aya_ebpf::bindings::xdp_action::{XDP_DROP, XDP_PASS};
use aya_ebpf::programs::XdpContext;
use lb_common::backend::Backend;
use lb_common::stats::Counter;
use lb_common::vip::VipInfo;
use lb_ebpf::packet::packet_len;

use crate::addr::field;
use crate::flow::Flow;
use crate::forward::{self, ANY_SOURCE, Lookup, Route};
use crate::ip::IpPacket;
use crate::maps::{self, HopCache};
use crate::select;
use crate::verdict::Verdict;

#[inline(always)]
pub fn balance_l2<P: IpPacket>(ctx: &XdpContext, pkt: &P, vip: &VipInfo, flow: &Flow) -> Verdict {
    // The balancer is a hop on the packet's way, in every forwarding mode: a TTL that expires
    // here is not forwarded, the stack answers it with ICMP "time exceeded" (as for NAT).
    if pkt.ttl() <= 1 {
        return (XDP_PASS, Counter::PassTtlExpired);
    }
    let choice = match select::choose(vip, flow, &pkt.tcp()) {
        Ok(choice) => choice,
        Err(verdict) => return verdict,
    };
    let sent = Sent { family: P::FAMILY, protocol: pkt.protocol(), tos: pkt.tos(), len: pkt.ip_len() };
    let generation = flow.nexthop_generation();
    match send_l2(ctx, &sent, vip, (choice.backend_id, choice.backend), generation) {
        Ok(verdict) => verdict,
        Err(mtu) => pkt.too_big(ctx, mtu),
    }
}

/// What the route lookup needs to know of the packet sent on.
pub struct Sent {
    pub family: u8,
    pub protocol: u8,
    pub tos: u8,
    /// Bytes from the network header to the end of the datagram.
    pub len: u16,
}

/// Sends the packet unchanged to `backend`'s MAC address, and counts it as the VIP's and the
/// backend's traffic. `Err(mtu)`: larger than the link's MTU.
#[inline(always)]
pub fn send_l2(
    ctx: &XdpContext,
    sent: &Sent,
    vip: &VipInfo,
    (backend_id, backend): (u32, &Backend),
    generation: u32,
) -> Result<Verdict, u16> {
    let query = Lookup {
        family: sent.family,
        src: &ANY_SOURCE,
        dst: field(&backend.addr),
        protocol: sent.protocol,
        tos: sent.tos,
        tot_len: sent.len,
        generation,
    };
    let (ifindex, smac, dmac) = match forward::lookup(ctx, &query, HopCache::Backend(backend_id)) {
        Route::Out { ifindex, smac, dmac, adjacent: true } => (ifindex, smac, dmac),
        Route::Out { adjacent: false, .. } => return Ok((XDP_DROP, Counter::DropNotAdjacent)),
        Route::NoNeighbour => return Ok((XDP_DROP, Counter::DropNoNeighbour)),
        Route::TooBig { mtu } => return Err(mtu),
        Route::Unreachable => return Ok((XDP_DROP, Counter::DropNoRoute)),
    };
    let bytes = packet_len(ctx);
    let verdict = forward::send(ctx, ifindex, smac, dmac);
    if verdict.0 != XDP_DROP {
        maps::count_traffic(vip.id, backend_id, bytes);
    }
    Ok(verdict)
}
