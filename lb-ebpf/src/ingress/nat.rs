//! NAT forwarding: the destination becomes the backend (client address kept, so the backend
//! must route replies back through the balancer), and replies get the VIP back as source.
//! Checksums are updated incrementally; TTL is decremented as any router would.
use aya_ebpf::bindings::xdp_action::{XDP_DROP, XDP_PASS};
use aya_ebpf::programs::XdpContext;
use lb_common::backend::{NAT_BACKEND_SHARED, NatBackendKey};
use lb_common::csum::{replace16, replace32, udp_fixup};
use lb_common::flow::{FlowKey, REVERSE_DIRECT, ReverseEntry};
use lb_common::stats::Counter;
use lb_common::vip::VipInfo;
use lb_common::{ip_proto, ipv4_octets};
use lb_ebpf::packet::packet_len;

use crate::flow::Flow;
use crate::forward::{self, ANY_SOURCE, Route, decrement_ttl};
use crate::maps::HopCache;
use crate::parse::Ipv4Packet;
use crate::table::Tables;
use crate::verdict::Verdict;
use crate::{icmp, maps, select};

/// Which end of the packet a rewrite changes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    Source,
    Destination,
}

#[inline(always)]
pub fn balance_nat(ctx: &XdpContext, pkt: &Ipv4Packet, vip: &VipInfo, flow: &Flow) -> Verdict {
    // SAFETY: parse() checked the header.
    if unsafe { (*pkt.ip).ttl } <= 1 {
        return (XDP_PASS, Counter::PassTtlExpired);
    }
    let choice = match select::choose(vip, flow, pkt) {
        Ok(choice) => choice,
        Err(verdict) => return verdict,
    };
    let backend = choice.backend;
    let backend_addr = ipv4_octets(&backend.addr);
    let bytes = packet_len(ctx);
    let to_backend = (ANY_SOURCE, backend_addr);
    let verdict = rewrite_and_send(
        ctx,
        pkt,
        End::Destination,
        (backend_addr, backend.port),
        to_backend,
        HopCache::Backend(choice.backend_id),
        NO_ROUTE,
    );
    if verdict.0 != XDP_DROP && verdict.1 != Counter::ForwardIcmpTooBig {
        maps::count_traffic(vip.id, choice.backend_id, bytes);
    }
    verdict
}

/// What a packet with no route gets: dropped, where this program owns the packet.
const NO_ROUTE: Verdict = (XDP_DROP, Counter::DropNoRoute);
/// Passed untouched: a backend's packet that no reply entry names and that is not routed
/// onwards (to this host: health-check answers, ...) is the stack's.
const NOT_OURS: Verdict = (XDP_PASS, Counter::PassNotVip);

/// A reply from a NAT backend: its source becomes the VIP again.
#[inline(always)]
pub fn reply_to_client(ctx: &XdpContext, pkt: &Ipv4Packet, reverse: &ReverseEntry) -> Verdict {
    // SAFETY: parse() checked the headers.
    let (client, ttl) = unsafe { ((*pkt.ip).dst_addr, (*pkt.ip).ttl) };
    if ttl <= 1 {
        return (XDP_PASS, Counter::PassTtlExpired);
    }
    let vip_addr = ipv4_octets(&reverse.vip_addr);
    maps::count(Counter::NatReply);
    rewrite_and_send(
        ctx,
        pkt,
        End::Source,
        (vip_addr, reverse.vip_port),
        (vip_addr, client),
        HopCache::Address,
        NO_ROUTE,
    )
}

/// A TCP SYN to a NAT backend's address and port that is not a VIP's: a connection opened
/// straight to the backend. Its reply key (`reply`: backend → client) is marked direct, so the
/// backend's answers pass untouched instead of being taken for a VIP's replies (an earlier VIP
/// connection's entry on the same 4-tuple, or NAT_BACKENDS). A first packet, so it takes only
/// a free or unproven way (or the way of its own key).
#[inline(always)]
pub fn note_direct_connection(reply: &FlowKey, t: &Tables) {
    let backend =
        NatBackendKey { addr: reply.src, port: reply.src_port, protocol: reply.protocol, family: reply.family };
    if maps::nat_backend(&backend).is_none() {
        return;
    }
    let direct = ReverseEntry { vip_addr: [0; 16], vip_port: 0, family: reply.family, _pad: 0, vip_id: REVERSE_DIRECT };
    maps::record_reverse_flow(reply, t.hash(reply), &direct, false, t);
    maps::count(Counter::DirectToBackend);
}

/// A packet from a NAT backend's port that no reply entry names (its entry was evicted, or
/// never recorded: see `select`). It must not leave with the backend's own address. From a
/// backend of one VIP it is that VIP's reply; from a backend several VIPs share it is dropped.
/// Either way only if routed onwards: packets to this host (health-check answers) and from
/// addresses that are no NAT backend's pass untouched.
#[inline(always)]
pub fn reply_without_entry(ctx: &XdpContext, pkt: &Ipv4Packet, key: &FlowKey) -> Verdict {
    let backend = NatBackendKey { addr: key.src, port: key.src_port, protocol: key.protocol, family: key.family };
    let Some(owner) = maps::nat_backend(&backend) else {
        return NOT_OURS;
    };
    // SAFETY: parse() checked the headers.
    let (src, dst, ttl, tos, tot_len) = unsafe {
        let ip = &*pkt.ip;
        (ip.src_addr, ip.dst_addr, ip.ttl, ip.tos, u16::from_be_bytes(ip.tot_len))
    };
    let vip = if owner == NAT_BACKEND_SHARED { None } else { maps::vip_info(owner) };
    match vip {
        Some(vip) if vip.key.protocol == key.protocol && ttl > 1 => {
            let vip_addr = ipv4_octets(&vip.key.addr);
            let to_client = (vip_addr, dst);
            let verdict = rewrite_and_send(
                ctx,
                pkt,
                End::Source,
                (vip_addr, vip.key.port),
                to_client,
                HopCache::Address,
                NOT_OURS,
            );
            if verdict != NOT_OURS {
                maps::count(Counter::NatReplyByBackend);
            }
            verdict
        }
        _ => match forward::lookup(ctx, src, dst, key.protocol, tos, tot_len, HopCache::Address) {
            Route::Unreachable => NOT_OURS,
            _ => (XDP_DROP, Counter::DropReplyNoFlow),
        },
    }
}

/// Rewrites one end of the packet to `to` (address, port) and sends it along `route` (source
/// and destination of the route lookup); `unroutable` is the answer when it has no route. The route is looked up first, so that a packet too
/// big for it is answered with ICMP "fragmentation needed" quoting the packet as its sender
/// sent it (DF set; else dropped). Without a neighbour entry the rewritten packet goes to the
/// stack, which resolves the neighbour and forwards it (and decrements TTL itself, so it is
/// decremented here only when this program forwards).
#[inline(always)]
fn rewrite_and_send(
    ctx: &XdpContext,
    pkt: &Ipv4Packet,
    end: End,
    to: ([u8; 4], u16),
    route: ([u8; 4], [u8; 4]),
    cache: HopCache,
    unroutable: Verdict,
) -> Verdict {
    // SAFETY: parse() checked the headers.
    let (protocol, tos, tot_len) = unsafe { ((*pkt.ip).proto, (*pkt.ip).tos, u16::from_be_bytes((*pkt.ip).tot_len)) };
    let (addr, port) = to;
    match forward::lookup(ctx, route.0, route.1, protocol, tos, tot_len, cache) {
        Route::Out { ifindex, smac, dmac, .. } => {
            rewrite(pkt, end, addr, port);
            decrement_ttl(pkt.ip);
            forward::send(ctx, ifindex, smac, dmac)
        }
        Route::NoNeighbour => {
            rewrite(pkt, end, addr, port);
            (XDP_PASS, Counter::PassNoNeighbour)
        }
        Route::TooBig { mtu } => icmp::too_big(ctx, pkt, mtu),
        Route::Unreachable => unroutable,
    }
}

/// Replaces one end's address and port, updating the IPv4 and L4 checksums incrementally.
#[inline(always)]
fn rewrite(pkt: &Ipv4Packet, end: End, addr: [u8; 4], port: u16) {
    // SAFETY: parse() checked that all these fields lie inside the packet.
    unsafe {
        let ip = &mut *pkt.ip;
        let (addr_field, port_field) = match end {
            End::Source => (&mut ip.src_addr, pkt.src_port),
            End::Destination => (&mut ip.dst_addr, pkt.dst_port),
        };
        let old_addr = *addr_field;
        let old_port = *port_field;
        *addr_field = addr;
        *port_field = port;
        ip.check = replace32(u16::from_ne_bytes(ip.check), old_addr, addr).to_ne_bytes();

        // The L4 checksum covers the pseudo-header (addresses) and the ports.
        let old_check = *pkt.l4_check;
        if ip.proto == ip_proto::UDP && old_check == 0 {
            return; // UDP without a checksum stays without one.
        }
        let check = replace16(replace32(old_check, old_addr, addr), old_port, port);
        *pkt.l4_check = if ip.proto == ip_proto::UDP { udp_fixup(old_check, check) } else { check };
    }
}
