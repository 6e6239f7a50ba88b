//! Checks a DSR backend's setup from the balancer: a TCP SYN to the VIP, sent to one backend the
//! way the data plane sends client packets (inside IP in IP or GUE from the VIP's
//! `encap_source`, or to the backend's MAC for `dsr-l2`), and the backend's SYN-ACK from the VIP
//! awaited on a raw socket. A backend that answers health checks on its own address but not
//! this probe is misconfigured for DSR (the VIP not on `lo`, no decapsulator or one that does
//! not accept the balancer's source, filtering of replies from the VIP), which health checks
//! alone never show: clients of that backend time out while it looks healthy.
//!
//! The kernel answers the SYN-ACK (it matches no socket here) with a reset, so the backend
//! drops the half-open connection at once. Needs root (raw and packet sockets).
use std::io::{ErrorKind, Read as _};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use etherparse::PacketBuilder;
use futures_util::TryStreamExt as _;
use lb_common::ip_proto;
use socket2::{Domain, Protocol, SockAddr, SockAddrStorage, Socket, Type};

/// How the data plane sends a VIP's packets to a backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Path {
    /// IP in IP (`dsr-ipip`) from `source`, the VIP's `encap_source`.
    Ipip { source: IpAddr },
    /// GUE (`dsr-gue`) from `source`.
    Gue { source: IpAddr },
    /// To the backend's MAC address on `iface` (`dsr-l2`).
    L2 { iface: String },
}

/// Sends the probe SYN for `vip` to `backend` along `path` and waits up to `timeout` for the
/// SYN-ACK; returns how long it took, or what went wrong. `iface` is the balancer's interface.
pub fn probe(
    vip: SocketAddr,
    backend: IpAddr,
    path: &Path,
    iface: &str,
    timeout: Duration,
) -> Result<Duration, String> {
    // The inner source: an address of the VIP's family the backend routes back to this host:
    // encap_source when it is of that family, else the address the route towards the backend
    // leaves from, else (an IPv4 VIP over IPv6 backends) one of the interface's.
    let source = match path {
        Path::Ipip { source } | Path::Gue { source } if source.is_ipv4() == vip.is_ipv4() => *source,
        _ if backend.is_ipv4() == vip.is_ipv4() => local_address_towards(backend)?,
        _ => interface_address(iface, vip.is_ipv4())?,
    };
    let listener = Socket::new(Domain::for_address(vip), Type::RAW, Some(Protocol::TCP))
        .map_err(|e| format!("raw socket (needs root): {e}"))?;
    listener.set_read_timeout(Some(Duration::from_millis(50))).map_err(|e| e.to_string())?;
    let probe_port = 40000 + (std::process::id() % 20000) as u16;
    let sequence = 0x6c62_0000 | (std::process::id() & 0xffff);
    let syn = syn_packet(source, probe_port, vip, sequence)?;
    let started = Instant::now();
    send(&syn, vip, backend, path)?;
    let mut buffer = [0u8; 2048];
    while started.elapsed() < timeout {
        let n = match (&listener).read(&mut buffer) {
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(e) => return Err(format!("reading the answer: {e}")),
        };
        if is_answer(&buffer[..n], vip, probe_port, sequence) {
            return Ok(started.elapsed());
        }
    }
    Err(format!("no SYN-ACK from {vip} within {}", humantime::format_duration(timeout)))
}

/// The address this host sends from towards `to` (the kernel's route lookup, no packet sent).
fn local_address_towards(to: IpAddr) -> Result<IpAddr, String> {
    let any: SocketAddr = if to.is_ipv4() { "0.0.0.0:0".parse().unwrap() } else { "[::]:0".parse().unwrap() };
    let socket = UdpSocket::bind(any).map_err(|e| e.to_string())?;
    socket.connect((to, 9)).map_err(|e| format!("no route to {to}: {e}"))?;
    Ok(socket.local_addr().map_err(|e| e.to_string())?.ip())
}

/// A global address of `iface` of the given family.
fn interface_address(iface: &str, ipv4: bool) -> Result<IpAddr, String> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list`, freed below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return Err(format!("getifaddrs: {}", std::io::Error::last_os_error()));
    }
    let mut found = None;
    let mut entry = list;
    while !entry.is_null() && found.is_none() {
        // SAFETY: a node of the list getifaddrs returned; its name is NUL-terminated and its
        // address, when present, is of the size its family says.
        unsafe {
            let e = &*entry;
            let name = std::ffi::CStr::from_ptr(e.ifa_name).to_string_lossy();
            if name == iface && !e.ifa_addr.is_null() {
                let family = (*e.ifa_addr).sa_family as i32;
                if ipv4 && family == libc::AF_INET {
                    let a = &*(e.ifa_addr as *const libc::sockaddr_in);
                    found = Some(IpAddr::from(u32::from_be(a.sin_addr.s_addr).to_be_bytes()));
                } else if !ipv4 && family == libc::AF_INET6 {
                    let a = &*(e.ifa_addr as *const libc::sockaddr_in6);
                    let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
                    // A link-local address has no route back from another network.
                    if ip.segments()[0] & 0xffc0 != 0xfe80 {
                        found = Some(IpAddr::V6(ip));
                    }
                }
            }
            entry = e.ifa_next;
        }
    }
    // SAFETY: the list getifaddrs returned, freed once.
    unsafe { libc::freeifaddrs(list) };
    found.ok_or_else(|| format!("{iface} has no {} address to send the probe from", if ipv4 { "IPv4" } else { "IPv6" }))
}

/// An IP packet holding a TCP SYN from `source:port` to the VIP.
fn syn_packet(source: IpAddr, port: u16, vip: SocketAddr, sequence: u32) -> Result<Vec<u8>, String> {
    let mut packet = Vec::new();
    let builder = match (source, vip.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => PacketBuilder::ipv4(s.octets(), d.octets(), 64),
        (IpAddr::V6(s), IpAddr::V6(d)) => PacketBuilder::ipv6(s.octets(), d.octets(), 64),
        _ => return Err(format!("no address of the VIP's family to send from ({source})")),
    };
    builder.tcp(port, vip.port(), sequence, 64240).syn().write(&mut packet, &[]).map_err(|e| e.to_string())?;
    Ok(packet)
}

/// Whether `packet` (from a raw TCP socket: IPv4 with its header, IPv6 without) is the
/// SYN-ACK from the VIP to the probe.
fn is_answer(packet: &[u8], vip: SocketAddr, port: u16, sequence: u32) -> bool {
    let tcp = match vip.ip() {
        IpAddr::V4(v4) => {
            let Some(header_len) = packet.first().map(|b| (b & 0xf) as usize * 4) else { return false };
            if packet.len() < header_len + 20 || packet[12..16] != v4.octets() {
                return false;
            }
            &packet[header_len..]
        }
        // The source address of an IPv6 raw socket's packet is not in it; the ports and the
        // acknowledged sequence number are specific enough.
        IpAddr::V6(_) => packet,
    };
    if tcp.len() < 20 {
        return false;
    }
    let (from, to) = (u16::from_be_bytes([tcp[0], tcp[1]]), u16::from_be_bytes([tcp[2], tcp[3]]));
    let acked = u32::from_be_bytes([tcp[8], tcp[9], tcp[10], tcp[11]]);
    from == vip.port() && to == port && tcp[13] & 0x12 == 0x12 && acked == sequence.wrapping_add(1)
}

/// Sends the probe packet to `backend` as the data plane would.
fn send(packet: &[u8], vip: SocketAddr, backend: IpAddr, path: &Path) -> Result<(), String> {
    match path {
        Path::Ipip { source } => {
            // The kernel writes the outer header; the socket's protocol names the inner family.
            let inner = if vip.is_ipv4() { ip_proto::IPIP } else { ip_proto::IPV6 };
            let socket = Socket::new(
                Domain::for_address(SocketAddr::new(backend, 0)),
                Type::RAW,
                Some(Protocol::from(inner as i32)),
            )
            .map_err(|e| format!("raw socket (needs root): {e}"))?;
            socket.bind(&SocketAddr::new(*source, 0).into()).map_err(|e| format!("binding {source}: {e}"))?;
            socket
                .send_to(packet, &SocketAddr::new(backend, 0).into())
                .map_err(|e| format!("sending to {backend}: {e}"))?;
        }
        Path::Gue { source } => {
            let socket = UdpSocket::bind((*source, 0)).map_err(|e| format!("binding {source}: {e}"))?;
            socket
                .send_to(packet, (backend, lb_common::gue::PORT))
                .map_err(|e| format!("sending to {backend}: {e}"))?;
        }
        Path::L2 { iface } => send_to_mac(packet, vip, backend, iface)?,
    }
    Ok(())
}

/// Sends `packet` in an Ethernet frame to `backend`'s MAC address (from the neighbour table) on
/// `iface`, as `dsr-l2` does.
fn send_to_mac(packet: &[u8], vip: SocketAddr, backend: IpAddr, iface: &str) -> Result<(), String> {
    let name = std::ffi::CString::new(iface).map_err(|e| e.to_string())?;
    // SAFETY: if_nametoindex reads a NUL-terminated name.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if ifindex == 0 {
        return Err(format!("no interface {iface}"));
    }
    // The neighbour entry exists once anything talked to the backend (its health checks do).
    let _ = std::net::TcpStream::connect_timeout(&SocketAddr::new(backend, 9), Duration::from_millis(200));
    let mac = neighbour_mac(backend, ifindex)?.ok_or_else(|| {
        format!("no neighbour entry (MAC address) for {backend} on {iface}: it is not on this segment")
    })?;
    let ether_type: u16 = if vip.is_ipv4() { 0x0800 } else { 0x86dd };
    let socket = Socket::new(Domain::PACKET, Type::DGRAM, Some(Protocol::from(ether_type.to_be() as i32)))
        .map_err(|e| format!("packet socket (needs root): {e}"))?;
    let mut storage = SockAddrStorage::zeroed();
    // SAFETY: a zeroed sockaddr_ll, filled here; the storage is large enough for it, and the
    // length given is its size.
    let address = unsafe {
        let ll = storage.view_as::<libc::sockaddr_ll>();
        ll.sll_family = libc::AF_PACKET as u16;
        ll.sll_protocol = ether_type.to_be();
        ll.sll_ifindex = ifindex as i32;
        ll.sll_halen = 6;
        ll.sll_addr[..6].copy_from_slice(&mac);
        SockAddr::new(storage, std::mem::size_of::<libc::sockaddr_ll>() as u32)
    };
    socket.send_to(packet, &address).map_err(|e| format!("sending on {iface}: {e}"))?;
    Ok(())
}

/// The MAC address the neighbour table holds for `ip` on interface `ifindex`, if any.
fn neighbour_mac(ip: IpAddr, ifindex: u32) -> Result<Option<[u8; 6]>, String> {
    use rtnetlink::packet_route::neighbour::{NeighbourAddress, NeighbourAttribute};
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let (connection, handle, _) = rtnetlink::new_connection().map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        let mut entries = handle.neighbours().get().execute();
        while let Some(entry) = entries.try_next().await.map_err(|e| e.to_string())? {
            if entry.header.ifindex != ifindex {
                continue;
            }
            let mut destination = None;
            let mut mac = None;
            for attribute in &entry.attributes {
                match attribute {
                    NeighbourAttribute::Destination(NeighbourAddress::Inet(v4)) => destination = Some(IpAddr::V4(*v4)),
                    NeighbourAttribute::Destination(NeighbourAddress::Inet6(v6)) => destination = Some(IpAddr::V6(*v6)),
                    NeighbourAttribute::LinkLayerAddress(bytes) if bytes.len() == 6 => {
                        mac = Some([bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5]])
                    }
                    _ => {}
                }
            }
            if destination == Some(ip) && mac.is_some() {
                return Ok(mac);
            }
        }
        Ok(None)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_is_the_syn_ack_for_the_probe_only() {
        let vip: SocketAddr = "203.0.113.10:80".parse().unwrap();
        let answer = |from: [u8; 4], sport: u16, dport: u16, ack: u32, syn_ack: bool| {
            let mut out = Vec::new();
            let tcp = PacketBuilder::ipv4(from, [198, 51, 100, 1], 64).tcp(sport, dport, 7, 1000);
            let tcp = if syn_ack { tcp.syn().ack(ack) } else { tcp.ack(ack) };
            tcp.write(&mut out, &[]).unwrap();
            out
        };
        assert!(is_answer(&answer([203, 0, 113, 10], 80, 41000, 100, true), vip, 41000, 99));
        assert!(!is_answer(&answer([203, 0, 113, 11], 80, 41000, 100, true), vip, 41000, 99), "another source");
        assert!(!is_answer(&answer([203, 0, 113, 10], 81, 41000, 100, true), vip, 41000, 99), "another port");
        assert!(!is_answer(&answer([203, 0, 113, 10], 80, 41000, 100, false), vip, 41000, 99), "not a SYN-ACK");
        assert!(!is_answer(&answer([203, 0, 113, 10], 80, 41000, 7, true), vip, 41000, 99), "another sequence");
        assert!(!is_answer(&[0x45, 0, 0], vip, 41000, 99), "truncated");
    }

    #[test]
    fn the_probe_is_a_syn_to_the_vip_with_valid_checksums() {
        let vip: SocketAddr = "[2001:db8:a::10]:80".parse().unwrap();
        let packet = syn_packet("2001:db8:b::1".parse().unwrap(), 41000, vip, 99).unwrap();
        let sliced = etherparse::SlicedPacket::from_ip(&packet).unwrap();
        let Some(etherparse::TransportSlice::Tcp(tcp)) = sliced.transport else { panic!("not TCP") };
        assert!(tcp.syn() && !tcp.ack());
        assert_eq!((tcp.source_port(), tcp.destination_port(), tcp.sequence_number()), (41000, 80, 99));
        let Some(etherparse::NetSlice::Ipv6(ip)) = sliced.net else { panic!("not IPv6") };
        let want = tcp.to_header().calc_checksum_ipv6(&ip.header().to_header(), &[]).unwrap();
        assert_eq!(tcp.checksum(), want);
        assert!(syn_packet("198.51.100.1".parse().unwrap(), 41000, vip, 99).is_err(), "families differ");
    }
}
