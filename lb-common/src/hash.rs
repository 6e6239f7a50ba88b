//! The flow hash: computed by the XDP program to pick a ring slot, and by userspace to explain
//! that choice. Both must give the same number, so it lives here once.
use crate::IpBytes;

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
pub fn flow_hash(
    src: &IpBytes,
    dst: &IpBytes,
    src_port: u16,
    dst_port: u16,
    protocol: u8,
    seed: u32,
) -> u32 {
    let (a, b) = halves(src);
    let (c, d) = halves(dst);
    let ports = ((src_port as u64) << 32) | ((dst_port as u64) << 16) | protocol as u64;
    mix64(a ^ mix64(b ^ mix64(c ^ mix64(d ^ mix64(ports ^ seed as u64))))) as u32
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
}
