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

/// NEXT_HOPS key.
#[repr(C, align(4))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NextHopKey {
    pub src: [u8; 4],
    pub dst: [u8; 4],
    pub ingress_ifindex: u32,
    /// The IPv4 TOS byte, widened: a word is written whole, where a byte and three bytes of
    /// padding become a call to a byte-by-byte memset in the BPF program.
    pub tos: u32,
}

/// NEXT_HOPS value (per CPU).
#[repr(C, align(4))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NextHop {
    /// The lookup this answers.
    pub key: NextHopKey,
    /// Egress interface.
    pub ifindex: u32,
    /// Largest IPv4 total length the FIB accepted for this route (its MTU check passed); a
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

crate::user_pod!(NextHopKey, NextHop);
const _: () = assert!(core::mem::size_of::<NextHopKey>() == 16);
const _: () = assert!(core::mem::size_of::<NextHop>() == 40);
