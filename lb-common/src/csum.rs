//! One's-complement checksum arithmetic (RFC 1071, incremental updates per RFC 1624).
//!
//! Values are 16-bit words exactly as they sit in memory: the one's-complement sum is the same
//! whichever byte order the words are read in, so callers read and write packet words raw and
//! never swap.

/// Folds a 32-bit accumulated sum into 16 bits with end-around carry.
#[inline(always)]
pub const fn fold(sum: u32) -> u16 {
    let sum = (sum & 0xffff) + (sum >> 16);
    let sum = (sum & 0xffff) + (sum >> 16);
    sum as u16
}

/// New checksum after one 16-bit word changes from `old` to `new` (RFC 1624, eqn. 3).
#[inline(always)]
pub const fn replace16(check: u16, old: u16, new: u16) -> u16 {
    !fold((!check) as u32 + (!old) as u32 + new as u32)
}

/// New checksum after a 32-bit field (an IPv4 address) changes, as two 16-bit words.
#[inline(always)]
pub const fn replace32(check: u16, old: [u8; 4], new: [u8; 4]) -> u16 {
    let check = replace16(check, u16::from_ne_bytes([old[0], old[1]]), u16::from_ne_bytes([new[0], new[1]]));
    replace16(check, u16::from_ne_bytes([old[2], old[3]]), u16::from_ne_bytes([new[2], new[3]]))
}

/// As [`replace32`], the field as one 32-bit word read from memory: the two halves' change is
/// summed and folded once, with no byte shuffling (the hot NAT path's form).
#[inline(always)]
pub const fn replace_word(check: u16, old: u32, new: u32) -> u16 {
    let sum = (!check) as u64 + (!old) as u64 + new as u64;
    let sum = (sum & 0xffff_ffff) + (sum >> 32);
    !fold(sum as u32 + (sum >> 32) as u32)
}

/// New checksum after a 128-bit field (an IPv6 address, as four 32-bit words read from
/// memory) changes: the differences of the words are summed and folded once (one's-complement
/// sums may be taken over words of any width and folded at the end), which keeps the program's
/// code and registers small.
#[inline(always)]
pub const fn replace128(check: u16, old: &[u32; 4], new: &[u32; 4]) -> u16 {
    let mut sum = (!check) as u64;
    let mut i = 0;
    while i < 4 {
        sum += (!old[i]) as u64 + new[i] as u64;
        i += 1;
    }
    let sum = (sum & 0xffff_ffff) + (sum >> 32);
    let sum = (sum & 0xffff_ffff) + (sum >> 32);
    !fold(sum as u32)
}

/// UDP's zero means "no checksum": a computed zero is sent as 0xffff (RFC 768), and a packet
/// that had none keeps none.
#[inline(always)]
pub const fn udp_fixup(old_check: u16, new_check: u16) -> u16 {
    if old_check == 0 {
        0
    } else if new_check == 0 {
        0xffff
    } else {
        new_check
    }
}

/// Checksum of a 20-byte IPv4 header whose checksum field (bytes 10..12) is zero.
#[inline(always)]
pub fn ipv4_header(header: &[u8; 20]) -> u16 {
    let mut words = [0u16; 10];
    let mut i = 0;
    while i < 10 {
        words[i] = u16::from_ne_bytes([header[2 * i], header[2 * i + 1]]);
        i += 1;
    }
    ipv4_header_words(&words)
}

/// As [`ipv4_header`], the header as the ten 16-bit words it is written as.
#[inline(always)]
pub fn ipv4_header_words(words: &[u16; 10]) -> u16 {
    let mut sum = 0u32;
    let mut i = 0;
    while i < 10 {
        sum += words[i] as u32;
        i += 1;
    }
    !fold(sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plain RFC 1071 over a whole buffer, as the reference the incremental forms must match.
    fn full(bytes: &[u8]) -> u16 {
        let mut sum = 0u32;
        for pair in bytes.chunks(2) {
            sum += u16::from_ne_bytes([pair[0], *pair.get(1).unwrap_or(&0)]) as u32;
        }
        !fold(sum)
    }

    #[test]
    fn incremental_matches_full_recompute() {
        let mut hdr: [u8; 20] = [0x45, 0, 0, 60, 0x1c, 0x46, 0x40, 0, 64, 6, 0, 0, 192, 0, 2, 1, 203, 0, 113, 10];
        let check = ipv4_header(&hdr);
        assert_eq!(check, full(&hdr));
        let updated = replace32(check, [203, 0, 113, 10], [198, 51, 100, 11]);
        hdr[16..20].copy_from_slice(&[198, 51, 100, 11]);
        assert_eq!(updated, ipv4_header(&hdr));
        let old_ttl = u16::from_ne_bytes([hdr[8], hdr[9]]);
        hdr[8] -= 1;
        let updated = replace16(updated, old_ttl, u16::from_ne_bytes([hdr[8], hdr[9]]));
        assert_eq!(updated, ipv4_header(&hdr));
    }

    #[test]
    fn replace_word_matches_replace32() {
        // A small xorshift: many field values, the edge words (0, 0xffff) among them.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let edges = [0u32, 0xffff, 0xffff_0000, 0xffff_ffff, 1];
        for i in 0..100_000 {
            let r = next();
            let check = if i % 7 == 0 { [0u16, 0xffff][i % 2] } else { r as u16 };
            let old = if i % 5 == 0 { edges[i % edges.len()] } else { (r >> 16) as u32 };
            let new = if i % 3 == 0 { edges[(i / 3) % edges.len()] } else { (r >> 32) as u32 };
            assert_eq!(
                replace_word(check, old, new),
                replace32(check, old.to_ne_bytes(), new.to_ne_bytes()),
                "check {check:#x}, old {old:#x}, new {new:#x}"
            );
        }
    }

    #[test]
    fn replace128_matches_full_recompute() {
        let mut buf = [0u8; 36];
        buf[..16].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10]);
        buf[16..32].copy_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
        buf[32..].copy_from_slice(&[0x12, 0x34, 0xab, 0xcd]);
        let check = full(&buf);
        let new = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0x11];
        let words = |bytes: &[u8]| -> [u32; 4] {
            core::array::from_fn(|i| u32::from_ne_bytes(bytes[i * 4..i * 4 + 4].try_into().unwrap()))
        };
        let updated = replace128(check, &words(&buf[..16]), &words(&new));
        buf[..16].copy_from_slice(&new);
        assert_eq!(updated, full(&buf));
    }

    #[test]
    fn udp_zero_rules() {
        assert_eq!(udp_fixup(0, 1234), 0);
        assert_eq!(udp_fixup(5, 0), 0xffff);
        assert_eq!(udp_fixup(5, 77), 77);
    }
}
