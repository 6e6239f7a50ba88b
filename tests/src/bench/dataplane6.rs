//! The IPv6 rows of the data-plane benchmark (see `dataplane`): the same method over the IPv6
//! golden fixture (`fixture6`), in a balancer of its own, measured in the same rounds as the
//! IPv4 rows they are compared with.
use lb_common::flow::FlowKey;
use lb_common::{family, ip_proto};
use lb_ctl::dataplane::aya::AyaDataplane;

use super::dataplane::{Path, Rows, Tables, UNSPENT};
use crate::fixture6::{CLIENT6, Frame6, LB6, configure6, vips6};
use crate::packets::L4;

pub const ESTABLISHED_NAT66: &str = "IPv6 established TCP (NAT66)";
pub const ESTABLISHED_IP6IP6: &str = "IPv6 in IPv6 encapsulation (DSR)";
pub const ESTABLISHED_GUE6: &str = "GUE over IPv6 encapsulation (DSR)";

/// The IPv6 rows, in balancer `dp` (configured here).
pub(super) fn ipv6_rows(dp: &mut AyaDataplane) -> anyhow::Result<Rows> {
    let vips = vips6();
    configure6(dp, &vips);
    let tables = Tables::take(dp)?;
    let addr = |i: usize| match vips[i].addr {
        std::net::IpAddr::V6(a) => a.octets(),
        std::net::IpAddr::V4(_) => unreachable!("fixture6 VIP {i} is IPv6"),
    };
    let (nat, ip6ip6, gue, l2) = (addr(0), addr(2), addr(5), addr(6));
    let key =
        |dst: [u8; 16], port: u16| FlowKey::new(CLIENT6, dst, port.to_be(), 80u16.to_be(), ip_proto::TCP, family::IPV6);
    // The reply's key of the new NAT66 flow: the ring alternates backends by slot.
    let (backend, backend_port) = crate::fixture6::by_client(&vips[0], CLIENT6);
    let std::net::IpAddr::V6(backend) = backend else { unreachable!("an IPv6 backend") };
    let reply_key = FlowKey {
        src: backend.octets(),
        dst: CLIENT6,
        src_port: backend_port.to_be(),
        dst_port: 45001u16.to_be(),
        ..key(nat, 45001)
    };
    let established = |f: Frame6| {
        f.with(|f| {
            f.l4 = L4::TcpAck;
            f.payload = vec![b'x'; 64]
        })
        .bytes()
    };
    let row = |name, frame, forget: Option<(u32, Option<u32>)>| Path {
        name,
        frame,
        action: 3,
        forget,
        target: None,
        katran: false,
        budget: UNSPENT,
        share: false,
        trace: false,
    };
    let paths = [
        Path { action: 2, ..row("IPv6 non-VIP pass", Frame6::tcp(CLIENT6, 40000, LB6, 22).bytes(), None) },
        row(ESTABLISHED_NAT66, established(Frame6::tcp(CLIENT6, 45000, nat, 80)), None),
        row(
            "IPv6 new TCP flow (SYN, NAT66)",
            Frame6::tcp(CLIENT6, 45001, nat, 80).bytes(),
            Some((dp.flow_set_of(&key(nat, 45001)), Some(dp.flow_set_of(&reply_key)))),
        ),
        row("IPv6 established UDP (NAT66)", Frame6::udp(CLIENT6, 5000, nat, 53).bytes(), None),
        row(ESTABLISHED_IP6IP6, established(Frame6::tcp(CLIENT6, 46000, ip6ip6, 80)), None),
        row(
            "IPv6 new TCP flow (SYN, IPv6 in IPv6)",
            Frame6::tcp(CLIENT6, 46001, ip6ip6, 80).bytes(),
            Some((dp.flow_set_of(&key(ip6ip6, 46001)), None)),
        ),
        row(ESTABLISHED_GUE6, established(Frame6::tcp(CLIENT6, 46200, gue, 80)), None),
        row("IPv6 MAC rewrite (DSR by MAC)", established(Frame6::tcp(CLIENT6, 46100, l2, 80)), None),
    ];
    // The UDP row is established from its second datagram on; the warm-up sends two.
    let warm = vec![paths[3].frame.clone()];
    Ok(Rows { paths: paths.into(), tables, events: None, warm })
}
