//! The next-hop cache. `bpf_fib_lookup` (route + neighbour) is the most expensive step of the
//! forwarding path (about 300 ns per packet: `cargo xtask bench dataplane` with the cache off,
//! `nexthop_ttl_ms = 0`, against on), and its answer only changes when
//! routes or neighbours do. Each CPU keeps the answers it got, per (source, destination,
//! ingress interface, TOS) until userspace bumps `DataplaneConfig::nexthop_generation` (the
//! daemon does every `nexthop_ttl_ms`, default 1000); only successful lookups are kept, so a
//! missing neighbour is looked up again on the next packet. A generation number rather than a
//! timestamp: reading the clock costs more per packet than the rest of the cache.
//!
//! Packets to backends use BACKEND_HOPS, a per-CPU array indexed by backend id (an array read,
//! no hashing); replies to clients use NEXT_HOPS, a per-CPU LRU hash. Either way the entry
//! carries its key, and is used only when the key matches.

use crate::IpBytes;

/// NEXT_HOPS key.
#[repr(C, align(4))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NextHopKey {
    pub src: IpBytes,
    pub dst: IpBytes,
    pub ingress_ifindex: u32,
    /// The IPv4 TOS byte (IPv6: traffic class), widened: a word is written whole, where a byte
    /// and three bytes of padding become a call to a byte-by-byte memset in the BPF program.
    pub tos: u32,
    /// `family::IPV4` or `IPV6`, widened likewise: an IPv4 address and the IPv6 address with
    /// the same 16 bytes (`::a.b.c.d`) are different destinations.
    pub family: u32,
}

/// NEXT_HOPS value (per CPU): the answer to its key's lookup.
#[repr(C, align(4))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NextHop {
    /// Egress interface.
    pub ifindex: u32,
    /// Largest IPv4 total length (IPv6: payload and fixed header) the FIB accepted for this route (its MTU check passed); a
    /// larger packet is looked up again, so the MTU is still enforced.
    pub max_len: u16,
    pub smac: [u8; 6],
    pub dmac: [u8; 6],
    /// 1 when the route goes through a gateway (`dmac` is the gateway's, not the
    /// destination's): `dsr-l2` refuses such backends.
    pub via_gateway: u8,
    pub _pad: u8,
    /// `DataplaneConfig::nexthop_generation` when this was looked up.
    pub generation: u32,
}

/// BACKEND_HOPS value (per CPU, by backend id): an answer and the lookup it answers, which a
/// packet's lookup must match (the id may have been given to another backend since).
#[repr(C, align(4))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackendHop {
    pub key: NextHopKey,
    pub hop: NextHop,
}

crate::user_pod!(NextHopKey, NextHop, BackendHop);
const _: () = assert!(core::mem::size_of::<NextHopKey>() == 44);
const _: () = assert!(core::mem::size_of::<NextHop>() == 24);
const _: () = assert!(core::mem::size_of::<BackendHop>() == 68);
