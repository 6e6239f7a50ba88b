//! PROXY protocol headers (HAProxy's spec, v1 text and v2 binary), written first on a backend
//! connection so the backend learns the real client address.
use std::net::{IpAddr, SocketAddr};

use crate::config::ProxyProtocol;

const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
/// Version 2, command PROXY.
const V2_PROXY: u8 = 0x21;
const V2_TCP4: u8 = 0x11;
const V2_TCP6: u8 = 0x21;

/// The header announcing a connection from `client` to `local` (the VIP), or None.
pub(crate) fn header(kind: ProxyProtocol, client: SocketAddr, local: SocketAddr) -> Option<Vec<u8>> {
    match kind {
        ProxyProtocol::None => None,
        ProxyProtocol::V1 => Some(v1(client, local)),
        ProxyProtocol::V2 => Some(v2(client, local)),
    }
}

/// Mixed families are sent as IPv6 (IPv4-mapped), since one header has one family.
fn same_family(client: SocketAddr, local: SocketAddr) -> (IpAddr, IpAddr) {
    match (client.ip(), local.ip()) {
        (IpAddr::V4(a), IpAddr::V4(b)) => (a.into(), b.into()),
        (a, b) => (to_v6(a).into(), to_v6(b).into()),
    }
}

fn to_v6(ip: IpAddr) -> std::net::Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

fn v1(client: SocketAddr, local: SocketAddr) -> Vec<u8> {
    let (src, dst) = same_family(client, local);
    let family = if src.is_ipv4() { "TCP4" } else { "TCP6" };
    format!("PROXY {family} {src} {dst} {} {}\r\n", client.port(), local.port()).into_bytes()
}

fn v2(client: SocketAddr, local: SocketAddr) -> Vec<u8> {
    let (src, dst) = same_family(client, local);
    let mut out = Vec::with_capacity(16 + 36);
    out.extend_from_slice(&V2_SIGNATURE);
    out.push(V2_PROXY);
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            out.push(V2_TCP4);
            out.extend_from_slice(&12u16.to_be_bytes());
            out.extend_from_slice(&s.octets());
            out.extend_from_slice(&d.octets());
        }
        (s, d) => {
            out.push(V2_TCP6);
            out.extend_from_slice(&36u16.to_be_bytes());
            out.extend_from_slice(&to_v6(s).octets());
            out.extend_from_slice(&to_v6(d).octets());
        }
    }
    out.extend_from_slice(&client.port().to_be_bytes());
    out.extend_from_slice(&local.port().to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_matches_the_spec_example_form() {
        let h = header(ProxyProtocol::V1, "192.0.2.1:56324".parse().unwrap(), "203.0.113.10:443".parse().unwrap());
        assert_eq!(h.unwrap(), b"PROXY TCP4 192.0.2.1 203.0.113.10 56324 443\r\n");
        let h = header(ProxyProtocol::V1, "[2001:db8::1]:1000".parse().unwrap(), "[::1]:80".parse().unwrap());
        assert_eq!(h.unwrap(), b"PROXY TCP6 2001:db8::1 ::1 1000 80\r\n");
    }

    #[test]
    fn v2_ipv4_layout() {
        let h =
            header(ProxyProtocol::V2, "192.0.2.1:256".parse().unwrap(), "203.0.113.10:80".parse().unwrap()).unwrap();
        let mut want = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
        want.extend_from_slice(&[0x21, 0x11, 0, 12, 192, 0, 2, 1, 203, 0, 113, 10, 1, 0, 0, 80]);
        assert_eq!(h, want);
    }

    #[test]
    fn v2_ipv6_length() {
        let h = header(ProxyProtocol::V2, "[2001:db8::1]:1".parse().unwrap(), "[::1]:2".parse().unwrap()).unwrap();
        assert_eq!(h.len(), 16 + 36);
        assert_eq!(&h[12..16], &[0x21, 0x21, 0, 36]);
        assert!(header(ProxyProtocol::None, "[::1]:1".parse().unwrap(), "[::1]:2".parse().unwrap()).is_none());
    }
}
