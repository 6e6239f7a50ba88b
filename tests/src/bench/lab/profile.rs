//! Where the CPUs went during a run (`lb-bench lab --profile`): a system-wide `perf record`
//! with the `cpu-clock` software event (it needs no hardware counters, which virtual machines
//! often lack), summarised by command and by symbol. It shows what limits a lab figure: the
//! generator, the veth copies and softirqs, the backends, or the balancer itself.
use std::process::{Command, Stdio};

use anyhow::{Context, Result};
use serde::Serialize;

/// A run's profile: the top commands and symbols, as `perf report` prints them.
#[derive(Clone, Debug, Serialize)]
pub struct Profile {
    pub what: String,
    pub by_command: String,
    pub by_symbol: String,
}

/// Samples every CPU while `run` runs (it should last about `secs`), then summarises.
pub fn profile<T>(what: &str, secs: u64, run: impl FnOnce() -> T) -> Result<(T, Profile)> {
    let data = tempfile::Builder::new().prefix("lb-bench-perf").suffix(".data").tempfile()?;
    let path = data.path().to_str().context("utf-8 path")?.to_string();
    let mut perf = Command::new("perf")
        .args(["record", "-q", "-e", "cpu-clock", "-F", "999", "-a", "-o", &path, "--", "sleep", &secs.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("perf record (Debian package linux-perf)")?;
    let out = run();
    perf.wait()?;
    let report = |sort: &str| -> Result<String> {
        let o = Command::new("perf")
            .args(["report", "-i", &path, "--stdio", "--quiet", "--sort", sort, "--percent-limit", "1.5"])
            .output()
            .context("perf report")?;
        Ok(String::from_utf8_lossy(&o.stdout).lines().take(14).collect::<Vec<_>>().join("\n"))
    };
    let profile = Profile { what: what.to_string(), by_command: report("comm")?, by_symbol: report("sym")? };
    Ok((out, profile))
}

impl Profile {
    pub fn print(&self) {
        println!("--- profile: {} (cpu-clock samples, all CPUs) ---", self.what);
        println!("by command:\n{}\nby symbol:\n{}", self.by_command, self.by_symbol);
    }
}
