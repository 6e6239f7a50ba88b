//! Passive outlier detection: a backend with N consecutive connect errors or 5xx is ejected for
//! a cooldown; after it, one more failure ejects it again for twice as long (up to a maximum),
//! while a success forgives it. Lock-free: the state is three atomics per backend.
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use crate::config::Outlier;

/// Milliseconds of a monotonic clock, in a number that fits an atomic. It stamps idle times,
/// pool ages and ejections, all counted in seconds, and it is read for every request and every
/// relayed message: so it is the kernel's coarse clock (the time of the last tick, a few ms
/// old, read from memory without reading the CPU's counter).
#[cfg(target_os = "linux")]
pub(crate) fn now_ms() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime only writes the timespec it is given; this clock always exists
    // on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn now_ms() -> u64 {
    use std::sync::OnceLock;
    use std::time::Instant;
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64
}

#[derive(Debug, Default)]
pub(crate) struct OutlierState {
    consecutive: AtomicU32,
    /// Ejections in a row not yet forgiven by a success; sets the next cooldown.
    ejections: AtomicU32,
    ejected_until_ms: AtomicU64,
}

impl OutlierState {
    pub(crate) fn is_ejected(&self, now_ms: u64) -> bool {
        self.ejected_until_ms.load(Relaxed) > now_ms
    }

    pub(crate) fn record_success(&self) {
        if self.consecutive.load(Relaxed) != 0 {
            self.consecutive.store(0, Relaxed);
        }
        // Only a success after the cooldown counts as recovery (requests already in flight
        // when it was ejected may still succeed).
        if self.ejections.load(Relaxed) != 0 && !self.is_ejected(now_ms()) {
            self.ejections.store(0, Relaxed);
        }
    }

    /// Counts a failure; returns true when it ejects the backend.
    pub(crate) fn record_failure(&self, cfg: &Outlier, now_ms: u64) -> bool {
        if cfg.consecutive_failures == 0 {
            return false;
        }
        let failures = self.consecutive.fetch_add(1, Relaxed) + 1;
        if self.is_ejected(now_ms) {
            return false;
        }
        // On probation (ejected before, no success since): one failure is enough.
        let on_probation = self.ejections.load(Relaxed) > 0;
        if failures < cfg.consecutive_failures && !on_probation {
            return false;
        }
        let n = self.ejections.fetch_add(1, Relaxed);
        let cooldown = cooldown(cfg, n);
        self.ejected_until_ms.store(now_ms + cooldown.as_millis() as u64, Relaxed);
        self.consecutive.store(0, Relaxed);
        true
    }
}

/// The `n`th ejection in a row (0-based) lasts `base * 2^n`, at most `max`.
fn cooldown(cfg: &Outlier, n: u32) -> Duration {
    let factor = 1u32.checked_shl(n.min(31)).unwrap_or(u32::MAX);
    cfg.base_ejection.saturating_mul(factor).min(cfg.max_ejection.max(cfg.base_ejection))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> Outlier {
        Outlier {
            consecutive_failures: 3,
            base_ejection: Duration::from_millis(100),
            max_ejection: Duration::from_millis(350),
        }
    }

    #[test]
    fn ejects_after_n_in_a_row_and_cooldown_grows() {
        let s = OutlierState::default();
        let c = cfg();
        let t = 1_000;
        assert!(!s.record_failure(&c, t));
        assert!(!s.record_failure(&c, t));
        assert!(s.record_failure(&c, t), "third failure in a row ejects");
        assert!(s.is_ejected(t + 99) && !s.is_ejected(t + 100));
        // After the cooldown: on probation, one failure ejects again, for twice as long.
        assert!(s.record_failure(&c, t + 100));
        assert!(s.is_ejected(t + 299) && !s.is_ejected(t + 300));
        assert!(s.record_failure(&c, t + 300));
        // 400 ms would exceed the maximum.
        assert!(s.is_ejected(t + 300 + 349) && !s.is_ejected(t + 300 + 350));
    }

    #[test]
    fn success_resets_the_count() {
        let s = OutlierState::default();
        let c = cfg();
        s.record_failure(&c, 0);
        s.record_failure(&c, 0);
        s.record_success();
        assert!(!s.record_failure(&c, 0));
        assert!(!s.record_failure(&c, 0));
        assert!(s.record_failure(&c, 0));
    }

    #[test]
    fn zero_threshold_disables() {
        let s = OutlierState::default();
        let c = Outlier { consecutive_failures: 0, ..cfg() };
        for _ in 0..100 {
            assert!(!s.record_failure(&c, 0));
        }
    }
}
