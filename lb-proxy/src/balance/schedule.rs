//! Precomputed schedules, rebuilt whenever a VIP's backends, weights or health change:
//! the smooth weighted round-robin sequence and the Maglev ring.
use std::net::SocketAddr;
use std::sync::Arc;

use lb_common::limits::DEFAULT_RING_SIZE;
use lb_common::maglev::{RingMember, build_ring};
use lb_common::ring_key;

use crate::backend::Backend;
use crate::config::Balance;

/// Longest WRR sequence; larger weight sums are scaled down to fit (shares stay within 1/4096).
const MAX_WRR_LEN: u64 = 4096;

#[derive(Debug)]
pub(crate) enum Schedule {
    /// The algorithm needs nothing precomputed.
    None,
    /// Backend indices in smooth-WRR order; one turn of the sequence gives each backend
    /// its weight's share, evenly interleaved.
    Wrr(Vec<u32>),
    /// Maglev ring of backend indices (`BACKEND_NONE` = empty).
    Ring(Vec<u32>),
}

impl Schedule {
    pub(crate) fn build(balance: &Balance, backends: &[Arc<Backend>]) -> Schedule {
        let weights: Vec<u32> = backends
            .iter()
            .map(|b| if b.in_rotation() { b.weight() } else { 0 })
            .collect();
        let addrs: Vec<SocketAddr> = backends.iter().map(|b| b.addr).collect();
        match balance {
            Balance::WeightedRoundRobin => Schedule::Wrr(wrr_sequence(&weights)),
            Balance::ConsistentHash { .. } => Schedule::Ring(ring(&addrs, &weights)),
            _ => Schedule::None,
        }
    }
}

/// nginx's smooth weighted round-robin, run once over a whole cycle.
pub(crate) fn wrr_sequence(weights: &[u32]) -> Vec<u32> {
    let gcd = weights
        .iter()
        .filter(|w| **w > 0)
        .fold(0u64, |g, &w| gcd(g, w as u64));
    if gcd == 0 {
        return Vec::new();
    }
    let mut w: Vec<u64> = weights.iter().map(|&x| x as u64 / gcd).collect();
    let total: u64 = w.iter().sum();
    if total > MAX_WRR_LEN {
        for x in w.iter_mut().filter(|x| **x > 0) {
            *x = (*x * MAX_WRR_LEN / total).max(1);
        }
    }
    let total: u64 = w.iter().sum();
    let mut current = vec![0i64; w.len()];
    let mut seq = Vec::with_capacity(total as usize);
    for _ in 0..total {
        let mut best = usize::MAX;
        for i in 0..w.len() {
            if w[i] == 0 {
                continue;
            }
            current[i] += w[i] as i64;
            if best == usize::MAX || current[i] > current[best] {
                best = i;
            }
        }
        current[best] -= total as i64;
        seq.push(best as u32);
    }
    seq
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

fn ring(addrs: &[SocketAddr], weights: &[u32]) -> Vec<u32> {
    let keys: Vec<[u8; 18]> = addrs.iter().copied().map(ring_key).collect();
    let members: Vec<RingMember<'_>> = keys
        .iter()
        .zip(weights)
        .enumerate()
        .map(|(i, (key, &weight))| RingMember {
            id: i as u32,
            weight,
            key,
        })
        .collect();
    build_ring(&members, DEFAULT_RING_SIZE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrr_is_smooth_and_proportional() {
        // nginx's documented example: weights 5,1,1 give a a b a c a a (no long runs of a).
        let seq = wrr_sequence(&[5, 1, 1]);
        assert_eq!(seq, vec![0, 0, 1, 0, 2, 0, 0]);
        let seq = wrr_sequence(&[300, 100, 0]);
        assert_eq!(seq.len(), 4, "weights are reduced by their gcd");
        assert_eq!(seq.iter().filter(|&&i| i == 0).count(), 3);
        assert!(!seq.contains(&2), "weight 0 gets no turn");
        assert!(wrr_sequence(&[0, 0]).is_empty());
    }

    #[test]
    fn wrr_large_weights_are_scaled() {
        let seq = wrr_sequence(&[100_000, 1]);
        assert!(seq.len() as u64 <= MAX_WRR_LEN + 1);
        assert!(seq.contains(&1), "a small weight still gets a turn");
    }

    #[test]
    fn ring_keys_differ_by_port() {
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:2".parse().unwrap();
        assert_ne!(ring_key(a), ring_key(b));
        assert_eq!(&ring_key(a)[..4], &[127, 0, 0, 1]);
    }
}
