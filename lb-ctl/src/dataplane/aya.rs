//! [`Dataplane`] over the real BPF maps of a loaded balancer.
use std::collections::HashMap;

use aya::Ebpf;
use aya::maps::{Array, HashMap as BpfHashMap, MapData, PerCpuArray, PerCpuValues};
use lb_common::backend::{BACKEND_NONE, Backend, NatBackendKey, backend_generation};
use lb_common::config::DataplaneConfig;
use lb_common::flow::{FlowEntry, FlowKey, ForwardSet};
use lb_common::limits::MAX_VIPS;
use lb_common::map_names;
use lb_common::quic::QuicServerKey;
use lb_common::stats::{Counter, Traffic};
use lb_common::table_hash::{self, TableHash};
use lb_common::vip::{VipInfo, VipKey, index};

use super::array_mmap::ArrayMmap;
use super::rings_mmap::RingsMmap;
use super::{Dataplane, DataplaneError, PinCheck, Result, keep_generation, next_generation};

/// The loaded balancer: map operations as syscalls (or stores into memory-mapped arrays). It
/// keeps no record of what the maps hold beyond CONFIG; the planner (`state::plan`) does.
pub struct AyaDataplane {
    ebpf: Ebpf,
    ring_size: u32,
    /// What CONFIG holds.
    config: DataplaneConfig,
    /// RINGS in our memory, when the map allows it.
    rings_mmap: Option<RingsMmap>,
    /// Sets in the connection tables, as loaded.
    flow_sets: u32,
    /// The tables' hash (kind and seed): kept from reused maps, else this build's newest kind
    /// with a random seed.
    table_hash: TableHash,
    /// FLOWS in our memory (read-only), when the map allows it.
    flows_mmap: Option<ArrayMmap>,
    /// The daemon's hold on the balancer's pins (an attached balancer only).
    pins: Option<super::pins::PinKeeper>,
}

/// A random, non-zero u32 from the kernel.
fn random_seed() -> u32 {
    let mut bytes = [0u8; 4];
    // SAFETY: getrandom(2) writes at most `bytes.len()` bytes into the buffer.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    let seed = if n == 4 { u32::from_ne_bytes(bytes) } else { std::process::id() ^ 0x9e37_79b9 };
    seed.max(1)
}

fn map_err(map: &'static str) -> impl Fn(aya::maps::MapError) -> DataplaneError {
    move |source| DataplaneError::Map { map, source }
}

impl AyaDataplane {
    pub fn new(ebpf: Ebpf, ring_size: u32) -> Self {
        let slots = (MAX_VIPS * ring_size) as usize;
        let rings_mmap = ebpf.map(map_names::RINGS).and_then(|m| RingsMmap::new(m, slots));
        if rings_mmap.is_none() {
            tracing::warn!(
                "RINGS cannot be memory-mapped (maps pinned by an older lb-ctl?): ring writes take one syscall a slot"
            );
        }
        let flows = ebpf.map(map_names::FLOWS);
        let flow_sets = match flows {
            Some(aya::maps::Map::Array(data)) => data.info().map_or(0, |info| info.max_entries()),
            _ => 0,
        };
        // Writable: flows shared by peer balancers are written into it (`shared_flows.rs`).
        let flows_mmap = flows.and_then(|m| ArrayMmap::new(m, flow_sets as usize, size_of::<ForwardSet>(), true));
        // Reused (pinned) maps keep the config in force: the hash seed finds flows already there.
        let config = ebpf
            .map(map_names::CONFIG)
            .and_then(|m| Array::<&MapData, DataplaneConfig>::try_from(m).ok())
            .and_then(|a| a.get(&0, 0).ok())
            .unwrap_or_default();
        // Reused (pinned) tables keep their hash, kind and seed: a table made by an older build
        // keeps that build's function. A zero seed is a table made now.
        let table_hash = match config.table_seed {
            0 => TableHash { kind: table_hash::kind::NEWEST, seed: random_seed() },
            _ => config.table_hash(),
        };
        let mut dataplane = Self { ebpf, ring_size, config, rings_mmap, flow_sets, table_hash, flows_mmap, pins: None };
        // VIPS may be pinned with VIPs in it; the index is the program's own. Without it new
        // flows are placed all the same, through VIPS.
        if let Err(e) = dataplane.write_vip_index(None) {
            tracing::warn!(error = %e, "VIP_INDEX not written: new flows find their VIP in VIPS, more slowly");
        }
        dataplane
    }

    /// Writes VIP_INDEX from what VIPS holds now: the slot `key` hashes to, or every slot.
    fn write_vip_index(&mut self, key: Option<&VipKey>) -> Result<()> {
        // (slot, VIP id) of every VIP.
        let slotted: Vec<(u32, u32)> = self.vips()?.iter().map(|(k, info)| (index::slot(k), info.id)).collect();
        let slots: Vec<u32> = match key {
            Some(key) => vec![index::slot(key)],
            None => (0..index::SLOTS).collect(),
        };
        let name = map_names::VIP_INDEX;
        let mut map = self.array_mut::<u32>(name)?;
        for slot in slots {
            let entry = index::entry(slotted.iter().filter(|(s, _)| *s == slot).map(|(_, id)| *id));
            map.set(slot, entry, 0).map_err(map_err(name))?;
        }
        Ok(())
    }

    /// Makes the data plane keep the balancer's pins (see [`Dataplane::check_pins`]).
    pub fn keep_pins(&mut self, keeper: super::pins::PinKeeper) {
        self.pins = Some(keeper);
    }

    /// The connection tables' hash of `key` (which set it lives in; what `dsr-gue` derives
    /// the outer source port from).
    pub fn table_hash_of(&self, key: &FlowKey) -> u32 {
        self.table_hash.of(key)
    }

    /// The tables' hash, kind and seed.
    pub fn table_hash(&self) -> TableHash {
        self.table_hash
    }

    /// Makes the tables hash with function `kind` (keeping the seed), for a program of a build
    /// whose CONFIG has no kind and which hashes only one way (a benchmark measuring an older
    /// build beside this one). Only before the tables hold a flow; CONFIG says it from its next
    /// write on, or now if it was written.
    pub fn hash_tables_as(&mut self, kind: u8) -> Result<()> {
        self.table_hash.kind = kind;
        match self.config.ring_size {
            0 => Ok(()),
            _ => self.set_config(self.config),
        }
    }

    /// FLOWS set of `hash` in the memory mapping (None without one).
    pub(super) fn flow_set_ptr(&self, hash: u32) -> Option<*mut ForwardSet> {
        let mmap = self.flows_mmap.as_ref()?;
        Some(mmap.element::<ForwardSet>(self.set_of_hash(hash) as usize))
    }

    /// The FLOWS (and REVERSE_FLOWS) set `key` lives in.
    pub fn flow_set_of(&self, key: &FlowKey) -> u32 {
        self.set_of_hash(self.table_hash.of(key))
    }

    fn set_of_hash(&self, hash: u32) -> u32 {
        hash & self.flow_sets.wrapping_sub(1)
    }

    /// FLOWS set `index`, as it is now.
    fn flow_set(&self, index: u32) -> Result<ForwardSet> {
        if let Some(mmap) = &self.flows_mmap {
            // SAFETY: an element of the mapping; the program may be writing it, which the
            // ways' check words reveal (a torn way does not count as a flow).
            return Ok(unsafe { std::ptr::read_volatile(mmap.element::<ForwardSet>(index as usize)) });
        }
        let map: Array<&MapData, ForwardSet> =
            Array::try_from(self.map(map_names::FLOWS)?).map_err(map_err(map_names::FLOWS))?;
        map.get(&index, 0).map_err(map_err(map_names::FLOWS))
    }

    /// The loaded object, for benchmarks that run several of its programs at once.
    pub fn ebpf(&self) -> &Ebpf {
        &self.ebpf
    }

    /// The loaded object, for attaching programs and for tests.
    pub fn ebpf_mut(&mut self) -> &mut Ebpf {
        &mut self.ebpf
    }

    fn map_mut(&mut self, name: &'static str) -> Result<&mut aya::maps::Map> {
        self.ebpf.map_mut(name).ok_or_else(|| DataplaneError::Load(format!("map {name} missing from the object")))
    }

    fn map(&self, name: &'static str) -> Result<&aya::maps::Map> {
        self.ebpf.map(name).ok_or_else(|| DataplaneError::Load(format!("map {name} missing from the object")))
    }

    fn array_mut<V: aya::Pod>(&mut self, name: &'static str) -> Result<Array<&mut MapData, V>> {
        Array::try_from(self.map_mut(name)?).map_err(map_err(name))
    }

    fn vips_mut(&mut self) -> Result<BpfHashMap<&mut MapData, VipKey, VipInfo>> {
        BpfHashMap::try_from(self.map_mut(map_names::VIPS)?).map_err(map_err(map_names::VIPS))
    }

    /// BACKENDS entry `id` as it is now (None if never written).
    pub(super) fn backend(&self, id: u32) -> Result<Option<Backend>> {
        let map: Array<&MapData, Backend> =
            Array::try_from(self.map(map_names::BACKENDS)?).map_err(map_err(map_names::BACKENDS))?;
        let backend = map.get(&id, 0).map_err(map_err(map_names::BACKENDS))?;
        Ok((backend != Backend::default()).then_some(backend))
    }

    /// Zeroes backend `id`'s traffic on every CPU.
    fn reset_backend_traffic(&mut self, id: u32) -> Result<()> {
        let name = map_names::BACKEND_STATS;
        let cpus = aya::util::nr_cpus().map_err(|(_, e)| DataplaneError::Load(format!("counting CPUs: {e}")))?;
        let zeros = PerCpuValues::try_from(vec![Traffic::default(); cpus])
            .map_err(|e| DataplaneError::Load(format!("{name}: {e}")))?;
        let mut map: PerCpuArray<&mut MapData, Traffic> =
            PerCpuArray::try_from(self.map_mut(name)?).map_err(map_err(name))?;
        map.set(id, zeros, 0).map_err(map_err(name))
    }

    fn traffic(&self, name: &'static str, index: u32) -> Result<Traffic> {
        let map: PerCpuArray<&MapData, Traffic> = PerCpuArray::try_from(self.map(name)?).map_err(map_err(name))?;
        let values = map.get(&index, 0).map_err(map_err(name))?;
        Ok(values.iter().fold(Traffic::default(), |sum, t| Traffic {
            packets: sum.packets + t.packets,
            bytes: sum.bytes + t.bytes,
        }))
    }
}

/// Whether a map operation failed only because the key is not there: aya reports a lookup's
/// miss as `KeyNotFound` but a delete's as the syscall's ENOENT (a daemon restarted on pinned
/// maps clears NAT_BACKENDS entries it cannot know are gone).
fn not_found(e: &aya::maps::MapError) -> bool {
    match e {
        aya::maps::MapError::KeyNotFound => true,
        aya::maps::MapError::SyscallError(s) => s.io_error.raw_os_error() == Some(libc::ENOENT),
        _ => false,
    }
}

impl Dataplane for AyaDataplane {
    fn check_pins(&mut self) -> Result<PinCheck> {
        let Some(keeper) = &self.pins else { return Ok(PinCheck::default()) };
        let restored = keeper.restore(&self.ebpf)?;
        if keeper.attached() {
            return Ok(PinCheck { restored, ..PinCheck::default() });
        }
        match super::attach::attach_again(&mut self.ebpf, keeper) {
            Ok(keeper) => {
                self.pins = Some(keeper);
                Ok(PinCheck { restored, attached_again: true, ..PinCheck::default() })
            }
            Err(e) => Ok(PinCheck { restored, detached: Some(e.to_string()), ..PinCheck::default() }),
        }
    }

    fn set_config(&mut self, config: DataplaneConfig) -> Result<()> {
        let generation = keep_generation(config.nexthop_generation, self.config.nexthop_generation);
        let config = DataplaneConfig {
            nexthop_generation: generation,
            flow_sets: self.flow_sets,
            table_seed: self.table_hash.seed,
            table_hash_kind: self.table_hash.kind,
            ..config
        };
        if config.ring_size != self.ring_size {
            return Err(DataplaneError::Load(format!(
                "ring size {} differs from the loaded maps' {}",
                config.ring_size, self.ring_size
            )));
        }
        self.array_mut::<DataplaneConfig>(map_names::CONFIG)?.set(0, config, 0).map_err(map_err(map_names::CONFIG))?;
        self.config = config;
        Ok(())
    }

    fn refresh_next_hops(&mut self) -> Result<()> {
        if self.config.nexthop_generation == 0 {
            return Ok(()); // caching is off
        }
        let config =
            DataplaneConfig { nexthop_generation: next_generation(self.config.nexthop_generation), ..self.config };
        self.array_mut::<DataplaneConfig>(map_names::CONFIG)?.set(0, config, 0).map_err(map_err(map_names::CONFIG))?;
        self.config = config;
        Ok(())
    }

    fn upsert_vip(&mut self, key: VipKey, info: VipInfo) -> Result<()> {
        let info = VipInfo { key, ..info };
        // VIP_INFO first: a connection-table hit may only find a VIP that VIPS also has.
        self.array_mut::<VipInfo>(map_names::VIP_INFO)?.set(info.id, info, 0).map_err(map_err(map_names::VIP_INFO))?;
        self.vips_mut()?.insert(key, info, 0).map_err(map_err(map_names::VIPS))?;
        self.write_vip_index(Some(&key))
    }

    fn remove_vip(&mut self, key: &VipKey) -> Result<()> {
        let mut vips = self.vips_mut()?;
        let id = match vips.get(key, 0) {
            Ok(info) => info.id,
            Err(e) if not_found(&e) => return Ok(()),
            Err(e) => return Err(map_err(map_names::VIPS)(e)),
        };
        vips.remove(key).map_err(map_err(map_names::VIPS))?;
        self.array_mut::<VipInfo>(map_names::VIP_INFO)?
            .set(id, VipInfo::default(), 0)
            .map_err(map_err(map_names::VIP_INFO))?;
        self.write_vip_index(Some(key))
    }

    fn upsert_backend(&mut self, id: u32, backend: Backend) -> Result<()> {
        let current = self.backend(id)?;
        let generation = backend_generation(current.as_ref(), &backend);
        if current.is_none_or(|c| c.generation != generation) {
            // A new holder of the id: its traffic starts from zero.
            self.reset_backend_traffic(id)?;
        }
        self.array_mut::<Backend>(map_names::BACKENDS)?
            .set(id, Backend { generation, ..backend }, 0)
            .map_err(map_err(map_names::BACKENDS))
    }

    fn remove_backend(&mut self, id: u32) -> Result<()> {
        // Inactive, but the generation stays: the id's next holder gets the one after it.
        let Some(current) = self.backend(id)? else {
            return Ok(());
        };
        self.array_mut::<Backend>(map_names::BACKENDS)?
            .set(id, Backend { flags: 0, ..current }, 0)
            .map_err(map_err(map_names::BACKENDS))
    }

    fn set_nat_backend(&mut self, key: NatBackendKey, vip: Option<u32>) -> Result<()> {
        let mut map: BpfHashMap<&mut MapData, NatBackendKey, u32> =
            BpfHashMap::try_from(self.map_mut(map_names::NAT_BACKENDS)?).map_err(map_err(map_names::NAT_BACKENDS))?;
        match vip {
            Some(vip) => map.insert(key, vip, 0).map_err(map_err(map_names::NAT_BACKENDS)),
            None => match map.remove(&key) {
                Ok(()) => Ok(()),
                Err(e) if not_found(&e) => Ok(()),
                Err(e) => Err(map_err(map_names::NAT_BACKENDS)(e)),
            },
        }
    }

    fn set_quic_server(&mut self, key: QuicServerKey, backend_id: Option<u32>) -> Result<()> {
        let name = map_names::QUIC_SERVERS;
        let mut map: BpfHashMap<&mut MapData, QuicServerKey, u32> =
            BpfHashMap::try_from(self.map_mut(name)?).map_err(map_err(name))?;
        match backend_id {
            Some(id) => map.insert(key, id, 0).map_err(map_err(name)),
            None => match map.remove(&key) {
                Ok(()) | Err(aya::maps::MapError::KeyNotFound) => Ok(()),
                Err(e) => Err(map_err(name)(e)),
            },
        }
    }

    fn vips(&self) -> Result<Vec<(VipKey, VipInfo)>> {
        let name = map_names::VIPS;
        let map: BpfHashMap<&MapData, VipKey, VipInfo> =
            BpfHashMap::try_from(self.map(name)?).map_err(map_err(name))?;
        map.iter().collect::<std::result::Result<Vec<_>, _>>().map_err(map_err(name))
    }

    fn quic_servers(&self) -> Result<Vec<(QuicServerKey, u32)>> {
        let name = map_names::QUIC_SERVERS;
        let map: BpfHashMap<&MapData, QuicServerKey, u32> =
            BpfHashMap::try_from(self.map(name)?).map_err(map_err(name))?;
        map.iter().collect::<std::result::Result<Vec<_>, _>>().map_err(map_err(name))
    }

    fn write_ring_slots(&mut self, vip_id: u32, slots: &[(u32, u32)]) -> Result<()> {
        let base = vip_id * self.ring_size;
        if let Some(&(slot, _)) = slots.iter().find(|(slot, _)| *slot >= self.ring_size) {
            return Err(DataplaneError::OutOfRange { what: "ring slot", index: slot, limit: self.ring_size });
        }
        if let Some(mmap) = &self.rings_mmap {
            for &(slot, id) in slots {
                mmap.set((base + slot) as usize, id);
            }
            return Ok(());
        }
        let mut map = self.array_mut::<u32>(map_names::RINGS)?;
        for &(slot, id) in slots {
            map.set(base + slot, id, 0).map_err(map_err(map_names::RINGS))?;
        }
        Ok(())
    }

    fn set_port_flags(&mut self, port: u16, flags: u32) -> Result<()> {
        self.array_mut::<u32>(map_names::PORT_FLAGS)?.set(port as u32, flags, 0).map_err(map_err(map_names::PORT_FLAGS))
    }

    fn counters(&self) -> Result<Vec<(Counter, u64)>> {
        let map: PerCpuArray<&MapData, u64> =
            PerCpuArray::try_from(self.map(map_names::COUNTERS)?).map_err(map_err(map_names::COUNTERS))?;
        // COUNTERS pinned by an older build (kept across an upgrade's restart) may hold fewer
        // counters than this build names: the newer ones read as 0 (the program cannot count
        // them either until `detach` makes the maps anew).
        let entries = map.len();
        Counter::ALL
            .iter()
            .map(|&c| {
                if c as u32 >= entries {
                    return Ok((c, 0));
                }
                let values = map.get(&(c as u32), 0).map_err(map_err(map_names::COUNTERS))?;
                Ok((c, values.iter().sum()))
            })
            .collect()
    }

    fn vip_traffic(&self, vip_id: u32) -> Result<Traffic> {
        self.traffic(map_names::VIP_STATS, vip_id)
    }

    fn counters_per_cpu(&self) -> Result<Vec<Vec<(Counter, u64)>>> {
        let map: PerCpuArray<&MapData, u64> =
            PerCpuArray::try_from(self.map(map_names::COUNTERS)?).map_err(map_err(map_names::COUNTERS))?;
        let entries = map.len();
        let mut cpus: Vec<Vec<(Counter, u64)>> = Vec::new();
        for &c in Counter::ALL {
            // Counters an older build's pinned map lacks read as 0 (see `counters`).
            if c as u32 >= entries {
                cpus.iter_mut().for_each(|cpu| cpu.push((c, 0)));
                continue;
            }
            let values = map.get(&(c as u32), 0).map_err(map_err(map_names::COUNTERS))?;
            for (cpu, value) in values.iter().enumerate() {
                if cpus.len() <= cpu {
                    cpus.push(Vec::with_capacity(Counter::ALL.len()));
                }
                cpus[cpu].push((c, *value));
            }
        }
        Ok(cpus)
    }

    fn vip_traffic_per_cpu(&self, vip_id: u32) -> Result<Vec<Traffic>> {
        let name = map_names::VIP_STATS;
        let map: PerCpuArray<&MapData, Traffic> = PerCpuArray::try_from(self.map(name)?).map_err(map_err(name))?;
        Ok(map.get(&vip_id, 0).map_err(map_err(name))?.iter().copied().collect())
    }

    fn backend_traffic(&self, backend_id: u32) -> Result<Traffic> {
        self.traffic(map_names::BACKEND_STATS, backend_id)
    }

    fn flows_per_backend(&self) -> Result<HashMap<u32, u64>> {
        let mut out = HashMap::new();
        // Each id's current generation: entries of an earlier holder do not count.
        let mut generations: HashMap<u32, Option<u32>> = HashMap::new();
        for index in 0..self.flow_sets {
            for way in self.flow_set(index)?.flows(self.table_hash) {
                let id = way.value.backend_id;
                let current = match generations.get(&id) {
                    Some(g) => *g,
                    None => *generations.entry(id).or_insert(self.backend(id)?.map(|b| b.generation)),
                };
                if current == Some(way.value.generation) {
                    *out.entry(id).or_default() += 1;
                }
            }
        }
        Ok(out)
    }

    fn record_shared_flows(&mut self, flows: &[lb_common::flow::SharedFlow]) -> Result<usize> {
        self.write_shared_flows(flows)
    }
    fn set_trace(&mut self, control: &lb_common::trace::TraceControl) -> Result<()> {
        let name = map_names::TRACE;
        self.array_mut::<lb_common::trace::TraceControl>(name)?.set(0, *control, 0).map_err(map_err(name))
    }
    fn take_trace(&mut self) -> Option<super::TraceMaps> {
        let events = aya::maps::RingBuf::try_from(self.ebpf.take_map(map_names::TRACE_EVENTS)?).ok()?;
        let stats = aya::maps::PerCpuArray::try_from(self.ebpf.take_map(map_names::TRACE_STATS)?).ok()?;
        Some(super::TraceMaps { events, stats })
    }
    fn take_flow_events(&mut self) -> Option<aya::maps::RingBuf<MapData>> {
        let map = self.ebpf.take_map(map_names::FLOW_EVENTS)?;
        aya::maps::RingBuf::try_from(map).ok()
    }
    fn lookup_flow(&self, key: &FlowKey) -> Result<Option<FlowEntry>> {
        if self.flow_sets == 0 {
            return Ok(None);
        }
        let hash = self.table_hash.of(key);
        let Some(entry) = self.flow_set(self.set_of_hash(hash))?.find(key, hash).map(|way| way.value) else {
            return Ok(None);
        };
        let current = self.backend(entry.backend_id)?;
        Ok(current.filter(|b| b.is_active() && b.generation == entry.generation).map(|_| entry))
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
