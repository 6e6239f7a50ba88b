//! lb_decap: the DSR backend's half. IPIP packets, and GUE packets (UDP to `gue::PORT`, see
//! `lb_common::gue`), arriving on the interface from an allowed outer source (the balancers:
//! DECAP_SOURCES prefixes) lose their outer headers and go up the stack as the client's
//! original packet (addressed to the VIP the backend holds locally).
//! Everything else passes untouched: opening tunnels from anyone would let any host inject
//! packets as if from any client. For hosts without an ipip device (`lb-ctl decap attach IFACE
//! --from PREFIX`).
//!
//! lb_pass: a bare XDP_PASS. The benchmark's baseline, and what a receiving veth peer needs so
//! frames sent to it with XDP_TX or a redirect in native mode are delivered.
#![no_std]
#![no_main]

use aya_ebpf::bindings::xdp_action::XDP_PASS;
use aya_ebpf::helpers::generated::bpf_xdp_adjust_head;
use aya_ebpf::macros::{map, xdp};
use aya_ebpf::maps::lpm_trie::Key;
use aya_ebpf::maps::{LpmTrie, PerCpuArray};
use aya_ebpf::programs::XdpContext;
use lb_common::stats::DecapCounter;
use lb_common::{gue, ip_proto};
use lb_ebpf::packet::{ETH_P_IPV4, IPV4_LEN, link_layer, ptr_at};
use network_types::eth::EthHdr;
use network_types::ip::Ipv4Hdr;

#[map]
static DECAP_COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(DecapCounter::COUNT, 0);
/// Allowed outer sources: IPv4 prefixes (address in network order) → 1.
#[map]
static DECAP_SOURCES: LpmTrie<[u8; 4], u8> = LpmTrie::with_max_entries(lb_common::limits::MAX_DECAP_SOURCES, 0);

#[xdp]
pub fn lb_decap(ctx: XdpContext) -> u32 {
    let counter = decap(&ctx);
    if let Some(value) = DECAP_COUNTERS.get_ptr_mut(counter as u32) {
        // SAFETY: per-CPU slot.
        unsafe { *value += 1 };
    }
    XDP_PASS
}

#[xdp]
pub fn lb_pass(_ctx: XdpContext) -> u32 {
    XDP_PASS
}

#[inline(always)]
fn decap(ctx: &XdpContext) -> DecapCounter {
    let Some((ether_type, l2)) = link_layer(ctx) else {
        return DecapCounter::Passed;
    };
    if ether_type != ETH_P_IPV4 {
        return DecapCounter::Passed;
    }
    let Some(outer) = ptr_at::<Ipv4Hdr>(ctx, l2) else {
        return DecapCounter::Passed;
    };
    // SAFETY: bounds checked.
    let (vihl, proto, frags) = unsafe { ((*outer).vihl, (*outer).proto, u16::from_be_bytes((*outer).frags)) };
    // Only whole, option-less IPIP or GUE datagrams; anything else is the stack's business.
    if vihl != 0x45 || frags & 0x3fff != 0 {
        return DecapCounter::Passed;
    }
    let outer_len = match proto {
        ip_proto::IPIP => IPV4_LEN,
        ip_proto::UDP => match ptr_at::<[u8; 4]>(ctx, l2 + IPV4_LEN) {
            // SAFETY: bounds checked; the UDP ports.
            Some(ports) if u16::from_be_bytes(unsafe { [(*ports)[2], (*ports)[3]] }) == gue::PORT => gue::OVERHEAD,
            _ => return DecapCounter::Passed,
        },
        _ => return DecapCounter::Passed,
    };
    // SAFETY: bounds checked.
    let source = unsafe { (*outer).src_addr };
    if DECAP_SOURCES.get(Key::new(32, source)).is_none() {
        return DecapCounter::Refused;
    }
    let Some(inner) = ptr_at::<Ipv4Hdr>(ctx, l2 + outer_len) else {
        return DecapCounter::Malformed;
    };
    // SAFETY: bounds checked.
    if unsafe { (*inner).vihl } >> 4 != 4 {
        return DecapCounter::Malformed;
    }
    let removed = match (l2 == EthHdr::LEN, outer_len == IPV4_LEN) {
        (true, true) => strip::<14, IPV4_LEN>(ctx),
        (false, true) => strip::<18, IPV4_LEN>(ctx),
        (true, false) => strip::<14, { gue::OVERHEAD }>(ctx),
        (false, false) => strip::<18, { gue::OVERHEAD }>(ctx),
    };
    if removed { DecapCounter::Decapsulated } else { DecapCounter::Malformed }
}

/// Moves the `L2`-byte link header forward over the `N` bytes of outer headers and drops them.
#[inline(always)]
fn strip<const L2: usize, const N: usize>(ctx: &XdpContext) -> bool {
    let Some(l2) = ptr_at::<[u8; L2]>(ctx, 0) else {
        return false;
    };
    // SAFETY: bounds checked.
    let saved = unsafe { *l2 };
    // SAFETY: helper call on our own context.
    if unsafe { bpf_xdp_adjust_head(ctx.ctx, N as i32) } != 0 {
        return false;
    }
    let Some(l2) = ptr_at::<[u8; L2]>(ctx, 0) else {
        return false;
    };
    // SAFETY: bounds checked after the head moved.
    unsafe { *l2 = saved };
    true
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
