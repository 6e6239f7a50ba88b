//! Filling a loaded balancer for the end-to-end suites, through the real map writer, with
//! Maglev rings from lb-common (the daemon's state module does the same from lb.toml).
use std::net::Ipv4Addr;

use lb_common::backend::{BACKEND_ACTIVE, Backend, NatBackendKey};
use lb_common::config::{DataplaneConfig, port_flags};
use lb_common::maglev::{RingMember, build_ring};
use lb_common::vip::{VipInfo, VipKey};
use lb_common::{family, ip_proto, ipv4_bytes};
use lb_ctl::dataplane::Dataplane;
use lb_ctl::dataplane::aya::AyaDataplane;
use lb_ctl::dataplane::load::{AttachMode, LoadOptions, attach, load_ingress};

use crate::netns::Netns;

/// lb_ingress loaded (unpinned: it goes when the returned data plane is dropped) and attached
/// in native mode to `eth0` of `host`, the lab's balancer.
pub fn attach_ingress(host: &Netns, ring_size: u32, flow_table_size: u32) -> anyhow::Result<AyaDataplane> {
    let _in = host.enter();
    let mut ebpf = load_ingress(&LoadOptions { pin_dir: None, ring_size, flow_table_size, ..LoadOptions::default() })?;
    attach(&mut ebpf, lb_common::program_names::INGRESS, "eth0", AttachMode::Native)?;
    Ok(AyaDataplane::new(ebpf, ring_size))
}

pub struct VipSpec {
    pub id: u32,
    pub addr: Ipv4Addr,
    pub port: u16,
    pub protocol: u8,
    pub forwarding: u8,
    pub hash: u8,
    pub encap_source: Ipv4Addr,
    /// (backend id, address, port, weight)
    pub backends: Vec<(u32, Ipv4Addr, u16, u32)>,
}

pub fn configure(dp: &mut dyn Dataplane, ring_size: u32, vips: &[VipSpec]) {
    let new_flow_budget = lb_common::limits::DEFAULT_NEW_FLOW_BUDGET;
    dp.set_config(DataplaneConfig {
        ring_size,
        hash_seed: 0x1b_c7,
        nexthop_generation: 1,
        new_flow_budget,
        ..Default::default()
    })
    .unwrap();
    let mut flags = std::collections::HashMap::<u16, u32>::new();
    for v in vips {
        let tcp = v.protocol == ip_proto::TCP;
        for &(id, addr, port, _) in &v.backends {
            let backend = Backend {
                addr: ipv4_bytes(addr.octets()),
                port: port.to_be(),
                family: family::IPV4,
                flags: BACKEND_ACTIVE,
                generation: 0,
            };
            dp.upsert_backend(id, backend).unwrap();
            if v.forwarding == lb_common::vip::forwarding::NAT {
                let reply_source = NatBackendKey {
                    addr: backend.addr,
                    port: backend.port,
                    protocol: v.protocol,
                    family: family::IPV4,
                };
                dp.set_nat_backend(reply_source, Some(v.id)).unwrap();
                *flags.entry(port).or_default() |=
                    if tcp { port_flags::NAT_BACKEND_TCP } else { port_flags::NAT_BACKEND_UDP };
            }
        }
        let keys: Vec<Vec<u8>> =
            v.backends.iter().map(|(_, a, p, _)| [&a.octets()[..], &p.to_be_bytes()].concat()).collect();
        let members: Vec<RingMember> = v
            .backends
            .iter()
            .zip(&keys)
            .map(|((id, _, _, weight), key)| RingMember { id: *id, weight: *weight, key })
            .collect();
        dp.write_ring(v.id, &build_ring(&members, ring_size)).unwrap();
        let key = VipKey {
            addr: ipv4_bytes(v.addr.octets()),
            port: v.port.to_be(),
            protocol: v.protocol,
            family: family::IPV4,
        };
        let info = VipInfo {
            id: v.id,
            forwarding: v.forwarding,
            hash: v.hash,
            encap_source: ipv4_bytes(v.encap_source.octets()),
            ..Default::default()
        };
        dp.upsert_vip(key, info).unwrap();
        *flags.entry(v.port).or_default() |= if tcp { port_flags::VIP_TCP } else { port_flags::VIP_UDP };
    }
    for (port, f) in flags {
        dp.set_port_flags(port, f).unwrap();
    }
}
