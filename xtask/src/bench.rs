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
    /// Packets and connections through lb-ctl (XDP NAT and DSR), nftables DNAT, HAProxy and
    /// nginx stream in the namespace lab, interleaved, with plain routing as the floor (root).
    Lab {
        /// One short repetition (2 s runs).
        #[arg(long)]
        quick: bool,
        /// Repetitions of every run (interleaved A,B,C,A,B,C).
        #[arg(long, default_value_t = 3)]
        repetitions: usize,
        /// Seconds per run.
        #[arg(long, default_value_t = 3)]
        seconds: u64,
    },
    /// Every benchmark, then a self-contained HTML report with charts and the raw results as
    /// JSON in DIR (root).
    All {
        /// The report's directory.
        #[arg(long, value_name = "DIR")]
        report: std::path::PathBuf,
        /// The lab benchmark's short pass.
        #[arg(long)]
        quick: bool,
    },
}

/// Debian packages of the proxy benchmark: the load generator and the peers.
const PROXY_PACKAGES: &[&str] = &["wrk", "nginx", "libnginx-mod-stream", "haproxy"];
/// Debian packages of the lab benchmark (and so of `all`): generators (trafgen, wrk, iperf3),
/// nftables (the DNAT peer and the backends' counters) and the proxy peers.
const LAB_PACKAGES: &[&str] = &["netsniff-ng", "wrk", "iperf3", "nftables", "haproxy", "nginx", "libnginx-mod-stream"];

pub fn run(what: Bench) -> anyhow::Result<()> {
    crate::setup::run()?;
    let (name, packages, extra): (&str, &[&str], Vec<String>) = match what {
        Bench::Dataplane => ("dataplane", &[][..], vec![]),
        Bench::Proxy => ("proxy", PROXY_PACKAGES, vec![]),
        Bench::Control => ("control", &[][..], vec![]),
        Bench::Lab { quick, repetitions, seconds } => {
            let mut args = vec![format!("--repetitions={repetitions}"), format!("--seconds={seconds}")];
            if quick {
                args.push("--quick".into());
            }
            ("lab", LAB_PACKAGES, args)
        }
        Bench::All { report, quick } => {
            // Absolute, so the report lands where it was asked for.
            let report = std::env::current_dir()?.join(report);
            let mut args = vec![format!("--report={}", report.display())];
            if quick {
                args.push("--quick".into());
            }
            ("all", LAB_PACKAGES, args)
        }
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
