//! NAT forwarding: the destination becomes the backend (client address kept, so the backend
//! must route replies back through the balancer), and replies get the VIP back as source.
//! Checksums are updated incrementally; TTL is decremented as any router would.
use aya_ebpf::bindings::xdp_action::{XDP_DROP, XDP_PASS};
use aya_ebpf::programs::XdpContext;
use lb_common::backend::{NAT_BACKEND_SHARED, NatBackendKey};
use lb_common::flow::{FlowKey, REVERSE_DIRECT, ReverseEntry};
use lb_common::stats::Counter;
use lb_common::vip::VipInfo;
use lb_ebpf::packet::packet_len;

use crate::flow::Flow;
use crate::forward::{self, ANY_SOURCE, Lookup, Route};
use crate::ip::{Addr, End, IpPacket, field};
use crate::maps::HopCache;
use crate::table::Tables;
use crate::verdict::Verdict;
use crate::{maps, select};

#[inline(always)]
pub fn balance_nat<P: IpPacket>(ctx: &XdpContext, pkt: &P, vip: &VipInfo, flow: &Flow) -> Verdict {
    if pkt.ttl() <= 1 {
        return (XDP_PASS, Counter::PassTtlExpired);
    }
    let choice = match select::choose(vip, flow, &pkt.tcp()) {
        Ok(choice) => choice,
        Err(verdict) => return verdict,
    };
    let backend = choice.backend;
    let bytes = packet_len(ctx);
    let backend_addr = field(&backend.addr);
    let to_backend = (&ANY_SOURCE, backend_addr);
    let generation = flow.nexthop_generation();
    let verdict = rewrite_and_send(
        ctx,
        pkt,
        End::Destination,
        (backend_addr, backend.port),
        (to_backend, generation),
        HopCache::Backend(choice.backend_id),
        NO_ROUTE,
    );
    if verdict.0 != XDP_DROP && verdict.1 != Counter::ForwardIcmpTooBig {
        maps::count_traffic(vip.id, choice.backend_id, bytes);
    }
    verdict
}

/// What a packet with no route gets: dropped, where this program owns the packet.
const NO_ROUTE: Verdict = (XDP_DROP, Counter::DropNoRoute);
/// Passed untouched: a backend's packet that no reply entry names and that is not routed
/// onwards (to this host: health-check answers, ...) is the stack's.
const NOT_OURS: Verdict = (XDP_PASS, Counter::PassNotVip);

/// A reply from a NAT backend: its source becomes the VIP again.
#[inline(always)]
pub fn reply_to_client<P: IpPacket>(ctx: &XdpContext, pkt: &P, reverse: &ReverseEntry, t: &Tables) -> Verdict {
    if pkt.ttl() <= 1 {
        return (XDP_PASS, Counter::PassTtlExpired);
    }
    let client = Addr(pkt.addresses().1);
    let vip_addr = field(&reverse.vip_addr);
    maps::count(Counter::NatReply);
    rewrite_and_send(
        ctx,
        pkt,
        End::Source,
        (vip_addr, reverse.vip_port),
        ((vip_addr, &client), t.nexthop_generation),
        HopCache::Address,
        NO_ROUTE,
    )
}

/// A TCP SYN to a NAT backend's address and port that is not a VIP's: a connection opened
/// straight to the backend. Its reply key (`reply`: backend → client) is marked direct, so the
/// backend's answers pass untouched instead of being taken for a VIP's replies (an earlier VIP
/// connection's entry on the same 4-tuple, or NAT_BACKENDS). A first packet, so it takes only
/// a free or unproven way (or the way of its own key).
#[inline(always)]
pub fn note_direct_connection(reply: &FlowKey, t: &Tables) {
    let backend =
        NatBackendKey { addr: reply.src, port: reply.src_port, protocol: reply.protocol, family: reply.family };
    if maps::nat_backend(&backend).is_none() {
        return;
    }
    let direct = ReverseEntry { vip_addr: [0; 16], vip_port: 0, family: reply.family, _pad: 0, vip_id: REVERSE_DIRECT };
    maps::record_reverse_flow(reply, t.hash(reply), &direct, false, t);
    maps::count(Counter::DirectToBackend);
}

/// Whose reply a NAT backend's packet (`key`: backend → client) is when no reply entry names
/// its flow: NAT_BACKENDS says.
pub enum Owner {
    /// The source is no NAT backend's address and port.
    NotABackend,
    /// A backend several VIPs share (or whose VIP is of another protocol or family): which
    /// VIP the flow was of is unknown.
    Unknown,
    /// The one VIP the backend serves.
    Vip(&'static VipInfo),
}

#[inline(always)]
pub fn owner_without_entry(key: &FlowKey) -> Owner {
    let backend = NatBackendKey { addr: key.src, port: key.src_port, protocol: key.protocol, family: key.family };
    let Some(owner) = maps::nat_backend(&backend) else {
        return Owner::NotABackend;
    };
    let vip = if owner == NAT_BACKEND_SHARED { None } else { maps::vip_info(owner) };
    match vip.filter(|vip| vip.key.protocol == key.protocol && vip.key.family == key.family) {
        Some(vip) => Owner::Vip(vip),
        None => Owner::Unknown,
    }
}

/// A NAT backend's packet that cannot leave from its VIP (`route`: its own route lookup): it
/// must not leave with the backend's own address, so it is dropped if routed onwards; to this
/// host (a health-check answer) it is the stack's.
#[inline(always)]
pub fn dropped_if_routed(ctx: &XdpContext, route: &Lookup) -> Verdict {
    match forward::lookup(ctx, route, HopCache::Address) {
        Route::Unreachable => NOT_OURS,
        _ => (XDP_DROP, Counter::DropReplyNoFlow),
    }
}

/// A packet from a NAT backend's port that no reply entry names (its entry was evicted, or
/// never recorded: see `select`). It must not leave with the backend's own address. From a
/// backend of one VIP it is that VIP's reply; from a backend several VIPs share it is dropped.
/// Either way only if routed onwards: packets to this host (health-check answers) and from
/// addresses that are no NAT backend's pass untouched.
#[inline(always)]
pub fn reply_without_entry<P: IpPacket>(ctx: &XdpContext, pkt: &P, key: &FlowKey, t: &Tables) -> Verdict {
    match owner_without_entry(key) {
        Owner::NotABackend => NOT_OURS,
        Owner::Vip(vip) if pkt.ttl() > 1 => {
            let vip_addr = field(&vip.key.addr);
            let to_client = (vip_addr, field(&key.dst));
            let verdict = rewrite_and_send(
                ctx,
                pkt,
                End::Source,
                (vip_addr, vip.key.port),
                (to_client, t.nexthop_generation),
                HopCache::Address,
                NOT_OURS,
            );
            if verdict != NOT_OURS {
                maps::count(Counter::NatReplyByBackend);
            }
            verdict
        }
        _ => dropped_if_routed(ctx, &lookup(pkt, (field(&key.src), field(&key.dst)), t.nexthop_generation)),
    }
}

/// Rewrites one end of the packet to `to` (address, port) and sends it along `route` (source
/// and destination of the route lookup, and the next-hop generation); `unroutable` is the answer when it has no route. The route is looked up first, so that a packet too
/// big for it is answered with ICMP "fragmentation needed" quoting the packet as its sender
/// sent it (DF set; else dropped). Without a neighbour entry the rewritten packet goes to the
/// stack, which resolves the neighbour and forwards it (and decrements TTL itself, so it is
/// decremented here only when this program forwards).
#[inline(always)]
fn rewrite_and_send<P: IpPacket>(
    ctx: &XdpContext,
    pkt: &P,
    end: End,
    to: (&Addr, u16),
    (route, generation): ((&Addr, &Addr), u32),
    cache: HopCache,
    unroutable: Verdict,
) -> Verdict {
    let (addr, port) = to;
    match forward::lookup(ctx, &lookup(pkt, route, generation), cache) {
        Route::Out { ifindex, smac, dmac, .. } => {
            pkt.rewrite(end, addr, port);
            pkt.decrement_ttl();
            forward::send(ctx, ifindex, smac, dmac)
        }
        Route::NoNeighbour => {
            pkt.rewrite(end, addr, port);
            (XDP_PASS, Counter::PassNoNeighbour)
        }
        Route::TooBig { mtu } => pkt.too_big(ctx, mtu),
        Route::Unreachable => unroutable,
    }
}

/// The route lookup of `pkt` sent `route.0 → route.1`, with next-hop `generation`.
#[inline(always)]
fn lookup<'a, P: IpPacket>(pkt: &P, route: (&'a Addr, &'a Addr), generation: u32) -> Lookup<'a> {
    Lookup {
        family: P::FAMILY,
        src: route.0,
        dst: route.1,
        protocol: pkt.protocol(),
        tos: pkt.tos(),
        tot_len: pkt.ip_len(),
        generation,
    }
}
