//! Seeded fuzzing of lb_ingress through BPF_PROG_TEST_RUN: random frames, frames mutated from
//! every kind of valid frame (IPv6 ones too: neighbour discovery, extension headers), and
//! random but well-formed TCP/UDP/ICMP frames aimed at the fixture's VIPs and backends, IPv4
//! ([`ipv4`]) or IPv6 ([`ipv6`]), and ICMP errors quoting such frames (from a NAT backend or a
//! router about a client's packet to the backend, from a client or a router about a VIP's
//! reply). Reproducible: the same seed gives the same
//! frames.
//!
//! What must hold for every frame: the verdict is a defined action (never XDP_ABORTED); a frame
//! that concerns no VIP and no NAT backend (judged from its raw header fields here, apart from
//! the program) is passed byte for byte as it came; a frame sent on (XDP_TX, XDP_REDIRECT) is a
//! frame etherparse reads whenever the input was one, with valid checksums whenever the input
//! had them (an ICMP message's checksum, and the IPv4 header an ICMP error quotes, included).
//! Over the whole run, exactly one verdict counter moves per frame.
use aya::programs::Xdp;
use lb_common::stats::Counter;
use lb_common::{ip_proto, program_names};
use lb_ctl::dataplane::Dataplane;
use lb_ctl::dataplane::aya::AyaDataplane;
use lb_ctl::dataplane::load::program;

use std::net::IpAddr;

use crate::fixture::{B_FAR, CLIENT, CLIENT2, Vip};
use crate::fixture6::{CLIENT6, Frame6, Vip6};
use crate::golden::{hex, is_verdict};
use crate::packets::{Frame, L4, icmp4, icmp6, verify_checksums};
use crate::testrun::{action_name, run_xdp};

/// BPF_PROG_TEST_RUN refuses XDP frames shorter than an Ethernet header.
const ETH_LEN: usize = 14;

/// xorshift64*: small, deterministic, good enough to spread bytes.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

/// What a run saw.
#[derive(Debug, Default)]
pub struct Report {
    pub frames: u64,
    /// By XDP action (0..=4).
    pub actions: [u64; 5],
    /// Frames that concerned no VIP (all passed untouched).
    pub not_ours: u64,
}

/// What a run aims at: the VIPs and NAT backends of the balancer's configuration, and valid
/// frames of every kind to mutate.
pub struct Targets {
    /// (address, port, protocol) of each VIP.
    vips: Vec<(IpAddr, u16, u8)>,
    /// (address, port, protocol) of each NAT backend.
    nat_backends: Vec<(IpAddr, u16, u8)>,
    seeds: Vec<Vec<u8>>,
}

/// The targets of the IPv4 fixture (`fixture::vips`).
pub fn ipv4(vips: &[Vip]) -> Targets {
    let nat = lb_common::vip::forwarding::NAT;
    Targets {
        vips: vips.iter().map(|v| (IpAddr::from(v.addr), v.port, v.protocol)).collect(),
        nat_backends: vips
            .iter()
            .filter(|v| v.forwarding == nat)
            .flat_map(|v| v.backends.iter().map(move |(_, a, p)| (IpAddr::from(*a), *p, v.protocol)))
            .collect(),
        seeds: seeds(vips),
    }
}

/// The targets of the IPv6 fixture (`fixture6::vips6`, which has an IPv4 VIP over IPv6 too).
pub fn ipv6(vips: &[Vip6]) -> Targets {
    let nat = lb_common::vip::forwarding::NAT;
    let mut seeds = ipv6_seeds();
    for v in vips.iter().filter(|v| v.addr.is_ipv6()) {
        let IpAddr::V6(addr) = v.addr else { continue };
        let f = if v.protocol == ip_proto::UDP {
            Frame6::udp(CLIENT6, 5000, addr.octets(), v.port)
        } else {
            Frame6::tcp(CLIENT6, 40000, addr.octets(), v.port)
        };
        seeds.push(f.bytes());
        seeds.push(f.with(|f| f.l4 = if f.l4 == L4::Udp { L4::Udp } else { L4::TcpAck }).bytes());
    }
    Targets {
        vips: vips.iter().map(|v| (v.addr, v.port, v.protocol)).collect(),
        nat_backends: vips
            .iter()
            .filter(|v| v.forwarding == nat)
            .flat_map(|v| v.backends.iter().map(move |(_, a, p)| (*a, *p, v.protocol)))
            .collect(),
        seeds,
    }
}

impl Targets {
    /// Whether the balancer may act on this frame, from its raw bytes: an IP packet (behind at
    /// most one 802.1Q tag) to a VIP's address, port and protocol, from a NAT backend's, an
    /// ICMP message to a VIP's address, or an ICMP error quoting a packet to a NAT backend's
    /// address (which goes to the client as if about the packet it sent); for IPv6 (whose L4
    /// header may sit behind extension headers) anything to a VIP's address or from a NAT
    /// backend's, and an ICMPv6 message quoting a packet to a NAT backend's address. Anything
    /// else must pass untouched.
    fn may_concern(&self, frame: &[u8]) -> bool {
        let mut l3 = 14;
        let ether_type = |at: usize| frame.get(at..at + 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
        let mut kind = ether_type(12);
        if kind == Some(0x8100) {
            kind = ether_type(16);
            l3 = 18;
        }
        if kind == Some(0x86dd) && frame.len() >= l3 + 40 {
            let ip = &frame[l3..];
            let src = IpAddr::from(<[u8; 16]>::try_from(&ip[8..24]).unwrap());
            let dst = IpAddr::from(<[u8; 16]>::try_from(&ip[24..40]).unwrap());
            // An ICMPv6 message's quote: its destination address, 8 + 24 bytes in.
            let quoted_dst = (ip[6] == ip_proto::ICMPV6)
                .then(|| ip.get(40 + 8 + 24..40 + 8 + 40))
                .flatten()
                .map(|a| IpAddr::from(<[u8; 16]>::try_from(a).unwrap()));
            return self.vips.iter().any(|(a, _, _)| *a == dst)
                || self.nat_backends.iter().any(|(a, _, _)| *a == src || Some(*a) == quoted_dst);
        }
        if kind != Some(0x0800) || frame.len() < l3 + 20 {
            return false;
        }
        let ip = &frame[l3..];
        let src = IpAddr::from([ip[12], ip[13], ip[14], ip[15]]);
        let dst = IpAddr::from([ip[16], ip[17], ip[18], ip[19]]);
        let proto = ip[9];
        let header_len = (ip[0] & 0xf) as usize * 4;
        if proto == ip_proto::ICMP {
            // An error's quote: the quoted IPv4 header's destination, 8 + 16 bytes in.
            let quoted_dst = ip
                .get(header_len.max(20) + 8 + 16..header_len.max(20) + 8 + 20)
                .map(|a| IpAddr::from(<[u8; 4]>::try_from(a).unwrap()));
            return self.vips.iter().any(|(a, _, _)| *a == dst)
                || self.nat_backends.iter().any(|(a, _, _)| Some(*a) == quoted_dst);
        }
        let Some(ports) = ip.get(header_len.max(20)..header_len.max(20) + 4) else {
            return false;
        };
        let (sport, dport) = (u16::from_be_bytes([ports[0], ports[1]]), u16::from_be_bytes([ports[2], ports[3]]));
        self.vips.contains(&(dst, dport, proto)) || self.nat_backends.contains(&(src, sport, proto))
    }
}

/// Valid frames of every kind the balancer handles, to mutate.
fn seeds(vips: &[Vip]) -> Vec<Vec<u8>> {
    let web = vips[0].addr;
    vec![
        Frame::tcp(CLIENT, 40000, web, 80).bytes(),
        Frame::tcp(CLIENT, 40000, web, 80)
            .with(|f| {
                f.l4 = L4::TcpAck;
                f.payload = b"GET /".to_vec()
            })
            .bytes(),
        Frame::tcp(CLIENT, 40000, web, 80).with(|f| f.vlan = Some(9)).bytes(),
        Frame::udp(CLIENT, 5000, web, 53).bytes(),
        Frame::tcp(CLIENT, 42000, vips[2].addr, 80).bytes(),
        Frame::tcp(crate::fixture::B1, 8080, CLIENT, 40000).with(|f| f.l4 = L4::TcpAck).bytes(),
        Frame::tcp(B_FAR, 8080, CLIENT2, 40000).with(|f| f.l4 = L4::TcpAck).bytes(),
        Frame::tcp(CLIENT, 40000, [192, 0, 2, 1], 22).bytes(),
    ]
    .into_iter()
    .chain(ipv6_seeds())
    .collect()
}

/// IPv6 frames: TCP and UDP to an address that is no VIP's (all must pass untouched, neighbour
/// discovery and router traffic included), ND neighbour solicitation and router
/// advertisement, and TCP behind hop-by-hop and fragment headers.
fn ipv6_seeds() -> Vec<Vec<u8>> {
    use etherparse::PacketBuilder;
    let client = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7];
    let vip = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10];
    let base = || PacketBuilder::ethernet2([2, 0, 0, 0, 0, 7], [2, 0, 0, 0, 0, 1]).ipv6(client, vip, 64);
    let mut tcp = Vec::new();
    base().tcp(40000, 80, 1, 64000).syn().write(&mut tcp, &[]).unwrap();
    let mut udp = Vec::new();
    base().udp(5000, 53).write(&mut udp, b"query").unwrap();
    let mut solicit = Vec::new();
    // Neighbour solicitation for the VIP (type 135), and a router advertisement (134).
    base().icmpv6_raw(135, 0, [0; 4]).write(&mut solicit, &vip).unwrap();
    let mut advert = Vec::new();
    base().icmpv6_raw(134, 0, [64, 0, 7, 8]).write(&mut advert, &[0; 8]).unwrap();
    // The TCP frame behind an 8-byte extension header of type `kind` (0 hop-by-hop, 44 fragment).
    let behind = |kind: u8| {
        let mut f = tcp.clone();
        let next = f[14 + 6];
        f[14 + 6] = kind;
        let len = u16::from_be_bytes([f[18], f[19]]) + 8;
        f[18..20].copy_from_slice(&len.to_be_bytes());
        f.splice(54..54, [next, 0, 0, 0, 0, 0, 0, 0]);
        f
    };
    vec![tcp.clone(), udp, solicit, advert, behind(0), behind(44)]
}

/// One frame: random bytes, a mutated seed, or a random well-formed frame aimed at a target.
fn frame(rng: &mut Rng, targets: &Targets) -> Vec<u8> {
    let seeds = &targets.seeds;
    match rng.below(10) {
        0 => {
            let mut f: Vec<u8> = (0..ETH_LEN + rng.below(160)).map(|_| rng.next_u64() as u8).collect();
            match rng.below(3) {
                0 => f[12..14].copy_from_slice(&[0x08, 0x00]),
                1 => f[12..14].copy_from_slice(&[0x86, 0xdd]),
                _ => {}
            }
            f
        }
        1..=5 => {
            let seed = seeds[rng.below(seeds.len())].clone();
            mutate(rng, seed)
        }
        _ => {
            let (addr, port, proto) =
                if rng.below(3) == 0 { rng.pick(&targets.nat_backends) } else { rng.pick(&targets.vips) };
            let from_backend = targets.nat_backends.contains(&(addr, port, proto)) && rng.below(2) == 0;
            // Now and then a VIP's reply to a client, as the balancer sent it on, for the error
            // the client (or a router) sends back about it (below).
            let vip_reply = !targets.nat_backends.contains(&(addr, port, proto)) && rng.below(6) == 0;
            let from_target = from_backend || vip_reply;
            // Half the frames come from a few clients and ports, so that later frames (a VIP's
            // reply and the error about it, a backend's reply) meet the flows earlier ones made.
            let regular = rng.below(2) == 0;
            let peer_host = if regular { 7 + rng.below(2) as u8 } else { 1 + rng.below(250) as u8 };
            let peer_port = if regular { 40000 + rng.below(4) as u16 } else { 1024 + rng.below(60000) as u16 };
            let ttl = rng.pick(&[1, 2, 64, 255]);
            let ack = proto == ip_proto::TCP && rng.below(2) == 0;
            let vlan = (rng.below(4) == 0).then(|| 1 + rng.below(4000) as u16);
            let payload: Vec<u8> = (0..rng.pick(&[0, 1, 64, 1400, 1472])).map(|_| rng.next_u64() as u8).collect();
            let l4 = match (proto == ip_proto::UDP, ack) {
                (true, _) => L4::Udp,
                (false, true) => L4::TcpAck,
                (false, false) => L4::TcpSyn,
            };
            let bytes = match addr {
                IpAddr::V4(addr) => {
                    let peer = [192, 0, 2, peer_host];
                    let (src, sport, dst, dport) = if from_target {
                        (addr.octets(), port, peer, peer_port)
                    } else {
                        (peer, peer_port, addr.octets(), port)
                    };
                    Frame { ttl, l4, vlan, payload, ..Frame::tcp(src, sport, dst, dport) }.bytes()
                }
                IpAddr::V6(addr) => {
                    let mut peer = CLIENT6;
                    peer[15] = peer_host;
                    let (src, sport, dst, dport) = if from_target {
                        (addr.octets(), port, peer, peer_port)
                    } else {
                        (peer, peer_port, addr.octets(), port)
                    };
                    Frame6 { ttl, l4, vlan, payload, ..Frame6::tcp(src, sport, dst, dport) }.bytes()
                }
            };
            // A client's packet to a NAT backend, as the balancer sent it on: now and then the
            // error a backend or a router sends back about it.
            let about_backend = !from_backend && targets.nat_backends.contains(&(addr, port, proto));
            let bytes = if vip_reply || (about_backend && rng.below(3) == 0) {
                icmp_error_about(rng, &bytes, vlan)
            } else {
                bytes
            };
            if rng.below(4) == 0 { mutate(rng, bytes) } else { bytes }
        }
    }
}

/// An ICMP (or ICMPv6) "port unreachable" about `sent` (an Ethernet frame, tagged or not, of an
/// IP packet: a client's to a backend, or a VIP's reply to a client), from its destination or
/// from a router, back to its source, quoting 28 or 48 bytes of it or all of it.
fn icmp_error_about(rng: &mut Rng, sent: &[u8], vlan: Option<u16>) -> Vec<u8> {
    let l3 = if vlan.is_some() { 18 } else { 14 };
    let ip = &sent[l3..];
    let quote = &ip[..rng.pick(&[28, 48, ip.len()]).min(ip.len())];
    let ttl = rng.pick(&[1, 64]);
    let by_router = rng.below(2) == 0;
    let macs = ([2, 0, 0, 0, 0, 0x11], [2, 0, 0, 0, 0, 1]);
    if ip[0] >> 4 == 4 {
        let (src, dst) = (<[u8; 4]>::try_from(&ip[12..16]).unwrap(), <[u8; 4]>::try_from(&ip[16..20]).unwrap());
        let from = if by_router { [198, 51, 100, 254] } else { dst };
        let kind = etherparse::Icmpv4Type::DestinationUnreachable(etherparse::icmpv4::DestUnreachableHeader::Port);
        icmp4(macs, (from, src, ttl), kind, quote)
    } else {
        let (src, dst) = (<[u8; 16]>::try_from(&ip[8..24]).unwrap(), <[u8; 16]>::try_from(&ip[24..40]).unwrap());
        let mut from = dst;
        if by_router {
            from[15] = 0xfd;
        }
        let kind = etherparse::Icmpv6Type::DestinationUnreachable(etherparse::icmpv6::DestUnreachableCode::Port);
        icmp6(macs, from, src, ttl, kind, quote)
    }
}

fn mutate(rng: &mut Rng, mut frame: Vec<u8>) -> Vec<u8> {
    match rng.below(5) {
        0 => frame.truncate(ETH_LEN + rng.below(frame.len() + 1 - ETH_LEN)),
        1 => {
            for _ in 0..1 + rng.below(4) {
                let at = rng.below(frame.len());
                frame[at] ^= 1 << rng.below(8);
            }
        }
        2 => frame.extend((0..rng.below(64)).map(|_| rng.next_u64() as u8)),
        3 => {
            // A header byte (Ethernet type, IPv4, L4) set at random.
            let at = 12 + rng.below(46);
            if at < frame.len() {
                frame[at] = rng.next_u64() as u8;
            }
        }
        _ => {
            let at = 14 + rng.below(24);
            if at + 1 < frame.len() {
                frame[at] = 0xff;
                frame[at + 1] = 0xff;
            }
        }
    }
    frame
}

/// Runs `frames` frames from `seed` through the balancer's lb_ingress (configured with the
/// VIPs of `targets`), as received on `ingress`. The first violation ends the run with a
/// reproducible description.
pub fn run(dp: &mut AyaDataplane, targets: &Targets, ingress: u32, frames: u64, seed: u64) -> Result<Report, String> {
    let mut rng = Rng::new(seed);
    let verdicts = |dp: &AyaDataplane| -> u64 {
        dp.counters().unwrap().into_iter().filter(|(c, _)| is_verdict(*c)).map(|(_, n)| n).sum()
    };
    let before = verdicts(dp);
    let prog: &Xdp = program(dp.ebpf_mut(), program_names::INGRESS).map_err(|e| e.to_string())?;
    let mut report = Report::default();
    for n in 0..frames {
        let input = frame(&mut rng, targets);
        let result = run_xdp(prog, &input, ingress);
        let at = || format!("seed {seed:#x}, frame {n}: {}", hex(&input));
        if !(1..=4).contains(&result.action) {
            return Err(format!("verdict {} ({}) at {}", result.action, action_name(result.action), at()));
        }
        report.actions[result.action as usize] += 1;
        if !targets.may_concern(&input) {
            report.not_ours += 1;
            if result.action != 2 || result.output != input {
                return Err(format!(
                    "frame for no VIP not passed untouched ({}) at {}",
                    action_name(result.action),
                    at()
                ));
            }
        }
        if result.action == 3 || result.action == 4 {
            if etherparse::SlicedPacket::from_ethernet(&input).is_ok()
                && let Err(e) = etherparse::SlicedPacket::from_ethernet(&result.output)
            {
                return Err(format!("sent frame does not parse ({e}) at {}", at()));
            }
            if verify_checksums(&input).is_ok()
                && let Err(e) = verify_checksums(&result.output)
            {
                return Err(format!("sent frame's checksums wrong ({e}) at {}", at()));
            }
        }
        report.frames += 1;
    }
    let counted = verdicts(dp) - before;
    if counted != report.frames {
        return Err(format!("{counted} verdicts counted for {} frames (seed {seed:#x})", report.frames));
    }
    Ok(report)
}

/// The counters a run leaves, for a summary line.
pub fn summary(dp: &AyaDataplane) -> String {
    let counters = dp.counters().unwrap();
    counters
        .iter()
        .filter(|(c, n)| *n > 0 && *c != Counter::NexthopLookup)
        .map(|(c, n)| format!("{} {n}", c.name()))
        .collect::<Vec<_>>()
        .join(", ")
}
