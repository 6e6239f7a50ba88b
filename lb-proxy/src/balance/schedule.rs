//! Per-set balancing state, rebuilt whenever a VIP's backends, weights or health change: the
//! smooth weighted round-robin weights and the Maglev ring.
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use lb_common::limits::DEFAULT_RING_SIZE;
use lb_common::maglev::{RingMember, build_ring};
use lb_common::ring_key;

use crate::backend::Backend;
use crate::config::Balance;

/// A snapshot of a VIP's backends plus the precomputed schedule (WRR sequence, Maglev ring).
#[derive(Debug)]
pub(crate) struct BackendSet {
    pub(crate) backends: Vec<Arc<Backend>>,
    pub(crate) schedule: Schedule,
}

#[derive(Debug)]
pub(crate) enum Schedule {
    /// The algorithm needs nothing precomputed.
    None,
    /// nginx's smooth weighted round-robin: each backend's current weight. A pick raises every
    /// usable backend's current weight by its weight and lowers the winner's by their total, so
    /// shares follow the weights, evenly interleaved, and a backend that cannot be used is
    /// left out of the round instead of handing its turn to one neighbour.
    Smooth(Mutex<Vec<i64>>),
    /// Maglev ring of backend indices (`BACKEND_NONE` = empty).
    Ring(Vec<u32>),
}

impl Schedule {
    pub(crate) fn build(balance: &Balance, backends: &[Arc<Backend>]) -> Schedule {
        match balance {
            Balance::RoundRobin | Balance::WeightedRoundRobin => Schedule::Smooth(Mutex::new(vec![0; backends.len()])),
            Balance::ConsistentHash { .. } => {
                let weights: Vec<u32> = backends.iter().map(|b| if b.in_rotation() { b.weight() } else { 0 }).collect();
                let addrs: Vec<SocketAddr> = backends.iter().map(|b| b.addr).collect();
                Schedule::Ring(ring(&addrs, &weights))
            }
            _ => Schedule::None,
        }
    }
}

/// One smooth weighted round-robin pick. `weights` yields each backend's weight, or None for
/// a backend that may not be picked now.
pub(crate) fn smooth_pick(current: &Mutex<Vec<i64>>, weights: impl Iterator<Item = Option<u32>>) -> Option<usize> {
    let mut current = current.lock().unwrap_or_else(|e| e.into_inner());
    let mut total = 0i64;
    let mut best: Option<(usize, i64)> = None;
    for (i, (c, w)) in current.iter_mut().zip(weights).enumerate() {
        let Some(w) = w.filter(|w| *w > 0) else {
            continue;
        };
        *c += i64::from(w);
        total += i64::from(w);
        if best.is_none_or(|(_, b)| *c > b) {
            best = Some((i, *c));
        }
    }
    let (b, _) = best?;
    current[b] -= total;
    Some(b)
}

#[cfg(test)]
mod smooth_tests {
    use super::*;

    fn run(weights: &[u32], down: &[usize], n: usize) -> Vec<usize> {
        let current = Mutex::new(vec![0; weights.len()]);
        (0..n)
            .map(|_| {
                let ws = weights.iter().enumerate().map(|(i, &w)| (!down.contains(&i)).then_some(w));
                smooth_pick(&current, ws).unwrap()
            })
            .collect()
    }

    #[test]
    fn nginx_example_sequence() {
        // nginx's documented example: weights 5,1,1 give a a b a c a a.
        assert_eq!(run(&[5, 1, 1], &[], 7), vec![0, 0, 1, 0, 2, 0, 0]);
    }

    #[test]
    fn a_backend_left_out_shares_its_turns_evenly() {
        let picks = run(&[1, 1, 1, 1], &[1], 300);
        let count = |i| picks.iter().filter(|&&p| p == i).count();
        assert_eq!((count(0), count(1), count(2), count(3)), (100, 0, 100, 100));
    }
}

fn ring(addrs: &[SocketAddr], weights: &[u32]) -> Vec<u32> {
    let keys: Vec<[u8; 18]> = addrs.iter().copied().map(ring_key).collect();
    let members: Vec<RingMember<'_>> = keys
        .iter()
        .zip(weights)
        .enumerate()
        .map(|(i, (key, &weight))| RingMember { id: i as u32, weight, key })
        .collect();
    build_ring(&members, DEFAULT_RING_SIZE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_keys_differ_by_port() {
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:2".parse().unwrap();
        assert_ne!(ring_key(a), ring_key(b));
        assert_eq!(&ring_key(a)[..4], &[127, 0, 0, 1]);
    }
}
