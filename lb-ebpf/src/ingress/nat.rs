//! NAT forwarding: the destination becomes the backend (client address kept, so the backend
//! must route replies back through the balancer), and replies get the VIP back as source.
//! Checksums are updated incrementally; TTL is decremented as any router would.
use aya_ebpf::bindings::xdp_action::{XDP_DROP, XDP_PASS};
use aya_ebpf::programs::XdpContext;
use lb_common::csum::{replace16, replace32, udp_fixup};
use lb_common::flow::ReverseEntry;
use lb_common::{ip_proto, ipv4_octets};
use lb_common::stats::Counter;
use lb_common::vip::VipInfo;
use lb_ebpf::packet::packet_len;

use crate::forward::{self, ANY_SOURCE, Route, decrement_ttl};
use crate::maps::HopCache;
use crate::flow::{Flow, flow_key};
use crate::parse::Ipv4Packet;
use crate::verdict::Verdict;
use crate::{icmp, maps, select};

/// Which end of the packet a rewrite changes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    Source,
    Destination,
}

#[inline(always)]
pub fn balance_nat(
    ctx: &XdpContext,
    pkt: &Ipv4Packet,
    vip: &VipInfo,
    flow: &Flow,
) -> Verdict {
    // SAFETY: parse() checked the header.
    if unsafe { (*pkt.ip).ttl } <= 1 {
        return (XDP_PASS, Counter::PassTtlExpired);
    }
    let key = flow.key;
    let (client, client_port, vip_port, protocol) = (ipv4_octets(&key.src), key.src_port, key.dst_port, key.protocol);
    let choice = match select::choose(vip, flow, pkt.opens_connection()) {
        Ok(choice) => choice,
        Err(verdict) => return verdict,
    };
    let backend = choice.backend;
    let backend_addr = ipv4_octets(&backend.addr);
    if choice.placed {
        let reply = flow_key(backend_addr, client, backend.port, client_port, protocol);
        maps::record_reverse_flow(
            &reply,
            choice.tables.hash(&reply),
            &ReverseEntry {
                vip_addr: key.dst,
                vip_port,
                family: key.family,
                _pad: 0,
                vip_id: vip.id,
            },
            &choice.tables,
        );
    }
    let bytes = packet_len(ctx);
    let to_backend = (ANY_SOURCE, backend_addr);
    let verdict = rewrite_and_send(ctx, pkt, End::Destination, (backend_addr, backend.port), to_backend, HopCache::Backend(choice.backend_id));
    if verdict.0 != XDP_DROP && verdict.1 != Counter::ForwardIcmpTooBig {
        maps::count_traffic(vip.id, choice.backend_id, bytes);
    }
    verdict
}

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
    rewrite_and_send(ctx, pkt, End::Source, (vip_addr, reverse.vip_port), (vip_addr, client), HopCache::Address)
}

/// Rewrites one end of the packet to `to` (address, port) and sends it along `route` (source
/// and destination of the route lookup). The route is looked up first, so that a packet too
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
) -> Verdict {
    // SAFETY: parse() checked the headers.
    let (protocol, tos, tot_len) =
        unsafe { ((*pkt.ip).proto, (*pkt.ip).tos, u16::from_be_bytes((*pkt.ip).tot_len)) };
    let (addr, port) = to;
    match forward::lookup(ctx, route.0, route.1, protocol, tos, tot_len, cache) {
        Route::Out { ifindex, smac, dmac } => {
            rewrite(pkt, end, addr, port);
            decrement_ttl(pkt.ip);
            forward::send(ctx, ifindex, smac, dmac)
        }
        Route::NoNeighbour => {
            rewrite(pkt, end, addr, port);
            (XDP_PASS, Counter::PassNoNeighbour)
        }
        Route::TooBig { mtu } => icmp::too_big(ctx, pkt, mtu),
        Route::Unreachable => (XDP_DROP, Counter::DropNoRoute),
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
