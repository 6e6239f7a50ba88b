//! ICMP "fragmentation needed" for packets that do not fit the next hop's MTU: DSR packets once
//! the outer header is added, NAT packets whose backend (or client) path has a smaller MTU.
//! Without it full-size segments would vanish: the answer makes the sender lower its path MTU
//! (RFC 1191), as it would for any router on the way.
use aya_ebpf::bindings::xdp_action::{XDP_DROP, XDP_TX};
use aya_ebpf::helpers::generated::bpf_xdp_adjust_tail;
use aya_ebpf::programs::XdpContext;
use lb_common::csum;
use lb_common::stats::Counter;
use lb_ebpf::packet::{IPV4_LEN, ptr_at};

use crate::parse::Ipv4Packet;
use crate::verdict::Verdict;

const IPPROTO_ICMP: u8 = 1;
/// Destination unreachable / fragmentation needed and DF set.
const ICMP_DEST_UNREACH: u8 = 3;
const ICMP_FRAG_NEEDED: u8 = 4;
/// The quoted part of the offending packet: its IPv4 header and 8 bytes of its payload.
const QUOTED: usize = IPV4_LEN + 8;
/// ICMP header + quote.
const ICMP_LEN: usize = 8 + QUOTED;
/// Don't-fragment flag in the IPv4 flags/offset field (host order).
const DF: u16 = 0x4000;

/// Turns the packet into an ICMP "fragmentation needed" (next-hop MTU `mtu`) back to its
/// sender, from the address it was sent to, and sends it out where it came from. Packets
/// without DF may be fragmented by the sender's rules, not ours: they are dropped.
#[inline(always)]
pub fn too_big(ctx: &XdpContext, pkt: &Ipv4Packet, mtu: u16) -> Verdict {
    // SAFETY: parse() checked the header.
    let (frags, src, dst) = unsafe {
        let ip = &*pkt.ip;
        (u16::from_be_bytes(ip.frags), ip.src_addr, ip.dst_addr)
    };
    if frags & DF == 0 {
        return (XDP_DROP, Counter::DropTooBig);
    }
    if pkt.l3_offset == 14 { reply::<14>(ctx, src, dst, mtu) } else { reply::<18>(ctx, src, dst, mtu) }
        .unwrap_or((XDP_DROP, Counter::DropTooBig))
}

/// Builds the reply in place (the BPF stack has no room for a copy): the quote moves behind
/// where the ICMP header goes, then the new IPv4 and ICMP headers are written over the old
/// ones and the frame is cut to size.
#[inline(always)]
fn reply<const L2: usize>(ctx: &XdpContext, client: [u8; 4], vip: [u8; 4], mtu: u16) -> Option<Verdict> {
    let quote_from = ptr_at::<[u8; QUOTED]>(ctx, L2)?;
    let quote_to = ptr_at::<[u8; QUOTED]>(ctx, L2 + IPV4_LEN + 8)?;
    let icmp_header = ptr_at::<[u8; 8]>(ctx, L2 + IPV4_LEN)?;
    let icmp_words = ptr_at::<[u16; ICMP_LEN / 2]>(ctx, L2 + IPV4_LEN)?;
    let ip = ptr_at::<[u8; IPV4_LEN]>(ctx, L2)?;
    let macs = ptr_at::<[u8; 12]>(ctx, 0)?;
    let mtu = mtu.to_be_bytes();
    // SAFETY: every pointer was bounds-checked by ptr_at; the quote's source and destination
    // do not overlap (bytes L2..L2+28 and L2+28..L2+56).
    unsafe {
        *quote_to = *quote_from;
        *icmp_header = [ICMP_DEST_UNREACH, ICMP_FRAG_NEEDED, 0, 0, 0, 0, mtu[0], mtu[1]];
        let mut sum = 0u32;
        let mut i = 0;
        while i < ICMP_LEN / 2 {
            sum += (*icmp_words)[i] as u32;
            i += 1;
        }
        let check = (!csum::fold(sum)).to_ne_bytes();
        (*icmp_header)[2] = check[0];
        (*icmp_header)[3] = check[1];

        let total = ((IPV4_LEN + ICMP_LEN) as u16).to_be_bytes();
        let mut header = [
            0x45,
            0,
            total[0],
            total[1],
            0,
            0,
            0,
            0,
            64,
            IPPROTO_ICMP,
            0,
            0,
            vip[0],
            vip[1],
            vip[2],
            vip[3],
            client[0],
            client[1],
            client[2],
            client[3],
        ];
        let check = csum::ipv4_header(&header).to_ne_bytes();
        header[10] = check[0];
        header[11] = check[1];
        *ip = header;

        // Back to where it came from: the addresses swap.
        let old = *macs;
        let m = &mut *macs;
        m[..6].copy_from_slice(&old[6..12]);
        m[6..12].copy_from_slice(&old[..6]);
    }
    let keep = (L2 + IPV4_LEN + ICMP_LEN) as i32;
    let len = (ctx.data_end() - ctx.data()) as i32;
    // SAFETY: helper call on our own context; shrinking only.
    if unsafe { bpf_xdp_adjust_tail(ctx.ctx, keep - len) } != 0 {
        return None;
    }
    Some((XDP_TX, Counter::ForwardIcmpTooBig))
}
