//! lb_ingress: the XDP balancer. For a packet addressed to a VIP it finds the flow's backend
//! (connection table, else the VIP's Maglev ring), rewrites the packet (NAT or IPIP) and sends
//! it on; a NAT reply from a backend is rewritten back to the VIP. Everything else is passed to
//! the stack untouched. Every packet is counted under exactly one verdict counter.
#![no_std]
#![no_main]

mod encap;
mod forward;
mod icmp;
mod icmp_error;
mod maps;
mod nat;
mod parse;
mod select;
mod table;

use aya_ebpf::bindings::xdp_action::XDP_PASS;
use aya_ebpf::macros::xdp;
use aya_ebpf::programs::XdpContext;
use lb_common::config::port_flags;
use lb_common::family;
use lb_common::flow::{FlowEntry, FlowKey, FlowSlot};
use lb_common::ip_proto;
use lb_common::stats::Counter;
use lb_common::vip::{VipKey, forwarding};

use crate::parse::Parsed;
use crate::table::Tables;

/// An XDP action and the counter that explains it.
pub type Verdict = (u32, Counter);

// Inlined into the entry point the macro wraps it in: left to itself LLVM may make it a
// BPF-to-BPF call, which costs every packet ~10 ns.
#[xdp]
#[inline(always)]
pub fn lb_ingress(ctx: XdpContext) -> u32 {
    let (action, reason) = balance(&ctx);
    maps::count(reason);
    action
}

#[inline(always)]
fn balance(ctx: &XdpContext) -> Verdict {
    let pkt = match parse::parse(ctx) {
        Parsed::Ipv4(pkt) => pkt,
        Parsed::IcmpError(err) => return icmp_error::to_backend(ctx, &err),
        Parsed::NotIpv4 => return (XDP_PASS, Counter::PassNotIpv4),
        Parsed::NotTcpUdp => return (XDP_PASS, Counter::PassNotVip),
        Parsed::Fragment => return (XDP_PASS, Counter::PassFragment),
        Parsed::Options => return (XDP_PASS, Counter::PassIpOptions),
        Parsed::Malformed => return (XDP_PASS, Counter::PassMalformed),
    };
    // SAFETY: parse() checked that the IPv4 and L4 headers lie inside the packet.
    let (src_port, dst_port, protocol) = unsafe { (*pkt.src_port, *pkt.dst_port, (*pkt.ip).proto) };
    // Addresses are read only once a port says the packet may concern us: most traffic that
    // passes through is decided by the two port lookups alone.
    // SAFETY: as above.
    let addresses = || unsafe { ((*pkt.ip).src_addr, (*pkt.ip).dst_addr) };
    let (vip_bit, backend_bit) = if protocol == ip_proto::TCP {
        (port_flags::VIP_TCP, port_flags::NAT_BACKEND_TCP)
    } else {
        (port_flags::VIP_UDP, port_flags::NAT_BACKEND_UDP)
    };

    if maps::port_flags(u16::from_be(dst_port)) & vip_bit != 0 {
        let (src, dst) = addresses();
        let vip_key = VipKey {
            addr: lb_common::ipv4_bytes(dst),
            port: dst_port,
            protocol,
            family: family::IPV4,
        };
        let key = flow_key(src, dst, src_port, dst_port, protocol);
        let tables = maps::tables();
        let hash = tables.map_or(0, |t| t.hash(&key));
        // An established flow costs no hash-map lookup: the connection table names its VIP by
        // id, and VIP_INFO (an array) confirms that VIP still exists. Otherwise look the VIP up.
        let flow = tables.and_then(|t| maps::flow(&key, hash, &t));
        // SAFETY: a valid map value pointer.
        let by_flow = flow.and_then(|slot| maps::vip_info(unsafe { (*slot).value.vip_id }));
        let vip = match by_flow {
            Some(vip) if vip.key == vip_key => Some(vip),
            _ => maps::vip(&vip_key),
        };
        if let Some(vip) = vip {
            let flow = Flow { key: &key, hash, slot: flow, tables };
            return match vip.forwarding {
                forwarding::DSR_IPIP => encap::balance_ipip(ctx, &pkt, vip, &flow),
                _ => nat::balance_nat(ctx, &pkt, vip, &flow),
            };
        }
    }
    if maps::port_flags(u16::from_be(src_port)) & backend_bit != 0
        && let Some(t) = maps::tables()
    {
        let (src, dst) = addresses();
        let key = flow_key(src, dst, src_port, dst_port, protocol);
        if let Some(reverse) = maps::reverse_flow(&key, t.hash(&key), &t) {
            return nat::reply_to_client(ctx, &pkt, &reverse);
        }
    }
    (XDP_PASS, Counter::PassNotVip)
}

/// A VIP packet's flow: its key and table hash, its connection-table way if it has one, and
/// the tables (None until userspace configured them).
pub struct Flow<'a> {
    pub key: &'a FlowKey,
    pub hash: u32,
    pub slot: Option<*mut FlowSlot<FlowEntry>>,
    pub tables: Option<Tables>,
}

/// A connection-table key from IPv4 header fields.
#[inline(always)]
pub fn flow_key(src: [u8; 4], dst: [u8; 4], src_port: u16, dst_port: u16, protocol: u8) -> FlowKey {
    FlowKey {
        src: lb_common::ipv4_bytes(src),
        dst: lb_common::ipv4_bytes(dst),
        src_port,
        dst_port,
        protocol,
        family: family::IPV4,
        _pad: [0; 2],
    }
}

/// Packet length for the traffic counters.
#[inline(always)]
pub fn packet_len(ctx: &XdpContext) -> u64 {
    (ctx.data_end() - ctx.data()) as u64
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
