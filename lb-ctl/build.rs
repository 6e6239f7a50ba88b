//! Builds the XDP objects (lb-ebpf, for the BPF target, with nightly) and leaves them in
//! OUT_DIR, where `dataplane::objects` embeds them. `AYA_BUILD_SKIP=1` skips the build for
//! tooling that only needs to type-check.
use anyhow::{Context as _, anyhow};

fn main() -> anyhow::Result<()> {
    let metadata = aya_build_metadata()?;
    aya_build::build_ebpf(
        [aya_build::Package { name: "lb-ebpf", root_dir: &metadata, ..Default::default() }],
        aya_build::Toolchain::default(),
    )
    .context("building the XDP programs (run `cargo xtask setup` if the toolchain is missing)")
}

/// lb-ebpf's directory, next to this crate.
fn aya_build_metadata() -> anyhow::Result<String> {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR")?;
    let dir = std::path::Path::new(&manifest_dir)
        .parent()
        .ok_or_else(|| anyhow!("lb-ctl has no parent directory"))?
        .join("lb-ebpf");
    Ok(dir.to_str().ok_or_else(|| anyhow!("non-UTF-8 path {}", dir.display()))?.to_owned())
}
