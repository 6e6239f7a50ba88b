//! Test helpers: a [`MemoryDataplane`] shared between the code under test and the test, with a
//! log of the write operations in order.
pub mod etcd;
pub mod ports;
pub mod rig;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use lb_common::backend::{Backend, NatBackendKey};
use lb_common::config::DataplaneConfig;
use lb_common::flow::{FlowEntry, FlowKey};
use lb_common::stats::{Counter, Traffic};
use lb_common::vip::{VipInfo, VipKey};

use crate::dataplane::memory::MemoryDataplane;
use crate::dataplane::{Dataplane, Result};

/// A write made through the trait.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Config,
    UpsertVip(u32),
    RemoveVip(u32),
    UpsertBackend(u32),
    RemoveBackend(u32),
    WriteRing(u32),
    PortFlags(u16, u32),
    /// A NAT_BACKENDS entry set (or, with None, cleared).
    NatBackend(Option<u32>),
}

#[derive(Default)]
pub struct Inner {
    pub fake: MemoryDataplane,
    pub ops: Vec<Op>,
}

/// A handle on a shared fake data plane; clones see the same maps.
#[derive(Clone, Default)]
pub struct SharedFake(pub Arc<Mutex<Inner>>);

/// The parts of the fake's maps that the control plane writes, comparable with `==`.
pub type Snapshot =
    (DataplaneConfig, Vec<(VipKey, VipInfo)>, Vec<(u32, Backend)>, Vec<(u32, Vec<u32>)>, Vec<(u16, u32)>);

impl SharedFake {
    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        self.0.lock().unwrap()
    }
    /// Takes the operations logged so far.
    pub fn take_ops(&self) -> Vec<Op> {
        std::mem::take(&mut self.lock().ops)
    }
    pub fn snapshot(&self) -> Snapshot {
        let g = self.lock();
        let f = &g.fake;
        let mut vips: Vec<_> = f.vips.iter().map(|(k, v)| (*k, *v)).collect();
        vips.sort_by_key(|(_, v)| v.id);
        let mut backends: Vec<_> = f.backends.iter().map(|(k, v)| (*k, *v)).collect();
        backends.sort_by_key(|(k, _)| *k);
        let mut rings: Vec<_> = f.rings.iter().map(|(k, v)| (*k, v.clone())).collect();
        rings.sort_by_key(|(k, _)| *k);
        let mut flags: Vec<_> = f.port_flags.iter().map(|(k, v)| (*k, *v)).collect();
        flags.sort();
        (f.config, vips, backends, rings, flags)
    }
}

impl Dataplane for SharedFake {
    fn set_config(&mut self, config: DataplaneConfig) -> Result<()> {
        let mut g = self.lock();
        g.ops.push(Op::Config);
        g.fake.set_config(config)
    }
    fn refresh_next_hops(&mut self) -> Result<()> {
        self.lock().fake.refresh_next_hops()
    }
    fn upsert_vip(&mut self, key: VipKey, info: VipInfo) -> Result<()> {
        let mut g = self.lock();
        g.ops.push(Op::UpsertVip(info.id));
        g.fake.upsert_vip(key, info)
    }
    fn remove_vip(&mut self, key: &VipKey) -> Result<()> {
        let mut g = self.lock();
        let id = g.fake.vips.get(key).map_or(u32::MAX, |i| i.id);
        g.ops.push(Op::RemoveVip(id));
        g.fake.remove_vip(key)
    }
    fn upsert_backend(&mut self, id: u32, backend: Backend) -> Result<()> {
        let mut g = self.lock();
        g.ops.push(Op::UpsertBackend(id));
        g.fake.upsert_backend(id, backend)
    }
    fn remove_backend(&mut self, id: u32) -> Result<()> {
        let mut g = self.lock();
        g.ops.push(Op::RemoveBackend(id));
        g.fake.remove_backend(id)
    }
    fn set_nat_backend(&mut self, key: NatBackendKey, vip: Option<u32>) -> Result<()> {
        let mut g = self.lock();
        g.ops.push(Op::NatBackend(vip));
        g.fake.set_nat_backend(key, vip)
    }
    fn set_quic_server(&mut self, key: lb_common::quic::QuicServerKey, backend_id: Option<u32>) -> Result<()> {
        self.lock().fake.set_quic_server(key, backend_id)
    }
    fn quic_servers(&self) -> Result<Vec<(lb_common::quic::QuicServerKey, u32)>> {
        self.lock().fake.quic_servers()
    }
    fn vips(&self) -> Result<Vec<(VipKey, VipInfo)>> {
        self.lock().fake.vips()
    }
    fn write_ring_slots(&mut self, vip_id: u32, slots: &[(u32, u32)]) -> Result<()> {
        let mut g = self.lock();
        g.ops.push(Op::WriteRing(vip_id));
        g.fake.write_ring_slots(vip_id, slots)
    }
    fn set_port_flags(&mut self, port: u16, flags: u32) -> Result<()> {
        let mut g = self.lock();
        g.ops.push(Op::PortFlags(port, flags));
        g.fake.set_port_flags(port, flags)
    }
    fn counters(&self) -> Result<Vec<(Counter, u64)>> {
        self.lock().fake.counters()
    }
    fn vip_traffic(&self, vip_id: u32) -> Result<Traffic> {
        self.lock().fake.vip_traffic(vip_id)
    }
    fn backend_traffic(&self, backend_id: u32) -> Result<Traffic> {
        self.lock().fake.backend_traffic(backend_id)
    }
    fn flows_per_backend(&self) -> Result<HashMap<u32, u64>> {
        self.lock().fake.flows_per_backend()
    }
    fn lookup_flow(&self, key: &FlowKey) -> Result<Option<FlowEntry>> {
        self.lock().fake.lookup_flow(key)
    }
    fn ring_slot(&self, vip_id: u32, slot: u32) -> Result<u32> {
        self.lock().fake.ring_slot(vip_id, slot)
    }
    fn record_shared_flows(&mut self, flows: &[lb_common::flow::SharedFlow]) -> Result<usize> {
        self.lock().fake.record_shared_flows(flows)
    }
}
