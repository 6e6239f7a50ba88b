//! [`Dataplane`] over the real BPF maps of a loaded balancer.
use std::collections::HashMap;

use aya::Ebpf;
use aya::maps::{Array, HashMap as BpfHashMap, MapData, PerCpuArray};
use lb_common::backend::{BACKEND_NONE, Backend};
use lb_common::config::DataplaneConfig;
use lb_common::flow::{FlowEntry, FlowKey};
use lb_common::limits::MAX_VIPS;
use lb_common::map_names;
use lb_common::stats::{Counter, Traffic};
use lb_common::vip::{VipInfo, VipKey};

use super::rings_mmap::RingsMmap;
use super::{Dataplane, DataplaneError, Result, keep_generation, next_generation};

/// The loaded balancer and what was last written to its rings (so rewrites touch only the
/// slots that changed).
pub struct AyaDataplane {
    ebpf: Ebpf,
    ring_size: u32,
    /// What CONFIG holds.
    config: DataplaneConfig,
    /// RINGS in our memory, when the map allows it.
    rings_mmap: Option<RingsMmap>,
    rings: HashMap<u32, Vec<u32>>,
}

fn map_err(map: &'static str) -> impl Fn(aya::maps::MapError) -> DataplaneError {
    move |source| DataplaneError::Map { map, source }
}

impl AyaDataplane {
    pub fn new(ebpf: Ebpf, ring_size: u32) -> Self {
        let slots = (MAX_VIPS * ring_size) as usize;
        let rings_mmap = ebpf.map(map_names::RINGS).and_then(|m| RingsMmap::new(m, slots));
        if rings_mmap.is_none() {
            tracing::warn!("RINGS cannot be memory-mapped (maps pinned by an older lb-ctl?): ring writes take one syscall a slot");
        }
        Self { ebpf, ring_size, config: DataplaneConfig::default(), rings_mmap, rings: HashMap::new() }
    }

    /// The loaded object, for attaching programs and for tests.
    pub fn ebpf_mut(&mut self) -> &mut Ebpf {
        &mut self.ebpf
    }

    fn map_mut(&mut self, name: &'static str) -> Result<&mut aya::maps::Map> {
        self.ebpf
            .map_mut(name)
            .ok_or_else(|| DataplaneError::Load(format!("map {name} missing from the object")))
    }

    fn map(&self, name: &'static str) -> Result<&aya::maps::Map> {
        self.ebpf
            .map(name)
            .ok_or_else(|| DataplaneError::Load(format!("map {name} missing from the object")))
    }

    fn array_mut<V: aya::Pod>(&mut self, name: &'static str) -> Result<Array<&mut MapData, V>> {
        Array::try_from(self.map_mut(name)?).map_err(map_err(name))
    }

    fn vips_mut(&mut self) -> Result<BpfHashMap<&mut MapData, VipKey, VipInfo>> {
        BpfHashMap::try_from(self.map_mut(map_names::VIPS)?).map_err(map_err(map_names::VIPS))
    }

    fn traffic(&self, name: &'static str, index: u32) -> Result<Traffic> {
        let map: PerCpuArray<&MapData, Traffic> =
            PerCpuArray::try_from(self.map(name)?).map_err(map_err(name))?;
        let values = map.get(&index, 0).map_err(map_err(name))?;
        Ok(values.iter().fold(Traffic::default(), |sum, t| Traffic {
            packets: sum.packets + t.packets,
            bytes: sum.bytes + t.bytes,
        }))
    }
}

impl Dataplane for AyaDataplane {
    fn set_config(&mut self, config: DataplaneConfig) -> Result<()> {
        let generation = keep_generation(config.nexthop_generation, self.config.nexthop_generation);
        let config = DataplaneConfig { nexthop_generation: generation, ..config };
        if config.ring_size != self.ring_size {
            return Err(DataplaneError::Load(format!(
                "ring size {} differs from the loaded maps' {}",
                config.ring_size, self.ring_size
            )));
        }
        self.array_mut::<DataplaneConfig>(map_names::CONFIG)?
            .set(0, config, 0)
            .map_err(map_err(map_names::CONFIG))?;
        self.config = config;
        Ok(())
    }

    fn refresh_next_hops(&mut self) -> Result<()> {
        if self.config.nexthop_generation == 0 {
            return Ok(()); // caching is off
        }
        let config = DataplaneConfig { nexthop_generation: next_generation(self.config.nexthop_generation), ..self.config };
        self.array_mut::<DataplaneConfig>(map_names::CONFIG)?
            .set(0, config, 0)
            .map_err(map_err(map_names::CONFIG))?;
        self.config = config;
        Ok(())
    }

    fn upsert_vip(&mut self, key: VipKey, info: VipInfo) -> Result<()> {
        let info = VipInfo { key, ..info };
        // VIP_INFO first: a connection-table hit may only find a VIP that VIPS also has.
        self.array_mut::<VipInfo>(map_names::VIP_INFO)?
            .set(info.id, info, 0)
            .map_err(map_err(map_names::VIP_INFO))?;
        self.vips_mut()?.insert(key, info, 0).map_err(map_err(map_names::VIPS))
    }

    fn remove_vip(&mut self, key: &VipKey) -> Result<()> {
        let mut vips = self.vips_mut()?;
        let id = match vips.get(key, 0) {
            Ok(info) => info.id,
            Err(aya::maps::MapError::KeyNotFound) => return Ok(()),
            Err(e) => return Err(map_err(map_names::VIPS)(e)),
        };
        vips.remove(key).map_err(map_err(map_names::VIPS))?;
        self.array_mut::<VipInfo>(map_names::VIP_INFO)?
            .set(id, VipInfo::default(), 0)
            .map_err(map_err(map_names::VIP_INFO))
    }

    fn upsert_backend(&mut self, id: u32, backend: Backend) -> Result<()> {
        self.array_mut::<Backend>(map_names::BACKENDS)?
            .set(id, backend, 0)
            .map_err(map_err(map_names::BACKENDS))
    }

    fn remove_backend(&mut self, id: u32) -> Result<()> {
        self.upsert_backend(id, Backend::default())
    }

    fn write_ring(&mut self, vip_id: u32, ring: &[u32]) -> Result<()> {
        if ring.len() != self.ring_size as usize {
            return Err(DataplaneError::OutOfRange {
                what: "ring length",
                index: ring.len() as u32,
                limit: self.ring_size,
            });
        }
        let base = vip_id * self.ring_size;
        let previous = self.rings.remove(&vip_id);
        if let Some(mmap) = &self.rings_mmap {
            for (slot, &id) in ring.iter().enumerate() {
                let index = (base + slot as u32) as usize;
                if mmap.get(index) != id {
                    mmap.set(index, id);
                }
            }
            self.rings.insert(vip_id, ring.to_vec());
            return Ok(());
        }
        let mut map = self.array_mut::<u32>(map_names::RINGS)?;
        for (slot, &id) in ring.iter().enumerate() {
            if previous.as_ref().is_some_and(|old| old[slot] == id) {
                continue;
            }
            map.set(base + slot as u32, id, 0).map_err(map_err(map_names::RINGS))?;
        }
        self.rings.insert(vip_id, ring.to_vec());
        Ok(())
    }

    fn set_port_flags(&mut self, port: u16, flags: u32) -> Result<()> {
        self.array_mut::<u32>(map_names::PORT_FLAGS)?
            .set(port as u32, flags, 0)
            .map_err(map_err(map_names::PORT_FLAGS))
    }

    fn counters(&self) -> Result<Vec<(Counter, u64)>> {
        let map: PerCpuArray<&MapData, u64> = PerCpuArray::try_from(self.map(map_names::COUNTERS)?)
            .map_err(map_err(map_names::COUNTERS))?;
        Counter::ALL
            .iter()
            .map(|&c| {
                let values = map.get(&(c as u32), 0).map_err(map_err(map_names::COUNTERS))?;
                Ok((c, values.iter().sum()))
            })
            .collect()
    }

    fn vip_traffic(&self, vip_id: u32) -> Result<Traffic> {
        self.traffic(map_names::VIP_STATS, vip_id)
    }

    fn backend_traffic(&self, backend_id: u32) -> Result<Traffic> {
        self.traffic(map_names::BACKEND_STATS, backend_id)
    }

    fn flows_per_backend(&self) -> Result<HashMap<u32, u64>> {
        let map: BpfHashMap<&MapData, FlowKey, FlowEntry> =
            BpfHashMap::try_from(self.map(map_names::FLOWS)?).map_err(map_err(map_names::FLOWS))?;
        let mut out = HashMap::new();
        // Entries may vanish while we iterate (LRU eviction): skip those.
        for (_, entry) in map.iter().flatten() {
            *out.entry(entry.backend_id).or_default() += 1;
        }
        Ok(out)
    }

    fn lookup_flow(&self, key: &FlowKey) -> Result<Option<FlowEntry>> {
        let map: BpfHashMap<&MapData, FlowKey, FlowEntry> =
            BpfHashMap::try_from(self.map(map_names::FLOWS)?).map_err(map_err(map_names::FLOWS))?;
        match map.get(key, 0) {
            Ok(entry) => Ok(Some(entry)),
            Err(aya::maps::MapError::KeyNotFound) => Ok(None),
            Err(e) => Err(map_err(map_names::FLOWS)(e)),
        }
    }

    fn ring_slot(&self, vip_id: u32, slot: u32) -> Result<u32> {
        if slot >= self.ring_size {
            return Ok(BACKEND_NONE);
        }
        let index = vip_id * self.ring_size + slot;
        if let Some(mmap) = &self.rings_mmap {
            return Ok(mmap.get(index as usize));
        }
        let map: Array<&MapData, u32> =
            Array::try_from(self.map(map_names::RINGS)?).map_err(map_err(map_names::RINGS))?;
        map.get(&index, 0).map_err(map_err(map_names::RINGS))
    }
}
