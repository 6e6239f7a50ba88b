//! The IPv6 golden cases of lb_ingress, one file per path family, run in order on one balancer
//! by `ipv6_golden_packets_through_lb_ingress`: later cases rely on the flows earlier ones left.
pub mod dsr;
pub mod icmp;
pub mod nat;
pub mod not_vip;

use etherparse::Icmpv6Type;
use lb_tests::fixture6::{CLIENT6, Frame6, vip6};
use lb_tests::packets::L4;
pub use lb_tests::packets::icmp6;

/// The NAT66 VIP (TCP port 80, UDP port 53).
pub const VIP_NAT: [u8; 16] = vip6(0x10);

/// The client's established packet to the NAT66 VIP (ACK + a request).
pub fn nat66_ack() -> Frame6 {
    Frame6::tcp(CLIENT6, 40000, VIP_NAT, 80).with(|f| {
        f.l4 = L4::TcpAck;
        f.payload = b"GET / HTTP/1.1\r\n\r\n".to_vec()
    })
}

pub const HOP_BY_HOP: u8 = 0;
pub const ROUTING: u8 = 43;
pub const FRAGMENT: u8 = 44;
pub const DESTINATION_OPTIONS: u8 = 60;

pub fn octets6(addr: std::net::IpAddr) -> [u8; 16] {
    match addr {
        std::net::IpAddr::V6(a) => a.octets(),
        std::net::IpAddr::V4(_) => panic!("an IPv6 address was expected"),
    }
}

/// The answer to an IPv6 packet too big for its next hop: ICMPv6 "packet too big" (MTU `mtu`)
/// from the address it was sent to, quoting its first 128 bytes, MACs swapped, tag kept.
pub fn too_big6(frame: &[u8], l3: usize, mtu: u32) -> Vec<u8> {
    let (src, dst): ([u8; 16], [u8; 16]) =
        (frame[l3 + 8..l3 + 24].try_into().unwrap(), frame[l3 + 24..l3 + 40].try_into().unwrap());
    let answer = icmp6(
        (frame[..6].try_into().unwrap(), frame[6..12].try_into().unwrap()),
        dst,
        src,
        64,
        Icmpv6Type::PacketTooBig { mtu },
        &frame[l3..l3 + 128],
    );
    // Behind the original link header (a tag kept), MACs swapped.
    let mut out = frame[6..12].to_vec();
    out.extend_from_slice(&frame[..6]);
    out.extend_from_slice(&frame[12..l3]);
    out.extend_from_slice(&answer[14..]);
    out
}
