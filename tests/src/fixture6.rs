//! The IPv6 golden-packet fixture: the IPv4 fixture's namespace (`fixture::lab`) with IPv6
//! addresses, routes and static neighbours added, IPv6 test frames built with etherparse, and
//! VIPs covering every IPv6 path (NAT66, IP in IP of either family, GUE, dsr-l2).
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use etherparse::{EtherType, Ethernet2Header, IpNumber, Ipv4Header, Ipv6FlowLabel, Ipv6Header};
use lb_common::backend::{BACKEND_ACTIVE, BACKEND_NONE, Backend, NAT_BACKEND_SHARED, NatBackendKey};
use lb_common::config::{DataplaneConfig, port_flags};
use lb_common::flow::FlowKey;
use lb_common::vip::{VipInfo, VipKey, forwarding, hash_mode};
use lb_common::{family, ip_bytes, ip_proto};
use lb_ctl::dataplane::Dataplane;
use lb_ctl::dataplane::aya::AyaDataplane;

use crate::fixture::{LB_ADDR, RING, SEED, lab};
use crate::netns::Netns;
use crate::packets::Mac;
pub use crate::packets::{Frame6, mac6};

/// 2001:db8::N: clients, the balancer and backends on g0's segment.
pub const fn seg(last: u8) -> [u8; 16] {
    [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, last]
}
/// 2001:db8:a::N: the VIPs.
pub const fn vip6(last: u8) -> [u8; 16] {
    [0x20, 0x01, 0x0d, 0xb8, 0, 0x0a, 0, 0, 0, 0, 0, 0, 0, 0, 0, last]
}
/// 2001:db8:1::N: behind h0, whose MTU is 1400.
pub const fn far(last: u8) -> [u8; 16] {
    [0x20, 0x01, 0x0d, 0xb8, 0, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, last]
}

pub const LB6: [u8; 16] = seg(1);
pub const CLIENT6: [u8; 16] = seg(7);
pub const B6_1: [u8; 16] = seg(0x11);
pub const B6_2: [u8; 16] = seg(0x12);
pub const B6_FAR: [u8; 16] = far(0x8c);
/// Reached through a gateway (B6_1): not on the segment, so `dsr-l2` cannot use it.
pub const B6_ROUTED: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x8c];

fn text(addr: [u8; 16]) -> String {
    Ipv6Addr::from(addr).to_string()
}

/// The IPv4 fixture's namespace with IPv6 too: g0 holds 2001:db8::1/64 (clients and backends),
/// h0 2001:db8:1::1/64 (MTU 1400), 2001:db8:2::/64 is routed via B6_1. Neighbours are static.
pub fn lab6() -> Netns {
    let ns = lab();
    ns.exec(&["sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"]);
    ns.exec(&["ip", "-6", "addr", "add", "2001:db8::1/64", "dev", "g0", "nodad"]);
    ns.exec(&["ip", "-6", "addr", "add", "2001:db8:1::1/64", "dev", "h0", "nodad"]);
    for (addr, dev) in [(CLIENT6, "g0"), (B6_1, "g0"), (B6_2, "g0"), (B6_FAR, "h0")] {
        let m = mac6(addr);
        let m = format!("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", m[0], m[1], m[2], m[3], m[4], m[5]);
        ns.exec(&["ip", "-6", "neigh", "replace", &text(addr), "lladdr", &m, "dev", dev, "nud", "permanent"]);
    }
    ns.exec(&["ip", "-6", "route", "add", "2001:db8:2::/64", "via", &text(B6_1), "dev", "g0"]);
    ns
}

/// `frame` (IPv6 at `l3`) with extension headers inserted behind the fixed header: each
/// `(type, body)` becomes `type`'s header holding `body` (a multiple of 8 bytes, less 2), the
/// chain ending in the original next header. Payload length grows; L4 checksums do not change.
pub fn with_extensions(frame: &[u8], l3: usize, headers: &[(u8, Vec<u8>)]) -> Vec<u8> {
    let mut out = frame[..l3 + 40].to_vec();
    let original_next = out[l3 + 6];
    let mut added = 0usize;
    for (i, (_, body)) in headers.iter().enumerate() {
        let next = headers.get(i + 1).map_or(original_next, |(k, _)| *k);
        let len = 2 + body.len();
        assert_eq!(len % 8, 0, "extension header length must be a multiple of 8");
        out.push(next);
        out.push((len / 8 - 1) as u8);
        out.extend_from_slice(body);
        added += len;
    }
    out[l3 + 6] = headers.first().map_or(original_next, |(k, _)| *k);
    let payload_len = u16::from_be_bytes([frame[l3 + 4], frame[l3 + 5]]) as usize + added;
    out[l3 + 4..l3 + 6].copy_from_slice(&(payload_len as u16).to_be_bytes());
    out.extend_from_slice(&frame[l3 + 40..]);
    out
}

/// Options padding (PadN) of a hop-by-hop or destination-options header with no option.
pub fn padding(len: usize) -> Vec<u8> {
    let mut body = vec![1, (len - 2) as u8];
    body.resize(len, 0);
    body
}

/// The link header of an output frame: new MACs, the inner frame's tag kept, `ether_type`.
fn link(inner: &[u8], l3: usize, src_mac: Mac, dst_mac: Mac, ether_type: EtherType) -> Vec<u8> {
    let mut out = Vec::new();
    if l3 == 18 {
        out.extend_from_slice(&dst_mac);
        out.extend_from_slice(&src_mac);
        out.extend_from_slice(&inner[12..16]);
        out.extend_from_slice(&ether_type.0.to_be_bytes());
    } else {
        out.extend_from_slice(&Ethernet2Header { source: src_mac, destination: dst_mac, ether_type }.to_bytes());
    }
    out
}

/// How an expected DSR frame is wrapped.
#[derive(Clone, Copy)]
pub enum Wrap {
    /// IP in IP, from `src` to `dst` (either family; both the same).
    Ip { src: IpAddr, dst: IpAddr },
    /// GUE from `src` to `dst` with this outer source port.
    Gue { src: IpAddr, dst: IpAddr, port: u16 },
}

/// The frame the balancer must emit for a DSR packet: the datagram of `inner` (a whole frame,
/// its IP header at `l3`, IPv4 or IPv6) behind outer headers, new MACs, the tag kept. An outer
/// IPv6 header carries the inner traffic class (0 here) and the flow label `label`.
pub fn wrapped(inner: &[u8], l3: usize, wrap: Wrap, label: u32, src_mac: Mac, dst_mac: Mac) -> Vec<u8> {
    let datagram = &inner[l3..];
    let inner_proto = if datagram[0] >> 4 == 6 { IpNumber::IPV6 } else { IpNumber::IPV4 };
    let (src, dst, udp) = match wrap {
        Wrap::Ip { src, dst } => (src, dst, None),
        Wrap::Gue { src, dst, port } => (src, dst, Some(port)),
    };
    let udp = udp.map(|port| etherparse::UdpHeader {
        source_port: port,
        destination_port: lb_common::gue::PORT,
        length: (8 + datagram.len()) as u16,
        checksum: 0,
    });
    let payload_len = datagram.len() + if udp.is_some() { 8 } else { 0 };
    let protocol = if udp.is_some() { IpNumber::UDP } else { inner_proto };
    let mut out;
    match (src, dst) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            out = link(inner, l3, src_mac, dst_mac, EtherType::IPV4);
            let mut ip = Ipv4Header::new(payload_len as u16, 64, protocol, src.octets(), dst.octets()).unwrap();
            ip.dont_fragment = false;
            ip.header_checksum = ip.calc_header_checksum();
            out.extend_from_slice(&ip.to_bytes());
        }
        (IpAddr::V6(src), IpAddr::V6(dst)) => {
            out = link(inner, l3, src_mac, dst_mac, EtherType::IPV6);
            let ip = Ipv6Header {
                traffic_class: 0,
                flow_label: Ipv6FlowLabel::try_new(label & 0xf_ffff).unwrap(),
                payload_length: payload_len as u16,
                next_header: protocol,
                hop_limit: 64,
                source: src.octets(),
                destination: dst.octets(),
            };
            out.extend_from_slice(&ip.to_bytes());
        }
        _ => panic!("outer source and destination of different families"),
    }
    if let Some(udp) = udp {
        out.extend_from_slice(&udp.to_bytes());
    }
    out.extend_from_slice(datagram);
    out
}

/// A fixture VIP of either family (the IPv4 fixture's are written through it too).
pub struct Vip6 {
    pub addr: IpAddr,
    pub port: u16,
    pub protocol: u8,
    pub forwarding: u8,
    pub hash: u8,
    pub encap_source: IpAddr,
    /// (backend id, address, port)
    pub backends: Vec<(u32, IpAddr, u16)>,
}

pub fn v6(addr: [u8; 16]) -> IpAddr {
    IpAddr::V6(Ipv6Addr::from(addr))
}

pub fn v4(addr: [u8; 4]) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(addr))
}

/// The IPv6 fixture's VIPs, by index: 0 NAT66 TCP, 1 NAT66 UDP, 2 IPv6-in-IPv6, 3 IPv6-in-IPv4,
/// 4 IPv4-in-IPv6, 5 GUE over IPv6, 6 dsr-l2, 7 NAT66 to the far (MTU 1400) backend, 8 dsr-l2
/// to a routed backend, 9 NAT66 without backends.
pub fn vips6() -> Vec<Vip6> {
    let tcp = |addr, forwarding, encap_source, backends| Vip6 {
        addr,
        port: 80,
        protocol: ip_proto::TCP,
        forwarding,
        hash: hash_mode::CLIENT_IP,
        encap_source,
        backends,
    };
    let lb6 = v6(LB6);
    vec![
        tcp(v6(vip6(0x10)), forwarding::NAT, lb6, vec![(0, v6(B6_1), 8080), (1, v6(B6_2), 8080)]),
        Vip6 {
            port: 53,
            protocol: ip_proto::UDP,
            ..tcp(v6(vip6(0x10)), forwarding::NAT, lb6, vec![(2, v6(B6_1), 5353)])
        },
        tcp(v6(vip6(0x20)), forwarding::DSR_IPIP, lb6, vec![(3, v6(B6_1), 80)]),
        tcp(v6(vip6(0x21)), forwarding::DSR_IPIP, v4(LB_ADDR), vec![(4, v4(crate::fixture::B1), 80)]),
        tcp(v4([203, 0, 113, 90]), forwarding::DSR_IPIP, lb6, vec![(5, v6(B6_1), 80)]),
        tcp(v6(vip6(0x22)), forwarding::DSR_GUE, lb6, vec![(6, v6(B6_1), 80)]),
        tcp(v6(vip6(0x23)), forwarding::DSR_L2, lb6, vec![(7, v6(B6_1), 80)]),
        tcp(v6(vip6(0x40)), forwarding::NAT, lb6, vec![(8, v6(B6_FAR), 8080)]),
        tcp(v6(vip6(0x24)), forwarding::DSR_L2, lb6, vec![(9, v6(B6_ROUTED), 80)]),
        tcp(v6(vip6(0x30)), forwarding::NAT, lb6, vec![]),
    ]
}

pub fn vip_key6(v: &Vip6) -> VipKey {
    let (addr, family) = ip_bytes(v.addr);
    VipKey { addr, port: v.port.to_be(), protocol: v.protocol, family }
}

/// Writes every VIP, backend and ring through the map writer. Rings alternate between a VIP's
/// backends slot by slot, so the slot a hash picks decides the backend.
pub fn configure6(dp: &mut AyaDataplane, vips: &[Vip6]) {
    dp.set_config(DataplaneConfig { ring_size: RING, hash_seed: SEED, nexthop_generation: 1, ..Default::default() })
        .unwrap();
    let mut flags: HashMap<u16, u32> = HashMap::new();
    let mut nat_backends: HashMap<NatBackendKey, u32> = HashMap::new();
    for (id, v) in vips.iter().enumerate() {
        let info = VipInfo {
            id: id as u32,
            forwarding: v.forwarding,
            hash: v.hash,
            encap_source: ip_bytes(v.encap_source).0,
            ..Default::default()
        };
        dp.upsert_vip(vip_key6(v), info).unwrap();
        let tcp = v.protocol == ip_proto::TCP;
        *flags.entry(v.port).or_default() |= if tcp { port_flags::VIP_TCP } else { port_flags::VIP_UDP };
        for &(bid, addr, port) in &v.backends {
            let (bytes, fam) = ip_bytes(addr);
            let backend =
                Backend { addr: bytes, port: port.to_be(), family: fam, flags: BACKEND_ACTIVE, generation: 0 };
            dp.upsert_backend(bid, backend).unwrap();
            if v.forwarding == forwarding::NAT {
                let reply_source = NatBackendKey { addr: bytes, port: port.to_be(), protocol: v.protocol, family: fam };
                let owner = nat_backends.entry(reply_source).or_insert(id as u32);
                if *owner != id as u32 {
                    *owner = NAT_BACKEND_SHARED;
                }
                *flags.entry(port).or_default() |=
                    if tcp { port_flags::NAT_BACKEND_TCP } else { port_flags::NAT_BACKEND_UDP };
            }
        }
        let ring: Vec<u32> = (0..RING as usize)
            .map(|slot| match v.backends.len() {
                0 => BACKEND_NONE,
                n => v.backends[slot % n].0,
            })
            .collect();
        dp.write_ring(id as u32, &ring).unwrap();
    }
    for (port, f) in flags {
        dp.set_port_flags(port, f).unwrap();
    }
    for (key, owner) in nat_backends {
        dp.set_nat_backend(key, Some(owner)).unwrap();
    }
}

/// The FLOWS key of a TCP flow from `src:src_port` to `dst:dst_port` (IPv6).
pub fn flow_key6(src: [u8; 16], dst: [u8; 16], src_port: u16, dst_port: u16) -> FlowKey {
    FlowKey::new(src, dst, src_port.to_be(), dst_port.to_be(), ip_proto::TCP, family::IPV6)
}

/// The backend (address, port) a ring of alternating backends gives a client (hash "ip").
pub fn by_client(v: &Vip6, client: [u8; 16]) -> (IpAddr, u16) {
    let hash = lb_common::hash::client_hash(&client, SEED);
    let (_, addr, port) = v.backends[(hash % RING) as usize % v.backends.len()];
    (addr, port)
}
