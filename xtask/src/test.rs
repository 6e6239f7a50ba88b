//! `cargo xtask test`: setup when needed, then every suite. The root suites (golden packets,
//! end to end) run one test at a time: they share the kernel's network state.
use crate::util::{cmd, cmd_env, is_root, step};

pub fn run() -> anyhow::Result<()> {
    crate::setup::run()?;
    if !is_root() {
        println!("note: not root: the golden-packet and end-to-end suites will print SKIPPED");
    }
    step("formatting (cargo fmt --check, rustfmt.toml)");
    cmd("cargo", &["fmt", "--all", "--check"])?;
    step("lints: host crates (stable clippy, warnings are errors)");
    cmd(
        "cargo",
        &[
            "clippy",
            "--all-targets",
            "-p",
            "lb-common",
            "-p",
            "lb-ctl",
            "-p",
            "lb-proxy",
            "-p",
            "xtask",
            "-p",
            "lb-tests",
        ]
        .into_iter()
        .chain(["--features", "lb-common/user", "--", "-D", "warnings"])
        .collect::<Vec<_>>(),
    )?;
    step("lints: the XDP programs (nightly clippy for the BPF target)");
    cmd(
        "rustup",
        &[
            "run",
            "nightly",
            "cargo",
            "clippy",
            "-p",
            "lb-ebpf",
            "--target",
            "bpfel-unknown-none",
            "-Z",
            "build-std=core",
            "--target-dir",
            "target/bpf-clippy",
            "--",
            "-D",
            "warnings",
        ],
    )?;
    step("unit suites (every host crate but the root suites; lb-ebpf is tested through them)");
    cmd(
        "cargo",
        &["test", "-p", "lb-common", "-p", "lb-ctl", "-p", "lb-proxy", "-p", "xtask", "--features", "lb-common/user"],
    )?;
    // The upgrade suite's "previous release": built in the same target directory (only the
    // three crates the feature touches compile again, not every dependency), then set apart
    // before the build under test takes target/debug/lb-ctl back.
    step("building the previous map layout's lb-ctl (feature layout-v1-test) for the upgrade suite");
    cmd("cargo", &["build", "-p", "lb-ctl", "--features", "layout-v1-test"])?;
    let target = crate::util::target_dir();
    let v1 = target.join("layout-v1");
    std::fs::create_dir_all(&v1)?;
    std::fs::copy(target.join("debug/lb-ctl"), v1.join("lb-ctl"))?;
    step("building the lb-ctl binary the end-to-end suites drive");
    cmd("cargo", &["build", "-p", "lb-ctl"])?;
    step(
        "root suites: golden packets through the real XDP programs, namespace end to end (scale-out with BIRD, the fleet with etcd: fleet_e2e)",
    );
    let v1_bin = v1.join("lb-ctl").display().to_string();
    cmd_env(
        "cargo",
        &["test", "-p", "lb-tests", "--", "--test-threads=1", "--skip", "soak"],
        &[("LB_CTL_V1_BIN", v1_bin.as_str())],
    )?;
    step("soak: a 2-minute seeded pass of `cargo xtask soak` (resources bounded, no connection broken)");
    cmd_env(
        "cargo",
        &["test", "-p", "lb-tests", "--test", "soak", "--", "--test-threads=1"],
        &[("LB_SOAK_MINUTES", "2"), ("LB_SOAK_SEED", "1")],
    )?;
    println!("all suites passed");
    Ok(())
}
