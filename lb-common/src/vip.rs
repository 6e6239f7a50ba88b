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
    /// The packet goes unchanged to the backend's MAC address (the backend is on this
    /// segment and holds the VIP on `lo`); the backend answers the client directly.
    pub const DSR_L2: u8 = 2;
    /// The packet is encapsulated in UDP (GUE, `crate::gue`) to the backend, which answers
    /// the client directly.
    pub const DSR_GUE: u8 = 3;
}

/// What the ring slot is chosen by.
pub mod hash_mode {
    /// Client address only: a client sticks to one backend.
    pub const CLIENT_IP: u8 = 0;
    /// The 5-tuple: each connection is placed on its own.
    pub const FLOW: u8 = 1;
}

/// VIPS map value.
///
/// Layout version 2 (`crate::layout`); version 1 had `id` after `_pad` (feature
/// `layout-v1-test` builds it, to prove the migration).
#[repr(C, align(4))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VipInfo {
    /// Index of this VIP's ring in RINGS and of its counters in VIP_STATS.
    #[cfg(not(feature = "layout-v1-test"))]
    pub id: u32,
    /// One of [`forwarding`].
    pub forwarding: u8,
    /// One of [`hash_mode`].
    pub hash: u8,
    /// Bits of behaviour: [`crate::quic::VIP_QUIC`] (0 in maps pinned before it, as the
    /// padding byte it took was).
    pub flags: u8,
    pub _pad: u8,
    #[cfg(feature = "layout-v1-test")]
    pub id: u32,
    /// Outer source address of IPIP packets (DSR modes).
    pub encap_source: IpBytes,
    /// The VIP this is the entry of. The VIP_INFO array (indexed by id) lets the program go
    /// from a connection-table hit to its VIP without a hash lookup, and this key tells it
    /// whether that VIP still exists (a removed VIP's slot is zeroed).
    pub key: VipKey,
}

crate::user_pod!(VipKey, VipInfo);
const _: () = assert!(core::mem::size_of::<VipKey>() == 20);
const _: () = assert!(core::mem::size_of::<VipInfo>() == 44);
