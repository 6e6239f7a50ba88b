//! The README's first command, `cargo xtask demo`, builds and runs `lb-demo`; this suite runs
//! that binary as the command does (with the lb-ctl the other suites drive), so a demo that no
//! longer runs to its end, or leaves something of its lab behind, fails here rather than in a
//! newcomer's first minutes. Needs root.
use std::process::Command;

use lb_tests::lb_ctl_bin;
use lb_tests::privileges::require_root;

#[test]
fn the_lab_demo_runs_to_its_end_and_leaves_nothing_behind() {
    if !require_root("demo_e2e") {
        return;
    }
    let out =
        Command::new(env!("CARGO_BIN_EXE_lb-demo")).env("LB_CTL_BIN", lb_ctl_bin()).output().expect("running lb-demo");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let shown = format!("lb-demo {}\n--- stdout\n{stdout}\n--- stderr\n{stderr}", out.status);
    assert!(out.status.success(), "{shown}");
    // What the demo shows a newcomer: IPv4 and IPv6 answered, the killed backend taken out and
    // brought back, and a clean teardown.
    for line in [
        "every request answered, over IPv4 and IPv6, none by backend-1",
        "healthy and back in the ring",
        "demo finished in",
        "torn down: no namespace, pin or file of this run is left",
    ] {
        assert!(stdout.contains(line), "lb-demo never said {line:?}\n{shown}");
    }
    assert!(!stderr.contains("left behind"), "{shown}");
}
