//! IPv6 parsing: the fixed header, then a bounded walk over extension headers to the TCP, UDP
//! or ICMPv6 header, with a bounds check before every access. Cases that are not balanced get
//! the verdicts IPv4's have: a fragment header is a fragment, more extension headers than we
//! walk (or a routing header with segments left: the destination is not the final one yet)
//! are "options", anything cut short is malformed.
use aya_ebpf::programs::XdpContext;
use lb_common::config::port_flags;
use lb_common::ip_proto;
use lb_ebpf::packet::{ETH_P_IPV6, IPV6_LEN, link_layer, ptr_at};
use network_types::ip::Ipv6Hdr;

pub use crate::parsed::{Icmp6Error, Ipv6Packet};
use crate::parsed::{Parsed, TcpFlags};
use crate::{maps, parsed};

/// Extension headers walked before giving up (`Parsed::Options`). Real traffic carries at most
/// one or two (hop-by-hop for jumbo or router-alert, destination options for mobility).
pub const MAX_EXTENSION_HEADERS: usize = 4;

const HOP_BY_HOP: u8 = 0;
const ROUTING: u8 = 43;
const FRAGMENT: u8 = 44;
const DESTINATION_OPTIONS: u8 = 60;

/// ICMPv6 error types (RFC 4443): destination unreachable, packet too big, time exceeded,
/// parameter problem. Informational messages (echo, neighbour discovery, router
/// advertisements: 128 and up) are never touched.
const ICMPV6_LAST_ERROR: u8 = 4;

/// Whether an IPv6 packet surely concerns no VIP, judged in lb_ingress so that most IPv6
/// traffic that passes through costs no tail call: a well-formed packet whose next header is
/// TCP or UDP (no extension headers) with ports no VIP or NAT backend uses, or an ICMPv6
/// informational message (echo, neighbour discovery, router advertisements: 128 and up). Every
/// other packet goes to lb_ingress_v6, whose verdict for these would also be "pass, not a VIP".
#[inline(always)]
pub fn passes_through(ctx: &XdpContext, l3_offset: usize) -> bool {
    // The fixed header and the first four bytes behind it (ports, or ICMPv6 type).
    let Some(ip) = ptr_at::<[u8; IPV6_LEN + 4]>(ctx, l3_offset) else {
        return false;
    };
    // SAFETY: bounds checked by ptr_at.
    let ip = unsafe { &*ip };
    if ip[6] == ip_proto::ICMPV6 {
        return well_formed(ctx, l3_offset, ip, 4) && ip[IPV6_LEN] > ICMPV6_LAST_ERROR;
    }
    let Some((vip_bit, backend_bit)) = port_flags::of_protocol(ip[6]) else {
        return false;
    };
    let minimum = if ip[6] == ip_proto::TCP { 20 } else { 8 };
    // The destination port first: a VIP's packet goes on with no more checks here.
    // A TCP SYN to a NAT backend's port is noted (a connection straight to a backend), so any
    // packet to such a port goes on too.
    let dst_port = u16::from_be_bytes([ip[IPV6_LEN + 2], ip[IPV6_LEN + 3]]);
    if maps::port_flags(dst_port) & (vip_bit | backend_bit) != 0 {
        return false;
    }
    let src_port = u16::from_be_bytes([ip[IPV6_LEN], ip[IPV6_LEN + 1]]);
    well_formed(ctx, l3_offset, ip, minimum) && maps::port_flags(src_port) & backend_bit == 0
}

/// An IPv6 header (and the 4 bytes behind it) of version 6 whose payload, at least `minimum`
/// bytes, lies inside the frame.
#[inline(always)]
fn well_formed(ctx: &XdpContext, l3_offset: usize, ip: &[u8; IPV6_LEN + 4], minimum: usize) -> bool {
    let payload_len = u16::from_be_bytes([ip[4], ip[5]]) as usize;
    ip[0] >> 4 == 6 && payload_len >= minimum && l3_offset + IPV6_LEN + payload_len <= ctx.data_end() - ctx.data()
}

/// Parses an IPv6 frame (anything else is `NotIp`).
#[inline(always)]
pub fn parse_frame(ctx: &XdpContext) -> Parsed {
    match link_layer(ctx) {
        Some((ETH_P_IPV6, l3_offset)) => parse(ctx, l3_offset),
        Some(_) => Parsed::NotIp,
        None => Parsed::Malformed,
    }
}

#[inline(always)]
fn parse(ctx: &XdpContext, l3_offset: usize) -> Parsed {
    let Some(ip) = ptr_at::<Ipv6Hdr>(ctx, l3_offset) else {
        return Parsed::Malformed;
    };
    // SAFETY: bounds checked by ptr_at.
    let (version, payload_len, mut next) =
        unsafe { ((*ip).vcf[0] >> 4, u16::from_be_bytes((*ip).payload_len) as usize, (*ip).next_hdr) };
    // Payload length 0 is a jumbogram's (RFC 2675): not for a balancer, and not on Ethernet.
    if version != 6 || payload_len == 0 || l3_offset + IPV6_LEN + payload_len > ctx.data_end() - ctx.data() {
        return Parsed::Malformed;
    }
    let end = l3_offset + IPV6_LEN + payload_len;
    let mut l4 = l3_offset + IPV6_LEN;
    let mut i = 0;
    while i < MAX_EXTENSION_HEADERS {
        match next {
            HOP_BY_HOP | ROUTING | DESTINATION_OPTIONS => {
                // Every extension header is a multiple of 8 bytes; its first two give the next
                // header and the length in 8-byte units after the first 8.
                let Some(h) = ptr_at::<[u8; 8]>(ctx, l4) else {
                    return Parsed::Malformed;
                };
                // SAFETY: bounds checked by ptr_at.
                let h = unsafe { *h };
                if next == ROUTING && h[3] != 0 {
                    return Parsed::Options;
                }
                next = h[0];
                // Masked so the verifier sees the offset stay small (it is at most 14 + 40 +
                // 4 × 2048 anyway).
                l4 = (l4 + (h[1] as usize + 1) * 8) & 0x3fff;
            }
            FRAGMENT => return Parsed::Fragment,
            _ => break,
        }
        i += 1;
    }
    if matches!(next, HOP_BY_HOP | ROUTING | DESTINATION_OPTIONS | FRAGMENT) {
        return if next == FRAGMENT { Parsed::Fragment } else { Parsed::Options };
    }
    // Every number of extension headers leaves the verifier a different range for the L4
    // offset, and it would check the rest of the program once for each (past its limit of a
    // million instructions). Or-ing in a zero it cannot see through gives them all one range.
    let l4 = (l4 | unseen_zero(ip)) & 0x3fff;
    let (l4_header, check_offset, tcp_flags) = match next {
        ip_proto::TCP => {
            let Some(h) = ptr_at::<[u8; 20]>(ctx, l4).filter(|_| l4 + 20 <= end) else {
                return Parsed::Malformed;
            };
            // SAFETY: byte 13 of the 20 just checked.
            (h as *mut u8, parsed::TCP_CHECK_AT, unsafe { (h as *const u8).add(13) })
        }
        ip_proto::UDP => {
            let Some(h) = ptr_at::<[u8; 8]>(ctx, l4).filter(|_| l4 + 8 <= end) else {
                return Parsed::Malformed;
            };
            (h as *mut u8, parsed::UDP_CHECK_AT, core::ptr::null())
        }
        ip_proto::ICMPV6 => return icmp_error(ctx, l3_offset, ip, l4, end),
        _ => return Parsed::NotTcpUdp,
    };
    let ports = l4_header as *mut u16;
    Parsed::Ipv6(Ipv6Packet {
        l3_offset,
        ip,
        protocol: next,
        src_port: ports,
        // SAFETY: inside the header checked above (at least 8 bytes).
        dst_port: unsafe { ports.add(1) },
        // SAFETY: as above; the checksum field ends at byte 18 (TCP) or 8 (UDP).
        l4_check: unsafe { l4_header.add(check_offset) } as *mut u16,
        tcp: TcpFlags(tcp_flags),
    })
}

/// Zero, as two reads of the same packet word xor-ed: the verifier does not know the two reads
/// are equal, so it sees a value of 16 unknown bits. Two loads and an xor, where a zero read
/// from a map would cost a map lookup.
#[inline(always)]
fn unseen_zero(ip: *mut Ipv6Hdr) -> usize {
    // SAFETY: inside the header ptr_at checked; the field sits 2-byte aligned (see ip::load).
    let word = unsafe { core::ptr::addr_of!((*ip).payload_len) } as *const u16;
    // SAFETY: as above.
    unsafe { (core::ptr::read_volatile(word) ^ core::ptr::read_volatile(word)) as usize }
}

/// An ICMPv6 error quoting an IPv6 TCP/UDP header (no extension headers) and at least its
/// ports; any other ICMPv6 is NotTcpUdp (passed: neighbour discovery, echo, ... are the host's).
#[inline(always)]
fn icmp_error(ctx: &XdpContext, l3_offset: usize, ip: *mut Ipv6Hdr, l4: usize, end: usize) -> Parsed {
    // ICMPv6 header (8 bytes), quoted IPv6 header (40) and ports (4).
    const NEEDED: usize = 8 + IPV6_LEN + 4;
    let Some(icmp) = ptr_at::<[u8; NEEDED]>(ctx, l4).filter(|_| l4 + NEEDED <= end) else {
        return Parsed::NotTcpUdp;
    };
    let bytes = icmp as *mut u8;
    // SAFETY: inside the NEEDED bytes checked above.
    let (kind, quoted_version, quoted_next) = unsafe { (*bytes, *bytes.add(8) >> 4, *bytes.add(8 + 6)) };
    if kind == 0
        || kind > ICMPV6_LAST_ERROR
        || quoted_version != 6
        || !matches!(quoted_next, ip_proto::TCP | ip_proto::UDP)
    {
        return Parsed::NotTcpUdp;
    }
    let quoted_l4_check = parsed::quoted_l4_check(ctx, l4 + 8 + IPV6_LEN, quoted_next, end);
    // SAFETY: all inside the NEEDED bytes checked above.
    unsafe {
        let ports = bytes.add(8 + IPV6_LEN) as *mut u16;
        Parsed::Icmp6Error(Icmp6Error {
            l3_offset,
            ip,
            icmp_check: bytes.add(2) as *mut u16,
            quoted: bytes.add(8) as *mut Ipv6Hdr,
            quoted_src_port: ports,
            quoted_dst_port: ports.add(1),
            quoted_l4_check,
        })
    }
}
