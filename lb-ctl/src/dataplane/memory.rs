//! An in-memory [`Dataplane`]: the maps' contents in plain collections. `lb-ctl proxy` runs the
//! daemon on it (no XDP: only `stats` and `explain` read it), and tests without root inspect it.
use std::collections::HashMap;

use lb_common::backend::{BACKEND_NONE, Backend, NatBackendKey, backend_generation};
use lb_common::config::DataplaneConfig;
use lb_common::flow::{FlowEntry, FlowKey, SharedFlow};
use lb_common::limits::{MAX_BACKENDS, MAX_VIPS};
use lb_common::quic::QuicServerKey;
use lb_common::stats::{Counter, Traffic};
use lb_common::vip::{VipInfo, VipKey};

use super::{Dataplane, DataplaneError, Result, keep_generation, next_generation};

/// The maps' contents, kept in plain collections. Fields are public so tests can inspect them
/// and plant flows or traffic.
#[derive(Debug, Default, Clone)]
pub struct MemoryDataplane {
    pub config: DataplaneConfig,
    pub vips: HashMap<VipKey, VipInfo>,
    pub backends: HashMap<u32, Backend>,
    pub rings: HashMap<u32, Vec<u32>>,
    pub port_flags: HashMap<u16, u32>,
    pub nat_backends: HashMap<NatBackendKey, u32>,
    pub quic_servers: HashMap<QuicServerKey, u32>,
    pub flows: HashMap<FlowKey, FlowEntry>,
    pub vip_traffic: HashMap<u32, Traffic>,
    pub backend_traffic: HashMap<u32, Traffic>,
    /// Number of ring slots written, to check that rewrites touch only changed slots.
    pub ring_slot_writes: u64,
}

fn check(what: &'static str, index: u32, limit: u32) -> Result<()> {
    if index >= limit {
        return Err(DataplaneError::OutOfRange { what, index, limit });
    }
    Ok(())
}

impl Dataplane for MemoryDataplane {
    fn set_config(&mut self, config: DataplaneConfig) -> Result<()> {
        let generation = keep_generation(config.nexthop_generation, self.config.nexthop_generation);
        self.config = DataplaneConfig { nexthop_generation: generation, ..config };
        Ok(())
    }
    fn refresh_next_hops(&mut self) -> Result<()> {
        if self.config.nexthop_generation != 0 {
            self.config.nexthop_generation = next_generation(self.config.nexthop_generation);
        }
        Ok(())
    }
    fn upsert_vip(&mut self, key: VipKey, info: VipInfo) -> Result<()> {
        check("VIP id", info.id, MAX_VIPS)?;
        self.vips.insert(key, VipInfo { key, ..info });
        Ok(())
    }
    fn remove_vip(&mut self, key: &VipKey) -> Result<()> {
        self.vips.remove(key);
        Ok(())
    }
    fn upsert_backend(&mut self, id: u32, backend: Backend) -> Result<()> {
        check("backend id", id, MAX_BACKENDS)?;
        let current = self.backends.get(&id);
        let generation = backend_generation(current, &backend);
        if current.is_none_or(|c| c.generation != generation) {
            self.backend_traffic.remove(&id);
        }
        self.backends.insert(id, Backend { generation, ..backend });
        Ok(())
    }
    fn remove_backend(&mut self, id: u32) -> Result<()> {
        check("backend id", id, MAX_BACKENDS)?;
        if let Some(b) = self.backends.get_mut(&id) {
            b.flags = 0;
        }
        Ok(())
    }
    fn set_nat_backend(&mut self, key: NatBackendKey, vip: Option<u32>) -> Result<()> {
        match vip {
            Some(vip) => self.nat_backends.insert(key, vip),
            None => self.nat_backends.remove(&key),
        };
        Ok(())
    }
    fn set_quic_server(&mut self, key: QuicServerKey, backend_id: Option<u32>) -> Result<()> {
        match backend_id {
            Some(id) => self.quic_servers.insert(key, id),
            None => self.quic_servers.remove(&key),
        };
        Ok(())
    }
    fn quic_servers(&self) -> Result<Vec<(QuicServerKey, u32)>> {
        Ok(self.quic_servers.iter().map(|(k, b)| (*k, *b)).collect())
    }
    fn vips(&self) -> Result<Vec<(VipKey, VipInfo)>> {
        Ok(self.vips.iter().map(|(k, v)| (*k, *v)).collect())
    }
    fn write_ring_slots(&mut self, vip_id: u32, slots: &[(u32, u32)]) -> Result<()> {
        check("VIP id", vip_id, MAX_VIPS)?;
        let size = self.config.ring_size;
        let ring = self.rings.entry(vip_id).or_insert_with(|| vec![BACKEND_NONE; size as usize]);
        for &(slot, id) in slots {
            check("ring slot", slot, size)?;
            if ring[slot as usize] != id {
                ring[slot as usize] = id;
                self.ring_slot_writes += 1;
            }
        }
        Ok(())
    }
    fn set_port_flags(&mut self, port: u16, flags: u32) -> Result<()> {
        if flags == 0 {
            self.port_flags.remove(&port);
        } else {
            self.port_flags.insert(port, flags);
        }
        Ok(())
    }
    fn counters(&self) -> Result<Vec<(Counter, u64)>> {
        Ok(Counter::ALL.iter().map(|c| (*c, 0)).collect())
    }
    fn vip_traffic(&self, vip_id: u32) -> Result<Traffic> {
        Ok(self.vip_traffic.get(&vip_id).copied().unwrap_or_default())
    }
    fn backend_traffic(&self, backend_id: u32) -> Result<Traffic> {
        Ok(self.backend_traffic.get(&backend_id).copied().unwrap_or_default())
    }
    fn flows_per_backend(&self) -> Result<HashMap<u32, u64>> {
        let mut out = HashMap::new();
        let current = |e: &FlowEntry| self.backends.get(&e.backend_id).is_some_and(|b| b.generation == e.generation);
        for entry in self.flows.values().filter(|e| current(e)) {
            *out.entry(entry.backend_id).or_default() += 1;
        }
        Ok(out)
    }
    fn record_shared_flows(&mut self, flows: &[SharedFlow]) -> Result<usize> {
        let mut written = 0;
        for f in flows {
            let Some(backend) = self.backends.get(&f.backend_id) else { continue };
            if self.lookup_flow(&f.key)?.is_some() {
                continue;
            }
            let entry =
                FlowEntry { backend_id: f.backend_id, vip_id: f.vip_id, generation: backend.generation, reply_hash: 0 };
            self.flows.insert(f.key, entry);
            written += 1;
        }
        Ok(written)
    }
    fn lookup_flow(&self, key: &FlowKey) -> Result<Option<FlowEntry>> {
        let current = |e: &FlowEntry| {
            self.backends.get(&e.backend_id).is_some_and(|b| b.is_active() && b.generation == e.generation)
        };
        Ok(self.flows.get(key).copied().filter(current))
    }
    fn ring_slot(&self, vip_id: u32, slot: u32) -> Result<u32> {
        Ok(self.rings.get(&vip_id).and_then(|r| r.get(slot as usize).copied()).unwrap_or(BACKEND_NONE))
    }
}
