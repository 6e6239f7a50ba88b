//! From [`State`] to map contents, and applying only the difference to a [`Dataplane`].
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use lb_common::backend::{BACKEND_ACTIVE, BACKEND_NONE, Backend, NAT_BACKEND_SHARED, NatBackendKey};
use lb_common::config::{DataplaneConfig, port_flags};
use lb_common::maglev::{RingMember, build_ring};
use lb_common::quic::{QuicServerKey, VIP_QUIC};
use lb_common::vip::{VipInfo, VipKey, forwarding};
use lb_common::{ip_bytes, ip_proto, ring_key};

use super::{BackendState, State, VipState};
use crate::config::{AllDownPolicy, Forwarding};
use crate::dataplane::{Dataplane, Result};

/// The VIPS key of a VIP.
pub fn vip_key(v: &VipState) -> VipKey {
    let (addr, family) = ip_bytes(v.address);
    VipKey { addr, port: v.port.to_be(), protocol: v.protocol.ip_proto(), family }
}

/// What a VIP's ring is built from: `(backend id, weight, ring key)` in a fixed order.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct RingInput {
    pub members: Vec<(u32, u32, [u8; 18])>,
}

impl RingInput {
    pub fn build(&self, size: u32) -> Vec<u32> {
        let members: Vec<RingMember<'_>> =
            self.members.iter().map(|(id, weight, key)| RingMember { id: *id, weight: *weight, key }).collect();
        build_ring(&members, size)
    }
}

/// Everything the maps should hold (rings as their inputs, built only when those change).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct MapContents {
    pub config: DataplaneConfig,
    pub vips: HashMap<VipKey, VipInfo>,
    pub backends: BTreeMap<u32, Backend>,
    pub rings: BTreeMap<u32, RingInput>,
    pub port_flags: BTreeMap<u16, u32>,
    /// NAT backends' reply sources → the VIP they serve (`NAT_BACKEND_SHARED` if several).
    pub nat_backends: HashMap<NatBackendKey, u32>,
    /// QUIC VIPs' server ids → the backend id that holds each, for backends that may take
    /// connections (in the ring, weight above 0): a drained or down backend's id routes nothing.
    pub quic_servers: BTreeMap<QuicServerKey, u32>,
}

/// The ring members of a VIP: healthy backends with their weight (0 while drained). With no
/// healthy backend of positive weight, the all-down policy decides: `forward` puts every
/// backend in with its weight (fail-open), `drop` leaves the ring empty.
pub fn ring_input(v: &VipState) -> RingInput {
    let member = |b: &BackendState| (b.id, b.effective_weight(), ring_key(b.address));
    if !all_down(v) {
        return RingInput { members: v.backends.iter().filter(|b| b.health.is_usable()).map(member).collect() };
    }
    match v.all_down {
        AllDownPolicy::Forward => RingInput { members: v.backends.iter().map(member).collect() },
        AllDownPolicy::Drop => RingInput::default(),
    }
}

/// A digest of which backend address each slot of `ring` (VIP `v`'s, of backend ids) holds:
/// nodes given the same backends show the same digest whatever their ids (`vips list`).
pub fn ring_digest(ring: &[u32], v: &VipState) -> String {
    let mut bytes = Vec::with_capacity(ring.len() * 4);
    for id in ring {
        match v.backends.iter().find(|b| b.id == *id) {
            Some(b) => {
                bytes.extend_from_slice(&lb_common::hash::bytes_hash(&ring_key(b.address), 0).to_le_bytes()[..4])
            }
            None => bytes.extend_from_slice(&[0xff; 4]),
        }
    }
    format!("{:016x}", lb_common::hash::bytes_hash(&bytes, 0))
}

/// Whether none of the VIP's backends may take new flows by health and weight (the all-down
/// policy applies).
pub fn all_down(v: &VipState) -> bool {
    !v.backends.iter().any(|b| b.health.is_usable() && b.effective_weight() > 0)
}

impl MapContents {
    /// The map contents of `state`. VIPs served by the userspace proxy have none.
    pub fn of(state: &State) -> MapContents {
        let mut out = MapContents {
            config: DataplaneConfig {
                ring_size: state.ring_size,
                hash_seed: state.hash_seed,
                // Caching on (the data plane numbers the generations) unless the TTL is 0.
                nexthop_generation: u32::from(state.nexthop_ttl_ms > 0),
                // The map writer fills in the size and hash of the tables it loaded.
                flow_sets: 0,
                table_seed: 0,
                table_hash_kind: 0,
                new_flow_budget: state.new_flow_budget,
                share_flows: u8::from(state.share_flows),
                _pad: [0; 2],
            },
            ..MapContents::default()
        };
        for v in state.vips.iter().filter(|v| v.forwarding.is_xdp()) {
            let (encap_source, _) = v.encap_source.map(ip_bytes).unwrap_or_default();
            let info = VipInfo {
                id: v.id,
                forwarding: match v.forwarding {
                    Forwarding::DsrIpip => forwarding::DSR_IPIP,
                    Forwarding::DsrL2 => forwarding::DSR_L2,
                    Forwarding::DsrGue => forwarding::DSR_GUE,
                    Forwarding::Nat | Forwarding::Proxy => forwarding::NAT,
                },
                hash: v.hash.wire(),
                flags: if v.quic.is_some() { VIP_QUIC } else { 0 },
                _pad: 0,
                encap_source,
                key: vip_key(v),
            };
            out.vips.insert(vip_key(v), info);
            let udp = v.protocol.ip_proto() == ip_proto::UDP;
            *out.port_flags.entry(v.port).or_default() |= if udp { port_flags::VIP_UDP } else { port_flags::VIP_TCP };
            for b in &v.backends {
                let (addr, family) = ip_bytes(b.address.ip());
                out.backends.insert(
                    b.id,
                    // The data plane numbers generations (`Dataplane::remove_backend`).
                    Backend { addr, port: b.address.port().to_be(), family, flags: BACKEND_ACTIVE, generation: 0 },
                );
                if v.forwarding == Forwarding::Nat {
                    let key =
                        NatBackendKey { addr, port: b.address.port().to_be(), protocol: v.protocol.ip_proto(), family };
                    out.nat_backends
                        .entry(key)
                        .and_modify(|vip| {
                            if *vip != v.id {
                                *vip = NAT_BACKEND_SHARED
                            }
                        })
                        .or_insert(v.id);
                    *out.port_flags.entry(b.address.port()).or_default() |=
                        if udp { port_flags::NAT_BACKEND_UDP } else { port_flags::NAT_BACKEND_TCP };
                }
            }
            let ring = ring_input(v);
            if let Some(quic) = &v.quic {
                for (id, _, _) in ring.members.iter().filter(|(_, weight, _)| *weight > 0) {
                    let b = v.backends.iter().find(|b| b.id == *id);
                    if let Some(server_id) = b.and_then(|b| quic.server_ids.get(&b.address)) {
                        out.quic_servers.insert(QuicServerKey { vip_id: v.id, server_id: *server_id }, *id);
                    }
                }
            }
            out.rings.insert(v.id, ring);
        }
        out
    }
}

/// Counts of map operations an apply made (for logs and tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ApplyReport {
    pub config: usize,
    pub vips_upserted: usize,
    pub vips_removed: usize,
    pub backends_upserted: usize,
    pub backends_removed: usize,
    pub rings_written: usize,
    pub port_flags: usize,
    pub nat_backends: usize,
    pub quic_servers: usize,
}

impl ApplyReport {
    pub fn is_empty(&self) -> bool {
        *self == ApplyReport::default()
    }
}

/// Tracks what has been written and writes only the difference.
///
/// Order of operations, so that the data plane never sees a ring slot (or QUIC server id)
/// naming a missing backend, nor a VIP without its ring, nor a new NAT backend's answer before
/// its port's bit and its VIP: config; new/changed backends; port flags that gain bits; NAT
/// backends; rings; VIPs; QUIC server ids (new, then gone); then
/// removed VIPs (and their rings cleared); removed backends; port
/// flags that lose bits. What was written is recorded operation by operation, so after a
/// failed syscall the next apply redoes exactly what is still missing.
///
/// A port's NAT-backend bit outlives the last backend answering from that port by
/// [`NAT_PORT_LINGER`]: the replies such a backend still has in flight (an RST, the end of a
/// response) find their reply entries and leave from the VIP. Without the bit they would pass
/// as not ours, and the host would route them on with the backend's own address. A removed
/// backend's NAT_BACKENDS entry lingers as long, for the replies whose entries were evicted
/// (a flood takes ways): they still find the VIP the backend served, or are dropped as a
/// shared backend's, instead of passing as not ours.
#[derive(Debug)]
pub struct Applier {
    /// What the maps hold, rings as their inputs: the one record of the maps' contents.
    applied: MapContents,
    /// The rings built from `applied.rings`, as written.
    built: BTreeMap<u32, Vec<u32>>,
    /// Ports whose NAT-backend bits are kept though no backend wants them.
    lingering_ports: Lingering<u16>,
    /// NAT_BACKENDS entries kept though their backend is gone.
    lingering_nat_backends: Lingering<NatBackendKey>,
    linger: Duration,
}

/// What is kept for a while after nothing wants it any more, and since when.
#[derive(Debug)]
struct Lingering<K>(HashMap<K, Instant>);

impl<K: std::hash::Hash + Eq + Copy> Lingering<K> {
    fn new() -> Self {
        Lingering(HashMap::new())
    }

    /// Whether `key`, no longer wanted, is still kept at `now`: for `linger` from the first
    /// time this is asked. Once that is over it is forgotten.
    fn keeps(&mut self, key: K, now: Instant, linger: Duration) -> bool {
        let since = *self.0.entry(key).or_insert(now);
        if now.duration_since(since) < linger {
            return true;
        }
        self.0.remove(&key);
        false
    }

    /// `key` is wanted again: its linger stops.
    fn forget(&mut self, key: &K) {
        self.0.remove(key);
    }
}

/// How long a port keeps its NAT-backend bit after its last backend went; cleared by the
/// first apply after that.
pub const NAT_PORT_LINGER: Duration = Duration::from_secs(60);

const NAT_BACKEND_BITS: u32 = port_flags::NAT_BACKEND_TCP | port_flags::NAT_BACKEND_UDP;

impl Default for Applier {
    fn default() -> Applier {
        Applier {
            applied: MapContents::default(),
            built: BTreeMap::new(),
            lingering_ports: Lingering::new(),
            lingering_nat_backends: Lingering::new(),
            linger: NAT_PORT_LINGER,
        }
    }
}

impl Applier {
    /// How long NAT-backend port bits linger ([`NAT_PORT_LINGER`]; tests shorten it).
    pub fn with_linger(mut self, linger: Duration) -> Applier {
        self.linger = linger;
        self
    }

    /// An applier that assumes the maps already hold `contents` except the rings (written on
    /// the first apply). Used after a restart on pinned maps, so entries of the previous run
    /// that the new state lacks are removed.
    pub fn assuming(mut contents: MapContents) -> Applier {
        contents.rings.clear();
        Applier { applied: contents, ..Applier::default() }
    }

    /// What the maps hold as far as this applier knows.
    pub fn applied(&self) -> &MapContents {
        &self.applied
    }

    /// The ring last written for VIP `vip_id`.
    pub fn ring(&self, vip_id: u32) -> Option<&[u32]> {
        self.built.get(&vip_id).map(Vec::as_slice)
    }

    /// Writes `ring` as VIP `vip_id`'s ring: only the slots that differ from the one built
    /// before (every slot when none was). Returns whether anything was written.
    fn write_ring(&mut self, dp: &mut dyn Dataplane, vip_id: u32, ring: Vec<u32>) -> Result<bool> {
        let changed: Vec<(u32, u32)> = match self.built.get(&vip_id).filter(|old| old.len() == ring.len()) {
            Some(old) => ring
                .iter()
                .zip(old)
                .enumerate()
                .filter(|(_, (new, old))| new != old)
                .map(|(slot, (new, _))| (slot as u32, *new))
                .collect(),
            None => ring.iter().enumerate().map(|(slot, &id)| (slot as u32, id)).collect(),
        };
        if !changed.is_empty() {
            dp.write_ring_slots(vip_id, &changed)?;
        }
        self.built.insert(vip_id, ring);
        Ok(!changed.is_empty())
    }

    /// Empties VIP `vip_id`'s ring and forgets it.
    fn clear_ring(&mut self, dp: &mut dyn Dataplane, vip_id: u32, size: u32) -> Result<()> {
        self.write_ring(dp, vip_id, vec![BACKEND_NONE; size as usize])?;
        self.built.remove(&vip_id);
        self.applied.rings.remove(&vip_id);
        Ok(())
    }

    pub fn apply(&mut self, dp: &mut dyn Dataplane, want: &MapContents) -> Result<ApplyReport> {
        let mut report = ApplyReport::default();
        let size = want.config.ring_size;
        if self.applied.config != want.config {
            dp.set_config(want.config)?;
            self.applied.config = want.config;
            report.config += 1;
            // Rings of another size must all be rebuilt.
            self.built.retain(|_, ring| ring.len() == size as usize);
        }
        for (id, b) in &want.backends {
            if self.applied.backends.get(id) != Some(b) {
                dp.upsert_backend(*id, *b)?;
                self.applied.backends.insert(*id, *b);
                report.backends_upserted += 1;
            }
        }
        // Before the rings can send a new backend anything: its answers must find its port's
        // bit and its VIP from the first (a SYN-ACK on the ring's first connection to it).
        for (port, flags) in &want.port_flags {
            let old = self.applied.port_flags.get(port).copied().unwrap_or(0);
            if old != *flags && flags & !old != 0 {
                // Gains bits (it may lose others at the same time: one write does both, but
                // the NAT-backend bits linger, as below).
                let flags = flags | (old & NAT_BACKEND_BITS);
                dp.set_port_flags(*port, flags)?;
                self.applied.port_flags.insert(*port, flags);
                report.port_flags += 1;
            }
        }
        for (key, vip) in &want.nat_backends {
            if self.applied.nat_backends.get(key) != Some(vip) {
                dp.set_nat_backend(*key, Some(*vip))?;
                self.applied.nat_backends.insert(*key, *vip);
                report.nat_backends += 1;
            }
        }
        for (vip_id, input) in &want.rings {
            if self.applied.rings.get(vip_id) == Some(input) && self.built.contains_key(vip_id) {
                continue;
            }
            if self.write_ring(dp, *vip_id, input.build(size))? {
                report.rings_written += 1;
            }
            self.applied.rings.insert(*vip_id, input.clone());
        }
        for (key, info) in &want.vips {
            if self.applied.vips.get(key) != Some(info) {
                dp.upsert_vip(*key, *info)?;
                self.applied.vips.insert(*key, *info);
                report.vips_upserted += 1;
            }
        }
        for (key, backend_id) in &want.quic_servers {
            if self.applied.quic_servers.get(key) != Some(backend_id) {
                dp.set_quic_server(*key, Some(*backend_id))?;
                self.applied.quic_servers.insert(*key, *backend_id);
                report.quic_servers += 1;
            }
        }
        // Before VIPs and backends go: no server id may name a backend that is gone.
        let gone: Vec<QuicServerKey> =
            self.applied.quic_servers.keys().filter(|k| !want.quic_servers.contains_key(*k)).copied().collect();
        for key in gone {
            dp.set_quic_server(key, None)?;
            self.applied.quic_servers.remove(&key);
            report.quic_servers += 1;
        }
        let gone: Vec<(VipKey, VipInfo)> =
            self.applied.vips.iter().filter(|(k, _)| !want.vips.contains_key(*k)).map(|(k, v)| (*k, *v)).collect();
        for (key, info) in gone {
            dp.remove_vip(&key)?;
            self.applied.vips.remove(&key);
            report.vips_removed += 1;
            if !want.rings.contains_key(&info.id) {
                self.clear_ring(dp, info.id, size)?;
                report.rings_written += 1;
            }
        }
        // Rings of VIP ids no longer used (also covers rings assumed from a previous run).
        let stale: Vec<u32> = self.applied.rings.keys().filter(|id| !want.rings.contains_key(id)).copied().collect();
        for id in stale {
            self.clear_ring(dp, id, size)?;
            report.rings_written += 1;
        }
        let gone: Vec<u32> =
            self.applied.backends.keys().filter(|id| !want.backends.contains_key(id)).copied().collect();
        for id in gone {
            dp.remove_backend(id)?;
            self.applied.backends.remove(&id);
            report.backends_removed += 1;
        }
        let now = Instant::now();
        for key in want.nat_backends.keys() {
            self.lingering_nat_backends.forget(key);
        }
        let gone: Vec<NatBackendKey> =
            self.applied.nat_backends.keys().filter(|k| !want.nat_backends.contains_key(*k)).copied().collect();
        for key in gone {
            if self.lingering_nat_backends.keeps(key, now, self.linger) {
                continue;
            }
            dp.set_nat_backend(key, None)?;
            self.applied.nat_backends.remove(&key);
            report.nat_backends += 1;
        }
        let ports: Vec<u16> = self.applied.port_flags.keys().chain(want.port_flags.keys()).copied().collect();
        for port in ports {
            let old = self.applied.port_flags.get(&port).copied().unwrap_or(0);
            let mut new = want.port_flags.get(&port).copied().unwrap_or(0);
            let lost = old & !new & NAT_BACKEND_BITS;
            if lost == 0 {
                self.lingering_ports.forget(&port);
            } else if self.lingering_ports.keeps(port, now, self.linger) {
                new |= lost;
            }
            if old != new {
                dp.set_port_flags(port, new)?;
                if new == 0 {
                    self.applied.port_flags.remove(&port);
                } else {
                    self.applied.port_flags.insert(port, new);
                }
                report.port_flags += 1;
            }
        }
        Ok(report)
    }
}
