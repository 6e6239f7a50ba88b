//! Root suites must not pass silently when they could not run.

/// True when the suite can run (root). Outside CI it prints a loud SKIPPED line and returns
/// false; under CI (`CI` set) a missing privilege is a failure.
pub fn require_root(suite: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    if std::env::var_os("CI").is_some() {
        panic!("{suite}: needs root (CAP_BPF, CAP_NET_ADMIN) and CI is set: refusing to skip");
    }
    eprintln!("SKIPPED (needs root): {suite}");
    false
}
