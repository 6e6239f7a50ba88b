//! What the forwarding paths read from, and do to, a parsed TCP/UDP packet of either family,
//! so balancing, NAT and DSR are written once for IPv4 and IPv6.
use aya_ebpf::programs::XdpContext;
use lb_common::csum::{replace_word, replace16, replace128, udp_fixup};
use lb_common::{IpBytes, family, ip_proto};

pub use crate::addr::{Addr, field};
use crate::addr::{ipv6_len, load, load4, load16, store, store4, store16, traffic_class};
use crate::forward::{decrement_hop_limit, decrement_ttl};
use crate::parse::{Ipv4Packet, TcpFlags};
use crate::parse6::Ipv6Packet;
use crate::verdict::Verdict;
use crate::{icmp, icmp6};

/// Which end of the packet a rewrite changes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum End {
    Source,
    Destination,
}

pub trait IpPacket {
    /// `family::IPV4` or `family::IPV6`.
    const FAMILY: u8;
    /// The protocol number of this family inside an outer IP header (IPIP or IPv6-in-IP).
    const ENCAPSULATED_AS: u8;
    fn l3_offset(&self) -> usize;
    fn protocol(&self) -> u8;
    /// Source and destination ports, network order.
    fn ports(&self) -> (u16, u16);
    /// The start of the L4 header (its first 8 bytes are inside the packet: parse checked).
    fn l4_header(&self) -> *const u8;
    /// Source and destination addresses in the maps' 16-byte form.
    fn addresses(&self) -> (IpBytes, IpBytes);
    fn tcp(&self) -> TcpFlags;
    /// TTL, or hop limit.
    fn ttl(&self) -> u8;
    /// TOS, or traffic class.
    fn tos(&self) -> u8;
    /// Bytes from the network header to the end of the datagram.
    fn ip_len(&self) -> u16;
    /// Replaces one end's address and port, updating every checksum incrementally.
    fn rewrite(&self, end: End, addr: &Addr, port: u16);
    fn decrement_ttl(&self);
    /// The answer to a packet too big for its next hop's MTU (`mtu`): ICMP "fragmentation
    /// needed" or ICMPv6 "packet too big", back to the sender.
    fn too_big(&self, ctx: &XdpContext, mtu: u16) -> Verdict;
}

impl IpPacket for Ipv4Packet {
    const FAMILY: u8 = family::IPV4;
    const ENCAPSULATED_AS: u8 = ip_proto::IPIP;

    #[inline(always)]
    fn l3_offset(&self) -> usize {
        self.l3_offset
    }
    #[inline(always)]
    fn protocol(&self) -> u8 {
        // SAFETY: parse() checked the header (likewise below).
        unsafe { (*self.ip).proto }
    }
    #[inline(always)]
    fn ports(&self) -> (u16, u16) {
        unsafe { (*self.src_port, *self.dst_port) }
    }
    #[inline(always)]
    fn l4_header(&self) -> *const u8 {
        self.src_port as *const u8
    }
    #[inline(always)]
    fn addresses(&self) -> (IpBytes, IpBytes) {
        unsafe {
            (
                Addr::from_words([load4(&(*self.ip).src_addr), 0, 0, 0]).0,
                Addr::from_words([load4(&(*self.ip).dst_addr), 0, 0, 0]).0,
            )
        }
    }
    #[inline(always)]
    fn tcp(&self) -> TcpFlags {
        self.tcp
    }
    #[inline(always)]
    fn ttl(&self) -> u8 {
        unsafe { (*self.ip).ttl }
    }
    #[inline(always)]
    fn tos(&self) -> u8 {
        unsafe { (*self.ip).tos }
    }
    #[inline(always)]
    fn ip_len(&self) -> u16 {
        unsafe { u16::from_be_bytes((*self.ip).tot_len) }
    }
    #[inline(always)]
    fn rewrite(&self, end: End, addr: &Addr, port: u16) {
        let addr = addr.words()[0];
        // SAFETY: parse() checked that all these fields lie inside the packet.
        unsafe {
            let ip = &mut *self.ip;
            let (addr_field, port_field) = match end {
                End::Source => (&mut ip.src_addr, self.src_port),
                End::Destination => (&mut ip.dst_addr, self.dst_port),
            };
            // Fields as 16-bit words: the header's byte arrays would be read and written a
            // byte at a time.
            let old_addr = load4(addr_field);
            let old_port = *port_field;
            store4(addr_field, addr);
            *port_field = port;
            let ip_check = replace_word(load16(&ip.check), old_addr, addr);
            store16(&mut ip.check, ip_check);

            // The L4 checksum covers the pseudo-header (addresses) and the ports.
            let old_check = *self.l4_check;
            if ip.proto == ip_proto::UDP && old_check == 0 {
                return; // UDP without a checksum stays without one.
            }
            let check = replace16(replace_word(old_check, old_addr, addr), old_port, port);
            *self.l4_check = if ip.proto == ip_proto::UDP { udp_fixup(old_check, check) } else { check };
        }
    }
    #[inline(always)]
    fn decrement_ttl(&self) {
        decrement_ttl(self.ip)
    }
    #[inline(always)]
    fn too_big(&self, ctx: &XdpContext, mtu: u16) -> Verdict {
        icmp::too_big(ctx, self, mtu)
    }
}

impl IpPacket for Ipv6Packet {
    const FAMILY: u8 = family::IPV6;
    const ENCAPSULATED_AS: u8 = ip_proto::IPV6;

    #[inline(always)]
    fn l3_offset(&self) -> usize {
        self.l3_offset
    }
    #[inline(always)]
    fn protocol(&self) -> u8 {
        self.protocol
    }
    #[inline(always)]
    fn ports(&self) -> (u16, u16) {
        // SAFETY: parse() checked the headers (likewise below).
        unsafe { (*self.src_port, *self.dst_port) }
    }
    #[inline(always)]
    fn l4_header(&self) -> *const u8 {
        self.src_port as *const u8
    }
    #[inline(always)]
    fn addresses(&self) -> (IpBytes, IpBytes) {
        unsafe { (load(&(*self.ip).src_addr).0, load(&(*self.ip).dst_addr).0) }
    }
    #[inline(always)]
    fn tcp(&self) -> TcpFlags {
        self.tcp
    }
    #[inline(always)]
    fn ttl(&self) -> u8 {
        unsafe { (*self.ip).hop_limit }
    }
    #[inline(always)]
    fn tos(&self) -> u8 {
        traffic_class(unsafe { &*self.ip })
    }
    #[inline(always)]
    fn ip_len(&self) -> u16 {
        ipv6_len(unsafe { &*self.ip })
    }
    #[inline(always)]
    fn rewrite(&self, end: End, addr: &Addr, port: u16) {
        // SAFETY: parse() checked that all these fields lie inside the packet.
        unsafe {
            let ip = &mut *self.ip;
            let (addr_field, port_field) = match end {
                End::Source => (&mut ip.src_addr, self.src_port),
                End::Destination => (&mut ip.dst_addr, self.dst_port),
            };
            let old_addr = load(addr_field);
            let old_port = *port_field;
            store(addr_field, addr);
            *port_field = port;
            // No IPv6 header checksum; the L4 one covers the pseudo-header and the ports.
            // UDP over IPv6 must carry one (RFC 8200 §8.1): a zero is left as it came.
            let old_check = *self.l4_check;
            if self.protocol == ip_proto::UDP && old_check == 0 {
                return;
            }
            let check = replace16(replace128(old_check, &old_addr.words(), &addr.words()), old_port, port);
            *self.l4_check = if self.protocol == ip_proto::UDP { udp_fixup(old_check, check) } else { check };
        }
    }
    #[inline(always)]
    fn decrement_ttl(&self) {
        decrement_hop_limit(self.ip)
    }
    /// Answered by lb_too_big6 (the packet is still as it came: nothing is rewritten before
    /// the route is known): the answer's code would not fit lb_ingress_v6's stack.
    #[inline(always)]
    fn too_big(&self, ctx: &XdpContext, mtu: u16) -> Verdict {
        icmp6::hand_on_too_big(ctx, mtu)
    }
}
