//! CPU time of a process and its children (nginx's and HAProxy's workers), read from
//! /proc/PID/stat: user and system, in seconds. Benchmarks divide the time a proxy spent over
//! a measured interval by the requests it served: CPU per request, which the shared lab
//! cannot distort the way it distorts requests/s. User time apart tells the proxy's own code
//! from the kernel's work on its sockets, which the same system calls cost every peer alike.
use std::fs;
use std::ops::Sub;

/// CPU time, user and system: seconds as read, microseconds per request once divided
/// ([`CpuTime::per`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuTime {
    pub user: f64,
    pub system: f64,
}

impl CpuTime {
    pub fn total(&self) -> f64 {
        self.user + self.system
    }

    /// Each part times `factor` (1e6 / requests: microseconds per request).
    pub fn per(self, factor: f64) -> CpuTime {
        CpuTime { user: self.user * factor, system: self.system * factor }
    }
}

impl Sub for CpuTime {
    type Output = CpuTime;
    fn sub(self, earlier: CpuTime) -> CpuTime {
        CpuTime { user: self.user - earlier.user, system: self.system - earlier.system }
    }
}

/// Clock ticks per second of /proc's time fields (USER_HZ: 100 on Linux builds).
fn ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// (pid, ppid, (utime, stime) in ticks) of one /proc/PID/stat line.
fn parse_stat(text: &str) -> Option<(u32, u32, (u64, u64))> {
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let (head, rest) = text.rsplit_once(')')?;
    let pid = head.split_whitespace().next()?.parse().ok()?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state): ppid is field 4, utime 14, stime 15.
    let ppid = f.get(1)?.parse().ok()?;
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some((pid, ppid, (utime, stime)))
}

/// CPU seconds used so far by `pid` and its direct children (threads are included in a
/// process's own fields).
pub fn tree_seconds(pid: u32) -> CpuTime {
    let (mut user, mut system) = (0u64, 0u64);
    let Ok(dir) = fs::read_dir("/proc") else {
        return CpuTime::default();
    };
    for entry in dir.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(text) = fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if let Some((p, ppid, (u, s))) = parse_stat(&text)
            && (p == pid || ppid == pid)
        {
            user += u;
            system += s;
        }
    }
    let hz = ticks_per_second();
    CpuTime { user: user as f64 / hz, system: system as f64 / hz }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_line_with_spaces_in_the_name() {
        let line = "4242 (nginx: worker (x)) S 4241 4241 4241 0 -1 4194624 100 0 0 0 250 70 0 0 20 0 1 0 5 1000 10";
        assert_eq!(parse_stat(line), Some((4242, 4241, (250, 70))));
    }

    #[test]
    fn this_process_has_used_some_cpu() {
        let spin: u64 = (0..5_000_000u64).fold(0, |a, b| a.wrapping_add(b * b));
        assert!(spin > 0);
        let used = tree_seconds(std::process::id());
        assert!(used.user >= 0.0 && used.system >= 0.0 && used.total() >= used.user);
    }
}
