//! `cargo xtask test`: setup when needed, then every suite. The root suites (golden packets,
//! end to end) run one test at a time: they share the kernel's network state.
use crate::util::{cmd, cmd_env, is_root, step};

pub fn run() -> anyhow::Result<()> {
    crate::setup::run()?;
    if !is_root() {
        println!("note: not root: the golden-packet and end-to-end suites will print SKIPPED");
    }
    warn_if_short_of_disk();
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
    // `--exact`: the soak test alone is left to its own step; a plain `--skip` matches by
    // substring, and would silently leave out any other test whose name holds "soak".
    cmd_env(
        "cargo",
        &["test", "-p", "lb-tests", "--", "--test-threads=1", "--skip", "soak", "--exact"],
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

/// About what a full run writes under target/ from a clean clone (measured: 6.8 GB).
const DISK_NEEDED_GIB: u64 = 8;

/// Says so up front when the disk under target/ has less room than a full run writes: a disk
/// that fills mid-link shows only as the linker dying with SIGBUS, far into the run.
fn warn_if_short_of_disk() {
    let target = crate::util::target_dir();
    let dir = if target.exists() { target } else { std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")) };
    let free = crate::util::output("df", &["--output=avail", "-B1", &dir.display().to_string()])
        .and_then(|out| out.lines().nth(1).and_then(|l| l.trim().parse::<u64>().ok()));
    if let Some(free) = free
        && free < DISK_NEEDED_GIB << 30
    {
        println!(
            "warning: {:.1} GiB free under {}; a full test run writes about {DISK_NEEDED_GIB} GiB there, and a link that fills the disk fails with SIGBUS",
            free as f64 / (1u64 << 30) as f64,
            dir.display()
        );
    }
}
