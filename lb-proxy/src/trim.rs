//! Giving memory back to the system after a burst of connections. glibc keeps memory freed by
//! closed connections in its per-thread arenas instead of returning it, so the resident set
//! stays at the burst's peak for ever (measured with `examples/idle_memory.rs`: 5000 idle
//! keep-alive connections take the proxy from 5 MiB to 130 MiB, and it stayed there after
//! they closed; a burst of 5000 busy ones reached 245 MiB; `malloc_trim(0)` brought it back
//! to 31 MiB). So, like HAProxy's pool garbage collection, a small thread asks glibc to trim
//! once the number of open client connections has fallen well below its recent peak.
use std::sync::Once;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

/// Open client connections of every VIP of the process.
static LIVE: AtomicUsize = AtomicUsize::new(0);
/// The most open at once since the last trim.
static PEAK: AtomicUsize = AtomicUsize::new(0);

/// A drop of this many connections from the peak is worth a trim (each held ~25 KiB).
const TRIM_AFTER_DROP: usize = 1000;
/// How often the drop is looked at.
const INTERVAL: Duration = Duration::from_secs(2);

pub(crate) fn connection_opened() {
    let live = LIVE.fetch_add(1, Relaxed) + 1;
    PEAK.fetch_max(live, Relaxed);
    start();
}

pub(crate) fn connection_closed() {
    LIVE.fetch_sub(1, Relaxed);
}

/// Starts the trimming thread once per process (only where the allocator is glibc's).
fn start() {
    static STARTED: Once = Once::new();
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    STARTED.call_once(|| {
        let spawned = std::thread::Builder::new().name("lb-proxy-trim".into()).spawn(|| {
            loop {
                std::thread::sleep(INTERVAL);
                let live = LIVE.load(Relaxed);
                if PEAK.load(Relaxed).saturating_sub(live) >= TRIM_AFTER_DROP {
                    // SAFETY: malloc_trim only walks glibc's own arenas; it is thread-safe.
                    unsafe { libc::malloc_trim(0) };
                    PEAK.store(live, Relaxed);
                }
            }
        });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start the memory trimming thread");
        }
    });
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    STARTED.call_once(|| {});
}
