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

/// The flow-hash modes, defined with the hash (`crate::hash`) and named here with the VIP field
/// that holds one.
pub use crate::hash::hash_mode;

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

/// VIP_INDEX: VIP ids by a hash of their key, so that a packet opening a flow finds its VIP
/// with two array lookups (VIP_INDEX, then VIP_INFO, whose `key` must match) instead of a
/// lookup in the VIPS hash map. Only an accelerator: VIPS stays the authority, and a slot
/// that is empty, shared by several VIPs, or stale sends the program to VIPS.
pub mod index {
    use super::VipKey;
    use crate::hash::mix64;

    /// Slots, a power of two: 16 for each of the `MAX_VIPS` VIPs, so that few share one.
    pub const SLOTS: u32 = 1024;
    /// A slot no VIP hashes to, or several do.
    pub const NONE: u32 = 0;
    const _: () = assert!(SLOTS.is_power_of_two());

    /// The slot `key` hashes to.
    #[inline(always)]
    pub fn slot(key: &VipKey) -> u32 {
        let a = &key.addr;
        let word =
            |i: usize| u64::from_le_bytes([a[i], a[i + 1], a[i + 2], a[i + 3], a[i + 4], a[i + 5], a[i + 6], a[i + 7]]);
        let rest = ((key.port as u64) << 16) | ((key.protocol as u64) << 8) | key.family as u64;
        mix64(word(0) ^ mix64(word(8) ^ rest)) as u32 & (SLOTS - 1)
    }

    /// A slot's value for the VIPs hashing to it: `id + 1` of the only one, else `NONE`.
    pub fn entry(mut ids: impl Iterator<Item = u32>) -> u32 {
        match (ids.next(), ids.next()) {
            (Some(id), None) => id + 1,
            _ => NONE,
        }
    }

    /// The VIP id a slot's value names, if one.
    #[inline(always)]
    pub fn id(entry: u32) -> Option<u32> {
        entry.checked_sub(1)
    }
}

crate::user_pod!(VipKey, VipInfo);
const _: () = assert!(core::mem::size_of::<VipKey>() == 20);
const _: () = assert!(core::mem::size_of::<VipInfo>() == 44);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{family, ip_proto, ipv4_bytes};
    extern crate std;
    use std::vec::Vec;

    #[test]
    fn a_slot_names_its_only_vip_or_none() {
        assert_eq!(index::entry([].into_iter()), index::NONE);
        assert_eq!(index::entry([0].into_iter()), 1);
        assert_eq!(index::entry([5, 9].into_iter()), index::NONE);
        assert_eq!(index::id(index::entry([5].into_iter())), Some(5));
        assert_eq!(index::id(index::NONE), None);
    }

    /// The most VIPs a balancer holds, on one port of neighbouring addresses (a common
    /// layout): nearly every one has a slot of its own, so nearly every new flow skips VIPS.
    #[test]
    fn the_most_vips_on_one_port_seldom_share_a_slot() {
        let slots: Vec<u32> = (0..crate::limits::MAX_VIPS)
            .map(|n| {
                let addr = ipv4_bytes([203, 0, 113, n as u8 + 1]);
                index::slot(&VipKey { addr, port: 443u16.to_be(), protocol: ip_proto::TCP, family: family::IPV4 })
            })
            .collect();
        let alone = slots.iter().filter(|s| slots.iter().filter(|t| t == s).count() == 1).count();
        assert!(alone >= 56, "{alone} of 64 VIPs alone in their slot");
        assert!(slots.iter().all(|s| *s < index::SLOTS));
    }
}
