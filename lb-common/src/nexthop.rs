//! The next-hop cache. `bpf_fib_lookup` (route + neighbour) is the most expensive step of the
//! forwarding path (about 300 ns per packet on a small VM), and its answer only changes when
//! routes or neighbours do. Each CPU keeps the answers it got, per (source, destination,
//! ingress interface, TOS), for `DataplaneConfig::nexthop_ttl_ms`; only successful lookups are
//! kept, so a missing neighbour is looked up again on the next packet.

/// NEXT_HOPS key.
#[repr(C, align(4))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NextHopKey {
    pub src: [u8; 4],
    pub dst: [u8; 4],
    pub ingress_ifindex: u32,
    pub tos: u8,
    pub _pad: [u8; 3],
}

/// NEXT_HOPS value (per CPU).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NextHop {
    /// Egress interface.
    pub ifindex: u32,
    /// Largest IPv4 total length the FIB accepted for this route (its MTU check passed); a
    /// larger packet is looked up again, so the MTU is still enforced.
    pub max_len: u16,
    pub smac: [u8; 6],
    pub dmac: [u8; 6],
    pub _pad: [u8; 6],
    /// `bpf_ktime_get_ns` after which the entry must be looked up again.
    pub expires_ns: u64,
}

crate::user_pod!(NextHopKey, NextHop);
const _: () = assert!(core::mem::size_of::<NextHopKey>() == 16);
const _: () = assert!(core::mem::size_of::<NextHop>() == 32);
