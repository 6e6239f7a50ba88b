//! DSR by MAC rewrite (`dsr-l2`, IPVS's "direct routing"): the client's packet goes unchanged
//! from its IP header on to the backend's MAC address. The backend, on this segment, holds the
//! VIP on `lo` and answers the client directly. No encapsulation: no overhead and no MTU
//! change, but the backend must be a neighbour of the balancer.
use aya_ebpf::bindings::xdp_action::XDP_DROP;
use aya_ebpf::programs::XdpContext;
use lb_common::backend::Backend;
use lb_common::ipv4_octets;
use lb_common::stats::Counter;
use lb_common::vip::VipInfo;
use lb_ebpf::packet::packet_len;
use network_types::ip::Ipv4Hdr;

use crate::flow::Flow;
use crate::forward::{self, ANY_SOURCE, Route};
use crate::maps::{self, HopCache};
use crate::parse::Ipv4Packet;
use crate::verdict::Verdict;
use crate::{icmp, select};

#[inline(always)]
pub fn balance_l2(ctx: &XdpContext, pkt: &Ipv4Packet, vip: &VipInfo, flow: &Flow) -> Verdict {
    let choice = match select::choose(vip, flow, pkt) {
        Ok(choice) => choice,
        Err(verdict) => return verdict,
    };
    match send_l2(ctx, pkt.ip, vip, choice.backend_id, choice.backend) {
        Ok(verdict) => verdict,
        Err(mtu) => icmp::too_big(ctx, pkt, mtu),
    }
}

/// Sends the IPv4 packet (header `ip`) unchanged to `backend`'s MAC address, and counts it as
/// the VIP's and the backend's traffic. `Err(mtu)`: larger than the link's MTU.
#[inline(always)]
pub fn send_l2(
    ctx: &XdpContext,
    ip: *const Ipv4Hdr,
    vip: &VipInfo,
    backend_id: u32,
    backend: &Backend,
) -> Result<Verdict, u16> {
    // SAFETY: parse() checked the header.
    let (protocol, tos, tot_len) = unsafe { ((*ip).proto, (*ip).tos, u16::from_be_bytes((*ip).tot_len)) };
    let backend_addr = ipv4_octets(&backend.addr);
    let (ifindex, smac, dmac) =
        match forward::lookup(ctx, ANY_SOURCE, backend_addr, protocol, tos, tot_len, HopCache::Backend(backend_id)) {
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
