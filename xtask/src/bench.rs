//! `cargo xtask bench WHAT [ARGS]`: installs what the benchmark needs, then builds and runs
//! `lb-bench WHAT [ARGS]` (lb-tests, where every benchmark and its options are defined; they
//! need aya, lb-ctl and lb-proxy, which xtask stays free of so that it builds before `setup`
//! has installed the eBPF toolchain). `cargo xtask bench help` lists them.
use anyhow::ensure;

use crate::util::{cmd, is_root, target_dir};

/// Debian packages of the proxy benchmark: the load generators, the peers and the counters
/// (valgrind for `--instructions`, perf for `--syscalls`).
const PROXY_PACKAGES: &[&str] = &[
    "wrk",
    "nghttp2-client",
    "iperf3",
    "openssl",
    "nginx",
    "libnginx-mod-stream",
    "haproxy",
    "valgrind",
    "linux-perf",
];
/// Debian packages of the lab benchmark (and so of `all`): generators (trafgen, wrk, iperf3),
/// nftables (the DNAT peer and the backends' counters) and the proxy peers.
const LAB_PACKAGES: &[&str] = &[
    "netsniff-ng",
    "wrk",
    "nghttp2-client",
    "iperf3",
    "openssl",
    "nftables",
    "haproxy",
    "nginx",
    "libnginx-mod-stream",
    "linux-perf",
];

pub fn run(args: &[String]) -> anyhow::Result<()> {
    crate::setup::run()?;
    let what = args.first().map(String::as_str).unwrap_or("help");
    let packages = match what {
        "proxy" => PROXY_PACKAGES,
        "lab" | "all" => LAB_PACKAGES,
        "flood" => &["nftables"],
        "cluster" => &["bird2"],
        _ => &[],
    };
    let help = matches!(what, "help" | "-h" | "--help") || args.iter().any(|a| a == "-h" || a == "--help");
    ensure!(help || what == "proxy" || is_root(), "`bench {what}` loads XDP programs: run it as root");
    if !help {
        crate::setup::debian_packages(packages)?;
    }
    // Release builds: the daemon the benchmarks drive, and the benchmarks themselves.
    cmd(
        "cargo",
        &[
            "build",
            "--quiet",
            "--release",
            "-p",
            "lb-ctl",
            "-p",
            "lb-tests",
            "--bin",
            "lb-ctl",
            "--bin",
            "lb-bench",
            "--bin",
            "lb-test-backend",
        ],
    )?;
    let release = target_dir().join("release");
    let mut args = args.to_vec();
    if what == "all" {
        // An absolute report directory: it lands where it was asked for.
        for arg in &mut args {
            if let Some(dir) = arg.strip_prefix("--report=") {
                *arg = format!("--report={}", std::env::current_dir()?.join(dir).display());
            }
        }
        if let Some(i) = args.iter().position(|a| a == "--report")
            && let Some(dir) = args.get_mut(i + 1)
        {
            *dir = std::env::current_dir()?.join(&*dir).display().to_string();
        }
    }
    let status = std::process::Command::new(release.join("lb-bench"))
        .args(&args)
        .env("LB_CTL_BIN", release.join("lb-ctl"))
        .status()?;
    ensure!(status.success(), "lb-bench {what} failed: {status}");
    Ok(())
}
