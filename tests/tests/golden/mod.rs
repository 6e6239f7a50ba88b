//! The golden cases of lb_ingress, one file per path family (as Katran keeps its fixtures), run
//! in order on one balancer by `golden_packets_through_lb_ingress`: later cases rely on the
//! flows and next hops earlier ones left.
pub mod dsr;
pub mod icmp_to_client;
pub mod nat;
pub mod next_hop;
pub mod non_vip;
pub mod reply;

use lb_tests::fixture::CLIENT;
use lb_tests::packets::{Frame, L4};

/// The web VIP (the fixture's first: NAT, TCP port 80, hash = ip).
pub const VIP_WEB: [u8; 4] = [203, 0, 113, 10];

/// The client's SYN to the web VIP.
pub fn web_syn() -> Frame {
    Frame::tcp(CLIENT, 40000, VIP_WEB, 80)
}

/// The established packet of that connection (ACK + a request).
pub fn web_ack() -> Frame {
    web_syn().with(|f| {
        f.l4 = L4::TcpAck;
        f.payload = b"GET / HTTP/1.1\r\n\r\n".to_vec()
    })
}

/// The expected answer to a frame too big for its next hop: ICMP "fragmentation needed" from the
/// address it was sent to, quoting its IPv4 header and 8 bytes, MACs swapped, tag kept.
pub fn frag_needed(frame: &[u8], l3: usize, mtu: u16) -> Vec<u8> {
    use etherparse::{Icmpv4Header, Icmpv4Type, IpNumber, Ipv4Header, icmpv4::DestUnreachableHeader};
    let quote = &frame[l3..l3 + 28];
    let (original, _) = Ipv4Header::from_slice(&frame[l3..]).unwrap();
    let icmp = Icmpv4Header::with_checksum(
        Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::FragmentationNeeded { next_hop_mtu: mtu }),
        quote,
    );
    let mut ip = Ipv4Header::new(36, 64, IpNumber::ICMP, original.destination, original.source).unwrap();
    ip.dont_fragment = false;
    ip.header_checksum = ip.calc_header_checksum();
    let mut out = frame[6..12].to_vec();
    out.extend_from_slice(&frame[..6]);
    out.extend_from_slice(&frame[12..l3]);
    out.extend_from_slice(&ip.to_bytes());
    out.extend_from_slice(&icmp.to_bytes());
    out.extend_from_slice(quote);
    out
}
