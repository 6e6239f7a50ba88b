//! Builds the XDP objects (lb-ebpf, for the BPF target, with nightly) and leaves them in
//! OUT_DIR, where `dataplane::objects` embeds them. `AYA_BUILD_SKIP=1` skips the build for
//! tooling that only needs to type-check.
use anyhow::{Context as _, anyhow};

fn main() -> anyhow::Result<()> {
    let root_dir = ebpf_dir()?;
    // The objects also depend on lb-common's layouts and functions.
    println!("cargo:rerun-if-changed={root_dir}/../lb-common");
    // The test-only previous layout (feature layout-v1-test) must reach the program too.
    let features: &[&str] =
        if std::env::var_os("CARGO_FEATURE_LAYOUT_V1_TEST").is_some() { &["layout-v1-test"] } else { &[] };
    aya_build::build_ebpf(
        [aya_build::Package { name: "lb-ebpf", root_dir: &root_dir, features, ..Default::default() }],
        aya_build::Toolchain::default(),
    )
    .context("building the XDP programs (run `cargo xtask setup` if the toolchain is missing)")?;
    // With AYA_BUILD_SKIP nothing was built: leave empty objects so the crate still compiles;
    // loading them then fails with a clear message (see dataplane::objects::available).
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    for object in ["lb-ingress", "lb-decap"] {
        let path = out_dir.join(object);
        if !path.exists() {
            std::fs::write(&path, [])?;
        }
    }
    Ok(())
}

/// lb-ebpf's directory, next to this crate.
fn ebpf_dir() -> anyhow::Result<String> {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR")?;
    let dir = std::path::Path::new(&manifest_dir)
        .parent()
        .ok_or_else(|| anyhow!("lb-ctl has no parent directory"))?
        .join("lb-ebpf");
    Ok(dir.to_str().ok_or_else(|| anyhow!("non-UTF-8 path {}", dir.display()))?.to_owned())
}
