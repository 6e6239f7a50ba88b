//! The program's debug messages (aya-log; the daemon writes them to its log under the target
//! `lb_ctl::xdp`): one line for each IPv4 packet the balancer drops, saying why. (lb_ingress_v6
//! has no stack left for the calls: its drops are counted and traced, not told.)
//!
//! They cost nothing unless the daemon starts at debug level. It sets AYA_LOG_LEVEL, a
//! read-only global the verifier reads as a constant: below debug the calls are dead code,
//! which the verifier skips and the JIT leaves out. Per-packet decisions for an operator are
//! `lb-ctl trace`'s job (a filter, a budget, structured records on a ring buffer), not these.
use aya_ebpf::bindings::xdp_action::XDP_DROP;
use aya_ebpf::programs::XdpContext;
use aya_log_ebpf::debug;
use lb_common::stats::Counter;
use lb_ebpf::packet::packet_len;

/// One line per dropped packet: its size, the interface, and the counter it was counted under
/// with what that counter means.
#[inline(always)]
pub fn verdict(ctx: &XdpContext, action: u32, reason: Counter) {
    if action != XDP_DROP {
        return;
    }
    let bytes = packet_len(ctx);
    // SAFETY: the context the kernel handed the program.
    let ifindex = unsafe { (*ctx.ctx).ingress_ifindex };
    // The format string must be a literal for the macro: each line is written out.
    macro_rules! dropped {
        ($format:tt) => {
            debug!(ctx, target: "lb_ctl::xdp", $format, bytes, ifindex)
        };
    }
    match reason {
        Counter::DropNoBackend => {
            dropped!("dropped {} bytes from ifindex {}: drop_no_backend (the VIP has no backend taking connections)")
        }
        Counter::DropNoRoute => {
            dropped!("dropped {} bytes from ifindex {}: drop_no_route (no route to the backend or client)")
        }
        Counter::DropNoNeighbour => {
            dropped!("dropped {} bytes from ifindex {}: drop_no_neighbour (the backend's MAC is not known yet)")
        }
        Counter::DropReplyNoFlow => dropped!(
            "dropped {} bytes from ifindex {}: drop_reply_no_flow (a shared backend's packet no reply entry names)"
        ),
        Counter::DropTooBig => {
            dropped!("dropped {} bytes from ifindex {}: drop_too_big (larger than the next hop's MTU, DF clear)")
        }
        Counter::DropEncapFailed => {
            dropped!("dropped {} bytes from ifindex {}: drop_encap_failed (the packet could not be grown)")
        }
        Counter::DropNotAdjacent => {
            dropped!("dropped {} bytes from ifindex {}: drop_backend_not_adjacent (a dsr-l2 backend behind a gateway)")
        }
        _ => dropped!("dropped {} bytes from ifindex {}: another drop counter"),
    }
}
