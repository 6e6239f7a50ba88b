//! Backend choice: the connection table first, else the VIP's Maglev ring (built in userspace,
//! only indexed here); and keeping a NAT flow's reply entry in step with its forward entry.
//!
//! Protection of established flows: a way remembers whether its flow proved itself (sent more
//! than its first packet). A first packet (a TCP SYN, any UDP datagram the table does not know)
//! may only take a free way or one that protects nothing, and each CPU records at most
//! `DataplaneConfig::new_flow_budget` new flows a second; past either limit the flow is placed
//! by the ring without being recorded. A flood of first packets therefore cannot evict a flow
//! that has proven itself while it lives. A connection's ways stop protecting it when it ends:
//! a FIN closes the way of its sender's direction, an RST both (here for the client's
//! packets, in `reply_seen` for the backend's), and a flow idle for
//! `lb_common::flow::PROTECT_IDLE_TICKS` protects nothing either. So closed connections never
//! fill a set, and a new connection finds a way for its reply (which a backend several VIPs
//! share cannot do without: see `nat::reply_without_entry`).
use aya_ebpf::bindings::xdp_action::{XDP_DROP, XDP_PASS};
use lb_common::backend::{BACKEND_NONE, Backend};
use lb_common::flow::{FlowEntry, FlowKey, FlowSlot, ReverseEntry};
use lb_common::hash::ring_slot;
use lb_common::stats::Counter;
use lb_common::vip::{VipInfo, forwarding};

use crate::flow::Flow;
use crate::parse::TcpFlags;
use crate::table::{self, Recorded, Tables};
use crate::verdict::Verdict;
use crate::{maps, quic};

pub struct Choice {
    pub backend_id: u32,
    pub backend: &'static Backend,
}

/// The backend for this flow, or the verdict when there is none. A packet that opens a
/// connection (TCP SYN) is placed on the ring even when its 5-tuple has an entry: that entry
/// belongs to an earlier connection which reused the client port, and a new connection must
/// follow the current ring (a drained backend gets no new connections). An entry matches only
/// its VIP and the generation of its backend id, so an id given to another backend never
/// carries an old flow there.
#[inline(always)]
pub fn choose(vip: &VipInfo, flow: &Flow, tcp: &TcpFlags) -> Result<Choice, Verdict> {
    let Some(t) = flow.tables else {
        return Err((XDP_PASS, Counter::PassNotConfigured));
    };
    let nat = vip.forwarding == forwarding::NAT;
    if let Some(slot) = flow.slot
        && let Some(choice) = established(vip, flow, tcp, slot, nat, &t)
    {
        return Ok(choice);
    }
    let (choice, entry, proven) = place_anew(vip, flow, tcp, nat, &t)?;
    // One place writes the reply entry of a flow placed anew, whichever way it was placed: the
    // verifier walks the eviction notice (`maps::record_reverse_flow`) in this copy and the
    // established path's, not in one per way.
    if nat {
        record_reply_entry(vip, flow.key, &entry, choice.backend, proven, &t);
    }
    Ok(choice)
}

/// The backend of a flow whose way (`slot`) still holds: its VIP, its backend active and of
/// the generation it was recorded with, and the packet not opening a new connection. None
/// otherwise: the flow is placed anew.
#[inline(always)]
fn established(
    vip: &VipInfo,
    flow: &Flow,
    tcp: &TcpFlags,
    slot: *mut FlowSlot<FlowEntry>,
    nat: bool,
    t: &Tables,
) -> Option<Choice> {
    // SAFETY: a valid map value pointer; the way holds this flow.
    let entry = unsafe { (*slot).value };
    if tcp.opens_connection() || entry.vip_id != vip.id || !quic::agrees(flow, entry.backend_id) {
        return None;
    }
    let backend = maps::backend(entry.backend_id).filter(|b| b.is_active() && b.generation == entry.generation)?;
    maps::count(Counter::FlowHit);
    if tcp.ends_connection() {
        // The client is done sending (FIN), or with the whole connection (RST).
        table::close(slot);
        if nat && tcp.resets_connection() {
            close_reply_entry(flow.key, &entry, backend, t);
        }
    } else {
        let newly_proven = table::prove(slot);
        // When the flow proves itself (so its reply entry is proven with it), when its reply
        // entry was evicted (the evicting packet marked the way `REPLY_LOST`), and once per
        // reply-check period (for a mark lost). Until then an evicted entry's replies find
        // their VIP through NAT_BACKENDS, or are dropped, never leaked.
        if nat && (newly_proven || flow.reply_check) {
            keep_reply_entry(vip, flow.key, &entry, backend, slot, t);
        }
    }
    Some(Choice { backend_id: entry.backend_id, backend })
}

/// A flow placed anew (the backend its QUIC connection ID names, else the ring) and recorded:
/// the backend, the flow's entry, and whether its reply entry is proven.
#[inline(always)]
fn place_anew(
    vip: &VipInfo,
    flow: &Flow,
    tcp: &TcpFlags,
    nat: bool,
    t: &Tables,
) -> Result<(Choice, FlowEntry, bool), Verdict> {
    let opens_connection = tcp.opens_connection();
    let (backend_id, backend) = place(vip, flow, t)?;
    let entry = flow_entry(vip, flow.key, backend_id, backend, nat, t);
    let choice = Choice { backend_id, backend };
    if let Some(slot) = flow.slot {
        // A new connection on a known 5-tuple starts unproven; a flow moved off a removed
        // backend has already proven itself.
        let proven = !opens_connection;
        table::replace(slot, flow.hash, &entry, proven, t);
        maps::count(if opens_connection { Counter::FlowNew } else { Counter::FlowRerouted });
        return Ok((choice, entry, proven));
    }
    // A TCP packet without SYN belongs to a connection already open (whose entry the table
    // lost, or that another balancer placed): it has proven itself. SYNs and UDP have not.
    let proven = tcp.continues_connection();
    if !maps::take_new_flow(t.new_flow_budget) {
        maps::count(Counter::FlowUnrecorded);
        // The reply entry is written all the same: without it the answer of a backend that
        // several VIPs share has no VIP to come from (the forward entry is not needed: the
        // ring places the flow's next packets alike). Unproven whatever the packet, so that a
        // flood past the budget (of SYNs, or of ACKs that would claim to be proven) takes only
        // ways that protect nothing.
        return Ok((choice, entry, false));
    }
    maps::count(match maps::record_flow(flow.key, flow.hash, &entry, proven, t) {
        Recorded::Free | Recorded::Failed => Counter::FlowNew,
        Recorded::Evicted => Counter::FlowTableFull,
        Recorded::Protected => Counter::FlowSetProven,
    });
    Ok((choice, entry, proven))
}

/// The connection-table entry of `key` on backend `backend_id`.
#[inline(always)]
fn flow_entry(vip: &VipInfo, key: &FlowKey, backend_id: u32, backend: &Backend, nat: bool, t: &Tables) -> FlowEntry {
    let reply_hash = if nat { t.hash(&reply_key(key, backend)) } else { 0 };
    FlowEntry { backend_id, vip_id: vip.id, generation: backend.generation, reply_hash }
}

/// The key of a NAT flow's replies: backend → client.
#[inline(always)]
fn reply_key(key: &FlowKey, backend: &Backend) -> FlowKey {
    FlowKey::new(backend.addr, key.src, backend.port, key.src_port, key.protocol, key.family)
}

#[inline(always)]
fn record_reply_entry(vip: &VipInfo, key: &FlowKey, entry: &FlowEntry, backend: &Backend, proven: bool, t: &Tables) {
    let reverse =
        ReverseEntry { vip_addr: key.dst, vip_port: key.dst_port, family: key.family, _pad: 0, vip_id: vip.id };
    maps::record_reverse_flow(&reply_key(key, backend), entry.reply_hash, &reverse, proven, t);
}

/// An established NAT flow keeps its reply entry: found (and stamped, so both directions age
/// together, and marked proven while the forward entry is, `slot`), or written again if churn
/// evicted it (proven as the forward entry is: not once the client has closed). The forward
/// entry holds the reply key's hash, so this costs no hashing. The way's lost mark goes once a
/// packet finds the entry: a write torn by another CPU's is tried again.
#[inline(always)]
fn keep_reply_entry(
    vip: &VipInfo,
    key: &FlowKey,
    entry: &FlowEntry,
    backend: &Backend,
    slot: *mut FlowSlot<FlowEntry>,
    t: &Tables,
) {
    let proven = table::is_proven(slot);
    match reply_way(key, entry, backend, t) {
        // SAFETY: a valid map value pointer; the check has vouched for the value.
        Some(way) if unsafe { (*way).value.vip_id } == vip.id => {
            // Only a live flow proves it: a closed one's entry, written again unproven, stays so.
            if proven {
                table::prove(way);
            }
            table::reply_kept(slot);
        }
        _ => {
            record_reply_entry(vip, key, entry, backend, proven, t);
            maps::count(Counter::ReverseRestored);
        }
    }
}

/// The reply entry of an established NAT flow, if the table holds it.
#[inline(always)]
fn reply_way(key: &FlowKey, entry: &FlowEntry, backend: &Backend, t: &Tables) -> Option<*mut FlowSlot<ReverseEntry>> {
    maps::reverse_way(&reply_key(key, backend), entry.reply_hash, t)
}

/// The client reset a NAT flow: its reply entry protects nothing any more either.
#[inline(always)]
fn close_reply_entry(key: &FlowKey, entry: &FlowEntry, backend: &Backend, t: &Tables) {
    if let Some(way) = reply_way(key, entry, backend, t) {
        table::close(way);
    }
}

/// A NAT backend's reply found its entry (`way`, keyed `reply`): the entry is answered, a FIN
/// from the backend closes it (the backend is done sending), an RST the forward entry too (the client will send
/// nothing more that could).
#[inline(always)]
pub fn reply_seen(reply: &FlowKey, way: *mut FlowSlot<ReverseEntry>, tcp: &TcpFlags, t: &Tables) {
    table::answered(way);
    if !tcp.ends_connection() {
        return;
    }
    table::close(way);
    if tcp.resets_connection() {
        // SAFETY: a valid map value pointer; the check has vouched for the value.
        let forward = unsafe { (*way).value }.forward_key(reply);
        if let Some((slot, _)) = maps::flow(&forward, t.hash(&forward), t) {
            table::close(slot);
        }
    }
}

/// Where a flow the table does not place goes: the backend its QUIC connection ID names, else
/// the ring.
#[inline(always)]
fn place(vip: &VipInfo, flow: &Flow, t: &Tables) -> Result<(u32, &'static Backend), Verdict> {
    match flow.server {
        Some(server) => Ok(server),
        None => from_ring(vip, flow, t),
    }
}

#[inline(always)]
fn from_ring(vip: &VipInfo, flow: &Flow, t: &Tables) -> Result<(u32, &'static Backend), Verdict> {
    // Tables::new made sure ring_size is not 0.
    let in_ring = ring_slot(vip.hash, flow.key, t.ring_seed, t.ring_size);
    let slot = vip.id.wrapping_mul(t.ring_size).wrapping_add(in_ring);
    let no_backend = Err((XDP_DROP, Counter::DropNoBackend));
    let Some(backend_id) = maps::ring_slot(slot) else {
        return no_backend;
    };
    if backend_id == BACKEND_NONE {
        return no_backend;
    }
    match maps::backend(backend_id) {
        Some(backend) if backend.is_active() => Ok((backend_id, backend)),
        _ => no_backend,
    }
}
