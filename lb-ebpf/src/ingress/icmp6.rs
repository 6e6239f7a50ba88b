//! ICMPv6 "packet too big" (RFC 4443 §3.2) for IPv6 packets that do not fit the next hop's
//! MTU: DSR packets once the outer header is added, NAT packets whose path has a smaller MTU.
//! IPv6 routers never fragment, so without it a transfer through a smaller-MTU path stalls:
//! the answer makes the sender lower its path MTU (RFC 8201).
use aya_ebpf::bindings::xdp_action::{XDP_DROP, XDP_TX};
use aya_ebpf::helpers::generated::{bpf_xdp_adjust_head, bpf_xdp_adjust_tail};
use aya_ebpf::programs::XdpContext;
use lb_common::stats::Counter;
use lb_common::{csum, ip_proto, jumps};
use lb_ebpf::packet::{IPV6_LEN, ptr_at};

use crate::addr::{Addr, load, store};
use crate::maps;
use crate::parse::Parsed;
use crate::parse6::{self, Ipv6Packet};
use crate::verdict::Verdict;

const ICMPV6_PACKET_TOO_BIG: u8 = 2;
/// The ICMPv6 header: type, code, checksum, MTU.
const ICMPV6_HEADER: usize = 8;
/// How much of the offending packet is quoted: its IPv6 header, room for extension headers,
/// and the ports behind them, which is what the sender's stack needs to find the socket. A
/// packet too big for an IPv6 link (at least 1280 bytes) always has that much.
const QUOTED: usize = 128;
/// What the answer adds in front of the quote.
const ADDED: usize = IPV6_LEN + ICMPV6_HEADER;

/// Hands a packet too big for an MTU of `mtu` to lb_too_big6, through this CPU's scratch space.
#[inline(always)]
pub fn hand_on_too_big(ctx: &XdpContext, mtu: u16) -> Verdict {
    let Some(scratch) = maps::scratch() else {
        return (XDP_DROP, Counter::DropTooBig);
    };
    // SAFETY: this CPU's own map slot, used by one packet at a time.
    unsafe { (*scratch).too_big_mtu = mtu as u32 };
    maps::jump(ctx, jumps::TOO_BIG6)
}

/// `lb_too_big6`: the packet lb_ingress_v6 found too big (the MTU in the scratch space).
#[inline(always)]
pub fn answer_too_big(ctx: &XdpContext) -> Verdict {
    // SAFETY: this CPU's own map slot, written by lb_ingress_v6 for this packet.
    let Some(mtu) = maps::scratch().map(|scratch| unsafe { (*scratch).too_big_mtu } as u16) else {
        return (XDP_DROP, Counter::DropTooBig);
    };
    match parse6::parse_frame(ctx) {
        Parsed::Ipv6(pkt) => too_big(ctx, &pkt, mtu),
        _ => (XDP_DROP, Counter::DropTooBig),
    }
}

/// Turns the packet into an ICMPv6 "packet too big" (MTU `mtu`) back to its sender, from the
/// address it was sent to, and sends it out where it came from.
#[inline(always)]
pub fn too_big(ctx: &XdpContext, pkt: &Ipv6Packet, mtu: u16) -> Verdict {
    // SAFETY: parse() checked the header.
    let (client, vip) = unsafe { (load(&(*pkt.ip).src_addr), load(&(*pkt.ip).dst_addr)) };
    if pkt.l3_offset == 14 { reply::<14>(ctx, &client, &vip, mtu) } else { reply::<18>(ctx, &client, &vip, mtu) }
        .unwrap_or((XDP_DROP, Counter::DropTooBig))
}

/// Puts the IPv6 and ICMPv6 headers in front of the packet (behind its link header, MACs
/// swapped) and cuts it behind the quote.
#[inline(always)]
fn reply<const L2: usize>(ctx: &XdpContext, client: &Addr, vip: &Addr, mtu: u16) -> Option<Verdict> {
    // The quote must be there before anything is changed.
    ptr_at::<[u8; QUOTED]>(ctx, L2)?;
    let link = ptr_at::<[u8; L2]>(ctx, 0)?;
    // SAFETY: bounds checked by ptr_at.
    let saved = unsafe { *link };
    // Back to where it came from: the addresses swap (a tag and the EtherType stay).
    let mut swapped = saved;
    swapped[..6].copy_from_slice(&saved[6..12]);
    swapped[6..12].copy_from_slice(&saved[..6]);
    // SAFETY: plain helper call on our own context.
    if unsafe { bpf_xdp_adjust_head(ctx.ctx, -(ADDED as i32)) } != 0 {
        return None;
    }
    let link = ptr_at::<[u8; L2]>(ctx, 0)?;
    let ip = ptr_at::<[u8; IPV6_LEN]>(ctx, L2)?;
    let icmp = ptr_at::<[u8; ICMPV6_HEADER]>(ctx, L2 + IPV6_LEN)?;
    let message = ptr_at::<[u16; (ICMPV6_HEADER + QUOTED) / 2]>(ctx, L2 + IPV6_LEN)?;
    let length = (ICMPV6_HEADER + QUOTED) as u16;
    let mtu = (mtu as u32).to_be_bytes();
    // SAFETY: every pointer was bounds-checked by ptr_at after the head moved.
    unsafe {
        *link = swapped;
        let ip = &mut *ip;
        ip[0..4].copy_from_slice(&[0x60, 0, 0, 0]);
        ip[4..6].copy_from_slice(&length.to_be_bytes());
        ip[6] = ip_proto::ICMPV6;
        ip[7] = 64;
        store(&mut *(ip.as_mut_ptr().add(8) as *mut [u8; 16]), vip);
        store(&mut *(ip.as_mut_ptr().add(24) as *mut [u8; 16]), client);
        *icmp = [ICMPV6_PACKET_TOO_BIG, 0, 0, 0, mtu[0], mtu[1], mtu[2], mtu[3]];
        // The pseudo-header: both addresses, the upper-layer length and next header.
        let mut sum = length.to_be() as u32 + (ip_proto::ICMPV6 as u16).to_be() as u32;
        let (vip, client) = (vip.words(), client.words());
        let mut i = 0;
        while i < 4 {
            sum += (vip[i] & 0xffff) + (vip[i] >> 16) + (client[i] & 0xffff) + (client[i] >> 16);
            i += 1;
        }
        let mut i = 0;
        while i < (ICMPV6_HEADER + QUOTED) / 2 {
            sum += (*message)[i] as u32;
            i += 1;
        }
        let check = (!csum::fold(sum)).to_ne_bytes();
        (*icmp)[2] = check[0];
        (*icmp)[3] = check[1];
    }
    let keep = (L2 + ADDED + QUOTED) as i32;
    let len = (ctx.data_end() - ctx.data()) as i32;
    // SAFETY: helper call on our own context; shrinking only.
    if unsafe { bpf_xdp_adjust_tail(ctx.ctx, keep - len) } != 0 {
        return None;
    }
    Some((XDP_TX, Counter::ForwardIcmpTooBig))
}
