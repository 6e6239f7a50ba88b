//! Header parsing with a bounds check before every access (the verifier insists, and so do we:
//! a short or odd packet gets a defined verdict, never an out-of-bounds read).
use aya_ebpf::programs::XdpContext;
use lb_common::config::port_flags;
use lb_common::ip_proto;
use lb_common::stats::Counter;
use lb_ebpf::packet::{ETH_P_IPV4, ETH_P_IPV6, IPV4_LEN, link_layer, ptr_at};
use network_types::eth::EthHdr;
use network_types::ip::Ipv4Hdr;

pub use crate::parsed::{IcmpError, Ipv4Packet, Parsed, TcpFlags};
use crate::{maps, parse6, parsed};

/// ICMP destination unreachable (every code: fragmentation needed, port unreachable, ...).
const ICMP_DEST_UNREACH: u8 = 3;
/// ICMP time exceeded (a TTL that ran out on the way: traceroute through a VIP).
const ICMP_TIME_EXCEEDED: u8 = 11;
/// ICMP parameter problem.
const ICMP_PARAMETER_PROBLEM: u8 = 12;
/// IPv4 flags and fragment offset: any of these bits (more fragments, an offset) set means the
/// datagram is not whole.
const FRAGMENT_BITS: u16 = 0x3fff;
/// An IPv4 header's first byte without options: version 4, 5 words.
const PLAIN_VIHL: u8 = 0x45;

/// `first_look`'s answer for a frame that is surely not the balancer's, which it has counted
/// as `pass_not_vip`.
pub const PASSES: u32 = 0;
/// In `first_look`'s answer: the low bits are the destination port's PORT_FLAGS (read where
/// the whole parse finds the port: an untagged IPv4 TCP/UDP frame without options).
pub const FLAGS_KNOWN: u32 = 1 << 31;
/// `first_look`'s answer for a frame it could not tell about, flags not read.
pub const UNKNOWN: u32 = 1 << 30;

/// Whether an untagged IPv4 frame is surely not the balancer's, decided before anything else
/// is parsed: most frames a balancer host sees are such, and pay only this. A whole TCP or UDP
/// datagram (no options, not a fragment) with room for a TCP header behind the IP header,
/// whose ports neither a VIP nor a NAT backend uses: `parse` and `balance` would pass it as
/// `pass_not_vip` too ([`PASSES`]). Any other frame (tagged, short, ICMP, malformed, a VIP's
/// ...) gets the whole parse, which gives it its verdict.
///
/// One bounds check, the EtherType, then the ports: a VIP's packet goes on after one port
/// lookup, to the whole parse, which repeats the checks (handed the packet from here instead,
/// the verifier walks the balancing paths twice, past its limit) but not the lookup: the
/// answer carries the destination port's flags ([`FLAGS_KNOWN`]) on to `balance`. One word,
/// not an enum: the fast path keeps it in a register.
#[inline(always)]
pub fn first_look(ctx: &XdpContext) -> u32 {
    const L3: usize = EthHdr::LEN;
    const L4: usize = L3 + IPV4_LEN;
    let Some(frame) = ptr_at::<[u8; L4 + 20]>(ctx, 0) else {
        return UNKNOWN;
    };
    // SAFETY: bounds checked by ptr_at.
    let f = unsafe { &*frame };
    // 16-bit fields as single loads of the words they are (byte-wise: two loads and the shifts
    // to join them); the frame is 2-byte aligned, as `parse` reads it.
    // SAFETY: `at` is an even offset inside the frame checked above, at every call.
    let be16 = |at: usize| u16::from_be(unsafe { *(frame as *const u16).add(at / 2) });
    // The EtherType, as the constant holds it (network order read natively).
    if be16(12).to_be() != ETH_P_IPV4 {
        return UNKNOWN;
    }
    let proto = f[L3 + 9];
    let Some((vip_bit, backend_bit)) = port_flags::of_protocol(proto) else {
        return UNKNOWN;
    };
    let minimum = if proto == ip_proto::TCP { 20 } else { 8 };
    // The frame's checks before the lookups: LLVM takes each inlined lookup for a helper call
    // that clobbers the argument registers, so what is decided before one is not kept (spilled)
    // across it. A frame that is not a whole datagram without options gets the whole parse,
    // which never needs its flags (it finds the frame malformed, a fragment or with options).
    let tot_len = be16(L3 + 2) as usize;
    let whole = f[L3] == PLAIN_VIHL
        && be16(L3 + 6) & FRAGMENT_BITS == 0
        && tot_len >= IPV4_LEN + minimum
        && L3 + tot_len <= ctx.data_end() - ctx.data();
    if !whole {
        return UNKNOWN;
    }
    // SAFETY: inside the frame checked above.
    let [src_port, dst_port] = unsafe { *(frame as *const u8).add(L4).cast::<[u16; 2]>() };
    // The destination first: a VIP's packet is told after one lookup.
    let dst_flags = maps::port_flags(u16::from_be(dst_port));
    if dst_flags & (vip_bit | backend_bit) == 0 {
        // Counted here rather than by the caller: the counter's slot is looked up before the
        // source port's flags, so its dependent loads overlap that lookup's instead of
        // following it (about 1 ns of the pass's 10 to 12, `bench dataplane --against`). A
        // NAT backend's reply looks the slot up unused, at no cost the same runs could see.
        let passed = maps::counter_ptr(Counter::PassNotVip as u32);
        if maps::port_flags(u16::from_be(src_port)) & backend_bit == 0 {
            maps::add_one(passed);
            return PASSES;
        }
    }
    // Without options the ports were read where the whole parse finds them: their flags hold.
    FLAGS_KNOWN | dst_flags
}

/// The destination port flags `first_look` read, if it did (`first`: its answer).
#[inline(always)]
pub fn known_dst_flags(first: u32) -> Option<u32> {
    (first & FLAGS_KNOWN != 0).then_some(first & !FLAGS_KNOWN)
}

/// Parses an IPv4 frame; an IPv6 frame is only recognised (`parse6::parse_frame` parses it).
#[inline(always)]
pub fn parse(ctx: &XdpContext) -> Parsed {
    let Some((ether_type, l3_offset)) = link_layer(ctx) else {
        return Parsed::Malformed;
    };
    if ether_type == ETH_P_IPV6 {
        return if parse6::passes_through(ctx, l3_offset) { Parsed::NotTcpUdp } else { Parsed::Ipv6Frame };
    }
    if ether_type != ETH_P_IPV4 {
        return Parsed::NotIp;
    }
    let Some(ip) = ptr_at::<Ipv4Hdr>(ctx, l3_offset) else {
        return Parsed::Malformed;
    };
    // Total length and flags/fragment offset are read as 16-bit words (header words 1 and 3):
    // the header's own type has byte arrays there, which compile to byte loads. The header
    // sits 2-byte aligned behind Ethernet (and a tag); unaligned loads are fine for XDP anyway.
    let words = ip as *const u16;
    // SAFETY: bounds checked by ptr_at.
    let (vihl, tot_len, frags, proto) =
        unsafe { ((*ip).vihl, u16::from_be(*words.add(1)), u16::from_be(*words.add(3)), (*ip).proto) };
    if vihl >> 4 != 4 || (vihl & 0xf) < 5 {
        return Parsed::Malformed;
    }
    if (tot_len as usize) < IPV4_LEN || l3_offset + tot_len as usize > ctx.data_end() - ctx.data() {
        return Parsed::Malformed;
    }
    // More-fragments flag or a fragment offset: not a whole datagram.
    if frags & FRAGMENT_BITS != 0 {
        return Parsed::Fragment;
    }
    if vihl & 0xf != 5 {
        return Parsed::Options;
    }
    let l4 = l3_offset + IPV4_LEN;
    // A whole L4 header, inside both the frame and the IP datagram. Every later access (ports,
    // checksum, TCP flags) lies inside it, so it needs no bounds check of its own.
    let (l4_header, check_offset, tcp_flags) = match proto {
        ip_proto::TCP => {
            let Some(h) = ptr_at::<[u8; 20]>(ctx, l4).filter(|_| tot_len as usize >= IPV4_LEN + 20) else {
                return Parsed::Malformed;
            };
            // SAFETY: byte 13 of the 20 just checked.
            (h as *mut u8, parsed::TCP_CHECK_AT, unsafe { (h as *const u8).add(13) })
        }
        ip_proto::UDP => {
            let Some(h) = ptr_at::<[u8; 8]>(ctx, l4).filter(|_| tot_len as usize >= IPV4_LEN + 8) else {
                return Parsed::Malformed;
            };
            (h as *mut u8, parsed::UDP_CHECK_AT, core::ptr::null())
        }
        ip_proto::ICMP => return icmp_error(ctx, l3_offset, ip, l4, tot_len),
        _ => return Parsed::NotTcpUdp,
    };
    let ports = l4_header as *mut u16;
    Parsed::Ipv4(Ipv4Packet {
        l3_offset,
        ip,
        src_port: ports,
        // SAFETY: inside the header checked above (at least 8 bytes).
        dst_port: unsafe { ports.add(1) },
        // SAFETY: as above; the checksum field ends at byte 18 (TCP) or 8 (UDP).
        l4_check: unsafe { l4_header.add(check_offset) } as *mut u16,
        tcp: TcpFlags(tcp_flags),
    })
}

/// An ICMP error (destination unreachable, time exceeded, parameter problem: the errors a
/// router or host sends about a packet it was handed) quoting an IPv4 TCP/UDP header without
/// options and at least its ports; any other ICMP is NotTcpUdp (passed like before: echo,
/// redirects, ... are the host's).
#[inline(always)]
fn icmp_error(ctx: &XdpContext, l3_offset: usize, ip: *mut Ipv4Hdr, l4: usize, tot_len: u16) -> Parsed {
    // ICMP header (8 bytes), quoted IPv4 header (20) and ports (4).
    const NEEDED: usize = 8 + IPV4_LEN + 4;
    let Some(icmp) = ptr_at::<[u8; NEEDED]>(ctx, l4).filter(|_| tot_len as usize >= IPV4_LEN + NEEDED) else {
        return Parsed::NotTcpUdp;
    };
    let bytes = icmp as *mut u8;
    // SAFETY: inside the NEEDED bytes checked above.
    let (kind, quoted_vihl, quoted_proto) = unsafe { (*bytes, *bytes.add(8), *bytes.add(8 + 9)) };
    let error = matches!(kind, ICMP_DEST_UNREACH | ICMP_TIME_EXCEEDED | ICMP_PARAMETER_PROBLEM);
    if !error || quoted_vihl != PLAIN_VIHL || !matches!(quoted_proto, ip_proto::TCP | ip_proto::UDP) {
        return Parsed::NotTcpUdp;
    }
    let quoted_l4 = l4 + 8 + IPV4_LEN;
    let quoted_l4_check = parsed::quoted_l4_check(ctx, quoted_l4, quoted_proto, l3_offset + tot_len as usize);
    // SAFETY: all inside the NEEDED bytes checked above.
    unsafe {
        let ports = bytes.add(8 + IPV4_LEN) as *mut u16;
        Parsed::IcmpError(IcmpError {
            l3_offset,
            ip,
            icmp_check: bytes.add(2) as *mut u16,
            quoted: bytes.add(8) as *mut Ipv4Hdr,
            quoted_src_port: ports,
            quoted_dst_port: ports.add(1),
            quoted_l4_check,
        })
    }
}
