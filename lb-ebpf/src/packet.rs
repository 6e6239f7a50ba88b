//! Bounds-checked access to the packet, and the link layer: Ethernet with at most one 802.1Q
//! tag. Every access is checked before it is made (the verifier insists, and so do we: a short
//! or odd packet gets a defined answer, never an out-of-bounds read).
use aya_ebpf::programs::XdpContext;
use network_types::eth::EthHdr;
use network_types::vlan::VlanHdr;

/// EtherType values as they sit in memory (network order read as a native u16).
pub const ETH_P_IPV4: u16 = 0x0800u16.to_be();
pub const ETH_P_IPV6: u16 = 0x86DDu16.to_be();
pub const ETH_P_8021Q: u16 = 0x8100u16.to_be();

/// Length of an IPv4 header without options.
pub const IPV4_LEN: usize = 20;
/// Length of the IPv6 fixed header.
pub const IPV6_LEN: usize = 40;

/// A pointer to a `T` at `offset`, if the whole `T` lies inside the packet.
#[inline(always)]
pub fn ptr_at<T>(ctx: &XdpContext, offset: usize) -> Option<*mut T> {
    let start = ctx.data();
    let end = ctx.data_end();
    if start + offset + core::mem::size_of::<T>() > end {
        return None;
    }
    Some((start + offset) as *mut T)
}

/// The packet's length in bytes.
#[inline(always)]
pub fn packet_len(ctx: &XdpContext) -> u64 {
    (ctx.data_end() - ctx.data()) as u64
}

/// The link layer: the EtherType of the network header (behind one 802.1Q tag, if there is
/// one) and that header's offset (14, or 18 behind a tag). None if the frame is too short to
/// hold the Ethernet header and the tag it announces.
#[inline(always)]
pub fn link_layer(ctx: &XdpContext) -> Option<(u16, usize)> {
    let eth = ptr_at::<EthHdr>(ctx, 0)?;
    // SAFETY: bounds checked by ptr_at.
    let ether_type = unsafe { (*eth).ether_type };
    if ether_type != ETH_P_8021Q {
        return Some((ether_type, EthHdr::LEN));
    }
    let vlan = ptr_at::<VlanHdr>(ctx, EthHdr::LEN)?;
    // SAFETY: bounds checked by ptr_at.
    Some((unsafe { (*vlan).ether_type }, EthHdr::LEN + VlanHdr::LEN))
}
