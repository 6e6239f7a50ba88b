//! The data plane as the rest of lb-ctl sees it: the operations on the BPF maps. The daemon's
//! single map writer holds one `Box<dyn Dataplane>`; nothing else writes maps.
//!
//! `aya::AyaDataplane` is the real one (loaded XDP program), a thin layer of syscalls;
//! `memory::MemoryDataplane` keeps the same state in memory, for `lb-ctl proxy` (no XDP) and
//! for tests without root.
use std::collections::HashMap;

use lb_common::backend::{Backend, NatBackendKey};
use lb_common::config::DataplaneConfig;
use lb_common::flow::{FlowEntry, FlowKey, SharedFlow};
use lb_common::quic::QuicServerKey;
use lb_common::stats::{Counter, Traffic};
use lb_common::vip::{VipInfo, VipKey};

mod array_mmap;
pub mod attach;
pub mod aya;
pub mod layout;
pub mod load;
pub mod memory;
pub mod messages;
pub mod migrate;
pub mod objects;
pub mod pins;
pub mod previous;
mod rings_mmap;
mod shared_flows;

/// A failed map operation.
#[derive(Debug, thiserror::Error)]
pub enum DataplaneError {
    /// A BPF map syscall failed.
    #[error("BPF map {map}: {source}")]
    Map {
        map: &'static str,
        #[source]
        source: ::aya::maps::MapError,
    },
    /// An id or index is outside the map's size.
    #[error("{what} {index} is out of range (limit {limit})")]
    OutOfRange { what: &'static str, index: u32, limit: u32 },
    /// Loading or attaching the program failed.
    #[error("{0}")]
    Load(String),
}

pub type Result<T, E = DataplaneError> = std::result::Result<T, E>;

/// A [`DataplaneError::Load`] saying `what`: how the loading, pinning and migrating modules
/// report a failed step.
fn err(what: impl std::fmt::Display) -> DataplaneError {
    DataplaneError::Load(what.to_string())
}

/// Operations on the balancer's maps. Writes are idempotent: writing what is already there is
/// harmless, so a reload may re-apply its whole desired state.
pub trait Dataplane: Send {
    /// Ring size, hash seed and next-hop generation (CONFIG map). Written before any VIP.
    fn set_config(&mut self, config: DataplaneConfig) -> Result<()>;
    /// Starts a new next-hop cache generation: every CPU looks its next hops up again. The
    /// daemon calls this every `nexthop_ttl_ms`, so route and neighbour changes are seen.
    fn refresh_next_hops(&mut self) -> Result<()>;
    /// Adds or replaces a VIP.
    fn upsert_vip(&mut self, key: VipKey, info: VipInfo) -> Result<()>;
    /// Removes a VIP (its ring and port flags are the caller's to clear).
    fn remove_vip(&mut self, key: &VipKey) -> Result<()>;
    /// Adds or replaces backend `id`.
    fn upsert_backend(&mut self, id: u32, backend: Backend) -> Result<()>;
    /// Marks backend `id` removed: flows pinned to it are re-placed on the ring.
    ///
    /// The data plane numbers each id's holders (`Backend::generation`, see
    /// `lb_common::backend::backend_generation`): an upsert that gives the id to another
    /// backend, or gives it again after a removal, starts a new generation, so no flow of an
    /// earlier holder matches the new one, and resets the id's traffic counters.
    fn remove_backend(&mut self, id: u32) -> Result<()>;
    /// Sets (Some: the VIP id, or `NAT_BACKEND_SHARED`) or clears the NAT_BACKENDS entry of a
    /// NAT backend's reply source.
    fn set_nat_backend(&mut self, key: NatBackendKey, vip: Option<u32>) -> Result<()>;
    /// Sets (Some: the backend id) or clears the QUIC_SERVERS entry of a QUIC VIP's server id.
    fn set_quic_server(&mut self, key: QuicServerKey, backend_id: Option<u32>) -> Result<()>;
    /// Every QUIC_SERVERS entry: what a restarted daemon finds in pinned maps, so its first
    /// apply removes what the file no longer has.
    fn quic_servers(&self) -> Result<Vec<(QuicServerKey, u32)>> {
        Ok(Vec::new())
    }
    /// Every VIPS entry: what a restarted daemon finds in pinned maps (the saved ids keep no
    /// forwarding, hash or QUIC setting), so its first apply writes what the file changed.
    fn vips(&self) -> Result<Vec<(VipKey, VipInfo)>>;
    /// Writes `(slot, backend id)` pairs of VIP `vip_id`'s ring. The planner sends only the
    /// slots that changed: the data plane keeps no copy of the rings.
    fn write_ring_slots(&mut self, vip_id: u32, slots: &[(u32, u32)]) -> Result<()>;
    /// Writes VIP `vip_id`'s whole ring.
    fn write_ring(&mut self, vip_id: u32, ring: &[u32]) -> Result<()> {
        let slots: Vec<(u32, u32)> = ring.iter().enumerate().map(|(slot, &id)| (slot as u32, id)).collect();
        self.write_ring_slots(vip_id, &slots)
    }
    /// Sets the PORT_FLAGS pre-filter bits of one port.
    fn set_port_flags(&mut self, port: u16, flags: u32) -> Result<()>;
    /// Totals over CPUs of every named counter.
    fn counters(&self) -> Result<Vec<(Counter, u64)>>;
    /// Totals over CPUs for one VIP.
    fn vip_traffic(&self, vip_id: u32) -> Result<Traffic>;
    /// Totals over CPUs for one backend.
    fn backend_traffic(&self, backend_id: u32) -> Result<Traffic>;
    /// Every named counter on each CPU (index = CPU number), for per-CPU rates. A data plane
    /// without CPUs of its own answers with its totals as one CPU.
    fn counters_per_cpu(&self) -> Result<Vec<Vec<(Counter, u64)>>> {
        Ok(vec![self.counters()?])
    }
    /// One VIP's traffic on each CPU (index = CPU number).
    fn vip_traffic_per_cpu(&self, vip_id: u32) -> Result<Vec<Traffic>> {
        Ok(vec![self.vip_traffic(vip_id)?])
    }
    /// Number of connection-table entries per backend id.
    /// (Entries of an id's earlier holder, another generation, do not count.)
    fn flows_per_backend(&self) -> Result<HashMap<u32, u64>>;
    /// The connection-table entry of one flow, if the program would follow it: its backend id
    /// still holds, active, the backend it was recorded for (same generation).
    fn lookup_flow(&self, key: &FlowKey) -> Result<Option<FlowEntry>>;
    /// The ring slot value last written for VIP `vip_id` (for `explain`).
    fn ring_slot(&self, vip_id: u32, slot: u32) -> Result<u32>;
    /// Records flows another balancer placed (flow sharing), each pinned to its backend id's
    /// current holder, proven (they are established). A flow this table already holds keeps
    /// its own entry. Returns how many were written.
    fn record_shared_flows(&mut self, flows: &[SharedFlow]) -> Result<usize>;
    /// The FLOW_EVENTS ring buffer (flows the program recorded), taken once by the flow
    /// sharer; None for a data plane without one.
    fn take_flow_events(&mut self) -> Option<::aya::maps::RingBuf<::aya::maps::MapData>> {
        None
    }
    /// Writes the trace filters (TRACE, see `lb_common::trace`). A data plane without the XDP
    /// program cannot trace.
    fn set_trace(&mut self, control: &lb_common::trace::TraceControl) -> Result<()> {
        let _ = control;
        Err(DataplaneError::Load("this data plane has no XDP program to trace".into()))
    }
    /// TRACE_EVENTS and TRACE_STATS, taken once by the daemon's trace reader; None for a data
    /// plane without them.
    fn take_trace(&mut self) -> Option<TraceMaps> {
        None
    }
    /// Checks that the balancer's pins are still there, pinning again what was removed, and
    /// that its program is still on the interface. A data plane without pins has nothing to
    /// check.
    fn check_pins(&mut self) -> Result<PinCheck> {
        Ok(PinCheck::default())
    }
}

/// What the trace reader reads: the records, and the matching packets not recorded
/// (`lb_common::trace::trace_stats`).
pub struct TraceMaps {
    pub events: ::aya::maps::RingBuf<::aya::maps::MapData>,
    pub stats: ::aya::maps::PerCpuArray<::aya::maps::MapData, u64>,
}

/// What [`Dataplane::check_pins`] found.
#[derive(Debug, Default)]
pub struct PinCheck {
    /// The pins that were missing and are pinned again (empty: none was missing).
    pub restored: Vec<String>,
    /// The program is no longer on the interface (its link was detached), and attaching it
    /// again failed with this (no interface of that name yet, say).
    pub detached: Option<String>,
    /// The program had come off the interface and is on it again (a new link, pinned).
    pub attached_again: bool,
}

/// The generation after `current`: never 0, which means "cache off".
pub fn next_generation(current: u32) -> u32 {
    current.wrapping_add(1).max(1)
}

/// The generation to write when the desired config asks for `requested` while `current` is in
/// force: the data plane numbers generations itself, so rewriting the config never revives
/// stale cache entries. A request of 0 turns the cache off.
pub fn keep_generation(requested: u32, current: u32) -> u32 {
    match (requested, current) {
        (0, _) => 0,
        (_, 0) => requested,
        (_, current) => current,
    }
}
