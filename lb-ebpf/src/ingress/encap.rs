//! DSR by encapsulation: the client's packet (IPv4 or IPv6), untouched, inside an outer IP
//! header to the backend (IP in IP: IPIP, 6in4, 4in6 or IPv6 in IPv6), or an outer IP and UDP
//! header (GUE, `lb_common::gue`). The outer header is of the backend's family, from the VIP's
//! encapsulation source (the control plane keeps the two of one family). The backend removes
//! them (kernel ipip device, or lb_decap for both) and answers the client directly from the VIP
//! it holds on a local interface.
use aya_ebpf::bindings::xdp_action::{XDP_DROP, XDP_PASS};
use aya_ebpf::helpers::generated::bpf_xdp_adjust_head;
use aya_ebpf::programs::XdpContext;
use lb_common::backend::Backend;
use lb_common::stats::Counter;
use lb_common::vip::{VipInfo, forwarding};
use lb_common::{csum, family, gue, ip_proto};
use lb_ebpf::packet::{ETH_P_IPV4, ETH_P_IPV6, IPV4_LEN, IPV6_LEN, packet_len, ptr_at};
use network_types::eth::EthHdr;

use crate::addr::{field, store, store_words};
use crate::flow::Flow;
use crate::forward::{self, Lookup, Route};
use crate::ip::IpPacket;
use crate::maps::{self, HopCache};
use crate::select;
use crate::verdict::Verdict;

/// TTL (hop limit) of the outer header.
const OUTER_TTL: u8 = 64;
/// Bytes of the outer UDP header (GUE).
const UDP_LEN: usize = 8;

/// How a DSR packet is wrapped.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Encap {
    Ipip,
    /// GUE, with this outer UDP source port.
    Gue {
        source_port: u16,
    },
}

/// The packet to wrap: where its network header is, and what the outer header must say of it.
pub struct Inner {
    pub l3_offset: usize,
    /// `IpPacket::ENCAPSULATED_AS` of its family: what IPIP's outer header names.
    pub protocol: u8,
    pub tos: u8,
    /// Bytes from its network header to the end of the datagram.
    pub len: u16,
    /// The flow's hash: an outer IPv6 header's flow label, so ECMP on the way spreads flows.
    pub entropy: u32,
}

#[inline(always)]
pub fn balance_encap<P: IpPacket>(ctx: &XdpContext, pkt: &P, vip: &VipInfo, flow: &Flow) -> Verdict {
    // The balancer is a hop on the packet's way, in every forwarding mode: a TTL that expires
    // here is not forwarded, the stack answers it with ICMP "time exceeded" (as for NAT).
    if pkt.ttl() <= 1 {
        return (XDP_PASS, Counter::PassTtlExpired);
    }
    let choice = match select::choose(vip, flow, &pkt.tcp()) {
        Ok(choice) => choice,
        Err(verdict) => return verdict,
    };
    let generation = flow.nexthop_generation();
    encapsulate(ctx, pkt, vip, (choice.backend_id, choice.backend), flow.hash, generation)
}

/// How `vip` wraps a packet of the flow with `hash`.
#[inline(always)]
fn encap_of(vip: &VipInfo, hash: u32) -> Encap {
    match vip.forwarding {
        forwarding::DSR_GUE => Encap::Gue { source_port: gue::source_port(hash) },
        _ => Encap::Ipip,
    }
}

/// Wraps the packet for `backend` as the VIP says (IP in IP, or GUE with an outer source port
/// from the flow's `hash`) and sends it; too big once wrapped, the sender is told.
#[inline(always)]
fn encapsulate<P: IpPacket>(
    ctx: &XdpContext,
    pkt: &P,
    vip: &VipInfo,
    (backend_id, backend): (u32, &Backend),
    hash: u32,
    generation: u32,
) -> Verdict {
    let encap = encap_of(vip, hash);
    let inner = Inner {
        l3_offset: pkt.l3_offset(),
        protocol: P::ENCAPSULATED_AS,
        tos: pkt.tos(),
        len: pkt.ip_len(),
        entropy: hash,
    };
    match send_encapsulated(ctx, &inner, vip, (backend_id, backend), encap, generation) {
        Ok(verdict) => verdict,
        Err(TooBig { mtu }) => pkt.too_big(ctx, mtu),
    }
}

/// The packet would exceed the next hop's MTU once encapsulated; `mtu` is what the inner
/// packet may use.
pub struct TooBig {
    pub mtu: u16,
}

/// Sends the packet `inner` to `backend` inside outer headers of the backend's family from the
/// VIP's encapsulation source, and counts it as the VIP's and the backend's traffic.
/// `generation`: the next-hop generation (`Tables::nexthop_generation`).
#[inline(always)]
pub fn send_encapsulated(
    ctx: &XdpContext,
    inner: &Inner,
    vip: &VipInfo,
    (backend_id, backend): (u32, &Backend),
    encap: Encap,
    generation: u32,
) -> Result<Verdict, TooBig> {
    // Counted as the client sent it, before the outer header is added.
    let bytes = packet_len(ctx);
    let v6 = backend.family == family::IPV6;
    let ip_len = if v6 { IPV6_LEN } else { IPV4_LEN };
    let udp_len = if encap == Encap::Ipip { 0 } else { UDP_LEN };
    let overhead = (ip_len + udp_len) as u16;
    let outer_len = inner.len.wrapping_add(overhead);
    let protocol = match encap {
        Encap::Ipip => inner.protocol,
        Encap::Gue { .. } => ip_proto::UDP,
    };
    let query = Lookup {
        family: backend.family,
        src: field(&vip.encap_source),
        dst: field(&backend.addr),
        protocol,
        tos: inner.tos,
        tot_len: outer_len,
        generation,
    };
    let (ifindex, smac, dmac) = match forward::lookup(ctx, &query, HopCache::Backend(backend_id)) {
        Route::Out { ifindex, smac, dmac, .. } => (ifindex, smac, dmac),
        Route::NoNeighbour => return Ok((XDP_DROP, Counter::DropNoNeighbour)),
        Route::TooBig { mtu } => return Err(TooBig { mtu: mtu.saturating_sub(overhead) }),
        Route::Unreachable => return Ok((XDP_DROP, Counter::DropNoRoute)),
    };

    let tagged = inner.l3_offset != 14;
    // Grown in front; the outer headers are then written straight into the packet (built on
    // the stack they would cost the program stack it does not have).
    let outer = match (tagged, v6, encap == Encap::Ipip) {
        (false, false, true) => push::<14, IPV4_LEN>(ctx, ETH_P_IPV4),
        (true, false, true) => push::<18, IPV4_LEN>(ctx, ETH_P_IPV4),
        (false, false, false) => push::<14, { gue::OVERHEAD }>(ctx, ETH_P_IPV4),
        (true, false, false) => push::<18, { gue::OVERHEAD }>(ctx, ETH_P_IPV4),
        (false, true, true) => push::<14, IPV6_LEN>(ctx, ETH_P_IPV6),
        (true, true, true) => push::<18, IPV6_LEN>(ctx, ETH_P_IPV6),
        (false, true, false) => push::<14, { gue::OVERHEAD6 }>(ctx, ETH_P_IPV6),
        (true, true, false) => push::<18, { gue::OVERHEAD6 }>(ctx, ETH_P_IPV6),
    };
    let l2 = if tagged { 18 } else { 14 };
    let headers = Outer { l2, v6, protocol, len: outer_len, encap };
    let written = match outer {
        Some(()) => write_outer(ctx, &headers, inner, vip, backend),
        None => None,
    };
    let pushed = written.ok_or(());
    Ok(pushed.map_or((XDP_DROP, Counter::DropEncapFailed), |()| {
        let verdict = forward::send(ctx, ifindex, smac, dmac);
        if verdict.0 != XDP_DROP {
            maps::count_traffic(vip.id, backend_id, bytes);
        }
        verdict
    }))
}

/// The outer headers of one packet, as `send_encapsulated` chose them.
struct Outer {
    /// Offset of the outer IP header (behind the link header).
    l2: usize,
    v6: bool,
    /// The outer IP header's protocol (next header).
    protocol: u8,
    /// Bytes from the outer IP header to the end.
    len: u16,
    encap: Encap,
}

/// Writes the outer headers straight into the packet, in the room `push` made, as 16-bit words
/// (the header's 2-byte alignment; byte-wise it would be a store a byte, and a header built on
/// the stack first would cost the program stack it does not have).
#[inline(always)]
fn write_outer(ctx: &XdpContext, outer: &Outer, inner: &Inner, vip: &VipInfo, backend: &Backend) -> Option<()> {
    let l2 = outer.l2;
    if outer.v6 {
        let h = ptr_at::<[u8; IPV6_LEN]>(ctx, l2)?;
        // Version 6, the inner traffic class, and a flow label from the flow's hash.
        let first = ((6u32 << 28) | ((inner.tos as u32) << 20) | (inner.entropy & 0xf_ffff)).to_be();
        let payload_len = outer.len.wrapping_sub(IPV6_LEN as u16).to_be();
        let words = [first as u16, (first >> 16) as u16, payload_len, u16::from_ne_bytes([outer.protocol, OUTER_TTL])];
        // SAFETY: bounds checked by ptr_at.
        unsafe {
            let h = &mut *h;
            store_words(h.as_mut_ptr() as *mut u16, &words);
            store(&mut *(h.as_mut_ptr().add(8) as *mut [u8; 16]), field(&vip.encap_source));
            store(&mut *(h.as_mut_ptr().add(24) as *mut [u8; 16]), field(&backend.addr));
        }
    } else {
        let h = ptr_at::<[u8; IPV4_LEN]>(ctx, l2)?;
        let (src, dst) = (field(&vip.encap_source).words()[0], field(&backend.addr).words()[0]);
        // id 0, no fragment flags: the outer header is never fragmented by us.
        let mut words = [
            u16::from_ne_bytes([0x45, inner.tos]),
            outer.len.to_be(),
            0,
            0,
            u16::from_ne_bytes([OUTER_TTL, outer.protocol]),
            0,
            src as u16,
            (src >> 16) as u16,
            dst as u16,
            (dst >> 16) as u16,
        ];
        words[5] = csum::ipv4_header_words(&words);
        // SAFETY: bounds checked by ptr_at.
        unsafe { store_words(h as *mut u16, &words) };
    }
    if let Encap::Gue { source_port } = outer.encap {
        let ip_len = if outer.v6 { IPV6_LEN } else { IPV4_LEN };
        let udp = ptr_at::<[u16; 4]>(ctx, l2 + ip_len)?;
        // UDP checksum 0: none (allowed over IPv4, and for tunnels over IPv6 by RFC 6935; the
        // inner packet carries its own).
        // SAFETY: bounds checked by ptr_at.
        unsafe { *udp = [source_port.to_be(), gue::PORT.to_be(), inner.len.wrapping_add(UDP_LEN as u16).to_be(), 0] };
    }
    Some(())
}

/// Grows the frame by `N` bytes in front and writes its new link header (`L2` bytes: Ethernet,
/// and one VLAN tag if present) with `ether_type` (the outer header's) as its last two bytes.
/// Only the tag is carried over: the MAC addresses are not, as `forward::send` writes both
/// before the frame leaves (and nothing else lets it leave).
#[inline(always)]
fn push<const L2: usize, const N: usize>(ctx: &XdpContext, ether_type: u16) -> Option<()> {
    const TAG: usize = 12;
    let tag = if L2 > EthHdr::LEN {
        let tag = ptr_at::<[u16; 2]>(ctx, TAG)?;
        // SAFETY: bounds checked by ptr_at.
        unsafe { *tag }
    } else {
        [0; 2]
    };
    // SAFETY: plain helper call on our own context.
    if unsafe { bpf_xdp_adjust_head(ctx.ctx, -(N as i32)) } != 0 {
        return None;
    }
    let l2 = ptr_at::<[u8; L2]>(ctx, 0)? as *mut u16;
    // SAFETY: bounds checked by ptr_at after the head moved; the words are 2-byte aligned.
    unsafe {
        if L2 > EthHdr::LEN {
            store_words(l2.add(TAG / 2), &tag);
        }
        l2.add(L2 / 2 - 1).write(ether_type);
    }
    Some(())
}
