//! lb_decap: the DSR backend's half. IP-in-IP packets (IPIP, 6in4, 4in6, IPv6 in IPv6), and GUE
//! packets (UDP to `gue::PORT`, see `lb_common::gue`) over IPv4 or IPv6, arriving on the
//! interface from an allowed outer source (the balancers: DECAP_SOURCES and DECAP_SOURCES6
//! prefixes) lose their outer headers and go up the stack as the client's
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
use lb_ebpf::packet::{ETH_P_IPV4, ETH_P_IPV6, IPV4_LEN, IPV6_LEN, link_layer, ptr_at};
use network_types::eth::EthHdr;
use network_types::ip::{Ipv4Hdr, Ipv6Hdr};

#[map]
static DECAP_COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(DecapCounter::COUNT, 0);
/// Allowed outer sources: IPv4 prefixes (address in network order) → 1.
#[map]
static DECAP_SOURCES: LpmTrie<[u8; 4], u8> = LpmTrie::with_max_entries(lb_common::limits::MAX_DECAP_SOURCES, 0);
/// Allowed outer sources: IPv6 prefixes → 1.
#[map]
static DECAP_SOURCES6: LpmTrie<[u8; 16], u8> = LpmTrie::with_max_entries(lb_common::limits::MAX_DECAP_SOURCES, 0);

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

/// An outer header's source address.
enum Source {
    V4([u8; 4]),
    V6([u8; 16]),
}

#[inline(always)]
fn decap(ctx: &XdpContext) -> DecapCounter {
    let Some((ether_type, l2)) = link_layer(ctx) else {
        return DecapCounter::Passed;
    };
    // The outer header: its protocol, length, and whether its source is an allowed balancer.
    let (protocol, ip_len, source) = if ether_type == ETH_P_IPV4 {
        let Some(outer) = ptr_at::<Ipv4Hdr>(ctx, l2) else {
            return DecapCounter::Passed;
        };
        // SAFETY: bounds checked.
        let (vihl, proto, frags, source) =
            unsafe { ((*outer).vihl, (*outer).proto, u16::from_be_bytes((*outer).frags), (*outer).src_addr) };
        // Only whole, option-less datagrams; anything else is the stack's business.
        if vihl != 0x45 || frags & 0x3fff != 0 {
            return DecapCounter::Passed;
        }
        (proto, IPV4_LEN, Source::V4(source))
    } else if ether_type == ETH_P_IPV6 {
        let Some(outer) = ptr_at::<Ipv6Hdr>(ctx, l2) else {
            return DecapCounter::Passed;
        };
        // SAFETY: bounds checked. An outer header with extension headers is the stack's.
        let (version, next, source) = unsafe { ((*outer).vcf[0] >> 4, (*outer).next_hdr, (*outer).src_addr) };
        if version != 6 {
            return DecapCounter::Passed;
        }
        (next, IPV6_LEN, Source::V6(source))
    } else {
        return DecapCounter::Passed;
    };
    let outer_len = match protocol {
        ip_proto::IPIP | ip_proto::IPV6 => ip_len,
        ip_proto::UDP => match ptr_at::<[u8; 4]>(ctx, l2 + ip_len) {
            // SAFETY: bounds checked; the UDP ports.
            Some(ports) if u16::from_be_bytes(unsafe { [(*ports)[2], (*ports)[3]] }) == gue::PORT => ip_len + 8,
            _ => return DecapCounter::Passed,
        },
        _ => return DecapCounter::Passed,
    };
    let allowed = match source {
        Source::V4(addr) => DECAP_SOURCES.get(Key::new(32, addr)).is_some(),
        Source::V6(addr) => DECAP_SOURCES6.get(Key::new(128, addr)).is_some(),
    };
    if !allowed {
        return DecapCounter::Refused;
    }
    // The inner packet's family, from its version nibble (GUE variant 1 names none) and, for
    // IP in IP, as the outer header named it.
    let Some(inner) = ptr_at::<u8>(ctx, l2 + outer_len) else {
        return DecapCounter::Malformed;
    };
    // SAFETY: bounds checked.
    let inner_ether_type = match (unsafe { *inner } >> 4, protocol) {
        (4, ip_proto::IPIP | ip_proto::UDP) if ptr_at::<Ipv4Hdr>(ctx, l2 + outer_len).is_some() => ETH_P_IPV4,
        (6, ip_proto::IPV6 | ip_proto::UDP) if ptr_at::<Ipv6Hdr>(ctx, l2 + outer_len).is_some() => ETH_P_IPV6,
        _ => return DecapCounter::Malformed,
    };
    let tagged = l2 != EthHdr::LEN;
    let removed = match (tagged, outer_len) {
        (false, IPV4_LEN) => strip::<14, IPV4_LEN>(ctx, inner_ether_type),
        (true, IPV4_LEN) => strip::<18, IPV4_LEN>(ctx, inner_ether_type),
        (false, IPV6_LEN) => strip::<14, IPV6_LEN>(ctx, inner_ether_type),
        (true, IPV6_LEN) => strip::<18, IPV6_LEN>(ctx, inner_ether_type),
        (false, gue::OVERHEAD) => strip::<14, { gue::OVERHEAD }>(ctx, inner_ether_type),
        (true, gue::OVERHEAD) => strip::<18, { gue::OVERHEAD }>(ctx, inner_ether_type),
        (false, _) => strip::<14, { gue::OVERHEAD6 }>(ctx, inner_ether_type),
        (true, _) => strip::<18, { gue::OVERHEAD6 }>(ctx, inner_ether_type),
    };
    if removed { DecapCounter::Decapsulated } else { DecapCounter::Malformed }
}

/// Moves the `L2`-byte link header forward over the `N` bytes of outer headers, with the
/// inner packet's `ether_type` as its last two bytes, and drops them.
#[inline(always)]
fn strip<const L2: usize, const N: usize>(ctx: &XdpContext, ether_type: u16) -> bool {
    let Some(l2) = ptr_at::<[u8; L2]>(ctx, 0) else {
        return false;
    };
    // SAFETY: bounds checked.
    let mut saved = unsafe { *l2 };
    saved[L2 - 2..].copy_from_slice(&ether_type.to_ne_bytes());
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
