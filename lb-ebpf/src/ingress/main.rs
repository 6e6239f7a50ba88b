//! lb_ingress: the XDP balancer, for IPv4 and IPv6. For a packet addressed to a VIP it finds
//! the flow's backend (connection table, else the VIP's Maglev ring), rewrites the packet (NAT,
//! or DSR: IP in IP, GUE or MAC rewrite) and sends it on; a NAT reply from a backend is
//! rewritten back to the VIP. Everything else is passed to
//! the stack untouched. Every packet is counted under exactly one verdict counter.
#![no_std]
#![no_main]
// Inline assembly for BPF (`maps::jump`).
#![feature(asm_experimental_arch)]

mod addr;
mod balance;
mod encap;
mod floor;
mod flow;
mod forward;
mod icmp;
mod icmp6;
mod icmp_error;
mod icmp_reply;
mod ip;
mod l2;
mod maps;
mod messages;
mod nat;
mod parse;
mod parse6;
mod parsed;
mod quic;
mod select;
mod table;
mod trace;
mod verdict;

use aya_ebpf::bindings::xdp_action::XDP_PASS;
use aya_ebpf::macros::xdp;
use aya_ebpf::programs::XdpContext;
// The panic handler, and the packet helpers both programs share.
use lb_ebpf as _;

// Inlined into the entry point the macro wraps it in: left to itself LLVM may make it a
// BPF-to-BPF call, which costs every packet ~10 ns (`cargo xtask bench dataplane`).
#[xdp]
#[inline(always)]
pub fn lb_ingress(ctx: XdpContext) -> u32 {
    let first = parse::first_look(&ctx);
    if first == parse::PASSES {
        // Counted by `first_look`.
        return XDP_PASS;
    }
    let (action, reason) = balance::try_balance(&ctx, parse::known_dst_flags(first));
    maps::count(reason);
    messages::verdict(&ctx, action, reason);
    action
}

/// The IPv6 half of the balancer, reached from lb_ingress through JUMPS.
#[xdp]
#[inline(always)]
pub fn lb_ingress_v6(ctx: XdpContext) -> u32 {
    let (action, reason) = balance::try_balance_v6(&ctx);
    maps::count(reason);
    // No `messages::verdict` here: the message's calls would take this program's stack
    // (about 500 of its 512 bytes) past the limit.
    action
}

/// ICMP errors about VIP flows (to their backend) and NAT flows (to their client), reached
/// from lb_ingress through JUMPS.
#[xdp]
#[inline(always)]
pub fn lb_icmp_errors(ctx: XdpContext) -> u32 {
    let (action, reason) = balance::try_icmp_error(&ctx);
    maps::count(reason);
    action
}

/// ICMPv6 errors about VIP flows and NAT flows, reached from lb_ingress_v6 through JUMPS.
#[xdp]
#[inline(always)]
pub fn lb_icmp6_errors(ctx: XdpContext) -> u32 {
    let (action, reason) = balance::try_icmp6_error(&ctx);
    maps::count(reason);
    action
}

/// The ICMPv6 "packet too big" answer to an IPv6 packet too big for its next hop, reached from
/// lb_ingress_v6 through JUMPS.
#[xdp]
#[inline(always)]
pub fn lb_too_big6(ctx: XdpContext) -> u32 {
    let (action, reason) = icmp6::answer_too_big(&ctx);
    maps::count(reason);
    action
}

/// Benchmarks only, never attached: finds an IPv4 packet's set in FLOWS as lb_ingress does and
/// reads one word of it, nothing else (`floor`).
#[xdp]
#[inline(always)]
pub fn lb_set_read(ctx: XdpContext) -> u32 {
    floor::read_set(&ctx);
    XDP_PASS
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
