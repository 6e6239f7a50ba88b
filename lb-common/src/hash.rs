//! The flow hash and the ring slot it picks: computed by the XDP program to place a flow, and
//! by userspace (`explain`, the proxy) to tell or repeat that choice. Both must give the same
//! number, so it lives here once.
use crate::IpBytes;
use crate::flow_key::FlowKey;

/// What the ring slot is chosen by.
pub mod hash_mode {
    /// Client address only: a client sticks to one backend.
    pub const CLIENT_IP: u8 = 0;
    /// The 5-tuple: each connection is placed on its own.
    pub const FLOW: u8 = 1;
}

/// MurmurHash3's 64-bit finalizer: cheap, and every input bit affects every output bit.
#[inline(always)]
pub const fn mix64(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^= x >> 33;
    x
}

#[inline(always)]
fn halves(addr: &IpBytes) -> (u64, u64) {
    let mut lo = [0u8; 8];
    let mut hi = [0u8; 8];
    lo.copy_from_slice(&addr[..8]);
    hi.copy_from_slice(&addr[8..]);
    (u64::from_le_bytes(lo), u64::from_le_bytes(hi))
}

/// Hash of the client address only (`hash = "ip"`).
#[inline(always)]
pub fn client_hash(src: &IpBytes, seed: u32) -> u32 {
    let (a, b) = halves(src);
    mix64(a ^ mix64(b ^ seed as u64)) as u32
}

/// Hash of the 5-tuple (`hash = "flow"`). Ports are taken as they are stored (network order).
#[inline(always)]
pub fn flow_hash(src: &IpBytes, dst: &IpBytes, src_port: u16, dst_port: u16, protocol: u8, seed: u32) -> u32 {
    let (a, b) = halves(src);
    let (c, d) = halves(dst);
    let ports = ((src_port as u64) << 32) | ((dst_port as u64) << 16) | protocol as u64;
    mix64(a ^ mix64(b ^ mix64(c ^ mix64(d ^ mix64(ports ^ seed as u64))))) as u32
}

/// The hash a VIP's ring is indexed by: of the client address (`hash_mode::CLIENT_IP`, ports
/// ignored) or of the 5-tuple (`hash_mode::FLOW`). `key` is the client → VIP flow.
#[inline(always)]
pub fn ring_hash(mode: u8, key: &FlowKey, seed: u32) -> u32 {
    if mode == hash_mode::FLOW {
        flow_hash(&key.src, &key.dst, key.src_port, key.dst_port, key.protocol, seed)
    } else {
        client_hash(&key.src, seed)
    }
}

/// The slot of a VIP's ring (of `ring_size` slots, not 0) that places the flow `key`: the data
/// plane's choice for a flow the connection table does not hold.
#[inline(always)]
pub fn ring_slot(mode: u8, key: &FlowKey, seed: u32, ring_size: u32) -> u32 {
    ring_hash(mode, key, seed) % ring_size
}

/// Hash of arbitrary bytes, for userspace (Maglev permutations). Not used on the packet path.
pub fn bytes_hash(bytes: &[u8], seed: u64) -> u64 {
    let mut h = mix64(seed ^ bytes.len() as u64);
    for chunk in bytes.chunks(8) {
        let mut word = [0u8; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        h = mix64(h ^ u64::from_le_bytes(word));
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipv4_bytes;

    #[test]
    fn client_hash_ignores_ports_and_spreads_addresses() {
        let a = client_hash(&ipv4_bytes([192, 0, 2, 1]), 0);
        let b = client_hash(&ipv4_bytes([192, 0, 2, 2]), 0);
        assert_ne!(a, b);
        assert_eq!(a, client_hash(&ipv4_bytes([192, 0, 2, 1]), 0));
        assert_ne!(a, client_hash(&ipv4_bytes([192, 0, 2, 1]), 1), "seed must matter");
    }

    #[test]
    fn flow_hash_depends_on_every_field() {
        let s = ipv4_bytes([192, 0, 2, 1]);
        let d = ipv4_bytes([203, 0, 113, 10]);
        let base = flow_hash(&s, &d, 1000, 80, 6, 7);
        assert_ne!(base, flow_hash(&d, &s, 1000, 80, 6, 7));
        assert_ne!(base, flow_hash(&s, &d, 1001, 80, 6, 7));
        assert_ne!(base, flow_hash(&s, &d, 1000, 81, 6, 7));
        assert_ne!(base, flow_hash(&s, &d, 1000, 80, 17, 7));
        assert_ne!(base, flow_hash(&s, &d, 1000, 80, 6, 8));
    }

    fn client_flow(src_port: u16) -> FlowKey {
        FlowKey::new(ipv4_bytes([192, 0, 2, 7]), ipv4_bytes([203, 0, 113, 10]), src_port.to_be(), 80u16.to_be(), 6, 4)
    }

    /// Expected values computed apart from this code (MurmurHash3's fmix64 composed as the
    /// doc comments say, in a few lines of Python), so a change of the data plane's slot choice
    /// cannot go unnoticed: it would move every flow of every running balancer.
    #[test]
    fn ring_slot_matches_known_values() {
        let key = client_flow(40000);
        assert_eq!(ring_hash(hash_mode::CLIENT_IP, &key, 0), 0x106b_1e8f);
        assert_eq!(ring_hash(hash_mode::CLIENT_IP, &key, 7), 0x3613_d675);
        assert_eq!(ring_hash(hash_mode::FLOW, &key, 0), 0x3f4a_b5aa);
        assert_eq!(ring_hash(hash_mode::FLOW, &key, 7), 0x3dec_6e19);
        assert_eq!(ring_slot(hash_mode::CLIENT_IP, &key, 0, 65537), 3620);
        assert_eq!(ring_slot(hash_mode::CLIENT_IP, &key, 7, 65537), 41058);
        assert_eq!(ring_slot(hash_mode::FLOW, &key, 0, 65537), 30304);
        assert_eq!(ring_slot(hash_mode::FLOW, &key, 7, 65537), 12333);
        assert_eq!(ring_slot(hash_mode::CLIENT_IP, &key, 7, 7), 1);
        assert_eq!(ring_slot(hash_mode::FLOW, &key, 7, 7), 4);
    }

    #[test]
    fn ring_slot_by_client_ignores_ports_and_by_flow_does_not() {
        let (a, b) = (client_flow(40000), client_flow(40001));
        let slot = |mode, key: &FlowKey| ring_slot(mode, key, 7, 65537);
        assert_eq!(slot(hash_mode::CLIENT_IP, &a), slot(hash_mode::CLIENT_IP, &b));
        assert_ne!(slot(hash_mode::FLOW, &a), slot(hash_mode::FLOW, &b));
        assert_eq!(slot(hash_mode::FLOW, &a), flow_hash(&a.src, &a.dst, a.src_port, a.dst_port, 6, 7) % 65537);
        assert_eq!(slot(hash_mode::CLIENT_IP, &a), client_hash(&a.src, 7) % 65537);
    }
}
