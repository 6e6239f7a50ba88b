//! ICMP errors about VIP flows, both ways.
//!
//! To a backend: errors about a VIP's packets ("fragmentation needed" from a router on the
//! client's path, a client's "port unreachable", ...) arrive addressed to the VIP, but only the
//! flow's backend can act on them: path MTU discovery for a backend's replies depends on it.
//! The quoted packet (VIP → client) names the flow; the error goes to that flow's backend —
//! NAT: with the VIP replaced by the backend in the outer destination and in the quote, as if
//! the backend's reply had not been rewritten; DSR: encapsulated untouched, as the backend holds
//! the VIP.
//!
//! To a client (NAT, `icmp_reply`): errors about a client's packet as the balancer sent it on
//! (client → backend: a UDP backend's "port unreachable", a router's "fragmentation needed" on
//! the backend's path) must not reach the client naming the backend.
//!
//! Errors about no known flow are passed to the stack untouched, like any other ICMP.
use aya_ebpf::bindings::xdp_action::{XDP_DROP, XDP_PASS};
use aya_ebpf::programs::XdpContext;
use lb_common::backend::Backend;
use lb_common::config::port_flags;
use lb_common::csum::{replace16, replace32, replace128, udp_fixup};
use lb_common::flow::FlowKey;
use lb_common::stats::Counter;
use lb_common::vip::{VipInfo, VipKey, forwarding};
use lb_common::{IpBytes, family, gue, ip_proto, ipv4_bytes};
use lb_ebpf::packet::packet_len;

use crate::addr::{Addr, field, ipv6_len, load, store, traffic_class};
use crate::encap::{self, Encap, Inner, TooBig};
use crate::forward::{self, ANY_SOURCE, Lookup, Route, decrement_hop_limit, decrement_ttl};
use crate::icmp_reply;
use crate::ip::End;
use crate::l2::{self, Sent};
use crate::maps::{self, HopCache};
use crate::parse::IcmpError;
use crate::parse6::Icmp6Error;
use crate::verdict::Verdict;

const NOT_OURS: Verdict = (XDP_PASS, Counter::PassNotVip);

/// An ICMP (or ICMPv6) error about a flow: what it says, and how it is rewritten for a NAT
/// backend.
pub trait FlowError {
    const FAMILY: u8;
    /// The ICMP protocol number of this family.
    const PROTOCOL: u8;
    /// The protocol number of this family inside an outer IP header.
    const ENCAPSULATED_AS: u8;
    fn l3_offset(&self) -> usize;
    /// The error's destination, and its TTL (hop limit).
    fn destination(&self) -> (IpBytes, u8);
    /// The quoted packet's flow, as its sender sent it: VIP → client.
    fn quoted(&self) -> FlowKey;
    fn tos(&self) -> u8;
    fn ip_len(&self) -> u16;
    /// The quote's `end` becomes `to` (address and port); so does the outer header's other end
    /// (the destination for the quote's source) where it holds the same address. To a backend:
    /// the VIP becomes the backend in the quote's source and the outer destination. To a
    /// client: the backend becomes the VIP in the quote's destination, and in the outer source
    /// when the backend sent the error (not when a router on its path did).
    fn rewrite(&self, end: End, to: &Addr, port: u16);
    fn decrement_ttl(&self);
}

/// An ICMP error: to a VIP flow's backend, to a NAT flow's client, or passed untouched. Either
/// way the error goes to the quoted packet's sender: the VIP (its packet to a client), or the
/// client (its packet to a backend).
#[inline(always)]
pub fn handle<E: FlowError>(ctx: &XdpContext, err: &E) -> Verdict {
    let (to, ttl) = err.destination();
    let quoted = err.quoted();
    let Some((vip_bit, backend_bit)) = port_flags::of_protocol(quoted.protocol) else {
        return NOT_OURS;
    };
    if to != quoted.src {
        return NOT_OURS;
    }
    let verdict = if maps::port_flags(u16::from_be(quoted.src_port)) & vip_bit != 0 {
        to_backend(ctx, err, &quoted, ttl)
    } else {
        NOT_OURS
    };
    // A client's source port may also be a VIP's: not a VIP flow's then, it may still be a NAT
    // flow's.
    if verdict != NOT_OURS || maps::port_flags(u16::from_be(quoted.dst_port)) & backend_bit == 0 {
        return verdict;
    }
    icmp_reply::to_client(ctx, err, &quoted, ttl)
}

/// An error about a VIP's packet (`quoted`: VIP → client), addressed to the VIP with `ttl`.
#[inline(always)]
fn to_backend<E: FlowError>(ctx: &XdpContext, err: &E, quoted: &FlowKey, ttl: u8) -> Verdict {
    let (vip_addr, vip_port, protocol) = (quoted.src, quoted.src_port, quoted.protocol);
    let Some(tables) = maps::tables() else {
        return NOT_OURS;
    };
    // The flow as the client sends it: client → VIP.
    let key = quoted.reversed();
    let Some((slot, _)) = maps::flow(&key, tables.hash(&key), &tables) else {
        return NOT_OURS;
    };
    // SAFETY: a valid map value pointer; the way holds this flow.
    let entry = unsafe { (*slot).value };
    let vip_key = VipKey { addr: vip_addr, port: vip_port, protocol, family: E::FAMILY };
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
        let inner = Inner {
            l3_offset: err.l3_offset(),
            protocol: E::ENCAPSULATED_AS,
            tos: err.tos(),
            len: err.ip_len(),
            entropy: 0,
        };
        // Never an ICMP error about an ICMP error (RFC 1122, RFC 4443): too big is dropped.
        let to = (entry.backend_id, backend);
        return match encap::send_encapsulated(ctx, &inner, vip, to, encap, tables.nexthop_generation) {
            Ok(verdict) => verdict,
            Err(TooBig { .. }) => (XDP_DROP, Counter::DropTooBig),
        };
    }
    if vip.forwarding == forwarding::DSR_L2 {
        // Unchanged, to the backend's MAC; too big is dropped (no ICMP about an ICMP error).
        let sent = Sent { family: E::FAMILY, protocol: E::PROTOCOL, tos: err.tos(), len: err.ip_len() };
        let to = (entry.backend_id, backend);
        return l2::send_l2(ctx, &sent, vip, to, tables.nexthop_generation).unwrap_or((XDP_DROP, Counter::DropTooBig));
    }
    to_nat_backend(ctx, err, vip, (entry.backend_id, backend), tables.nexthop_generation)
}

/// NAT: the error goes to the backend as if about its own, unrewritten reply.
#[inline(always)]
fn to_nat_backend<E: FlowError>(
    ctx: &XdpContext,
    err: &E,
    vip: &VipInfo,
    (backend_id, backend): (u32, &Backend),
    generation: u32,
) -> Verdict {
    let bytes = packet_len(ctx);
    let query = route_of(err, (&ANY_SOURCE, field(&backend.addr)), generation);
    let (ifindex, smac, dmac) = match forward::lookup(ctx, &query, HopCache::Backend(backend_id)) {
        Route::Out { ifindex, smac, dmac, .. } => (ifindex, smac, dmac),
        Route::NoNeighbour => {
            err.rewrite(End::Source, field(&backend.addr), backend.port);
            return (XDP_PASS, Counter::PassNoNeighbour);
        }
        Route::TooBig { .. } => return (XDP_DROP, Counter::DropTooBig),
        Route::Unreachable => return (XDP_DROP, Counter::DropNoRoute),
    };
    err.rewrite(End::Source, field(&backend.addr), backend.port);
    err.decrement_ttl();
    let verdict = forward::send(ctx, ifindex, smac, dmac);
    if verdict.0 != XDP_DROP {
        maps::count_traffic(vip.id, backend_id, bytes);
    }
    verdict
}

/// The route lookup of `err` sent `route.0 → route.1`, with next-hop `generation`.
#[inline(always)]
pub fn route_of<'a, E: FlowError>(err: &E, route: (&'a Addr, &'a Addr), generation: u32) -> Lookup<'a> {
    Lookup {
        family: E::FAMILY,
        src: route.0,
        dst: route.1,
        protocol: E::PROTOCOL,
        tos: err.tos(),
        tot_len: err.ip_len(),
        generation,
    }
}

impl FlowError for IcmpError {
    const FAMILY: u8 = family::IPV4;
    const PROTOCOL: u8 = ip_proto::ICMP;
    const ENCAPSULATED_AS: u8 = ip_proto::IPIP;

    #[inline(always)]
    fn l3_offset(&self) -> usize {
        self.l3_offset
    }
    #[inline(always)]
    fn destination(&self) -> (IpBytes, u8) {
        // SAFETY: parse() checked the outer header, the quoted header and its ports (likewise
        // below).
        unsafe { (ipv4_bytes((*self.ip).dst_addr), (*self.ip).ttl) }
    }
    #[inline(always)]
    fn quoted(&self) -> FlowKey {
        unsafe {
            let quoted = &*self.quoted;
            FlowKey::new(
                ipv4_bytes(quoted.src_addr),
                ipv4_bytes(quoted.dst_addr),
                *self.quoted_src_port,
                *self.quoted_dst_port,
                quoted.proto,
                family::IPV4,
            )
        }
    }
    #[inline(always)]
    fn tos(&self) -> u8 {
        unsafe { (*self.ip).tos }
    }
    #[inline(always)]
    fn ip_len(&self) -> u16 {
        unsafe { u16::from_be_bytes((*self.ip).tot_len) }
    }
    /// The outer, quoted and ICMP checksums are updated incrementally (every changed word sits
    /// at an even offset of the ICMP message, as RFC 1624 needs).
    #[inline(always)]
    fn rewrite(&self, end: End, to: &Addr, port: u16) {
        let new = to.words()[0].to_ne_bytes();
        unsafe {
            let ip = &mut *self.ip;
            let quoted = &mut *self.quoted;
            let (outer, quote, quoted_port) = match end {
                End::Source => (&mut ip.dst_addr, &mut quoted.src_addr, self.quoted_src_port),
                End::Destination => (&mut ip.src_addr, &mut quoted.dst_addr, self.quoted_dst_port),
            };
            let old = *quote;
            if *outer == old {
                *outer = new;
                ip.check = replace32(u16::from_ne_bytes(ip.check), old, new).to_ne_bytes();
            }
            *quote = new;
            let old_quoted_check = u16::from_ne_bytes(quoted.check);
            let new_quoted_check = replace32(old_quoted_check, old, new);
            quoted.check = new_quoted_check.to_ne_bytes();
            let old_port = *quoted_port;
            *quoted_port = port;

            let check = replace32(*self.icmp_check, old, new);
            let check = replace16(check, old_quoted_check, new_quoted_check);
            let check = replace16(check, old_port, port);
            let udp = quoted.proto == ip_proto::UDP;
            *self.icmp_check =
                rewrite_quoted_l4(self.quoted_l4_check, udp, |c| replace32(c, old, new), (old_port, port), check);
        }
    }
    #[inline(always)]
    fn decrement_ttl(&self) {
        decrement_ttl(self.ip)
    }
}

impl FlowError for Icmp6Error {
    const FAMILY: u8 = family::IPV6;
    const PROTOCOL: u8 = ip_proto::ICMPV6;
    const ENCAPSULATED_AS: u8 = ip_proto::IPV6;

    #[inline(always)]
    fn l3_offset(&self) -> usize {
        self.l3_offset
    }
    #[inline(always)]
    fn destination(&self) -> (IpBytes, u8) {
        // SAFETY: parse() checked the outer header, the quoted header and its ports (likewise
        // below).
        unsafe { (load(&(*self.ip).dst_addr).0, (*self.ip).hop_limit) }
    }
    #[inline(always)]
    fn quoted(&self) -> FlowKey {
        unsafe {
            let quoted = &*self.quoted;
            FlowKey::new(
                load(&quoted.src_addr).0,
                load(&quoted.dst_addr).0,
                *self.quoted_src_port,
                *self.quoted_dst_port,
                quoted.next_hdr,
                family::IPV6,
            )
        }
    }
    #[inline(always)]
    fn tos(&self) -> u8 {
        traffic_class(unsafe { &*self.ip })
    }
    #[inline(always)]
    fn ip_len(&self) -> u16 {
        ipv6_len(unsafe { &*self.ip })
    }
    /// The ICMPv6 checksum covers the pseudo-header (so the outer addresses) and the quote: it
    /// changes with each address rewritten and the port. IPv6 headers have no checksum.
    #[inline(always)]
    fn rewrite(&self, end: End, to: &Addr, port: u16) {
        unsafe {
            let ip = &mut *self.ip;
            let quoted = &mut *self.quoted;
            let (outer, quote, quoted_port) = match end {
                End::Source => (&mut ip.dst_addr, &mut quoted.src_addr, self.quoted_src_port),
                End::Destination => (&mut ip.src_addr, &mut quoted.dst_addr, self.quoted_dst_port),
            };
            let old = load(quote);
            let (old_words, new_words) = (old.words(), to.words());
            let mut check = replace128(*self.icmp_check, &old_words, &new_words);
            if load(outer).words() == old_words {
                store(outer, to);
                check = replace128(check, &old_words, &new_words);
            }
            store(quote, to);
            let old_port = *quoted_port;
            *quoted_port = port;
            let check = replace16(check, old_port, port);
            let udp = quoted.next_hdr == ip_proto::UDP;
            let readdress = |c| replace128(c, &old_words, &new_words);
            *self.icmp_check = rewrite_quoted_l4(self.quoted_l4_check, udp, readdress, (old_port, port), check);
        }
    }
    #[inline(always)]
    fn decrement_ttl(&self) {
        decrement_hop_limit(self.ip)
    }
}

/// Rewrites the quoted TCP/UDP checksum (`field`, null where the quote stops before it), as
/// conntrack's NAT does: its pseudo-header holds the rewritten address (`readdress`: the
/// checksum after that change) and the port changes (`ports`: old, new). A UDP quote without a
/// checksum keeps none. Returns the ICMP checksum `icmp_check` updated for the change.
///
/// # Safety
/// `field`, if not null, points into the packet (`parsed::quoted_l4_check`).
#[inline(always)]
unsafe fn rewrite_quoted_l4(
    field: *mut u16,
    udp: bool,
    readdress: impl Fn(u16) -> u16,
    (old_port, port): (u16, u16),
    icmp_check: u16,
) -> u16 {
    if field.is_null() {
        return icmp_check;
    }
    // SAFETY: by the caller's promise.
    let old = unsafe { *field };
    let new = replace16(readdress(old), old_port, port);
    let new = if udp { udp_fixup(old, new) } else { new };
    // SAFETY: as above.
    unsafe { *field = new };
    replace16(icmp_check, old, new)
}
