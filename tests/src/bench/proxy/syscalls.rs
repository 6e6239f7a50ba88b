//! `cargo xtask bench proxy --syscalls`: the system calls each peer makes per request, counted
//! in the kernel while each workload runs (`perf stat` on the syscall tracepoints of the peer's
//! processes and threads; no PMU needed). On loopback most of a proxy's CPU time is its
//! system calls (a write runs the receiver's TCP input too), so how many it makes per request,
//! and of which kind, says where CPU per request goes; the count does not move with the host's
//! load. The counter costs the peers a little on every call, so the CPU column of such a run
//! is not the one to quote.
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result};

use super::instructions::process_tree;

/// The tracepoints counted: every system call, and those that write, read and wait.
const ALL: &str = "raw_syscalls:sys_enter";
const WRITES: [&str; 4] = [
    "syscalls:sys_enter_write",
    "syscalls:sys_enter_writev",
    "syscalls:sys_enter_sendto",
    "syscalls:sys_enter_sendmsg",
];
const READS: [&str; 4] = [
    "syscalls:sys_enter_read",
    "syscalls:sys_enter_readv",
    "syscalls:sys_enter_recvfrom",
    "syscalls:sys_enter_recvmsg",
];
const WAITS: [&str; 2] = ["syscalls:sys_enter_epoll_wait", "syscalls:sys_enter_epoll_pwait"];

/// What a peer made over one measured run.
#[derive(Debug, Default, PartialEq)]
pub struct Calls {
    pub all: u64,
    pub writes: u64,
    pub reads: u64,
    pub waits: u64,
}

impl Calls {
    /// "system calls per request: ..." over `units` requests (`unit` "req"), or MiB.
    pub fn per_unit(&self, units: u64, unit: &str) -> String {
        let n = units.max(1) as f64;
        let unit = if unit == "req" { "request" } else { unit };
        format!(
            "system calls per {unit}: {:.2} (writes {:.2}, reads {:.2}, epoll waits {:.2})",
            self.all as f64 / n,
            self.writes as f64 / n,
            self.reads as f64 / n,
            self.waits as f64 / n
        )
    }
}

/// `perf stat` counting on a peer's processes until [`Counter::stop`].
pub struct Counter {
    perf: Child,
    out: PathBuf,
}

impl Counter {
    /// Counts the system calls of `pid`, its threads and its child processes (nginx's
    /// workers), written to a file in `dir`.
    pub fn start(pid: u32, dir: &Path) -> Result<Counter> {
        let pids: Vec<String> = process_tree(pid).iter().map(u32::to_string).collect();
        let events: Vec<&str> = [ALL].iter().chain(&WRITES).chain(&READS).chain(&WAITS).copied().collect();
        let out = dir.join(format!("syscalls.{pid}.csv"));
        let perf = Command::new("perf")
            .args(["stat", "-x,", "-e", &events.join(","), "-p", &pids.join(","), "-o"])
            .arg(&out)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("perf stat (Debian package linux-perf)")?;
        // perf opens its counters before the workload starts.
        std::thread::sleep(std::time::Duration::from_millis(300));
        Ok(Counter { perf, out })
    }

    pub fn stop(mut self) -> Result<Calls> {
        // SAFETY: a signal to our own child; SIGINT makes perf write its counts and exit.
        unsafe { libc::kill(self.perf.id() as i32, libc::SIGINT) };
        self.perf.wait()?;
        let text = std::fs::read_to_string(&self.out).with_context(|| format!("reading {}", self.out.display()))?;
        Ok(parse(&text))
    }
}

/// Sums `perf stat -x,` lines (`COUNT,UNIT,EVENT,...`) into [`Calls`].
fn parse(text: &str) -> Calls {
    let mut calls = Calls::default();
    for line in text.lines() {
        let mut fields = line.split(',');
        let (Some(count), Some(event)) = (fields.next(), fields.nth(1)) else { continue };
        let Ok(count) = count.parse::<u64>() else { continue };
        if event == ALL {
            calls.all += count;
        } else if WRITES.contains(&event) {
            calls.writes += count;
        } else if READS.contains(&event) {
            calls.reads += count;
        } else if WAITS.contains(&event) {
            calls.waits += count;
        }
    }
    calls
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_perf_stat_csv() {
        let text = "# started on Sun Nov 29 06:20:00 2026\n\n\
            2379,,raw_syscalls:sys_enter,5468706,100.00,,\n\
            10,,syscalls:sys_enter_writev,5468706,100.00,,\n\
            5,,syscalls:sys_enter_sendto,5468706,100.00,,\n\
            7,,syscalls:sys_enter_recvfrom,5468706,100.00,,\n\
            3,,syscalls:sys_enter_epoll_wait,5468706,100.00,,\n\
            <not counted>,,syscalls:sys_enter_sendmsg,0,0.00,,\n";
        assert_eq!(parse(text), Calls { all: 2379, writes: 15, reads: 7, waits: 3 });
        assert_eq!(
            parse(text).per_unit(10, "req"),
            "system calls per request: 237.90 (writes 1.50, reads 0.70, epoll waits 0.30)"
        );
    }
}
