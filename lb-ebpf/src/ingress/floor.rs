//! lb_set_read, the floor under the connection table's cost (`lb-bench flows`): what any
//! lookup of a flow must do, and no more. It parses the packet, hashes its key and reads one
//! word of its FLOWS set, the memory lb_ingress touches first for the same packet. Beside
//! lb_ingress on the same packets, at each number of flows, it shows how much of lb_ingress's
//! cost at scale is that one read (the set not in the CPU's caches) and how much is its work.
use aya_ebpf::programs::XdpContext;
use lb_common::flow::FlowKey;

use crate::ip::IpPacket;
use crate::maps;
use crate::parse::{self, Ipv4Packet, Parsed};

/// Reads one word of the packet's FLOWS set, if it is a whole IPv4 TCP or UDP packet and the
/// tables are configured.
#[inline(always)]
pub fn read_set(ctx: &XdpContext) {
    let Parsed::Ipv4(pkt) = parse::parse(ctx) else {
        return;
    };
    let Some(t) = maps::tables() else {
        return;
    };
    let (src, dst) = pkt.addresses();
    let (src_port, dst_port) = pkt.ports();
    let key = FlowKey::new(src, dst, src_port, dst_port, pkt.protocol(), Ipv4Packet::FAMILY);
    maps::read_flow_set(t.hash(&key), &t);
}
