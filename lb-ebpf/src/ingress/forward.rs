//! The next hop: `bpf_fib_lookup` for the rewritten packet (IPv4 or IPv6), then XDP_TX out of
//! the same interface or a redirect to another; and the TTL (hop limit) decrement of packets
//! this program forwards.
use core::ptr::addr_of_mut;

use aya_ebpf::EbpfContext;
use aya_ebpf::bindings::xdp_action::{XDP_REDIRECT, XDP_TX};
use aya_ebpf::bindings::{
    BPF_FIB_LKUP_RET_FRAG_NEEDED, BPF_FIB_LKUP_RET_NO_NEIGH, BPF_FIB_LKUP_RET_SUCCESS, bpf_fib_lookup,
};
use aya_ebpf::helpers::generated::{bpf_fib_lookup as fib_lookup, bpf_redirect};
use aya_ebpf::programs::XdpContext;
use lb_common::csum::replace16;
use lb_common::family;
use lb_common::nexthop::{NextHop, NextHopKey};
use lb_common::stats::Counter;
use lb_ebpf::packet::ptr_at;
use network_types::eth::EthHdr;
use network_types::ip::{Ipv4Hdr, Ipv6Hdr};

use crate::addr::{Addr, field, load16, store16};
use crate::maps::{self, HopCache};
use crate::verdict::Verdict;

const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;

/// The source address of route lookups towards backends: the route is the same for every
/// client (source-based policy routing towards backends is not supported), and so one cached
/// answer per backend serves them all.
pub const ANY_SOURCE: Addr = Addr([0; 16]);

pub enum Route {
    /// Send out of `ifindex` with these addresses; `adjacent`: the destination itself is the
    /// next hop (no gateway), so `dmac` is its own.
    Out { ifindex: u32, smac: [u8; 6], dmac: [u8; 6], adjacent: bool },
    /// Routed, but the next hop's MAC is not known yet.
    NoNeighbour,
    /// Larger than the egress MTU, which is `mtu`.
    TooBig { mtu: u16 },
    /// No usable route (unreachable, blackhole, prohibited, forwarding disabled).
    Unreachable,
}

/// A route lookup: a packet of `family` from `src` to `dst` (16-byte map form), `tot_len`
/// bytes from its network header on.
pub struct Lookup<'a> {
    pub family: u8,
    pub src: &'a Addr,
    pub dst: &'a Addr,
    pub protocol: u8,
    pub tos: u8,
    pub tot_len: u16,
    /// `Tables::nexthop_generation`: cached answers of another generation are stale.
    pub generation: u32,
}

/// Where the packet of `query` goes: this CPU's cached answer if it is of the current
/// generation and the packet is no larger than one the route already accepted, else the
/// FIB's (cached for next time when it is a success).
#[inline(always)]
pub fn lookup(ctx: &XdpContext, query: &Lookup, cache: HopCache) -> Route {
    let ingress_ifindex = ctx.ingress_ifindex() as u32;
    let tot_len = query.tot_len;
    let generation = query.generation;
    // A backend's answer is compared with the query field by field, where it lies: no key is
    // built for it (building one costs every packet a 44-byte copy, and its zero source a
    // call to a byte-by-byte memset). A client's answer is looked up by key.
    let cached = match cache {
        HopCache::Backend(id) => {
            maps::backend_hop(id).filter(|entry| answers(&entry.key, query, ingress_ifindex)).map(|entry| &entry.hop)
        }
        HopCache::Address => with_key(query, ingress_ifindex, maps::client_hop),
    }
    .filter(|hop| generation != 0 && hop.generation == generation);
    if let Some(hop) = cached
        && tot_len <= hop.max_len
    {
        return Route::Out { ifindex: hop.ifindex, smac: hop.smac, dmac: hop.dmac, adjacent: hop.via_gateway == 0 };
    }
    maps::count(Counter::NexthopLookup);
    // The FIB lookup's parameters, in the scratch space too: taken only on a cache miss.
    let Some(scratch) = maps::scratch() else {
        return Route::Unreachable;
    };
    // SAFETY: this CPU's own map slot; `fib` is a field apart from `key`.
    let route = fib(ctx, query, unsafe { &mut (*scratch).fib });
    if let Route::Out { ifindex, smac, dmac, adjacent } = route
        && generation != 0
    {
        let max_len = match cached {
            Some(hop) if hop.ifindex == ifindex && hop.max_len > tot_len => hop.max_len,
            _ => tot_len,
        };
        let via_gateway = u8::from(!adjacent);
        let hop = NextHop { ifindex, max_len, smac, dmac, via_gateway, _pad: 0, generation };
        with_key(query, ingress_ifindex, |key| maps::remember_next_hop(cache, key, &hop));
    }
    route
}

/// Whether `key` is the key of this lookup (`query` on `ingress_ifindex`), compared word by
/// word (a derived `==` on 16-byte arrays may become a memcmp call, which BPF cannot make).
#[inline(always)]
fn answers(key: &NextHopKey, query: &Lookup, ingress_ifindex: u32) -> bool {
    let (src, dst) = (field(&key.src).words(), field(&key.dst).words());
    let (want_src, want_dst) = (query.src.words(), query.dst.words());
    let mut same = key.ingress_ifindex == ingress_ifindex && key.tos == query.tos as u32;
    same &= key.family == query.family as u32;
    for i in 0..4 {
        same &= src[i] == want_src[i] && dst[i] == want_dst[i];
    }
    same
}

/// Calls `f` with the key of this lookup. An IPv4 key stays on the stack (most of it constant
/// zeros, compared as such); an IPv6 one goes to this CPU's scratch space, as lb_ingress_v6's
/// stack has no room for it.
#[inline(always)]
fn with_key<R>(query: &Lookup, ingress_ifindex: u32, f: impl FnOnce(&NextHopKey) -> R) -> R {
    // The addresses pass through words: copied as `IpBytes` (alignment 1) they were sixteen
    // byte loads and stores each.
    let built = NextHopKey {
        src: Addr::from_words(query.src.words()).0,
        dst: Addr::from_words(query.dst.words()).0,
        ingress_ifindex,
        tos: query.tos as u32,
        family: query.family as u32,
    };
    match maps::scratch() {
        // SAFETY: this CPU's own map slot; nothing else uses it while this packet is handled.
        Some(scratch) if query.family == family::IPV6 => unsafe {
            (*scratch).key = built;
            f(&(*scratch).key)
        },
        _ => f(&built),
    }
}

/// What the kernel's FIB says about the packet of `query`. The lookup's parameters live in a
/// per-CPU map, not on the stack: the program's 512 bytes of stack are spent elsewhere.
#[inline(always)]
fn fib(ctx: &XdpContext, query: &Lookup, params: &mut bpf_fib_lookup) -> Route {
    zero(params);
    params.l4_protocol = query.protocol;
    params.__bindgen_anon_1.tot_len = query.tot_len;
    let v6 = query.family == family::IPV6;
    if v6 {
        params.family = AF_INET6;
        // The traffic class sits in the flow-info word's top bits (network order).
        params.__bindgen_anon_2.flowinfo = ((query.tos as u32) << 20).to_be();
        params.__bindgen_anon_3.ipv6_src = query.src.words();
        params.__bindgen_anon_4.ipv6_dst = query.dst.words();
    } else {
        params.family = AF_INET;
        params.__bindgen_anon_2.tos = query.tos;
        params.__bindgen_anon_3.ipv4_src = query.src.words()[0];
        params.__bindgen_anon_4.ipv4_dst = query.dst.words()[0];
    }
    params.ifindex = ctx.ingress_ifindex() as u32;
    // SAFETY: params is a valid, writable bpf_fib_lookup of the size passed.
    let rc = unsafe { fib_lookup(ctx.as_ptr(), params, core::mem::size_of::<bpf_fib_lookup>() as i32, 0) };
    match rc as u32 {
        // The kernel writes the gateway, if there is one, over the destination.
        BPF_FIB_LKUP_RET_SUCCESS => Route::Out {
            ifindex: params.ifindex,
            smac: params.smac,
            dmac: params.dmac,
            // SAFETY: the kernel sets ipv4_dst or ipv6_dst with this return code.
            adjacent: unsafe {
                if v6 {
                    params.__bindgen_anon_4.ipv6_dst == query.dst.words()
                } else {
                    params.__bindgen_anon_4.ipv4_dst == query.dst.words()[0]
                }
            },
        },
        BPF_FIB_LKUP_RET_NO_NEIGH => Route::NoNeighbour,
        // SAFETY: the kernel sets mtu_result with this return code.
        BPF_FIB_LKUP_RET_FRAG_NEEDED => Route::TooBig { mtu: unsafe { params.__bindgen_anon_1.mtu_result } },
        _ => Route::Unreachable,
    }
}

/// Zeroes a `bpf_fib_lookup` as sixteen volatile words: plain zeroing is merged by LLVM into a
/// memset that the BPF backend turns into a call to a byte-at-a-time loop.
#[inline(always)]
fn zero(params: &mut bpf_fib_lookup) {
    const WORDS: usize = core::mem::size_of::<bpf_fib_lookup>() / 4;
    let words = params as *mut bpf_fib_lookup as *mut u32;
    for i in 0..WORDS {
        // SAFETY: in bounds of the map value, which is 8-byte aligned.
        unsafe { words.add(i).write_volatile(0) };
    }
}

/// Writes the next hop's MAC addresses and sends the frame.
#[inline(always)]
pub fn send(ctx: &XdpContext, ifindex: u32, smac: [u8; 6], dmac: [u8; 6]) -> Verdict {
    let Some(eth) = ptr_at::<EthHdr>(ctx, 0) else {
        // Unreachable: the frame was parsed before; keep a defined answer anyway.
        return (aya_ebpf::bindings::xdp_action::XDP_DROP, Counter::DropEncapFailed);
    };
    // SAFETY: bounds checked by ptr_at.
    unsafe {
        (*eth).dst_addr = dmac;
        (*eth).src_addr = smac;
    }
    if ifindex == ctx.ingress_ifindex() as u32 {
        return (XDP_TX, Counter::ForwardTx);
    }
    // SAFETY: plain helper call.
    let rc = unsafe { bpf_redirect(ifindex, 0) };
    if rc as u32 == XDP_REDIRECT {
        (XDP_REDIRECT, Counter::ForwardRedirect)
    } else {
        (aya_ebpf::bindings::xdp_action::XDP_DROP, Counter::DropNoRoute)
    }
}

/// Decrements an IPv6 header's hop limit (checked > 1 before); IPv6 has no header checksum.
#[inline(always)]
pub fn decrement_hop_limit(ip: *mut Ipv6Hdr) {
    // SAFETY: the caller's parse() checked the header.
    unsafe { (*ip).hop_limit -= 1 };
}

/// Decrements an IPv4 header's TTL (checked > 1 before), updating its checksum.
#[inline(always)]
pub fn decrement_ttl(ip: *mut Ipv4Hdr) {
    // SAFETY: the caller's parse() checked the header.
    unsafe {
        let ip = &mut *ip;
        // TTL and protocol as the one 16-bit word the checksum sums them as (2-byte aligned,
        // at offset 8): byte by byte they are two loads, a store and the shifts to join them.
        let word = addr_of_mut!(ip.ttl) as *mut u16;
        let old = *word;
        let new = old.wrapping_sub(u16::from_ne_bytes([1, 0]));
        *word = new;
        let check = replace16(load16(&ip.check), old, new);
        store16(&mut ip.check, check);
    }
}
