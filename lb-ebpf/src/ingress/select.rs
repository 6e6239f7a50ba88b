//! Backend choice: the connection table first, else the VIP's Maglev ring (built in userspace,
//! only indexed here).
use aya_ebpf::bindings::xdp_action::{XDP_DROP, XDP_PASS};
use lb_common::backend::{BACKEND_NONE, Backend};
use lb_common::flow::FlowEntry;
use lb_common::hash::ring_slot;
use lb_common::stats::Counter;
use lb_common::vip::VipInfo;

use crate::table::{self, Recorded, Tables};
use crate::flow::Flow;
use crate::maps;
use crate::verdict::Verdict;

pub struct Choice {
    pub backend_id: u32,
    pub backend: &'static Backend,
    /// The flow was placed now (new, or moved off a removed backend): NAT must record the
    /// reverse entry for its replies.
    pub placed: bool,
    pub tables: Tables,
}

/// The backend for this flow, or the verdict when there is none. A packet that opens a
/// connection (TCP SYN) is placed on the ring even when its 5-tuple has an entry: that entry
/// belongs to an earlier connection which reused the client port, and a new connection must
/// follow the current ring (a drained backend gets no new connections).
#[inline(always)]
pub fn choose(vip: &VipInfo, flow: &Flow, opens_connection: bool) -> Result<Choice, Verdict> {
    let Some(t) = flow.tables else {
        return Err((XDP_PASS, Counter::PassNotConfigured));
    };
    if let Some(slot) = flow.slot {
        // SAFETY: a valid map value pointer; the way holds this flow.
        let FlowEntry { backend_id: pinned, vip_id } = unsafe { (*slot).value };
        if !opens_connection
            && vip_id == vip.id
            && let Some(backend) = maps::backend(pinned)
            && backend.is_active()
        {
            maps::count(Counter::FlowHit);
            return Ok(Choice { backend_id: pinned, backend, placed: false, tables: t });
        }
        let (backend_id, backend) = from_ring(vip, flow, &t)?;
        table::replace(slot, flow.hash, &FlowEntry { backend_id, vip_id: vip.id }, &t);
        maps::count(if opens_connection { Counter::FlowNew } else { Counter::FlowRerouted });
        return Ok(Choice { backend_id, backend, placed: true, tables: t });
    }
    let (backend_id, backend) = from_ring(vip, flow, &t)?;
    maps::count(match maps::record_flow(flow.key, flow.hash, &FlowEntry { backend_id, vip_id: vip.id }, &t) {
        Recorded::Free | Recorded::Failed => Counter::FlowNew,
        Recorded::Evicted => Counter::FlowTableFull,
    });
    Ok(Choice { backend_id, backend, placed: true, tables: t })
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
