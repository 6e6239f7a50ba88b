//! Backend choice per request (HTTP) or connection (TCP). Reads only the current
//! `BackendSet` snapshot and atomics: no locks.
mod schedule;

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use schedule::smooth_pick;
pub(crate) use schedule::{BackendSet, Schedule};

use crate::backend::{Backend, Tried};
use crate::config::Balance;
use crate::outlier::now_ms;

/// Longest walk along the ring past unusable slots before falling back to a scan.
const RING_PROBES: usize = 64;

/// Per-VIP balancer state (the cursor spreading scans and ties).
#[derive(Debug, Default)]
pub(crate) struct Balancer {
    cursor: AtomicUsize,
}

impl Balancer {
    /// Picks a backend index. `hash` is the consistent-hash key's hash (ignored by the other
    /// algorithms). Backends that are down, draining or listed in `tried` are never picked;
    /// ejected outliers only when nothing else is left (better a suspect backend than none).
    pub(crate) fn pick(&self, balance: &Balance, set: &BackendSet, hash: u32, tried: &Tried) -> Option<usize> {
        let now = now_ms();
        let strict = |_: usize, b: &Backend| b.may_take(now, tried);
        let lenient = |_: usize, b: &Backend| b.in_rotation() && !tried.contains(&b.addr);
        // A retry does not advance the rotation: that would shift every later request's turn.
        let advance = tried.is_empty();
        self.pick_with(balance, set, hash, advance, &strict)
            .or_else(|| self.pick_with(balance, set, hash, false, &lenient))
    }

    /// Generic over `usable`, not `&dyn`: a call through a pointer for every backend of every
    /// pick cost more than the check itself.
    fn pick_with(
        &self,
        balance: &Balance,
        set: &BackendSet,
        hash: u32,
        advance: bool,
        usable: &impl Fn(usize, &Backend) -> bool,
    ) -> Option<usize> {
        let n = set.backends.len();
        if n == 0 {
            return None;
        }
        let start = if advance { self.cursor.fetch_add(1, Relaxed) } else { self.cursor.load(Relaxed) };
        match (balance, &set.schedule) {
            (_, Schedule::Smooth(current)) => {
                smooth_pick(current, set.backends.iter().enumerate().map(|(i, b)| usable(i, b).then(|| b.weight())))
            }
            (Balance::ConsistentHash { .. }, Schedule::Ring(ring)) if !ring.is_empty() => {
                let slot = hash as usize % ring.len();
                (0..RING_PROBES.min(ring.len()))
                    .map(|k| ring[(slot + k) % ring.len()] as usize)
                    .find(|&i| i < n && usable(i, &set.backends[i]))
                    .or_else(|| least_loaded(set, start, usable))
            }
            (Balance::LeastConnections, _) => least_loaded(set, start, usable),
            (Balance::PowerOfTwo, _) => {
                let a = random_below(n);
                let b = random_below(n);
                match (usable(a, &set.backends[a]), usable(b, &set.backends[b])) {
                    (true, true) if less_loaded(&set.backends[b], &set.backends[a]) => Some(b),
                    (true, _) => Some(a),
                    (false, true) => Some(b),
                    (false, false) => least_loaded(set, start, usable),
                }
            }
            _ => (0..n).map(|k| (start + k) % n).find(|&i| usable(i, &set.backends[i])),
        }
    }
}

/// Fewest active per unit of weight; the scan starts at a rotating index so ties spread.
fn least_loaded(set: &BackendSet, start: usize, usable: &impl Fn(usize, &Backend) -> bool) -> Option<usize> {
    let n = set.backends.len();
    let mut best: Option<usize> = None;
    for k in 0..n {
        let i = (start + k) % n;
        let b = &set.backends[i];
        if !usable(i, b) {
            continue;
        }
        if best.is_none_or(|j| less_loaded(b, &set.backends[j])) {
            best = Some(i);
        }
    }
    best
}

/// `a` has fewer active requests than `b` relative to their weights (cross-multiplied).
fn less_loaded(a: &Backend, b: &Backend) -> bool {
    (a.active() as u128) * (b.weight().max(1) as u128) < (b.active() as u128) * (a.weight().max(1) as u128)
}

/// xorshift64*: a per-thread generator; only spreads load, nothing depends on its quality.
fn random_below(n: usize) -> usize {
    thread_local! {
        static STATE: Cell<u64> = Cell::new({
            // A stack address differs per thread; the clock differs per run.
            let local = 0u8;
            (&local as *const u8 as u64).rotate_left(17) ^ now_ms() ^ 0x9e37_79b9_7f4a_7c15 | 1
        });
    }
    STATE.with(|s| {
        let mut x = s.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        s.set(x);
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as usize % n
    })
}
