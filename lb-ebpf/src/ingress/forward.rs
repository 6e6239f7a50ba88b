//! The next hop: `bpf_fib_lookup` for the rewritten packet, then XDP_TX out of the same
//! interface or a redirect to another; and the TTL decrement of packets this program forwards.
use aya_ebpf::EbpfContext;
use aya_ebpf::bindings::xdp_action::{XDP_REDIRECT, XDP_TX};
use aya_ebpf::bindings::{
    BPF_FIB_LKUP_RET_FRAG_NEEDED, BPF_FIB_LKUP_RET_NO_NEIGH, BPF_FIB_LKUP_RET_SUCCESS, bpf_fib_lookup,
};
use aya_ebpf::helpers::generated::{bpf_fib_lookup as fib_lookup, bpf_redirect};
use aya_ebpf::programs::XdpContext;
use lb_common::csum::replace16;
use lb_common::nexthop::{NextHop, NextHopKey};
use lb_common::stats::Counter;
use lb_ebpf::packet::ptr_at;
use network_types::eth::EthHdr;
use network_types::ip::Ipv4Hdr;

use crate::maps::{self, HopCache};
use crate::verdict::Verdict;

const AF_INET: u8 = 2;

/// The source address of route lookups towards backends: the route is the same for every
/// client (source-based policy routing towards backends is not supported), and so one cached
/// answer per backend serves them all.
pub const ANY_SOURCE: [u8; 4] = [0; 4];

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

/// Where an IPv4 packet `src → dst` of `tot_len` bytes goes: this CPU's cached answer if it is
/// of the current generation and the packet is no larger than one the route already accepted,
/// else the FIB's (cached for next time when it is a success).
#[inline(always)]
pub fn lookup(
    ctx: &XdpContext,
    src: [u8; 4],
    dst: [u8; 4],
    protocol: u8,
    tos: u8,
    tot_len: u16,
    cache: HopCache,
) -> Route {
    let key = NextHopKey { src, dst, ingress_ifindex: ctx.ingress_ifindex() as u32, tos: tos as u32 };
    let generation = maps::config().map_or(0, |c| c.nexthop_generation);
    let cached = maps::next_hop(cache, &key).filter(|hop| generation != 0 && hop.generation == generation);
    if let Some(hop) = cached
        && tot_len <= hop.max_len
    {
        return Route::Out { ifindex: hop.ifindex, smac: hop.smac, dmac: hop.dmac, adjacent: hop.via_gateway == 0 };
    }
    maps::count(Counter::NexthopLookup);
    let route = fib(ctx, src, dst, protocol, tos, tot_len);
    if let Route::Out { ifindex, smac, dmac, adjacent } = route
        && generation != 0
    {
        let max_len = match cached {
            Some(hop) if hop.ifindex == ifindex && hop.max_len > tot_len => hop.max_len,
            _ => tot_len,
        };
        let via_gateway = u8::from(!adjacent);
        maps::remember_next_hop(
            cache,
            &NextHop { key, ifindex, max_len, smac, dmac, via_gateway, _pad: 0, generation },
        );
    }
    route
}

/// What the kernel's FIB says about an IPv4 packet `src → dst` of `tot_len` bytes.
#[inline(always)]
fn fib(ctx: &XdpContext, src: [u8; 4], dst: [u8; 4], protocol: u8, tos: u8, tot_len: u16) -> Route {
    let mut params = zeroed_params();
    params.family = AF_INET;
    params.l4_protocol = protocol;
    params.__bindgen_anon_1.tot_len = tot_len;
    params.__bindgen_anon_2.tos = tos;
    params.__bindgen_anon_3.ipv4_src = u32::from_ne_bytes(src);
    params.__bindgen_anon_4.ipv4_dst = u32::from_ne_bytes(dst);
    params.ifindex = ctx.ingress_ifindex() as u32;
    // SAFETY: params is a valid, writable bpf_fib_lookup of the size passed.
    let rc = unsafe { fib_lookup(ctx.as_ptr(), &mut params, core::mem::size_of::<bpf_fib_lookup>() as i32, 0) };
    match rc as u32 {
        // The kernel writes the gateway, if there is one, over the destination.
        BPF_FIB_LKUP_RET_SUCCESS => Route::Out {
            ifindex: params.ifindex,
            smac: params.smac,
            dmac: params.dmac,
            // SAFETY: the kernel sets ipv4_dst with this return code.
            adjacent: unsafe { params.__bindgen_anon_4.ipv4_dst } == u32::from_ne_bytes(dst),
        },
        BPF_FIB_LKUP_RET_NO_NEIGH => Route::NoNeighbour,
        // SAFETY: the kernel sets mtu_result with this return code.
        BPF_FIB_LKUP_RET_FRAG_NEEDED => Route::TooBig { mtu: unsafe { params.__bindgen_anon_1.mtu_result } },
        _ => Route::Unreachable,
    }
}

/// A zeroed `bpf_fib_lookup`, written as sixteen volatile words: plain zeroing is merged by
/// LLVM into a memset that the BPF backend turns into a call to a byte-at-a-time loop.
#[inline(always)]
fn zeroed_params() -> bpf_fib_lookup {
    const WORDS: usize = core::mem::size_of::<bpf_fib_lookup>() / 4;
    let mut raw = core::mem::MaybeUninit::<bpf_fib_lookup>::uninit();
    let words = raw.as_mut_ptr() as *mut u32;
    for i in 0..WORDS {
        // SAFETY: in bounds of `raw`, which is 4-byte aligned.
        unsafe { words.add(i).write_volatile(0) };
    }
    // SAFETY: every byte was written; all-zero is a valid bpf_fib_lookup.
    unsafe { raw.assume_init() }
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

/// Decrements an IPv4 header's TTL (checked > 1 before), updating its checksum.
#[inline(always)]
pub fn decrement_ttl(ip: *mut Ipv4Hdr) {
    // SAFETY: the caller's parse() checked the header.
    unsafe {
        let ip = &mut *ip;
        let old = u16::from_ne_bytes([ip.ttl, ip.proto]);
        ip.ttl -= 1;
        let new = u16::from_ne_bytes([ip.ttl, ip.proto]);
        ip.check = replace16(u16::from_ne_bytes(ip.check), old, new).to_ne_bytes();
    }
}
