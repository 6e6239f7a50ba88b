//! DSR by encapsulation: the client's packet, untouched, inside an outer IPv4 header to the
//! backend (IPIP), or an outer IPv4 and UDP header (GUE, `lb_common::gue`). The backend removes
//! them (kernel ipip device, or lb_decap for both) and answers the client directly from the VIP
//! it holds on a local interface.
use aya_ebpf::bindings::xdp_action::XDP_DROP;
use aya_ebpf::helpers::generated::bpf_xdp_adjust_head;
use aya_ebpf::programs::XdpContext;
use lb_common::backend::Backend;
use lb_common::ip_proto;
use lb_common::stats::Counter;
use lb_common::vip::{VipInfo, forwarding};
use lb_common::{csum, gue, ipv4_octets};
use lb_ebpf::packet::{IPV4_LEN, packet_len, ptr_at};
use network_types::ip::Ipv4Hdr;

use crate::flow::Flow;
use crate::forward::{self, Route};
use crate::maps::{self, HopCache};
use crate::parse::Ipv4Packet;
use crate::verdict::Verdict;
use crate::{icmp, select};

/// TTL of the outer header.
const OUTER_TTL: u8 = 64;

/// How a DSR packet is wrapped.
#[derive(Clone, Copy)]
pub enum Encap {
    Ipip,
    /// GUE, with this outer UDP source port.
    Gue {
        source_port: u16,
    },
}

impl Encap {
    /// Bytes the outer headers add.
    #[inline(always)]
    fn overhead(self) -> usize {
        match self {
            Encap::Ipip => IPV4_LEN,
            Encap::Gue { .. } => gue::OVERHEAD,
        }
    }
}

#[inline(always)]
pub fn balance_encap(ctx: &XdpContext, pkt: &Ipv4Packet, vip: &VipInfo, flow: &Flow) -> Verdict {
    let choice = match select::choose(vip, flow, pkt) {
        Ok(choice) => choice,
        Err(verdict) => return verdict,
    };
    let encap = match vip.forwarding {
        forwarding::DSR_GUE => Encap::Gue { source_port: gue::source_port(flow.hash) },
        _ => Encap::Ipip,
    };
    match send_encapsulated(ctx, pkt.l3_offset, pkt.ip, vip, choice.backend_id, choice.backend, encap) {
        Ok(verdict) => verdict,
        Err(TooBig { mtu }) => icmp::too_big(ctx, pkt, mtu),
    }
}

/// The packet would exceed the next hop's MTU once encapsulated; `mtu` is what the inner
/// packet may use.
pub struct TooBig {
    pub mtu: u16,
}

/// Sends the IPv4 packet at `l3_offset` (header `ip`) to `backend` inside outer headers from
/// the VIP's encapsulation source, and counts it as the VIP's and the backend's traffic.
#[inline(always)]
pub fn send_encapsulated(
    ctx: &XdpContext,
    l3_offset: usize,
    ip: *const Ipv4Hdr,
    vip: &VipInfo,
    backend_id: u32,
    backend: &Backend,
    encap: Encap,
) -> Result<Verdict, TooBig> {
    // SAFETY: parse() checked the header.
    let (tos, inner_len) = unsafe { ((*ip).tos, u16::from_be_bytes((*ip).tot_len)) };
    // Counted as the client sent it, before the outer header is added.
    let bytes = packet_len(ctx);
    let outer_dst = ipv4_octets(&backend.addr);
    let outer_src = ipv4_octets(&vip.encap_source);
    let overhead = encap.overhead() as u16;
    let outer_len = inner_len.wrapping_add(overhead);
    let protocol = match encap {
        Encap::Ipip => ip_proto::IPIP,
        Encap::Gue { .. } => ip_proto::UDP,
    };
    let (ifindex, smac, dmac) =
        match forward::lookup(ctx, outer_src, outer_dst, protocol, tos, outer_len, HopCache::Backend(backend_id)) {
            Route::Out { ifindex, smac, dmac, .. } => (ifindex, smac, dmac),
            Route::NoNeighbour => return Ok((XDP_DROP, Counter::DropNoNeighbour)),
            Route::TooBig { mtu } => return Err(TooBig { mtu: mtu.saturating_sub(overhead) }),
            Route::Unreachable => return Ok((XDP_DROP, Counter::DropNoRoute)),
        };

    let mut outer = [0u8; IPV4_LEN];
    outer[0] = 0x45;
    outer[1] = tos;
    outer[2..4].copy_from_slice(&outer_len.to_be_bytes());
    // id 0, no fragment flags: the outer header is never fragmented by us.
    outer[8] = OUTER_TTL;
    outer[9] = protocol;
    outer[12..16].copy_from_slice(&outer_src);
    outer[16..20].copy_from_slice(&outer_dst);
    let check = csum::ipv4_header(&outer);
    outer[10..12].copy_from_slice(&check.to_ne_bytes());

    let pushed = match encap {
        Encap::Ipip if l3_offset == 14 => push_outer::<14, IPV4_LEN>(ctx, &outer),
        Encap::Ipip => push_outer::<18, IPV4_LEN>(ctx, &outer),
        Encap::Gue { source_port } => {
            let mut headers = [0u8; gue::OVERHEAD];
            headers[..IPV4_LEN].copy_from_slice(&outer);
            headers[20..22].copy_from_slice(&source_port.to_be_bytes());
            headers[22..24].copy_from_slice(&gue::PORT.to_be_bytes());
            headers[24..26].copy_from_slice(&inner_len.wrapping_add(8).to_be_bytes());
            // UDP checksum 0: none (allowed over IPv4; the inner packet carries its own).
            if l3_offset == 14 {
                push_outer::<14, { gue::OVERHEAD }>(ctx, &headers)
            } else {
                push_outer::<18, { gue::OVERHEAD }>(ctx, &headers)
            }
        }
    };
    Ok(pushed.map_or((XDP_DROP, Counter::DropEncapFailed), |()| {
        let verdict = forward::send(ctx, ifindex, smac, dmac);
        if verdict.0 != XDP_DROP {
            maps::count_traffic(vip.id, backend_id, bytes);
        }
        verdict
    }))
}

/// Grows the frame by `N` bytes, moves the L2 header (`L2` bytes: Ethernet, and one VLAN tag if
/// present) to the new front, and writes `outer` behind it.
#[inline(always)]
fn push_outer<const L2: usize, const N: usize>(ctx: &XdpContext, outer: &[u8; N]) -> Result<(), ()> {
    let l2 = ptr_at::<[u8; L2]>(ctx, 0).ok_or(())?;
    // SAFETY: bounds checked by ptr_at.
    let saved = unsafe { *l2 };
    // SAFETY: plain helper call on our own context.
    if unsafe { bpf_xdp_adjust_head(ctx.ctx, -(N as i32)) } != 0 {
        return Err(());
    }
    let l2 = ptr_at::<[u8; L2]>(ctx, 0).ok_or(())?;
    let ip = ptr_at::<[u8; N]>(ctx, L2).ok_or(())?;
    // SAFETY: bounds checked by ptr_at after the head moved.
    unsafe {
        *l2 = saved;
        *ip = *outer;
    }
    Ok(())
}
