//! Support for the root-requiring suites: privilege checks that fail in CI instead of
//! skipping, network namespaces that clean up after themselves, and BPF_PROG_TEST_RUN.
pub mod balancer;
pub mod fixture;
pub mod lab;
pub mod netns;
pub mod packets;
pub mod privileges;
pub mod testrun;

/// The `lb-ctl` binary the root suites drive: `LB_CTL_BIN`, else the workspace's debug build
/// (`cargo xtask test` builds it before the suites run).
pub fn lb_ctl_bin() -> std::path::PathBuf {
    if let Some(path) = std::env::var_os("LB_CTL_BIN") {
        return path.into();
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let path = target.join("debug/lb-ctl");
    assert!(path.exists(), "{} is missing: run `cargo build -p lb-ctl` (cargo xtask test does)", path.display());
    path
}
