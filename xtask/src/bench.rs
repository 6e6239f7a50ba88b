//! `cargo xtask bench …`: installs what a benchmark needs, then builds and runs `lb-bench`
//! (lb-tests: the benchmarks need aya, lb-ctl and lb-proxy, which xtask itself stays free of,
//! so that it builds before `setup` has installed the eBPF toolchain).
use clap::Subcommand;

use crate::util::{cmd, is_root, target_dir};

#[derive(Subcommand)]
pub enum Bench {
    /// ns per packet of each XDP path, over a bare XDP_PASS measured in the same run (root).
    Dataplane,
    /// lb-proxy against nginx and HAProxy with wrk, same backends, same run.
    Proxy,
    /// Control plane: `backends remove` to the map change, Maglev ring build for 1000
    /// backends, daemon RSS with the full VIP x backend table (root).
    Control,
}

/// Debian packages of the proxy benchmark: the load generator and the peers.
const PROXY_PACKAGES: &[&str] = &["wrk", "nginx", "libnginx-mod-stream", "haproxy"];

pub fn run(what: Bench) -> anyhow::Result<()> {
    crate::setup::run()?;
    let (name, packages, extra): (&str, &[&str], Vec<String>) = match what {
        Bench::Dataplane => ("dataplane", &[][..], vec![]),
        Bench::Proxy => ("proxy", PROXY_PACKAGES, vec![]),
        Bench::Control => ("control", &[][..], vec![]),
    };
    anyhow::ensure!(name == "proxy" || is_root(), "`bench {name}` loads XDP programs: run it as root");
    crate::setup::debian_packages(packages)?;
    // Release builds: the daemon the control benchmark drives, and the benchmarks themselves.
    cmd("cargo", &["build", "--quiet", "--release", "-p", "lb-ctl", "-p", "lb-tests", "--bin", "lb-ctl", "--bin", "lb-bench", "--bin", "lb-test-backend"])?;
    let release = target_dir().join("release");
    let status = std::process::Command::new(release.join("lb-bench"))
        .arg(name)
        .args(&extra)
        .env("LB_CTL_BIN", release.join("lb-ctl"))
        .status()?;
    anyhow::ensure!(status.success(), "lb-bench {name} failed: {status}");
    Ok(())
}
