//! The flow-sharing message: which backend each of a batch of flows was given, authenticated
//! with the cluster's shared key. One UDP datagram, at most [`MAX_FLOWS`] flows (under 1,200
//! bytes: no fragmentation on any usual MTU).
//!
//! ```text
//! "LBF1" | count: u16 | sequence: u64 | count × flow (56 bytes) | HMAC-SHA256 of all before (32)
//! flow: protocol u8 | 0 u8 | client IP (16) port (2) | VIP IP (16) port (2) | backend IP (16) port (2)
//! ```
//! Addresses are 16 bytes, IPv4 ones IPv4-mapped (`::ffff:a.b.c.d`); numbers big-endian. The
//! sequence is the sender's clock in microseconds since the Unix epoch, strictly increasing: a
//! receiver refuses a sequence not above the last it accepted from that peer, or too far from
//! its own clock, so a captured message cannot be played again.
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use hmac::{Hmac, Mac};
use sha2::Sha256;

const MAGIC: &[u8; 4] = b"LBF1";
/// Flows in one message at most.
pub const MAX_FLOWS: usize = 20;
const HEADER: usize = 14;
const FLOW: usize = 56;
const MAC_LEN: usize = 32;

/// One shared flow, by addresses (ids are each node's own).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WireFlow {
    pub protocol: u8,
    pub client: SocketAddr,
    pub vip: SocketAddr,
    pub backend: SocketAddr,
}

/// Why a message was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("malformed message")]
    Malformed,
    #[error("wrong key (authentication failed)")]
    BadMac,
}

fn mac(key: &[u8]) -> Hmac<Sha256> {
    Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length")
}

fn put(out: &mut Vec<u8>, addr: SocketAddr) {
    let v6 = match addr.ip() {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    };
    out.extend_from_slice(&v6.octets());
    out.extend_from_slice(&addr.port().to_be_bytes());
}

fn get(bytes: &[u8]) -> SocketAddr {
    let octets: [u8; 16] = bytes[..16].try_into().expect("16 bytes");
    let v6 = Ipv6Addr::from(octets);
    let ip = v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4);
    SocketAddr::new(ip, u16::from_be_bytes([bytes[16], bytes[17]]))
}

/// A message's contents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    pub sequence: u64,
    pub flows: Vec<WireFlow>,
}

/// The message carrying `flows` (at most [`MAX_FLOWS`]) as number `sequence`, signed with `key`.
pub fn encode(sequence: u64, flows: &[WireFlow], key: &[u8]) -> Vec<u8> {
    assert!(flows.len() <= MAX_FLOWS, "at most {MAX_FLOWS} flows a message");
    let mut out = Vec::with_capacity(HEADER + flows.len() * FLOW + MAC_LEN);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(flows.len() as u16).to_be_bytes());
    out.extend_from_slice(&sequence.to_be_bytes());
    for f in flows {
        out.extend_from_slice(&[f.protocol, 0]);
        put(&mut out, f.client);
        put(&mut out, f.vip);
        put(&mut out, f.backend);
    }
    let mut m = mac(key);
    m.update(&out);
    out.extend_from_slice(&m.finalize().into_bytes());
    out
}

/// A message's sequence and flows, if it is well formed and signed with `key`.
pub fn decode(message: &[u8], key: &[u8]) -> Result<Message, WireError> {
    if message.len() < HEADER + MAC_LEN || &message[..4] != MAGIC {
        return Err(WireError::Malformed);
    }
    let count = u16::from_be_bytes([message[4], message[5]]) as usize;
    if count > MAX_FLOWS || message.len() != HEADER + count * FLOW + MAC_LEN {
        return Err(WireError::Malformed);
    }
    let (body, tag) = message.split_at(message.len() - MAC_LEN);
    let mut m = mac(key);
    m.update(body);
    m.verify_slice(tag).map_err(|_| WireError::BadMac)?;
    let sequence = u64::from_be_bytes(body[6..14].try_into().expect("8 bytes"));
    let flows = body[HEADER..]
        .chunks_exact(FLOW)
        .map(|f| WireFlow { protocol: f[0], client: get(&f[2..]), vip: get(&f[20..]), backend: get(&f[38..]) })
        .collect();
    Ok(Message { sequence, flows })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(i: u16) -> WireFlow {
        WireFlow {
            protocol: 6,
            client: SocketAddr::from(([192, 0, 2, 7], 40000 + i)),
            vip: SocketAddr::from(([203, 0, 113, 10], 80)),
            backend: SocketAddr::from(([198, 51, 100, 11], 80)),
        }
    }

    #[test]
    fn a_message_carries_its_flows_and_only_the_key_opens_it() {
        let key = b"0123456789abcdef0123";
        let flows: Vec<WireFlow> = (0..MAX_FLOWS as u16).map(flow).collect();
        let message = encode(7, &flows, key);
        assert!(message.len() < 1200, "{} bytes", message.len());
        assert_eq!(decode(&message, key), Ok(Message { sequence: 7, flows }));
        assert_eq!(decode(&message, b"another key of 20 b"), Err(WireError::BadMac));
        let mut tampered = message.clone();
        tampered[10] ^= 1;
        assert_eq!(decode(&tampered, key), Err(WireError::BadMac));
        assert_eq!(decode(&message[..message.len() - 1], key), Err(WireError::Malformed));
        assert_eq!(decode(b"LBF1", key), Err(WireError::Malformed));
        let v6 = WireFlow { client: "[2001:db8::7]:40000".parse().unwrap(), ..flow(0) };
        assert_eq!(decode(&encode(8, &[v6], key), key).map(|m| m.flows), Ok(vec![v6]));
    }
}
