//! What parsing yields: bounds-checked views of a TCP/UDP packet (IPv4 or IPv6) or of an ICMP
//! error quoting one, and the `Parsed` verdict. Below `parse` and `parse6`, which both build
//! them, and the forwarding paths, which read them.
use aya_ebpf::programs::XdpContext;
use lb_common::ip_proto;
use lb_ebpf::packet::ptr_at;
use network_types::ip::{Ipv4Hdr, Ipv6Hdr};

/// A TCP segment's flags byte (byte 13 of its header), or null for UDP: whether a packet opens
/// or continues a connection. Read when asked, so packets that pass through never pay for it.
#[derive(Clone, Copy)]
pub struct TcpFlags(pub *const u8);

impl TcpFlags {
    /// A TCP SYN without ACK: the first packet of a new connection (false for UDP).
    #[inline(always)]
    pub fn opens_connection(&self) -> bool {
        // SAFETY: inside the TCP header the parser checked.
        !self.0.is_null() && unsafe { *self.0 } & 0x12 == 0x02
    }

    /// A TCP packet without SYN: it belongs to a connection already open (false for UDP,
    /// whose first datagram looks like any other).
    #[inline(always)]
    pub fn continues_connection(&self) -> bool {
        // SAFETY: inside the TCP header the parser checked.
        !self.0.is_null() && unsafe { *self.0 } & 0x02 == 0
    }

    /// A TCP FIN or RST: its sender is done with the connection in this direction (an RST in
    /// both). False for UDP.
    #[inline(always)]
    pub fn ends_connection(&self) -> bool {
        // SAFETY: inside the TCP header the parser checked.
        !self.0.is_null() && unsafe { *self.0 } & 0x05 != 0
    }

    /// A TCP RST: the connection is over in both directions. False for UDP.
    #[inline(always)]
    pub fn resets_connection(&self) -> bool {
        // SAFETY: inside the TCP header the parser checked.
        !self.0.is_null() && unsafe { *self.0 } & 0x04 != 0
    }
}

/// A parsed IPv4 TCP/UDP packet: pointers into the packet, all bounds-checked.
pub struct Ipv4Packet {
    /// Offset of the IPv4 header: 14, or 18 behind one 802.1Q tag.
    pub l3_offset: usize,
    pub ip: *mut Ipv4Hdr,
    /// Source and destination ports (network order): the first four bytes of TCP and UDP.
    pub src_port: *mut u16,
    pub dst_port: *mut u16,
    /// The L4 checksum field.
    pub l4_check: *mut u16,
    pub tcp: TcpFlags,
}

/// An ICMP error (destination unreachable, time exceeded, parameter problem) quoting a TCP or
/// UDP packet (as routers and hosts send about packets that left from a VIP or went to a NAT
/// backend): pointers into the packet, all bounds-checked.
pub struct IcmpError {
    pub l3_offset: usize,
    pub ip: *mut Ipv4Hdr,
    /// The ICMP checksum field.
    pub icmp_check: *mut u16,
    /// The quoted header (without options) and the first two words behind it: the ports.
    pub quoted: *mut Ipv4Hdr,
    pub quoted_src_port: *mut u16,
    pub quoted_dst_port: *mut u16,
    /// The quoted TCP/UDP checksum field, null where the quote stops before it (a quote of
    /// the 8 bytes RFC 792 asks for holds UDP's, not TCP's).
    pub quoted_l4_check: *mut u16,
}

/// A parsed IPv6 TCP/UDP packet: pointers into the packet, all bounds-checked.
pub struct Ipv6Packet {
    /// Offset of the IPv6 header: 14, or 18 behind one 802.1Q tag.
    pub l3_offset: usize,
    pub ip: *mut Ipv6Hdr,
    /// The L4 protocol (behind any extension headers).
    pub protocol: u8,
    /// Source and destination ports (network order).
    pub src_port: *mut u16,
    pub dst_port: *mut u16,
    /// The L4 checksum field.
    pub l4_check: *mut u16,
    pub tcp: TcpFlags,
}

/// An ICMPv6 error quoting a TCP or UDP packet without extension headers (as routers and hosts
/// send about packets that left from a VIP): pointers into the packet, all bounds-checked.
pub struct Icmp6Error {
    pub l3_offset: usize,
    pub ip: *mut Ipv6Hdr,
    /// The ICMPv6 checksum field.
    pub icmp_check: *mut u16,
    /// The quoted header and the first two words behind it: the ports.
    pub quoted: *mut Ipv6Hdr,
    pub quoted_src_port: *mut u16,
    pub quoted_dst_port: *mut u16,
    /// As `IcmpError::quoted_l4_check`.
    pub quoted_l4_check: *mut u16,
}

pub enum Parsed {
    Ipv4(Ipv4Packet),
    /// An IPv6 frame, not parsed yet: `lb_ingress` hands it to `lb_ingress_v6`.
    Ipv6Frame,
    Ipv6(Ipv6Packet),
    IcmpError(IcmpError),
    Icmp6Error(Icmp6Error),
    NotIp,
    NotTcpUdp,
    Fragment,
    Options,
    Malformed,
}

/// Where the checksum field sits in a TCP header and in a UDP header.
pub const TCP_CHECK_AT: usize = 16;
pub const UDP_CHECK_AT: usize = 6;

/// The checksum field of a quoted TCP/UDP header of `protocol` starting at `l4`, if it lies
/// inside the packet and its datagram (which ends at `end`); else null.
#[inline(always)]
pub fn quoted_l4_check(ctx: &XdpContext, l4: usize, protocol: u8, end: usize) -> *mut u16 {
    let at = l4 + if protocol == ip_proto::TCP { TCP_CHECK_AT } else { UDP_CHECK_AT };
    match ptr_at::<u16>(ctx, at) {
        Some(field) if at + 2 <= end => field,
        _ => core::ptr::null_mut(),
    }
}
