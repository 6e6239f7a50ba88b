//! Everything the XDP program and userspace must agree on: map names, limits, the `#[repr(C)]`
//! layouts stored in maps, counter names, and the pure functions both sides compute (flow hash,
//! checksum arithmetic). Each is defined here once.
//!
//! - [`vip`]: a VIP's map key and info (forwarding, hash mode, ring).
//! - [`backend`]: a backend's map entry, its generation, NAT backend keys.
//! - [`flow`]: connection-table keys and entries, and flows shared between balancers.
//! - [`config`]: the data plane's runtime settings (the CONFIG map) and port flags.
//! - [`nexthop`]: cached next hops.
//! - [`quic`]: QUIC routing by the server id in connection IDs (Katran's encoding).
//! - [`stats`]: the named counters (every verdict and event) and per-VIP/backend traffic.
//! - [`trace`]: `lb-ctl trace`'s filters and records.
//! - [`layout`]: the layout version of the pinned maps, and what each older one differed in.
//! - [`hash`]: the flow hash; [`csum`]: incremental checksum arithmetic; [`gue`]: GUE's header.
//! - `maglev` (feature `user`): the weighted Maglev ring builder.
//! - Below: map and program names, tail-call indices, limits and protocol numbers.
#![no_std]

#[cfg(feature = "user")]
extern crate std;

pub mod backend;
pub mod config;
pub mod csum;
pub mod flow;
pub mod flow_key;
pub mod gue;
pub mod hash;
pub mod layout;
pub mod nexthop;
pub mod quic;
pub mod stats;
pub mod table_hash;
pub mod trace;
pub mod vip;

#[cfg(feature = "user")]
pub mod maglev;

/// Map names, as declared by the XDP program and looked up by the loader.
pub mod map_names {
    pub const VIPS: &str = "VIPS";
    pub const VIP_INFO: &str = "VIP_INFO";
    pub const BACKENDS: &str = "BACKENDS";
    pub const RINGS: &str = "RINGS";
    pub const FLOWS: &str = "FLOWS";
    pub const REVERSE_FLOWS: &str = "REVERSE_FLOWS";
    pub const PORT_FLAGS: &str = "PORT_FLAGS";
    pub const CONFIG: &str = "CONFIG";
    pub const COUNTERS: &str = "COUNTERS";
    pub const VIP_STATS: &str = "VIP_STATS";
    pub const BACKEND_STATS: &str = "BACKEND_STATS";
    pub const DECAP_COUNTERS: &str = "DECAP_COUNTERS";
    pub const DECAP_SOURCES: &str = "DECAP_SOURCES";
    pub const DECAP_SOURCES6: &str = "DECAP_SOURCES6";
    pub const NEXT_HOPS: &str = "NEXT_HOPS";
    pub const BACKEND_HOPS: &str = "BACKEND_HOPS";
    pub const NAT_BACKENDS: &str = "NAT_BACKENDS";
    pub const FLOW_EVENTS: &str = "FLOW_EVENTS";
    pub const JUMPS: &str = "JUMPS";
    pub const TRACE: &str = "TRACE";
    pub const TRACE_EVENTS: &str = "TRACE_EVENTS";
    pub const TRACE_STATS: &str = "TRACE_STATS";
    pub const QUIC_SERVERS: &str = "QUIC_SERVERS";
    pub const VIP_INDEX: &str = "VIP_INDEX";
}

/// JUMPS (a program array) indices: the programs `lb_ingress` hands packets to with a tail
/// call. Each has its own 512 bytes of stack, which one program holding every path would need
/// several times over.
pub mod jumps {
    /// `program_names::INGRESS_V6`: IPv6 frames.
    pub const IPV6: u32 = 0;
    /// `program_names::ICMP_ERRORS`: ICMP errors about VIP flows.
    pub const ICMP_ERRORS: u32 = 1;
    /// `program_names::TOO_BIG6`: IPv6 packets too big for their next hop, to be answered.
    pub const TOO_BIG6: u32 = 2;
    /// `program_names::ICMP6_ERRORS`: ICMPv6 errors about VIP flows.
    pub const ICMP6_ERRORS: u32 = 3;
    /// `program_names::TRACE`: a decided packet to record, while a trace runs.
    pub const TRACE: u32 = 4;
    pub const COUNT: u32 = 5;
}

/// Program names (the `#[xdp]` function names) in the two objects.
pub mod program_names {
    /// The balancer, in the `lb-ingress` object: the program attached to the interface.
    pub const INGRESS: &str = "lb_ingress";
    /// The balancer's IPv6 half, in the `lb-ingress` object (reached through JUMPS).
    pub const INGRESS_V6: &str = "lb_ingress_v6";
    /// ICMP errors about VIP flows, in the `lb-ingress` object (through JUMPS).
    pub const ICMP_ERRORS: &str = "lb_icmp_errors";
    /// ICMPv6 errors about VIP flows, in the `lb-ingress` object (through JUMPS).
    pub const ICMP6_ERRORS: &str = "lb_icmp6_errors";
    /// The ICMPv6 "packet too big" answer, in the `lb-ingress` object (through JUMPS).
    pub const TOO_BIG6: &str = "lb_too_big6";
    /// The trace recorder (`lb-ctl trace`), in the `lb-ingress` object (through JUMPS).
    pub const TRACE: &str = "lb_trace";
    /// Benchmarks only, in the `lb-ingress` object, never attached: finds a packet's set in
    /// FLOWS and reads one word of it (the floor under a connection-table lookup).
    pub const SET_READ: &str = "lb_set_read";
    /// The DSR decapsulator, in the `lb-decap` object.
    pub const DECAP: &str = "lb_decap";
    /// A bare `XDP_PASS`, in the `lb-decap` object: the benchmark baseline, and the program a
    /// receiving veth peer needs so native-mode XDP_TX/redirect frames are delivered.
    pub const PASS: &str = "lb_pass";
}

/// Compile-time sizes of the maps. The loader may shrink or grow the ones marked "default".
pub mod limits {
    /// Outer-source prefixes the decapsulator accepts encapsulated packets from (per family:
    /// DECAP_SOURCES holds IPv4 prefixes, DECAP_SOURCES6 IPv6 ones).
    pub const MAX_DECAP_SOURCES: u32 = 256;
    /// Highest number of VIPs (ids `0..MAX_VIPS`).
    pub const MAX_VIPS: u32 = 64;
    /// Highest number of backends over all VIPs (ids `0..MAX_BACKENDS`).
    pub const MAX_BACKENDS: u32 = 4096;
    /// Default Maglev ring size per VIP: a prime, as Maglev requires.
    pub const DEFAULT_RING_SIZE: u32 = 65537;
    /// The RINGS array holds `MAX_VIPS` rings of `ring_size` slots; the loader sizes it.
    pub const DEFAULT_RINGS_ENTRIES: u32 = MAX_VIPS * DEFAULT_RING_SIZE;
    /// Default connection-table size in flows (`flow::flow_sets` of it in sets; a full set
    /// evicts its least recently used flow).
    pub const DEFAULT_FLOWS: u32 = 262_144;
    /// Default new flows each CPU records a second (`DataplaneConfig::new_flow_budget`): far
    /// above what one CPU places in ordinary traffic, far below a flood's rate.
    pub const DEFAULT_NEW_FLOW_BUDGET: u32 = 50_000;
    /// Default time a next-hop lookup result is reused (ms).
    pub const DEFAULT_NEXTHOP_TTL_MS: u32 = 1000;
    /// Next-hop cache entries per CPU.
    pub const NEXT_HOPS: u32 = 16384;
    /// Number of L4 ports: PORT_FLAGS is indexed by port.
    pub const PORTS: u32 = 65536;
}

/// Address families, as stored in map keys (`family` fields).
pub mod family {
    pub const IPV4: u8 = 4;
    pub const IPV6: u8 = 6;
}

/// IP protocol numbers used in keys.
pub mod ip_proto {
    pub const ICMP: u8 = 1;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
    /// IPv4 inside IP (IPIP, and IPv4 in IPv6).
    pub const IPIP: u8 = 4;
    /// IPv6 inside IP (6in4, and IPv6 in IPv6).
    pub const IPV6: u8 = 41;
    pub const ICMPV6: u8 = 58;
}

/// Addresses are stored as 16 bytes in network order: IPv4 in the first 4, the rest zero,
/// so the same layouts serve IPv6. The structs holding them are over-aligned (`align(4)` or
/// `align(8)`) so the XDP program copies and compares keys in words: byte-aligned keys make
/// LLVM's BPF backend call byte-at-a-time memset/memcpy loops on the packet path.
pub type IpBytes = [u8; 16];

/// An IPv4 address (network-order bytes) widened to the 16-byte map form.
#[inline(always)]
pub const fn ipv4_bytes(octets: [u8; 4]) -> IpBytes {
    // Built from words, not bytes: see the note on IpBytes.
    let words = [u32::from_ne_bytes(octets), 0, 0, 0];
    // SAFETY: [u32; 4] and [u8; 16] have the same size, and every bit pattern is valid.
    unsafe { core::mem::transmute::<[u32; 4], IpBytes>(words) }
}

/// The IPv4 address (network-order bytes) held in a 16-byte map address.
#[inline(always)]
pub const fn ipv4_octets(addr: &IpBytes) -> [u8; 4] {
    [addr[0], addr[1], addr[2], addr[3]]
}

/// An address in the maps' 16-byte form, with its family (`family::IPV4` or `IPV6`).
pub fn ip_bytes(ip: core::net::IpAddr) -> (IpBytes, u8) {
    match ip {
        core::net::IpAddr::V4(v4) => (ipv4_bytes(v4.octets()), family::IPV4),
        core::net::IpAddr::V6(v6) => (v6.octets(), family::IPV6),
    }
}

/// The bytes that place a backend on a Maglev ring: its 16-byte address then its port (big
/// endian), so a backend keeps its slots whatever else changes. The daemon (XDP rings) and the
/// userspace proxy build their rings from it, and so agree.
pub fn ring_key(address: core::net::SocketAddr) -> [u8; 18] {
    let mut key = [0u8; 18];
    key[..16].copy_from_slice(&ip_bytes(address.ip()).0);
    key[16..].copy_from_slice(&address.port().to_be_bytes());
    key
}

/// Implements `aya::Pod` for map types in userspace builds.
macro_rules! user_pod {
    ($($t:ty),* $(,)?) => {
        $(
            #[cfg(feature = "user")]
            // SAFETY: the type is #[repr(C)], made of integers and byte arrays, with explicit padding.
            unsafe impl aya::Pod for $t {}
        )*
    };
}
pub(crate) use user_pod;

/// The map types cross the user/kernel boundary as raw bytes: these tests pin down where each
/// field sits (what the XDP program reads) and that a value survives the trip through bytes.
#[cfg(test)]
mod layout_tests {
    use crate::backend::{BACKEND_ACTIVE, Backend};
    use crate::flow::{FlowEntry, FlowKey, ReverseEntry};
    use crate::vip::{VipInfo, VipKey};
    use crate::{ipv4_bytes, ipv4_octets};

    fn bytes<T: Copy>(v: &T) -> &[u8] {
        // SAFETY: plain-old-data structs, read as bytes.
        unsafe { core::slice::from_raw_parts(v as *const T as *const u8, core::mem::size_of::<T>()) }
    }

    fn back<T: Copy>(b: &[u8]) -> T {
        assert_eq!(b.len(), core::mem::size_of::<T>());
        // SAFETY: right size; every bit pattern is valid for these types.
        unsafe { core::ptr::read_unaligned(b.as_ptr() as *const T) }
    }

    #[test]
    fn vip_key_layout_and_round_trip() {
        let key = VipKey { addr: ipv4_bytes([203, 0, 113, 10]), port: 80u16.to_be(), protocol: 6, family: 4 };
        let b = bytes(&key);
        assert_eq!(&b[..4], &[203, 0, 113, 10]);
        assert_eq!(&b[4..16], &[0; 12]);
        assert_eq!(&b[16..18], &[0, 80], "port in network order");
        assert_eq!((b[18], b[19]), (6, 4));
        assert_eq!(back::<VipKey>(b), key);
        assert_eq!(ipv4_octets(&key.addr), [203, 0, 113, 10]);
    }

    #[test]
    fn backend_and_flow_layouts_round_trip() {
        let backend = Backend {
            addr: ipv4_bytes([198, 51, 100, 11]),
            port: 8080u16.to_be(),
            family: 4,
            flags: BACKEND_ACTIVE,
            generation: 9,
        };
        let b = bytes(&backend);
        assert_eq!((&b[..4], &b[16..18], b[19]), (&[198, 51, 100, 11][..], &[0x1f, 0x90][..], BACKEND_ACTIVE));
        assert_eq!(back::<Backend>(b), backend);

        let key = FlowKey::new(
            ipv4_bytes([192, 0, 2, 7]),
            ipv4_bytes([203, 0, 113, 10]),
            40000u16.to_be(),
            80u16.to_be(),
            6,
            4,
        );
        let b = bytes(&key);
        assert_eq!(
            (&b[..4], &b[16..20], &b[32..34], &b[34..36]),
            (&[192, 0, 2, 7][..], &[203, 0, 113, 10][..], &40000u16.to_be_bytes()[..], &[0, 80][..])
        );
        assert_eq!(back::<FlowKey>(b), key);
        let entry = FlowEntry { backend_id: 7, vip_id: 3, generation: 2, reply_hash: 0xdead_beef };
        assert_eq!(back::<FlowEntry>(bytes(&entry)), entry);
        let reverse = ReverseEntry { vip_addr: key.dst, vip_port: key.dst_port, family: 4, _pad: 0, vip_id: 3 };
        assert_eq!(back::<ReverseEntry>(bytes(&reverse)), reverse);
        let info = VipInfo {
            id: 3,
            forwarding: 1,
            hash: 1,
            flags: crate::quic::VIP_QUIC,
            _pad: 0,
            encap_source: ipv4_bytes([198, 51, 100, 1]),
            key: VipKey::default(),
        };
        assert_eq!(back::<VipInfo>(bytes(&info)), info);
    }

    #[test]
    fn addresses_and_ring_keys() {
        use crate::{family, ip_bytes, ring_key};
        let v4: core::net::IpAddr = core::net::Ipv4Addr::new(198, 51, 100, 11).into();
        assert_eq!(ip_bytes(v4), (ipv4_bytes([198, 51, 100, 11]), family::IPV4));
        let v6: core::net::IpAddr = core::net::Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1).into();
        assert_eq!(ip_bytes(v6).1, family::IPV6);
        assert_eq!(&ip_bytes(v6).0[..4], &[0x20, 0x01, 0x0d, 0xb8]);
        let key = ring_key(core::net::SocketAddr::new(v4, 8080));
        assert_eq!(&key[..4], &[198, 51, 100, 11]);
        assert_eq!(&key[4..16], &[0; 12]);
        assert_eq!(&key[16..], &[0x1f, 0x90], "port big-endian");
        assert_ne!(key, ring_key(core::net::SocketAddr::new(v4, 8081)));
    }
}
