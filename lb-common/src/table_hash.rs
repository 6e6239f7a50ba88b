//! The hash that places a flow in the connection tables (which set of FLOWS and REVERSE_FLOWS
//! it lives in, and part of its way's check word), and what DSR derives the GUE source port and
//! the IPv6 flow label from.
//!
//! A table keeps the hash it was made with for as long as its flows live: a start on pinned
//! tables reads the kind and seed from the pinned CONFIG, so flows recorded under an older
//! build's hash are still found. Only a table made anew takes [`kind::NEWEST`].
use crate::flow_key::FlowKey;
use crate::hash::{flow_hash, mix64};

/// Which function a table hashes with (`DataplaneConfig::table_hash_kind`).
pub mod kind {
    /// The 5-tuple flow hash, five chained `mix64` rounds: the tables of builds before layout
    /// version 4 (their CONFIG reads 0 here).
    pub const CHAINED: u8 = 0;
    /// The key's ten 32-bit halves, each pair added to seeded constants and multiplied, the
    /// five products summed and mixed once ([`super::paired`]). The same spread as `CHAINED`
    /// from about a third of its dependent steps: the five multiplications run side by side.
    pub const PAIRED: u8 = 1;
    /// What a new table is made with.
    #[cfg(not(feature = "layout-v1-test"))]
    pub const NEWEST: u8 = PAIRED;
    /// What a new table is made with by the test-only build of layout version 1, which stands
    /// for the builds before `PAIRED`: the upgrade from it must keep its tables' hash.
    #[cfg(feature = "layout-v1-test")]
    pub const NEWEST: u8 = CHAINED;
}

/// A table's hash: its function and its seed (random for each new table, so nobody outside
/// can aim flows at one set to evict another).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableHash {
    pub kind: u8,
    pub seed: u32,
}

impl TableHash {
    /// The hash of `key` in this table. An unknown kind hashes as [`kind::PAIRED`]: a build
    /// refuses CONFIG of a newer layout, so none reaches here.
    #[inline(always)]
    pub fn of(&self, key: &FlowKey) -> u32 {
        if self.kind == kind::CHAINED {
            flow_hash(&key.src, &key.dst, key.src_port, key.dst_port, key.protocol, self.seed)
        } else {
            paired(key, self.seed)
        }
    }
}

/// Fixed odd-looking constants (fractional digits of well-known irrationals and primes used by
/// other hashes), one per key word; the seed is mixed into each.
const PAIR_KEYS: [u64; 5] =
    [0x9e37_79b9_7f4a_7c15, 0xc2b2_ae3d_27d4_eb4f, 0x1656_67b1_9e37_79f9, 0x27d4_eb2f_1656_67c5, 0x85eb_ca77_c2b2_ae63];

/// [`kind::PAIRED`]: NH, the inner hash of UMAC, over the key's five words (each word's two
/// halves, added to its key's halves modulo 2^32, are multiplied into 64 bits), then one
/// `mix64` so that every bit of the sum reaches the low bits that pick the set. Unlike a
/// chain, the five products do not wait for each other. Without the seed, which pairs of keys
/// sum alike cannot be told: both halves of every product move with it.
#[inline(always)]
pub fn paired(key: &FlowKey, seed: u32) -> u32 {
    let seed = ((seed as u64) << 32) | seed as u64;
    let words = key.words();
    let mut sum = 0u64;
    for (word, pair_key) in words.iter().zip(PAIR_KEYS) {
        let pair_key = pair_key ^ seed;
        let low = (*word as u32).wrapping_add(pair_key as u32);
        let high = ((*word >> 32) as u32).wrapping_add((pair_key >> 32) as u32);
        sum = sum.wrapping_add(low as u64 * high as u64);
    }
    mix64(sum) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipv4_bytes;
    use std::vec;

    fn key(src: [u8; 4], port: u16) -> FlowKey {
        FlowKey::new(ipv4_bytes(src), ipv4_bytes([203, 0, 113, 10]), port.to_be(), 80u16.to_be(), 6, 4)
    }

    #[test]
    fn chained_is_the_flow_hash_older_tables_were_made_with() {
        let k = key([192, 0, 2, 7], 1000);
        let hash = TableHash { kind: kind::CHAINED, seed: 9 };
        assert_eq!(hash.of(&k), flow_hash(&k.src, &k.dst, k.src_port, k.dst_port, k.protocol, 9));
    }

    #[test]
    fn paired_depends_on_every_field_and_the_seed() {
        let hash = TableHash { kind: kind::PAIRED, seed: 9 };
        let base = key([192, 0, 2, 7], 1000);
        let h = hash.of(&base);
        let mut others = vec![key([192, 0, 2, 8], 1000), key([192, 0, 2, 7], 1001)];
        others.push(FlowKey { dst: ipv4_bytes([203, 0, 113, 11]), ..base });
        others.push(FlowKey { dst_port: 81u16.to_be(), ..base });
        others.push(FlowKey { protocol: 17, ..base });
        let mut v6 = [0u8; 16];
        v6[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        v6[15] = 7;
        others.push(FlowKey { src: v6, family: 6, ..base });
        for other in &others {
            assert_ne!(hash.of(other), h, "{other:?}");
        }
        assert_ne!(TableHash { seed: 10, ..hash }.of(&base), h, "the seed must matter");
        assert_ne!(TableHash { kind: kind::CHAINED, ..hash }.of(&base), h);
    }

    /// Clients of one network, each on a few ports, must spread over the sets as evenly as
    /// chance would (the sets are the hash's low bits): a chi-squared test at a loose bound,
    /// for several seeds and set counts.
    #[test]
    fn paired_spreads_neighbouring_flows_over_the_sets() {
        for seed in [0, 1, 0xdead_beef] {
            for sets in [64u32, 1024] {
                let mut counts = vec![0u32; sets as usize];
                let flows = sets * 16;
                for i in 0..flows {
                    let k = key([10, 0, (i >> 10) as u8, (i >> 2) as u8], 40000 + (i & 3) as u16);
                    counts[(paired(&k, seed) & (sets - 1)) as usize] += 1;
                }
                let expected = flows as f64 / sets as f64;
                let chi2: f64 = counts.iter().map(|&c| (c as f64 - expected).powi(2) / expected).sum();
                // Degrees of freedom sets - 1; its mean is sets - 1 and its spread about
                // sqrt(2 * sets): six spreads above the mean fails only a broken hash.
                let bound = (sets - 1) as f64 + 6.0 * (2.0 * sets as f64).sqrt();
                assert!(chi2 < bound, "seed {seed:#x}, {sets} sets: chi2 {chi2:.0} over {bound:.0}");
            }
        }
    }
}
