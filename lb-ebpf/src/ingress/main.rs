//! lb_ingress: the XDP balancer. For a packet addressed to a VIP it finds the flow's backend
//! (connection table, else the VIP's Maglev ring), rewrites the packet (NAT or IPIP) and sends
//! it on; a NAT reply from a backend is rewritten back to the VIP. Everything else is passed to
//! the stack untouched. Every packet is counted under exactly one verdict counter.
#![no_std]
#![no_main]

mod balance;
mod encap;
mod flow;
mod forward;
mod icmp;
mod icmp_error;
mod l2;
mod maps;
mod nat;
mod parse;
mod select;
mod table;
mod verdict;

use aya_ebpf::macros::xdp;
use aya_ebpf::programs::XdpContext;
// The panic handler, and the packet helpers both programs share.
use lb_ebpf as _;

// Inlined into the entry point the macro wraps it in: left to itself LLVM may make it a
// BPF-to-BPF call, which costs every packet ~10 ns (`cargo xtask bench dataplane`).
#[xdp]
#[inline(always)]
pub fn lb_ingress(ctx: XdpContext) -> u32 {
    let (action, reason) = balance::try_balance(&ctx);
    maps::count(reason);
    action
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
