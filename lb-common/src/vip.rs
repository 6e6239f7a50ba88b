//! A VIP as the data plane sees it: the key packets are matched on, and what to do with them.
use crate::IpBytes;

/// VIPS map key: (address, port, protocol). `port` is in network byte order.
#[repr(C, align(4))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct VipKey {
    pub addr: IpBytes,
    pub port: u16,
    pub protocol: u8,
    pub family: u8,
}

/// How a VIP's packets leave the balancer.
pub mod forwarding {
    /// Destination rewritten to the backend; replies rewritten back on their way through.
    pub const NAT: u8 = 0;
    /// The packet is encapsulated in IPIP to the backend, which answers the client directly.
    pub const DSR_IPIP: u8 = 1;
}

/// What the ring slot is chosen by.
pub mod hash_mode {
    /// Client address only: a client sticks to one backend.
    pub const CLIENT_IP: u8 = 0;
    /// The 5-tuple: each connection is placed on its own.
    pub const FLOW: u8 = 1;
}

/// VIPS map value.
#[repr(C, align(4))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VipInfo {
    /// Index of this VIP's ring in RINGS and of its counters in VIP_STATS.
    pub id: u32,
    /// One of [`forwarding`].
    pub forwarding: u8,
    /// One of [`hash_mode`].
    pub hash: u8,
    pub _pad: [u8; 2],
    /// Outer source address of IPIP packets (DSR modes).
    pub encap_source: IpBytes,
}

crate::user_pod!(VipKey, VipInfo);
const _: () = assert!(core::mem::size_of::<VipKey>() == 20);
const _: () = assert!(core::mem::size_of::<VipInfo>() == 24);
