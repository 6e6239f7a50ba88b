//! Test frames, built with etherparse: every checksum in an expected frame is computed from
//! scratch, never carried over from the program's output.
use etherparse::checksum::Sum16BitWords;
use etherparse::{
    Ethernet2Header, IpHeaders, IpNumber, Ipv4Header, PacketBuilder, PacketBuilderStep, TcpHeader, UdpHeader, VlanId,
};

pub type Mac = [u8; 6];

/// An address family of test frames: what an IPv4 and an IPv6 frame differ in, so `Frame` is
/// written once for both (as the program's `IpPacket` is).
pub trait Family: Copy + std::fmt::Debug {
    /// Length of the fixed IP header.
    const IP_LEN: usize;
    /// The source MAC of a frame from `src` (the sending test host's).
    fn sender_mac(src: Self) -> Mac;
    /// The IP step of a frame builder, behind `vlan`'s tag if any.
    fn ip(
        eth: PacketBuilderStep<Ethernet2Header>,
        vlan: Option<u16>,
        src: Self,
        dst: Self,
        ttl: u8,
    ) -> PacketBuilderStep<IpHeaders>;
}

impl Family for [u8; 4] {
    const IP_LEN: usize = 20;
    fn sender_mac(_: Self) -> Mac {
        [2, 0, 0, 0, 0, 7]
    }
    fn ip(
        eth: PacketBuilderStep<Ethernet2Header>,
        vlan: Option<u16>,
        src: Self,
        dst: Self,
        ttl: u8,
    ) -> PacketBuilderStep<IpHeaders> {
        match vlan {
            Some(id) => eth.single_vlan(VlanId::try_new(id).unwrap()).ipv4(src, dst, ttl),
            None => eth.ipv4(src, dst, ttl),
        }
    }
}

impl Family for [u8; 16] {
    const IP_LEN: usize = 40;
    fn sender_mac(src: Self) -> Mac {
        mac6(src)
    }
    fn ip(
        eth: PacketBuilderStep<Ethernet2Header>,
        vlan: Option<u16>,
        src: Self,
        dst: Self,
        hop_limit: u8,
    ) -> PacketBuilderStep<IpHeaders> {
        match vlan {
            Some(id) => eth.single_vlan(VlanId::try_new(id).unwrap()).ipv6(src, dst, hop_limit),
            None => eth.ipv6(src, dst, hop_limit),
        }
    }
}

/// The MAC address of an IPv6 test host, from its address's last byte (as `fixture::mac_of`).
pub fn mac6(addr: [u8; 16]) -> Mac {
    [2, 0, 0, 6, if addr[15] >= 128 { 1 } else { 0 }, addr[15] % 128]
}

/// The fields of a test TCP/UDP frame: IPv4 (`Frame`) or IPv6 (`Frame6`).
#[derive(Clone, Debug)]
pub struct Frame<A: Family = [u8; 4]> {
    pub src_mac: Mac,
    pub dst_mac: Mac,
    pub vlan: Option<u16>,
    pub src: A,
    pub dst: A,
    /// TTL, or IPv6 hop limit.
    pub ttl: u8,
    pub src_port: u16,
    pub dst_port: u16,
    pub l4: L4,
    pub payload: Vec<u8>,
}

/// An IPv6 test frame.
pub type Frame6 = Frame<[u8; 16]>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L4 {
    TcpSyn,
    TcpAck,
    /// FIN with ACK: its sender is done sending.
    TcpFin,
    /// RST with ACK: the connection is over.
    TcpRst,
    Udp,
    /// UDP sent without a checksum (zero).
    UdpNoChecksum,
}

impl<A: Family> Frame<A> {
    pub fn tcp(src: A, src_port: u16, dst: A, dst_port: u16) -> Frame<A> {
        Frame {
            src_mac: A::sender_mac(src),
            dst_mac: [2, 0, 0, 0, 0, 1],
            vlan: None,
            src,
            dst,
            ttl: 64,
            src_port,
            dst_port,
            l4: L4::TcpSyn,
            payload: Vec::new(),
        }
    }

    pub fn udp(src: A, src_port: u16, dst: A, dst_port: u16) -> Frame<A> {
        Frame { l4: L4::Udp, payload: b"query".to_vec(), ..Frame::tcp(src, src_port, dst, dst_port) }
    }

    pub fn with(&self, change: impl FnOnce(&mut Frame<A>)) -> Frame<A> {
        let mut f = self.clone();
        change(&mut f);
        f
    }

    /// Offset of the IP header in the frame.
    pub fn l3_offset(&self) -> usize {
        if self.vlan.is_some() { 18 } else { 14 }
    }

    pub fn bytes(&self) -> Vec<u8> {
        let eth = PacketBuilder::ethernet2(self.src_mac, self.dst_mac);
        let ip = A::ip(eth, self.vlan, self.src, self.dst, self.ttl);
        let mut out = write_l4(ip, self.l4, (self.src_port, self.dst_port), &self.payload);
        if self.l4 == L4::UdpNoChecksum {
            let at = self.l3_offset() + A::IP_LEN + 6;
            out[at..at + 2].copy_from_slice(&[0, 0]);
        }
        out
    }
}

/// The frame behind `ip` (an IPv4 or IPv6 step of a builder): the L4 header `l4` with `ports`
/// (source, destination), then `payload`. TCP segments carry fixed sequence numbers.
pub fn write_l4(ip: PacketBuilderStep<IpHeaders>, l4: L4, ports: (u16, u16), payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let (src, dst) = ports;
    match l4 {
        L4::TcpSyn => ip.tcp(src, dst, 1000, 64240).syn().write(&mut out, payload),
        L4::TcpAck => ip.tcp(src, dst, 1001, 64240).ack(5000).write(&mut out, payload),
        L4::TcpFin => ip.tcp(src, dst, 1001, 64240).fin().ack(5000).write(&mut out, payload),
        L4::TcpRst => ip.tcp(src, dst, 1001, 0).rst().ack(5000).write(&mut out, payload),
        L4::Udp | L4::UdpNoChecksum => ip.udp(src, dst).write(&mut out, payload),
    }
    .unwrap();
    out
}

/// Rewrites the IPv4 header of `frame` (at `l3`) through `change`, then recomputes its length
/// and checksum. For fragments, options, odd TTLs.
pub fn patch_ipv4(frame: &[u8], l3: usize, change: impl FnOnce(&mut Ipv4Header)) -> Vec<u8> {
    let (mut header, rest) = Ipv4Header::from_slice(&frame[l3..]).unwrap();
    let payload_len = header.total_len as usize - header.header_len();
    change(&mut header);
    header.total_len = (header.header_len() + payload_len) as u16;
    header.header_checksum = header.calc_header_checksum();
    let mut out = frame[..l3].to_vec();
    out.extend_from_slice(&header.to_bytes());
    out.extend_from_slice(rest);
    out
}

/// The frame the balancer must emit for a DSR packet: `inner` (a whole frame) with its IPv4
/// datagram wrapped in an outer header `outer_src → outer_dst`, behind new MACs.
pub fn ipip(inner: &Frame, outer_src: [u8; 4], outer_dst: [u8; 4], src_mac: Mac, dst_mac: Mac) -> Vec<u8> {
    ipip_frame(&inner.bytes(), inner.l3_offset(), outer_src, outer_dst, src_mac, dst_mac)
}

/// `ipip` for a frame given as bytes, its IPv4 header at `l3`.
pub fn ipip_frame(
    inner_bytes: &[u8],
    l3: usize,
    outer_src: [u8; 4],
    outer_dst: [u8; 4],
    src_mac: Mac,
    dst_mac: Mac,
) -> Vec<u8> {
    let datagram = &inner_bytes[l3..];
    let mut outer = Ipv4Header::new(datagram.len() as u16, 64, IpNumber::IPV4, outer_src, outer_dst).unwrap();
    outer.dont_fragment = false;
    outer.header_checksum = outer.calc_header_checksum();
    let mut out = Vec::new();
    let eth = Ethernet2Header { source: src_mac, destination: dst_mac, ether_type: etherparse::EtherType::IPV4 };
    if l3 == 18 {
        // Keep the original VLAN header (bytes 12..18) behind the new addresses.
        out.extend_from_slice(&dst_mac);
        out.extend_from_slice(&src_mac);
        out.extend_from_slice(&inner_bytes[12..18]);
    } else {
        out.extend_from_slice(&eth.to_bytes());
    }
    out.extend_from_slice(&outer.to_bytes());
    out.extend_from_slice(datagram);
    out
}

/// The frame the balancer must emit for a `dsr-gue` packet: `inner` (a whole frame, its IPv4
/// header at `l3`) with its IPv4 datagram behind an outer IPv4 header `outer_src → outer_dst`
/// and a UDP header `source_port → gue::PORT` without checksum, behind new MACs.
pub fn gue_frame(
    inner_bytes: &[u8],
    l3: usize,
    outer: ([u8; 4], [u8; 4]),
    source_port: u16,
    src_mac: Mac,
    dst_mac: Mac,
) -> Vec<u8> {
    let datagram = &inner_bytes[l3..];
    let udp = etherparse::UdpHeader {
        source_port,
        destination_port: lb_common::gue::PORT,
        length: (8 + datagram.len()) as u16,
        checksum: 0,
    };
    let mut ip = Ipv4Header::new(udp.length, 64, IpNumber::UDP, outer.0, outer.1).unwrap();
    ip.dont_fragment = false;
    ip.header_checksum = ip.calc_header_checksum();
    let mut out = Vec::new();
    if l3 == 18 {
        out.extend_from_slice(&dst_mac);
        out.extend_from_slice(&src_mac);
        out.extend_from_slice(&inner_bytes[12..18]);
    } else {
        let eth = Ethernet2Header { source: src_mac, destination: dst_mac, ether_type: etherparse::EtherType::IPV4 };
        out.extend_from_slice(&eth.to_bytes());
    }
    out.extend_from_slice(&ip.to_bytes());
    out.extend_from_slice(&udp.to_bytes());
    out.extend_from_slice(datagram);
    out
}

/// An ICMP "fragmentation needed" (next-hop MTU `mtu`) from `from` to `to`, quoting the IPv4
/// header and the first 8 bytes behind it of `quoted` (untagged).
pub fn icmp_frag_needed(macs: (Mac, Mac), from: [u8; 4], to: [u8; 4], ttl: u8, mtu: u16, quoted: &Frame) -> Vec<u8> {
    use etherparse::icmpv4::DestUnreachableHeader;
    let why = etherparse::Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::FragmentationNeeded {
        next_hop_mtu: mtu,
    });
    icmp_error(macs, (from, to, ttl), why, quoted)
}

/// An ICMP error of `kind` (destination unreachable, time exceeded, ...) sent `from → to` with
/// `ttl`, quoting the IPv4 header and the first 8 bytes behind it of `quoted` (untagged), as
/// RFC 792 asks.
pub fn icmp_error(
    macs: (Mac, Mac),
    (from, to, ttl): ([u8; 4], [u8; 4], u8),
    kind: etherparse::Icmpv4Type,
    quoted: &Frame,
) -> Vec<u8> {
    icmp_error_quoting(macs, (from, to, ttl), kind, quoted, 28)
}

/// As [`icmp_error`], quoting the first `quote_len` bytes of `quoted`'s IP datagram (RFC 1812
/// lets a router quote more than RFC 792's 28).
pub fn icmp_error_quoting(
    macs: (Mac, Mac),
    (from, to, ttl): ([u8; 4], [u8; 4], u8),
    kind: etherparse::Icmpv4Type,
    quoted: &Frame,
    quote_len: usize,
) -> Vec<u8> {
    let bytes = quoted.bytes();
    let l3 = quoted.l3_offset();
    icmp4(macs, (from, to, ttl), kind, &bytes[l3..l3 + quote_len])
}

/// An ICMP message of `kind` sent `from → to` with `ttl`, quoting `quote` (the first bytes of
/// an IP datagram), behind `macs`.
pub fn icmp4(
    macs: (Mac, Mac),
    (from, to, ttl): ([u8; 4], [u8; 4], u8),
    kind: etherparse::Icmpv4Type,
    quote: &[u8],
) -> Vec<u8> {
    let icmp = etherparse::Icmpv4Header::with_checksum(kind, quote);
    let mut ip = Ipv4Header::new((icmp.header_len() + quote.len()) as u16, ttl, IpNumber::ICMP, from, to).unwrap();
    ip.header_checksum = ip.calc_header_checksum();
    let eth = Ethernet2Header { source: macs.0, destination: macs.1, ether_type: etherparse::EtherType::IPV4 };
    let mut out = eth.to_bytes().to_vec();
    out.extend_from_slice(&ip.to_bytes());
    out.extend_from_slice(&icmp.to_bytes());
    out.extend_from_slice(quote);
    out
}

/// An ICMPv6 message of `kind` from `from` to `to`, quoting `quote`, behind `macs`.
pub fn icmp6(
    macs: (Mac, Mac),
    from: [u8; 16],
    to: [u8; 16],
    hop_limit: u8,
    kind: etherparse::Icmpv6Type,
    quote: &[u8],
) -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ethernet2(macs.0, macs.1).ipv6(from, to, hop_limit).icmpv6(kind).write(&mut out, quote).unwrap();
    out
}

/// Checks every checksum of an IPv4 TCP/UDP frame from scratch; describes the first wrong one.
pub fn verify_checksums(frame: &[u8]) -> Result<(), String> {
    let sliced = etherparse::SlicedPacket::from_ethernet(frame).map_err(|e| format!("parse: {e}"))?;
    if let Some(etherparse::NetSlice::Ipv6(ip)) = &sliced.net {
        return verify_ipv6_checksums(&ip.header().to_header(), &sliced.transport);
    }
    let Some(etherparse::NetSlice::Ipv4(ip)) = &sliced.net else { return Ok(()) };
    let header = ip.header().to_header();
    if header.calc_header_checksum() != header.header_checksum {
        return Err(format!("IPv4 checksum {:#06x}", header.header_checksum));
    }
    if header.protocol == IpNumber::IPV4 {
        // IPIP: check the inner datagram too (only it: bytes behind the outer datagram, as
        // an Ethernet trailer, are not part of it).
        let mut fake = frame[..14].to_vec();
        fake[12..14].copy_from_slice(&[0x08, 0x00]);
        fake.extend_from_slice(ip.payload().payload);
        return verify_checksums(&fake);
    }
    let payload = ip.payload().payload;
    match &sliced.transport {
        Some(etherparse::TransportSlice::Tcp(tcp)) => {
            let h: TcpHeader = tcp.to_header();
            let want = h.calc_checksum_ipv4(&header, tcp.payload()).unwrap();
            if want != h.checksum {
                return Err(format!("TCP checksum {:#06x}, want {want:#06x}", h.checksum));
            }
        }
        Some(etherparse::TransportSlice::Udp(udp)) => {
            let h: UdpHeader = udp.to_header();
            if h.checksum != 0 {
                let want = h.calc_checksum_ipv4(&header, udp.payload()).unwrap();
                if want != h.checksum {
                    return Err(format!("UDP checksum {:#06x}, want {want:#06x}", h.checksum));
                }
            }
        }
        Some(etherparse::TransportSlice::Icmpv4(icmp)) => {
            // Over the message, its checksum included, a sum that holds complements to 0.
            if Sum16BitWords::new().add_slice(icmp.slice()).ones_complement() != 0 {
                return Err(format!("ICMP checksum {:#06x}", icmp.checksum()));
            }
            // An error's quote starts with the IPv4 header of the packet it is about: its
            // checksum must hold too (a quote rewritten is a header rewritten).
            let error = matches!(icmp.type_u8(), 3 | 11 | 12);
            if error && let Ok(quoted) = etherparse::Ipv4HeaderSlice::from_slice(icmp.payload()) {
                let quoted = quoted.to_header();
                if quoted.calc_header_checksum() != quoted.header_checksum {
                    return Err(format!("quoted IPv4 checksum {:#06x}", quoted.header_checksum));
                }
            }
        }
        _ => {}
    }
    let _ = payload;
    Ok(())
}

/// The TCP or UDP checksum of an IPv6 packet (UDP without one, as GUE sends, passes).
fn verify_ipv6_checksums(
    header: &etherparse::Ipv6Header,
    transport: &Option<etherparse::TransportSlice>,
) -> Result<(), String> {
    match transport {
        Some(etherparse::TransportSlice::Tcp(tcp)) => {
            let h: TcpHeader = tcp.to_header();
            let want = h.calc_checksum_ipv6(header, tcp.payload()).map_err(|e| e.to_string())?;
            if want != h.checksum {
                return Err(format!("TCP checksum {:#06x}, want {want:#06x}", h.checksum));
            }
        }
        Some(etherparse::TransportSlice::Udp(udp)) => {
            let h: UdpHeader = udp.to_header();
            if h.checksum != 0 {
                let want = h.calc_checksum_ipv6(header, udp.payload()).map_err(|e| e.to_string())?;
                if want != h.checksum {
                    return Err(format!("UDP checksum {:#06x}, want {want:#06x}", h.checksum));
                }
            }
        }
        Some(etherparse::TransportSlice::Icmpv6(icmp)) => {
            // Over the pseudo-header (both addresses, the message's length, next header 58)
            // and the message, its checksum included, a sum that holds complements to 0.
            let message = icmp.slice();
            let sum = Sum16BitWords::new()
                .add_16bytes(header.source)
                .add_16bytes(header.destination)
                .add_4bytes((message.len() as u32).to_be_bytes())
                .add_4bytes([0, 0, 0, 58])
                .add_slice(message);
            if sum.ones_complement() != 0 {
                return Err(format!("ICMPv6 checksum {:#06x}", icmp.checksum()));
            }
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn icmp_checksums_are_checked_both_families() {
        let quoted = Frame::tcp([192, 0, 2, 7], 40000, [198, 51, 100, 11], 8080);
        let unreachable =
            etherparse::Icmpv4Type::DestinationUnreachable(etherparse::icmpv4::DestUnreachableHeader::Port);
        let mut v4 = icmp_error(
            ([2, 0, 0, 0, 0, 11], [2, 0, 0, 0, 0, 1]),
            ([198, 51, 100, 11], [192, 0, 2, 7], 64),
            unreachable,
            &quoted,
        );
        assert_eq!(verify_checksums(&v4), Ok(()));
        // A quoted byte changed, the ICMP checksum not.
        let last = v4.len() - 5;
        v4[last] ^= 1;
        assert!(verify_checksums(&v4).unwrap_err().starts_with("ICMP checksum"));

        let (src, dst) = (
            [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x11],
            [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7],
        );
        let kind = etherparse::Icmpv6Type::DestinationUnreachable(etherparse::icmpv6::DestUnreachableCode::Port);
        let mut v6 =
            icmp6(([2, 0, 0, 0, 0, 11], [2, 0, 0, 0, 0, 1]), src, dst, 64, kind, &[0x60, 0, 0, 0, 0, 8, 6, 64]);
        assert_eq!(verify_checksums(&v6), Ok(()));
        // The destination address changed (the pseudo-header), the checksum not.
        v6[14 + 39] ^= 1;
        assert!(verify_checksums(&v6).unwrap_err().starts_with("ICMPv6 checksum"));
    }
}
