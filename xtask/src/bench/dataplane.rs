//! `cargo xtask bench dataplane`: builds and runs the benchmark binary (it needs aya and the
//! embedded objects, which xtask itself stays free of).
use crate::util::{cmd, is_root};

pub fn run() -> anyhow::Result<()> {
    crate::setup::run()?;
    anyhow::ensure!(is_root(), "the data-plane benchmark loads XDP programs: run it as root");
    cmd("cargo", &["run", "--quiet", "--release", "-p", "lb-tests", "--bin", "lb-bench-dataplane"])
}
