//! `cargo xtask fuzz [FRAMES] [SEED]`: the data-plane fuzz step (see `lb_tests::fuzz`). Builds
//! and runs its binary, which needs aya and the embedded objects (xtask itself stays free of
//! them).
use crate::util::{cmd, is_root};

pub fn run(frames: u64, seed: Option<String>) -> anyhow::Result<()> {
    crate::setup::run()?;
    anyhow::ensure!(is_root(), "the fuzz step loads XDP programs: run it as root");
    let frames = frames.to_string();
    let mut args = vec!["run", "--quiet", "--release", "-p", "lb-tests", "--bin", "lb-fuzz-dataplane", "--", &frames];
    if let Some(seed) = &seed {
        args.push(seed);
    }
    cmd("cargo", &args)
}
