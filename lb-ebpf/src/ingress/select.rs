//! Backend choice: the connection table first, else the VIP's Maglev ring (built in userspace,
//! only indexed here).
use aya_ebpf::bindings::xdp_action::{XDP_DROP, XDP_PASS};
use lb_common::backend::{BACKEND_NONE, Backend};
use lb_common::flow::{FlowEntry, FlowKey};
use lb_common::hash::{client_hash, flow_hash};
use lb_common::stats::Counter;
use lb_common::vip::{VipInfo, hash_mode};

use crate::Verdict;
use crate::maps;

pub struct Choice {
    pub backend_id: u32,
    pub backend: &'static Backend,
    /// The flow was placed now (new, or moved off a removed backend): NAT must record the
    /// reverse entry for its replies.
    pub placed: bool,
}

/// The backend for this flow, or the verdict when there is none. `flow` is the flow's
/// connection-table entry, if the caller found one. A packet that opens a connection (TCP SYN)
/// is placed on the ring even when its 5-tuple has an entry: that entry belongs to an earlier
/// connection which reused the client port, and a new connection must follow the current ring
/// (a drained backend gets no new connections).
#[inline(always)]
pub fn choose(
    vip: &VipInfo,
    key: &FlowKey,
    flow: Option<*mut FlowEntry>,
    opens_connection: bool,
) -> Result<Choice, Verdict> {
    let Some(config) = maps::config() else {
        return Err((XDP_PASS, Counter::PassNotConfigured));
    };
    let ring_size = config.ring_size;
    if ring_size == 0 {
        return Err((XDP_PASS, Counter::PassNotConfigured));
    }
    if let Some(entry) = flow {
        // SAFETY: a valid map value pointer; the entry is this flow's own.
        let (pinned, vip_id) = unsafe { ((*entry).backend_id, (*entry).vip_id) };
        if !opens_connection
            && vip_id == vip.id
            && let Some(backend) = maps::backend(pinned)
            && backend.is_active()
        {
            maps::count(Counter::FlowHit);
            return Ok(Choice { backend_id: pinned, backend, placed: false });
        }
        let (backend_id, backend) = from_ring(vip, key, ring_size, config.hash_seed)?;
        // SAFETY: as above.
        unsafe {
            (*entry).backend_id = backend_id;
            (*entry).vip_id = vip.id;
        }
        maps::count(if opens_connection { Counter::FlowNew } else { Counter::FlowRerouted });
        return Ok(Choice { backend_id, backend, placed: true });
    }
    let (backend_id, backend) = from_ring(vip, key, ring_size, config.hash_seed)?;
    if maps::record_flow(key, &FlowEntry { backend_id, vip_id: vip.id }) {
        maps::count(Counter::FlowNew);
    } else {
        maps::count(Counter::FlowTableFull);
    }
    Ok(Choice { backend_id, backend, placed: true })
}

#[inline(always)]
fn from_ring(
    vip: &VipInfo,
    key: &FlowKey,
    ring_size: u32,
    seed: u32,
) -> Result<(u32, &'static Backend), Verdict> {
    let hash = if vip.hash == hash_mode::FLOW {
        flow_hash(&key.src, &key.dst, key.src_port, key.dst_port, key.protocol, seed)
    } else {
        client_hash(&key.src, seed)
    };
    let slot = vip.id.wrapping_mul(ring_size).wrapping_add(hash % ring_size);
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
