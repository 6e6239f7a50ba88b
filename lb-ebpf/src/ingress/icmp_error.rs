//! ICMP errors about VIP flows ("fragmentation needed" from a router on the client's path, a
//! client's "port unreachable", ...) arrive addressed to the VIP, but only the flow's backend
//! can act on them: path MTU discovery for a backend's replies depends on it. The quoted packet
//! (VIP → client) names the flow; the error goes to that flow's backend — NAT: with the VIP
//! replaced by the backend in the outer destination and in the quote, as if the backend's reply
//! had not been rewritten; DSR: encapsulated untouched, as the backend holds the VIP. Errors
//! about no known flow are passed to the stack untouched, like any other ICMP.
use aya_ebpf::bindings::xdp_action::{XDP_DROP, XDP_PASS};
use aya_ebpf::programs::XdpContext;
use lb_common::backend::Backend;
use lb_common::config::port_flags;
use lb_common::csum::{replace16, replace32};
use lb_common::stats::Counter;
use lb_common::vip::{VipInfo, VipKey, forwarding};
use lb_common::{family, gue, ip_proto, ipv4_octets};
use lb_ebpf::packet::packet_len;

use crate::encap::{self, Encap, TooBig};
use crate::flow::flow_key;
use crate::forward::{self, ANY_SOURCE, Route, decrement_ttl};
use crate::l2;
use crate::maps::{self, HopCache};
use crate::parse::IcmpError;
use crate::verdict::Verdict;

const NOT_OURS: Verdict = (XDP_PASS, Counter::PassNotVip);

#[inline(always)]
pub fn to_backend(ctx: &XdpContext, err: &IcmpError) -> Verdict {
    // SAFETY: parse() checked the outer header, the quoted header and its ports.
    let (to, ttl, vip_addr, client, protocol, vip_port, client_port) = unsafe {
        let quoted = &*err.quoted;
        (
            (*err.ip).dst_addr,
            (*err.ip).ttl,
            quoted.src_addr,
            quoted.dst_addr,
            quoted.proto,
            *err.quoted_src_port,
            *err.quoted_dst_port,
        )
    };
    let vip_bit = if protocol == ip_proto::TCP { port_flags::VIP_TCP } else { port_flags::VIP_UDP };
    if maps::port_flags(u16::from_be(vip_port)) & vip_bit == 0 || to != vip_addr {
        return NOT_OURS;
    }
    let Some(tables) = maps::tables() else {
        return NOT_OURS;
    };
    let key = flow_key(client, vip_addr, client_port, vip_port, protocol);
    let Some((slot, _)) = maps::flow(&key, tables.hash(&key), &tables) else {
        return NOT_OURS;
    };
    // SAFETY: a valid map value pointer; the way holds this flow.
    let entry = unsafe { (*slot).value };
    let vip_key = VipKey { addr: lb_common::ipv4_bytes(vip_addr), port: vip_port, protocol, family: family::IPV4 };
    let Some(vip) = maps::vip_info(entry.vip_id).filter(|vip| vip.key == vip_key) else {
        return NOT_OURS;
    };
    // Only the backend the flow was recorded for (same id holder, still active).
    let Some(backend) = maps::backend(entry.backend_id).filter(|b| b.is_active() && b.generation == entry.generation)
    else {
        return NOT_OURS;
    };
    if ttl <= 1 {
        return (XDP_PASS, Counter::PassTtlExpired);
    }
    maps::count(Counter::IcmpToBackend);
    let encap = match vip.forwarding {
        forwarding::DSR_IPIP => Some(Encap::Ipip),
        // Any source port: errors are rare, and spreading them over queues does not matter.
        forwarding::DSR_GUE => Some(Encap::Gue { source_port: gue::source_port(0) }),
        _ => None,
    };
    if let Some(encap) = encap {
        // Never an ICMP error about an ICMP error (RFC 1122): too big is dropped.
        return match encap::send_encapsulated(ctx, err.l3_offset, err.ip, vip, entry.backend_id, backend, encap) {
            Ok(verdict) => verdict,
            Err(TooBig { .. }) => (XDP_DROP, Counter::DropTooBig),
        };
    }
    if vip.forwarding == forwarding::DSR_L2 {
        // Unchanged, to the backend's MAC; too big is dropped (no ICMP about an ICMP error).
        return l2::send_l2(ctx, err.ip, vip, entry.backend_id, backend).unwrap_or((XDP_DROP, Counter::DropTooBig));
    }
    to_nat_backend(ctx, err, vip, entry.backend_id, backend)
}

/// NAT: the error goes to the backend as if about its own, unrewritten reply.
#[inline(always)]
fn to_nat_backend(ctx: &XdpContext, err: &IcmpError, vip: &VipInfo, backend_id: u32, backend: &Backend) -> Verdict {
    let backend_addr = ipv4_octets(&backend.addr);
    // SAFETY: parse() checked the outer header.
    let (tos, tot_len) = unsafe { ((*err.ip).tos, u16::from_be_bytes((*err.ip).tot_len)) };
    let bytes = packet_len(ctx);
    let (ifindex, smac, dmac) = match forward::lookup(
        ctx,
        ANY_SOURCE,
        backend_addr,
        ip_proto::ICMP,
        tos,
        tot_len,
        HopCache::Backend(backend_id),
    ) {
        Route::Out { ifindex, smac, dmac, .. } => (ifindex, smac, dmac),
        Route::NoNeighbour => {
            rewrite(err, backend_addr, backend.port);
            return (XDP_PASS, Counter::PassNoNeighbour);
        }
        Route::TooBig { .. } => return (XDP_DROP, Counter::DropTooBig),
        Route::Unreachable => return (XDP_DROP, Counter::DropNoRoute),
    };
    rewrite(err, backend_addr, backend.port);
    decrement_ttl(err.ip);
    let verdict = forward::send(ctx, ifindex, smac, dmac);
    if verdict.0 != XDP_DROP {
        maps::count_traffic(vip.id, backend_id, bytes);
    }
    verdict
}

/// The VIP becomes the backend: outer destination, quoted source address and port, with the
/// outer, quoted and ICMP checksums updated incrementally (every changed word sits at an even
/// offset of the ICMP message, as RFC 1624 needs).
#[inline(always)]
fn rewrite(err: &IcmpError, backend_addr: [u8; 4], backend_port: u16) {
    // SAFETY: parse() checked every field touched here.
    unsafe {
        let ip = &mut *err.ip;
        let vip_addr = ip.dst_addr;
        ip.dst_addr = backend_addr;
        ip.check = replace32(u16::from_ne_bytes(ip.check), vip_addr, backend_addr).to_ne_bytes();

        let quoted = &mut *err.quoted;
        let old_quoted_check = u16::from_ne_bytes(quoted.check);
        quoted.src_addr = backend_addr;
        let new_quoted_check = replace32(old_quoted_check, vip_addr, backend_addr);
        quoted.check = new_quoted_check.to_ne_bytes();
        let old_port = *err.quoted_src_port;
        *err.quoted_src_port = backend_port;

        let check = replace32(*err.icmp_check, vip_addr, backend_addr);
        let check = replace16(check, old_quoted_check, new_quoted_check);
        *err.icmp_check = replace16(check, old_port, backend_port);
    }
}
