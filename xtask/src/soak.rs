//! `cargo xtask soak [--minutes N] [--seed S]`: the soak run (tests/tests/soak.rs) for N
//! minutes, its report written to target/soak-report.md. `cargo xtask test` runs a 2-minute
//! pass of it with seed 1.
use crate::util::{is_root, step};

pub fn run(minutes: u64, seed: u64) -> anyhow::Result<()> {
    anyhow::ensure!(is_root(), "the soak run needs root (network namespaces, XDP)");
    anyhow::ensure!(minutes >= 1, "--minutes must be at least 1");
    // Absolute: the test runs in its package's directory.
    let report = std::env::current_dir()?.join("target/soak-report.md");
    step(&format!("soak: {minutes} minutes, seed {seed} (report: {})", report.display()));
    let status = std::process::Command::new("cargo")
        .args(["test", "-p", "lb-tests", "--test", "soak", "--", "--nocapture", "--test-threads=1"])
        .env("LB_SOAK_MINUTES", minutes.to_string())
        .env("LB_SOAK_SEED", seed.to_string())
        .env("LB_SOAK_REPORT", &report)
        .status()?;
    anyhow::ensure!(status.success(), "the soak run failed (report: {})", report.display());
    Ok(())
}
