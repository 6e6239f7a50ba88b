//! Ports for the listeners tests start. A port the kernel picked for a listener that was then
//! closed comes from the ephemeral range, and so do the local ports of outgoing connections:
//! another test's connection can take it before the test binds it again ("address already in
//! use"). These come from below the ephemeral range, each handed out once per process, and
//! only while nothing is bound there. Shared by the unit tests and `tests/proxy.rs`.
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

/// The lowest port handed out.
const FIRST: u32 = 10_000;

pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    // Below the first ephemeral port (32768 by default).
    let end = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u32>().ok())
        .filter(|low| *low > FIRST + 1000)
        .unwrap_or(32_768);
    let span = end - FIRST;
    // Each process starts at its own place, so overlapping runs rarely try the same ports.
    let start = std::process::id().wrapping_mul(7919);
    for _ in 0..span {
        let port = (FIRST + start.wrapping_add(NEXT.fetch_add(1, Relaxed)) % span) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {FIRST}..{end}");
}
