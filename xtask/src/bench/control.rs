//! `cargo xtask bench control`: builds and runs the control-plane benchmark binary (it needs
//! aya and the lb-ctl library, which xtask itself stays free of), after building the lb-ctl
//! binary it drives.
use crate::util::{cmd, is_root};

pub fn run() -> anyhow::Result<()> {
    crate::setup::run()?;
    anyhow::ensure!(is_root(), "the control-plane benchmark runs the daemon with XDP: run it as root");
    cmd("cargo", &["build", "--quiet", "--release", "-p", "lb-ctl"])?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let lb_ctl = target.join("release/lb-ctl");
    let status = std::process::Command::new("cargo")
        .args(["run", "--quiet", "--release", "-p", "lb-tests", "--bin", "lb-bench-control"])
        .env("LB_CTL_BIN", &lb_ctl)
        .status()?;
    anyhow::ensure!(status.success(), "lb-bench-control failed: {status}");
    Ok(())
}
