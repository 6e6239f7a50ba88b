//! The golden-packet fixture: a namespace whose FIB answers the balancer's next-hop lookups
//! (static neighbours, so MAC addresses are known), and a set of VIPs covering every forwarding
//! path. Shared by the golden-packet suite and the data-plane benchmark.
use std::net::IpAddr;

use lb_common::vip::{VipKey, forwarding, hash_mode};
use lb_common::{family, ip_proto, ipv4_bytes};
use lb_ctl::dataplane::aya::AyaDataplane;

use crate::fixture6::{Vip6, configure6};

use crate::netns::Netns;
use crate::packets::Mac;

pub const RING: u32 = 13;
pub const SEED: u32 = 0x5eed;

pub const LB_MAC: Mac = [2, 0, 0, 0, 0, 1];
pub const LB_MAC_H: Mac = [2, 0, 0, 0, 1, 1];
pub const CLIENT: [u8; 4] = [192, 0, 2, 7];
pub const CLIENT_MAC: Mac = [2, 0, 0, 0, 0, 7];
pub const CLIENT2: [u8; 4] = [192, 0, 2, 8];
pub const LB_ADDR: [u8; 4] = [198, 51, 100, 1];
pub const B1: [u8; 4] = [198, 51, 100, 11];
pub const B2: [u8; 4] = [198, 51, 100, 12];
pub const B_FAR: [u8; 4] = [198, 51, 100, 140];
pub const B_NO_NEIGH: [u8; 4] = [198, 51, 100, 60];
pub const B_NO_NEIGH_DSR: [u8; 4] = [198, 51, 100, 61];
pub const B_NO_ROUTE: [u8; 4] = [203, 0, 113, 99];
/// Reached through a gateway (B1): not on the segment, so `dsr-l2` cannot use it.
pub const B_ROUTED: [u8; 4] = [203, 0, 113, 140];

pub fn mac_of(addr: [u8; 4]) -> Mac {
    [2, 0, 0, 0, if addr[3] >= 128 { 1 } else { 0 }, addr[3] % 128]
}

/// The namespace the FIB lookups run in: g0 faces clients and most backends, h0 one more
/// backend (for redirects). Neighbours are static.
///
/// The calling thread is pinned to its CPU: the golden cases run one after another on the
/// program's per-CPU state (a case about the next-hop cache expects what an earlier case
/// cached), which a thread moved to another CPU would not find.
pub fn lab() -> Netns {
    crate::testrun::pin_to_this_cpu().expect("pinning the test to its CPU");
    // Unique per call: the golden tests of one process run in parallel threads.
    static LABS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let ns = Netns::new(&format!("gold{}", LABS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)));
    for (dev, peer, mac, addrs) in [
        ("g0", "g1", "02:00:00:00:00:01", vec!["192.0.2.1/24", "198.51.100.1/25"]),
        ("h0", "h1", "02:00:00:00:01:01", vec!["198.51.100.129/25"]),
    ] {
        ns.exec(&["ip", "link", "add", dev, "type", "veth", "peer", "name", peer]);
        ns.exec(&["ip", "link", "set", dev, "address", mac]);
        for addr in addrs {
            ns.exec(&["ip", "addr", "add", addr, "dev", dev]);
        }
        ns.exec(&["ip", "link", "set", dev, "up"]);
        ns.exec(&["ip", "link", "set", peer, "up"]);
    }
    // A smaller MTU towards B_FAR: NAT packets too big for a backend's path.
    ns.exec(&["ip", "link", "set", "h0", "mtu", "1400"]);
    for (addr, dev) in [(CLIENT, "g0"), (CLIENT2, "g0"), (B1, "g0"), (B2, "g0"), (B_FAR, "h0")] {
        let a = format!("{}.{}.{}.{}", addr[0], addr[1], addr[2], addr[3]);
        let m = mac_of(addr);
        let m = format!("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", m[0], m[1], m[2], m[3], m[4], m[5]);
        ns.exec(&["ip", "neigh", "replace", &a, "lladdr", &m, "dev", dev, "nud", "permanent"]);
    }
    ns.exec(&["ip", "route", "add", "203.0.113.128/25", "via", "198.51.100.11", "dev", "g0"]);
    ns.exec(&["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
    ns
}

pub struct Vip {
    pub addr: [u8; 4],
    pub port: u16,
    pub protocol: u8,
    pub forwarding: u8,
    pub hash: u8,
    /// (backend id, address, port)
    pub backends: Vec<(u32, [u8; 4], u16)>,
}

pub fn vips() -> Vec<Vip> {
    let tcp = |addr, forwarding, backends| Vip {
        addr,
        port: 80,
        protocol: ip_proto::TCP,
        forwarding,
        hash: hash_mode::CLIENT_IP,
        backends,
    };
    vec![
        tcp([203, 0, 113, 10], forwarding::NAT, vec![(0, B1, 8080), (1, B2, 8080)]),
        Vip {
            addr: [203, 0, 113, 10],
            port: 53,
            protocol: ip_proto::UDP,
            forwarding: forwarding::NAT,
            hash: hash_mode::FLOW,
            backends: vec![(2, B1, 5353), (3, B2, 5353)],
        },
        tcp([203, 0, 113, 20], forwarding::DSR_IPIP, vec![(4, B1, 80)]),
        tcp([203, 0, 113, 30], forwarding::NAT, vec![]),
        tcp([203, 0, 113, 40], forwarding::NAT, vec![(5, B_FAR, 8080)]),
        tcp([203, 0, 113, 50], forwarding::NAT, vec![(6, B_NO_NEIGH, 8080)]),
        tcp([203, 0, 113, 51], forwarding::DSR_IPIP, vec![(7, B_NO_NEIGH_DSR, 80)]),
        tcp([203, 0, 113, 52], forwarding::NAT, vec![(8, B_NO_ROUTE, 8080)]),
        Vip { hash: hash_mode::FLOW, ..tcp([203, 0, 113, 60], forwarding::NAT, vec![(9, B1, 8080), (10, B2, 8080)]) },
        tcp([203, 0, 113, 70], forwarding::DSR_L2, vec![(11, B1, 80)]),
        tcp([203, 0, 113, 71], forwarding::DSR_L2, vec![(12, B_ROUTED, 80)]),
        tcp([203, 0, 113, 72], forwarding::DSR_GUE, vec![(13, B1, 80)]),
        tcp([203, 0, 113, 73], forwarding::DSR_IPIP, vec![(14, B1, 80), (15, B2, 80)]),
    ]
}

pub fn vip_key(v: &Vip) -> VipKey {
    VipKey { addr: ipv4_bytes(v.addr), port: v.port.to_be(), protocol: v.protocol, family: family::IPV4 }
}

/// Writes every VIP, backend and ring through the map writer. Rings alternate between a VIP's
/// backends slot by slot, so the slot a hash picks decides the backend.
pub fn configure(dp: &mut AyaDataplane, vips: &[Vip]) {
    let any: Vec<Vip6> = vips
        .iter()
        .map(|v| Vip6 {
            addr: IpAddr::from(v.addr),
            port: v.port,
            protocol: v.protocol,
            forwarding: v.forwarding,
            hash: v.hash,
            encap_source: IpAddr::from(LB_ADDR),
            backends: v.backends.iter().map(|(id, a, p)| (*id, IpAddr::from(*a), *p)).collect(),
        })
        .collect();
    configure6(dp, &any);
}

/// Connection-table size of the fixture's balancer (flows).
pub const FLOW_TABLE: u32 = 4096;

/// `count` client ports whose flows share the connection-table set (`set_of`) of port 50000's:
/// searched from 50000 up, then from 1024. The table's seed is drawn at load, so the first
/// range alone (about 15 ports a set in the fixture's 1024 sets) sometimes held too few.
pub fn ports_in_one_set(set_of: impl Fn(u16) -> u32, count: usize) -> Vec<u16> {
    let home = set_of(50000);
    let ports: Vec<u16> = (50000..=u16::MAX).chain(1024..50000).filter(|p| set_of(*p) == home).take(count).collect();
    assert_eq!(ports.len(), count, "client ports sharing one connection-table set");
    ports
}

/// The backend (address, port) a ring of alternating backends gives for this hash.
pub fn by_hash(v: &Vip, hash: u32) -> ([u8; 4], u16) {
    let (_, addr, port) = v.backends[(hash % RING) as usize % v.backends.len()];
    (addr, port)
}

/// The balancer loaded with the fixture's ring size and empty maps (not attached: driven with
/// BPF_PROG_TEST_RUN).
pub fn balancer() -> AyaDataplane {
    balancer_loaded(false)
}

/// [`balancer`], loaded with its debug messages on (`debug_messages`) or off.
pub fn balancer_loaded(debug_messages: bool) -> AyaDataplane {
    balancer_of(None, debug_messages)
}

/// [`balancer_loaded`] from lb_ingress object `object`, or the built one.
pub fn balancer_of(object: Option<&'static [u8]>, debug_messages: bool) -> AyaDataplane {
    let options = lb_ctl::dataplane::load::LoadOptions {
        pin_dir: None,
        ring_size: RING,
        flow_table_size: FLOW_TABLE,
        debug_messages,
        object,
        ..Default::default()
    };
    AyaDataplane::new(lb_ctl::dataplane::load::load_ingress(&options).expect("loading lb_ingress"), RING)
}
