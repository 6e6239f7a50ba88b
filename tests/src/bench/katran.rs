//! Katran as a peer of the data-plane benchmarks (`--katran DIR`): its balancer object, built by
//! Katran's own build in the operator's checkout, loaded with aya and configured the way
//! katran_server would for the fixture's IPv4 VIPs and backends, so that `bench dataplane` and
//! `bench flows` run it call by call beside lb_ingress and the bare program on the same frames.
//!
//! The map layouts below are Katran's (katran/lib/bpf/balancer_structs.h); aya checks each
//! key and value size against the object's BTF when a map is taken, so a Katran whose layout
//! changed fails loudly here rather than measuring a misconfigured program.
use std::os::fd::{FromRawFd as _, OwnedFd};
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use aya::maps::{Array, ArrayOfMaps, HashMap, Map, MapData, PerCpuArray, PerCpuValues};
use aya::programs::Xdp;
use aya::{Ebpf, Pod};

use super::katran_build;
use crate::fixture::{LB_MAC, vips};

/// Where Katran's builds leave the balancer object, relative to the checkout:
/// build_bpf_modules_opensource.sh (which build_katran.sh runs) and Makefile-bpf run in place.
const OBJECT_PATHS: [&str; 2] = [katran_build::OBJECT, "bpf/balancer.bpf.o"];
const PROGRAM: &str = "balancer_ingress";

/// balancer_consts.h: the ring of each VIP, the stats slot of the new-connection rate, and the
/// control array's MAC slot.
const RING_SIZE: u32 = 65537;
const MAX_VIPS: u32 = 512;
const NEW_CONN_RATE_CNTR: u32 = 2;
const MAC_ADDR_POS: u32 = 0;
const BPF_MAP_TYPE_LRU_HASH: u32 = 9;

/// struct flow_key: addresses (IPv4 in the first 4 bytes), ports as on the wire, protocol.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq, Hash)]
pub struct FlowKey {
    src: [u8; 16],
    dst: [u8; 16],
    ports: [u8; 4],
    proto: u8,
    _pad: [u8; 3],
}

/// struct real_pos_lru.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct RealPosLru {
    pos: u32,
    _pad: u32,
    atime: u64,
}

/// struct vip_definition.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct VipDefinition {
    vip: [u8; 16],
    port: u16,
    proto: u8,
    _pad: u8,
}

/// struct vip_meta (flags 0: a plain VIP hashing the whole 5-tuple, LRU on).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct VipMeta {
    flags: u32,
    vip_num: u32,
}

/// struct real_definition (flags 0: an IPv4 real, IPIP).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct RealDefinition {
    dst: [u8; 16],
    flags: u8,
    _pad: [u8; 3],
}

/// struct lb_stats.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct LbStats {
    v1: u64,
    v2: u64,
}

// SAFETY: plain C structs of integers and byte arrays, padding spelled out.
unsafe impl Pod for FlowKey {}
unsafe impl Pod for RealPosLru {}
unsafe impl Pod for VipDefinition {}
unsafe impl Pod for VipMeta {}
unsafe impl Pod for RealDefinition {}
unsafe impl Pod for LbStats {}

/// Katran's key of an IPv4 TCP or UDP frame (Ethernet, IPv4, then ports), as its parser builds
/// it.
pub fn flow_key(frame: &[u8]) -> FlowKey {
    let ip = &frame[14..];
    let l4 = &ip[usize::from(ip[0] & 0x0f) * 4..];
    let mut key = FlowKey { proto: ip[9], ..FlowKey::default() };
    key.src[..4].copy_from_slice(&ip[12..16]);
    key.dst[..4].copy_from_slice(&ip[16..20]);
    key.ports.copy_from_slice(&l4[..4]);
    key
}

/// The balancer object in a Katran checkout, built there if it has none (or the object itself).
pub fn object_in(checkout: &Path) -> anyhow::Result<PathBuf> {
    if checkout.is_file() {
        return Ok(checkout.to_path_buf());
    }
    if let Some(built) = OBJECT_PATHS.iter().map(|p| checkout.join(p)).find(|p| p.is_file()) {
        return Ok(built);
    }
    anyhow::ensure!(
        katran_build::is_checkout(checkout),
        "no balancer.bpf.o in {} (looked for {}), and it is not a Katran checkout to build one in",
        checkout.display(),
        OBJECT_PATHS.join(", ")
    );
    katran_build::build(checkout)
}

/// Katran loaded and configured. The program and the maps a run changes are apart, so a bench
/// can hold the program while it forgets flows.
pub struct Katran {
    ebpf: Ebpf,
    pub maps: Maps,
}

/// The maps a run changes: this CPU's connection table (LRU) and the stats holding the
/// new-connection rate.
pub struct Maps {
    lru_mapping: ArrayOfMaps<MapData>,
    lru: HashMap<MapData, FlowKey, RealPosLru>,
    stats: PerCpuArray<MapData, LbStats>,
    cpu: u32,
}

impl Katran {
    /// Loads the object and configures the fixture's IPv4 VIPs (each with a ring naming its
    /// backends slot by slot) and a connection table of `lru_size` flows for CPU `cpu`.
    pub fn load(object: &Path, cpu: u32, lru_size: u32) -> anyhow::Result<Katran> {
        let mut ebpf = Ebpf::load_file(object).with_context(|| format!("loading Katran's {}", object.display()))?;
        let prog: &mut Xdp = ebpf
            .program_mut(PROGRAM)
            .with_context(|| format!("no program {PROGRAM} in {}", object.display()))?
            .try_into()?;
        prog.load().context("loading balancer_ingress (verifier)")?;
        let mut take = |name: &str| ebpf.take_map(name).ok_or_else(|| anyhow::anyhow!("Katran has no map {name}"));
        let mut vip_map: HashMap<MapData, VipDefinition, VipMeta> = HashMap::try_from(take("vip_map")?)?;
        let mut reals: Array<MapData, RealDefinition> = Array::try_from(take("reals")?)?;
        let mut ch_rings: Array<MapData, u32> = Array::try_from(take("ch_rings")?)?;
        let mut ctl: Array<MapData, u64> = Array::try_from(take("ctl_array")?)?;
        let lru_mapping = ArrayOfMaps::try_from(take("lru_mapping")?)?;
        let stats = PerCpuArray::try_from(take("stats")?)?;
        let mut mac = [0u8; 8];
        mac[..6].copy_from_slice(&LB_MAC);
        ctl.set(MAC_ADDR_POS, u64::from_ne_bytes(mac), 0)?;
        for (vip_num, vip) in vips().iter().enumerate().filter(|(_, v)| !v.backends.is_empty()) {
            let mut key = VipDefinition { port: vip.port.to_be(), proto: vip.protocol, ..Default::default() };
            key.vip[..4].copy_from_slice(&vip.addr);
            vip_map.insert(key, VipMeta { flags: 0, vip_num: vip_num as u32 }, 0)?;
            // Katran's reals are numbered from 1 (0 marks an empty ring slot).
            let ids: Vec<u32> = vip.backends.iter().map(|(id, _, _)| id + 1).collect();
            for ((_, addr, _), id) in vip.backends.iter().zip(&ids) {
                let mut real = RealDefinition::default();
                real.dst[..4].copy_from_slice(addr);
                reals.set(*id, real, 0)?;
            }
            for slot in 0..RING_SIZE {
                ch_rings.set(vip_num as u32 * RING_SIZE + slot, ids[slot as usize % ids.len()], 0)?;
            }
        }
        let (lru, attach) = lru_map(lru_size)?;
        let mut maps = Maps { lru, lru_mapping, stats, cpu };
        maps.lru_mapping.set(cpu, &attach, 0)?;
        Ok(Katran { ebpf, maps })
    }

    /// The program and the maps, borrowed apart.
    pub fn parts(&mut self) -> anyhow::Result<(&Xdp, &mut Maps)> {
        let prog: &mut Xdp = self.ebpf.program_mut(PROGRAM).context("balancer_ingress")?.try_into()?;
        Ok((&*prog, &mut self.maps))
    }
}

impl Maps {
    /// Forgets a flow outside the timed region: deletes it from this CPU's table, and restarts
    /// the new-connection rate, so that every SYN takes Katran's ordinary new-flow path (ring,
    /// then a table insert) rather than the one it takes above 125,000 new flows a second
    /// on a CPU (no insert), which a loop of SYNs would otherwise reach within the second.
    pub fn forget(&mut self, key: &FlowKey) -> anyhow::Result<()> {
        let _ = self.lru.remove(key);
        let cpus = aya::util::nr_cpus().map_err(|(_, e)| e)?;
        let zero = PerCpuValues::try_from(vec![LbStats::default(); cpus])?;
        self.stats.set(MAX_VIPS + NEW_CONN_RATE_CNTR, zero, 0)?;
        Ok(())
    }

    /// Swaps this CPU's connection table for an empty one of `size` flows.
    pub fn new_table(&mut self, size: u32) -> anyhow::Result<()> {
        let (lru, attach) = lru_map(size)?;
        self.lru = lru;
        self.lru_mapping.set(self.cpu, &attach, 0)?;
        Ok(())
    }
}

/// A Katran connection table of `size` flows (BPF_MAP_TYPE_LRU_HASH, as katran_server creates
/// for each forwarding CPU), and a second handle of it to put in lru_mapping. aya creates no
/// standalone LRU map, hence the raw BPF_MAP_CREATE.
fn lru_map(size: u32) -> anyhow::Result<(HashMap<MapData, FlowKey, RealPosLru>, MapData)> {
    // union bpf_attr for BPF_MAP_CREATE: map_type, key_size, value_size, max_entries, map_flags.
    let mut attr = [0u32; 32];
    attr[..5].copy_from_slice(&[
        BPF_MAP_TYPE_LRU_HASH,
        size_of::<FlowKey>() as u32,
        size_of::<RealPosLru>() as u32,
        size,
        0,
    ]);
    // SAFETY: BPF_MAP_CREATE reads a zeroed bpf_attr of the size given.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, 0, attr.as_ptr(), size_of_val(&attr)) };
    anyhow::ensure!(fd >= 0, "creating Katran's connection table: {}", std::io::Error::last_os_error());
    // SAFETY: the syscall returned a new descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let attach = MapData::from_fd(fd.try_clone()?)?;
    Ok((HashMap::try_from(Map::LruHashMap(MapData::from_fd(fd)?))?, attach))
}
