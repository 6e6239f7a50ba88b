//! `cargo xtask demo`: setup, then builds and runs `lb-demo` (lb-tests), the balancer in the
//! namespace lab driven by its own CLI. See README.md.
use anyhow::ensure;

use crate::util::{cmd, is_root, step, target_dir};

pub fn run(which: Option<&str>) -> anyhow::Result<()> {
    ensure!(matches!(which, None | Some("cluster")), "unknown demo {which:?}: `demo` or `demo cluster`");
    ensure!(is_root(), "the demo creates network namespaces and loads XDP programs: run it as root");
    crate::setup::run()?;
    step("building lb-ctl and the lab programs (lb-demo, lb-test-backend)");
    cmd(
        "cargo",
        &[
            "build",
            "--quiet",
            "-p",
            "lb-ctl",
            "-p",
            "lb-tests",
            "--bin",
            "lb-ctl",
            "--bin",
            "lb-demo",
            "--bin",
            "lb-test-backend",
        ],
    )?;
    let debug = target_dir().join("debug");
    // Ctrl-C reaches the whole process group: lb-demo tears its lab down and exits; this
    // process only waits for it.
    ctrlc::set_handler(|| {})?;
    let status = std::process::Command::new(debug.join("lb-demo"))
        .args(which)
        .env("LB_CTL_BIN", debug.join("lb-ctl"))
        .status()?;
    ensure!(status.success(), "the demo failed: {status}");
    Ok(())
}
