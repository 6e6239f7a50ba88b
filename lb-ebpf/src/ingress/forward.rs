//! The next hop: `bpf_fib_lookup` for the rewritten packet, then XDP_TX out of the same
//! interface or a redirect to another.
use aya_ebpf::bindings::xdp_action::{XDP_REDIRECT, XDP_TX};
use aya_ebpf::bindings::{
    BPF_FIB_LKUP_RET_FRAG_NEEDED, BPF_FIB_LKUP_RET_NO_NEIGH, BPF_FIB_LKUP_RET_SUCCESS,
    bpf_fib_lookup,
};
use aya_ebpf::helpers::generated::{bpf_fib_lookup as fib_lookup, bpf_redirect};
use aya_ebpf::programs::XdpContext;
use aya_ebpf::EbpfContext;
use lb_common::stats::Counter;
use network_types::eth::EthHdr;

use crate::Verdict;
use crate::parse::ptr_at;

const AF_INET: u8 = 2;

pub enum Route {
    /// Send out of `ifindex` with these addresses.
    Out { ifindex: u32, smac: [u8; 6], dmac: [u8; 6] },
    /// Routed, but the next hop's MAC is not known yet.
    NoNeighbour,
    /// Larger than the egress MTU.
    TooBig,
    /// No usable route (unreachable, blackhole, prohibited, forwarding disabled).
    NoRoute,
}

/// What the kernel's FIB says about an IPv4 packet `src → dst` of `tot_len` bytes.
#[inline(always)]
pub fn lookup(
    ctx: &XdpContext,
    src: [u8; 4],
    dst: [u8; 4],
    protocol: u8,
    tos: u8,
    tot_len: u16,
) -> Route {
    // SAFETY: bpf_fib_lookup is plain old data; zero is a valid value for every field.
    let mut params: bpf_fib_lookup = unsafe { core::mem::zeroed() };
    params.family = AF_INET;
    params.l4_protocol = protocol;
    params.__bindgen_anon_1.tot_len = tot_len;
    params.__bindgen_anon_2.tos = tos;
    params.__bindgen_anon_3.ipv4_src = u32::from_ne_bytes(src);
    params.__bindgen_anon_4.ipv4_dst = u32::from_ne_bytes(dst);
    params.ifindex = ctx.ingress_ifindex() as u32;
    // SAFETY: params is a valid, writable bpf_fib_lookup of the size passed.
    let rc = unsafe {
        fib_lookup(
            ctx.as_ptr(),
            &mut params,
            core::mem::size_of::<bpf_fib_lookup>() as i32,
            0,
        )
    };
    match rc as u32 {
        BPF_FIB_LKUP_RET_SUCCESS => Route::Out {
            ifindex: params.ifindex,
            smac: params.smac,
            dmac: params.dmac,
        },
        BPF_FIB_LKUP_RET_NO_NEIGH => Route::NoNeighbour,
        BPF_FIB_LKUP_RET_FRAG_NEEDED => Route::TooBig,
        _ => Route::NoRoute,
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
