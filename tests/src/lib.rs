//! Support for the root-requiring suites: privilege checks that fail in CI instead of
//! skipping, network namespaces that clean up after themselves, the namespace lab, and
//! BPF_PROG_TEST_RUN; and the benchmarks, which run in the same lab. docs/testing.md lists the
//! suites (`tests/*.rs`).
//!
//! - [`privileges`]: root or not; CI turns a skip into a failure.
//! - [`netns`]: namespaces and links with a per-run prefix, removed on drop.
//! - [`testrun`]: BPF_PROG_TEST_RUN; [`balancer`]: a loaded balancer for packet tests.
//! - [`golden`], [`fixture`], [`fixture6`], [`packets`]: golden-packet cases and the frames
//!   they are built from (etherparse).
//! - [`fuzz`]: the data-plane fuzzer's generator; [`flood`]: spoofed SYN floods and keep-alive
//!   clients.
//! - [`lab`]: the one namespace lab (topology, the daemon under test, HTTP client) the suites,
//!   the demo and the benchmarks share; [`cluster`]: the scale-out lab with BIRD; [`fleet`]:
//!   that lab with an etcd cluster and nodes following the fleet in it.
//! - `bench`: every benchmark (`lb-bench`).
pub mod balancer;
pub mod bench;
pub mod cluster;
pub mod fixture;
pub mod fixture6;
pub mod fleet;
pub mod flood;
pub mod fuzz;
pub mod golden;
pub mod lab;
pub mod netns;
pub mod packets;
pub mod privileges;
pub mod soak;
pub mod testrun;

/// The `lb-ctl` binary the root suites drive: `LB_CTL_BIN`, else the workspace's debug build,
/// brought up to date now (a no-op when `cargo xtask test` just built it; a stale binary
/// would test old code). Built once per process: suites call this for every command.
pub fn lb_ctl_bin() -> std::path::PathBuf {
    static BIN: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(build_lb_ctl).clone()
}

/// lb-ctl built with the maps in layout version 1 (feature `layout-v1-test`), the "previous
/// release" an upgrade test starts from; `LB_CTL_V1_BIN` overrides it. Built into a target
/// directory of its own (`<target>/layout-v1`), so the build under test is not replaced.
pub fn lb_ctl_v1_bin() -> std::path::PathBuf {
    static BIN: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(path) = std::env::var_os("LB_CTL_V1_BIN") {
            return path.into();
        }
        let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| workspace.join("target"))
            .join("layout-v1");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = std::process::Command::new(cargo)
            .args(["build", "--quiet", "-p", "lb-ctl", "--features", "layout-v1-test", "--target-dir"])
            .arg(&target)
            .current_dir(&workspace)
            .status()
            .expect("running cargo build -p lb-ctl --features layout-v1-test");
        assert!(status.success(), "cargo build -p lb-ctl --features layout-v1-test failed");
        target.join("debug/lb-ctl")
    })
    .clone()
}

fn build_lb_ctl() -> std::path::PathBuf {
    if let Some(path) = std::env::var_os("LB_CTL_BIN") {
        return path.into();
    }
    let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map(std::path::PathBuf::from).unwrap_or_else(|| workspace.join("target"));
    let path = target.join("debug/lb-ctl");
    {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = std::process::Command::new(cargo)
            .args(["build", "--quiet", "-p", "lb-ctl"])
            .current_dir(&workspace)
            .status()
            .expect("running cargo build -p lb-ctl");
        assert!(status.success(), "cargo build -p lb-ctl failed");
    }
    path
}
