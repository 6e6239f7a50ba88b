//! NAT: ICMP errors about a client's packet as the balancer sent it on (client → backend): a
//! UDP backend's "port unreachable", a "fragmentation needed" from a router on the backend's
//! path. Passed on as they came they would reach the client naming the backend, which the
//! client never sent to: it ignores them (a UDP client waits out its timeout instead of
//! failing at once, a TCP sender never lowers its path MTU), and they show the address NAT
//! hides. Like a reply, the error goes to the client as if about the packet the client sent:
//! the backend becomes the VIP in the quote, and in the outer source when the backend sent it.
//! The flow's VIP is its reply entry's, or without one the VIP the backend alone serves (as
//! for replies, `nat::owner_without_entry`).
use aya_ebpf::bindings::xdp_action::{XDP_DROP, XDP_PASS};
use aya_ebpf::programs::XdpContext;
use lb_common::IpBytes;
use lb_common::flow::{FlowKey, REVERSE_DIRECT};
use lb_common::stats::Counter;

use crate::addr::{Addr, field};
use crate::forward::{self, Route};
use crate::icmp_error::{FlowError, route_of};
use crate::ip::End;
use crate::maps::{self, HopCache};
use crate::nat::{self, Owner};
use crate::verdict::Verdict;

const NOT_OURS: Verdict = (XDP_PASS, Counter::PassNotVip);

/// An error about `quoted` (client → a NAT backend's port), addressed to the client with `ttl`.
#[inline(always)]
pub fn to_client<E: FlowError>(ctx: &XdpContext, err: &E, quoted: &FlowKey, ttl: u8) -> Verdict {
    let Some(t) = maps::tables() else {
        return NOT_OURS;
    };
    // Backend → client: the key the backend's replies are looked up by.
    let reply = quoted.reversed();
    let (vip_addr, vip_port): (IpBytes, u16) = match maps::reverse_way(&reply, t.hash(&reply), &t) {
        Some(way) => {
            // SAFETY: a valid map value pointer; the check has vouched for the value.
            let reverse = unsafe { (*way).value };
            if reverse.vip_id == REVERSE_DIRECT {
                // A connection opened straight to the backend: the client knows its address.
                return NOT_OURS;
            }
            (reverse.vip_addr, reverse.vip_port)
        }
        None => match nat::owner_without_entry(&reply) {
            Owner::NotABackend => return NOT_OURS,
            Owner::Vip(vip) => (vip.key.addr, vip.key.port),
            // Which VIP the flow was of is unknown: not sent on naming the backend.
            Owner::Unknown => {
                let route = route_of(err, (field(&reply.src), field(&reply.dst)), t.nexthop_generation);
                return nat::dropped_if_routed(ctx, &route);
            }
        },
    };
    if ttl <= 1 {
        return (XDP_PASS, Counter::PassTtlExpired);
    }
    let vip_addr = field(&vip_addr);
    let client = Addr(quoted.src);
    let query = route_of(err, (vip_addr, &client), t.nexthop_generation);
    match forward::lookup(ctx, &query, HopCache::Address) {
        Route::Out { ifindex, smac, dmac, .. } => {
            err.rewrite(End::Destination, vip_addr, vip_port);
            err.decrement_ttl();
            maps::count(Counter::IcmpToClient);
            forward::send(ctx, ifindex, smac, dmac)
        }
        Route::NoNeighbour => {
            err.rewrite(End::Destination, vip_addr, vip_port);
            maps::count(Counter::IcmpToClient);
            (XDP_PASS, Counter::PassNoNeighbour)
        }
        // Never an ICMP error about an ICMP error (RFC 1122, RFC 4443).
        Route::TooBig { .. } => (XDP_DROP, Counter::DropTooBig),
        // Not routed onwards: about this host's own packet to the backend (a health check),
        // the stack's.
        Route::Unreachable => NOT_OURS,
    }
}
