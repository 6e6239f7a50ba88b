//! Weighted Maglev consistent hashing (Eisenbud et al., NSDI 2016), computed in userspace:
//! the XDP program and lb-proxy only index the table it returns.
use std::vec;
use std::vec::Vec;

use crate::backend::BACKEND_NONE;
use crate::hash::bytes_hash;

/// One ring member: a stable id (what the slots hold), a weight, and the bytes that place it
/// (its address and port), so a backend keeps its slots whatever else changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingMember<'a> {
    pub id: u32,
    pub weight: u32,
    pub key: &'a [u8],
}

const OFFSET_SEED: u64 = 0x6d61_676c_6576_6f66; // "maglevof"
const SKIP_SEED: u64 = 0x6d61_676c_6576_736b; // "maglevsk"

/// Whether `n` is prime (ring sizes must be).
pub fn is_prime(n: u32) -> bool {
    if n < 2 {
        return false;
    }
    let mut d = 2u64;
    while d * d <= n as u64 {
        if (n as u64).is_multiple_of(d) {
            return false;
        }
        d += 1;
    }
    true
}

/// Builds a ring of `size` slots (a prime) holding member ids; which member a slot holds
/// depends only on the members' keys and weights. Members with weight 0 get no slots (drained);
/// with no positive weight at all every slot is [`BACKEND_NONE`].
///
/// Weights: members take turns filling their next preferred empty slot; each round a member
/// earns `weight` credit and takes one turn per `max_weight` of credit, so slot shares follow
/// the weights while keeping Maglev's minimal disruption.
pub fn build_ring(members: &[RingMember<'_>], size: u32) -> Vec<u32> {
    assert!(is_prime(size), "Maglev ring size must be prime, got {size}");
    let size_u = size as usize;
    let mut ring = vec![BACKEND_NONE; size_u];
    // Members take their turns in the order of their keys: the ring then depends on the set
    // of members alone, not on the order they were listed or their ids, so every node given
    // the same backends builds the same ring (a flow that ECMP moves to another balancer
    // reaches the same backend).
    let mut live: Vec<&RingMember<'_>> = members.iter().filter(|m| m.weight > 0).collect();
    live.sort_by(|a, b| a.key.cmp(b.key));
    let Some(max_weight) = live.iter().map(|m| m.weight as u64).max() else {
        return ring;
    };

    // (offset, skip) define each member's permutation: slot j = (offset + j * skip) mod size.
    let perms: Vec<(u64, u64)> = live
        .iter()
        .map(|m| {
            let offset = bytes_hash(m.key, OFFSET_SEED) % size as u64;
            let skip = bytes_hash(m.key, SKIP_SEED) % (size as u64 - 1) + 1;
            (offset, skip)
        })
        .collect();
    let mut next = vec![0u64; live.len()];
    let mut credit = vec![0u64; live.len()];
    let mut filled = 0usize;

    while filled < size_u {
        for (i, member) in live.iter().enumerate() {
            credit[i] += member.weight as u64;
            while credit[i] >= max_weight {
                credit[i] -= max_weight;
                let (offset, skip) = perms[i];
                let slot = loop {
                    let slot = ((offset + next[i] * skip) % size as u64) as usize;
                    next[i] += 1;
                    if ring[slot] == BACKEND_NONE {
                        break slot;
                    }
                };
                ring[slot] = member.id;
                filled += 1;
                if filled == size_u {
                    return ring;
                }
            }
        }
    }
    ring
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::format;
    use std::println;
    use std::string::String;

    fn keys(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("198.51.100.{}:{}", i % 250, 8000 + i)).collect()
    }

    fn members<'a>(keys: &'a [String], weights: &[u32]) -> Vec<RingMember<'a>> {
        keys.iter()
            .zip(weights)
            .enumerate()
            .map(|(i, (k, w))| RingMember { id: i as u32, weight: *w, key: k.as_bytes() })
            .collect()
    }

    fn shares(ring: &[u32]) -> HashMap<u32, usize> {
        let mut out = HashMap::new();
        for id in ring {
            *out.entry(*id).or_default() += 1;
        }
        out
    }

    #[test]
    fn every_slot_filled() {
        let k = keys(7);
        let ring = build_ring(&members(&k, &[1; 7]), 1031);
        assert!(ring.iter().all(|&id| id < 7));
    }

    #[test]
    fn balance_within_one_percent_when_ring_is_large() {
        for n in [3usize, 10, 50] {
            let k = keys(n);
            let size = 65537; // > 100 * n for every n here
            let ring = build_ring(&members(&k, &vec![1; n]), size);
            let ideal = size as f64 / n as f64;
            let worst = shares(&ring).values().map(|&c| (c as f64 - ideal).abs() / ideal).fold(0.0, f64::max);
            println!("maglev balance: n={n} size={size} worst deviation {:.3}%", worst * 100.0);
            assert!(worst <= 0.01, "n={n}: worst deviation {worst}");
        }
    }

    #[test]
    fn weights_are_honoured() {
        let k = keys(3);
        let ring = build_ring(&members(&k, &[100, 50, 25]), 65537);
        let s = shares(&ring);
        let total = 175.0;
        for (id, w) in [(0u32, 100.0), (1, 50.0), (2, 25.0)] {
            let got = s[&id] as f64 / 65537.0;
            let want = w / total;
            println!("maglev weights: id {id} share {got:.4} want {want:.4}");
            assert!((got - want).abs() / want < 0.01, "id {id}: {got} vs {want}");
        }
    }

    #[test]
    fn zero_weight_gets_no_slots_and_empty_ring_is_none() {
        let k = keys(3);
        let ring = build_ring(&members(&k, &[1, 0, 1]), 251);
        assert!(!ring.contains(&1));
        let ring = build_ring(&members(&k, &[0, 0, 0]), 251);
        assert!(ring.iter().all(|&id| id == BACKEND_NONE));
    }

    #[test]
    fn removing_one_of_n_moves_about_one_nth() {
        let n = 10;
        let k = keys(n);
        let all = members(&k, &vec![1; n]);
        let before = build_ring(&all, 65537);
        let after = build_ring(&all[1..], 65537);
        // Slots that belonged to a surviving backend but moved: Maglev's disruption.
        let moved = before.iter().zip(&after).filter(|(b, a)| **b != 0 && b != a).count();
        let total_moved = before.iter().zip(&after).filter(|(b, a)| b != a).count();
        let frac = total_moved as f64 / before.len() as f64;
        println!(
            "maglev disruption: removing 1 of {n} moved {:.2}% of slots (ideal {:.2}%), {} slots of surviving backends",
            frac * 100.0,
            100.0 / n as f64,
            moved
        );
        assert!(frac <= 1.0 / n as f64 * 1.25, "moved {frac}");
    }

    #[test]
    fn ring_size_must_be_prime() {
        assert!(is_prime(65537) && is_prime(251) && !is_prime(65536) && !is_prime(1));
        let r = std::panic::catch_unwind(|| build_ring(&[], 100));
        assert!(r.is_err());
    }

    #[test]
    fn the_ring_depends_on_the_set_of_members_not_their_order_or_ids() {
        let keys = keys(7);
        let weights = [100, 50, 100, 200, 100, 0, 100];
        let ring = build_ring(&members(&keys, &weights), 65_537);
        let key_of = |members: &[RingMember<'_>], id: u32| members.iter().find(|m| m.id == id).map(|m| m.key.to_vec());
        let listed = members(&keys, &weights);
        // The same backends listed in reverse, with other ids.
        let mut other: Vec<RingMember<'_>> =
            members(&keys, &weights).into_iter().rev().map(|m| RingMember { id: m.id + 100, ..m }).collect();
        other.swap(1, 4);
        let other_ring = build_ring(&other, 65_537);
        for (a, b) in ring.iter().zip(&other_ring) {
            assert_eq!(key_of(&listed, *a), key_of(&other, *b), "every slot holds the same backend");
        }
    }
}
