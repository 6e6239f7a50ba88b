//! `lb-ctl export`: the binary prints the golden outputs, and the nftables ruleset is valid
//! for `nft` (checked with `nft -c`, which loads nothing, in a network namespace made here).
//! The check needs root and nft: prints SKIPPED without them, and fails in CI (env CI set).
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_lb-ctl");
const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/cli/export_golden");

fn export(format: &str) -> String {
    let out = Command::new(BIN).args(["export", format, "-c", "lb.toml"]).current_dir(GOLDEN).output().unwrap();
    assert!(out.status.success(), "export {format}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn export_prints_the_golden_ruleset_and_commands() {
    let golden = |name: &str| std::fs::read_to_string(Path::new(GOLDEN).join(name)).unwrap();
    assert_eq!(export("nft"), golden("lb.nft"));
    assert_eq!(export("ipvs"), golden("lb.ipvs"));
}

#[test]
fn export_of_a_bad_config_prints_its_mistakes_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lb.toml");
    std::fs::write(&path, "[[vip]]\naddress = \"203.0.113.10\"\nport = 80\nbackend = []\n").unwrap();
    let out = Command::new(BIN).args(["export", "nft", "-c"]).arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stderr).contains("lb.toml:"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A network namespace of this run, removed on drop.
struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

#[test]
fn the_nft_export_is_a_valid_ruleset() {
    let test = "the_nft_export_is_a_valid_ruleset";
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let nft = Command::new("nft").arg("--version").output().is_ok_and(|o| o.status.success());
    if !root || !nft {
        assert!(std::env::var_os("CI").is_none(), "{test} needs root and nft, and CI must run it");
        println!("SKIPPED (needs root and nft): {test}");
        return;
    }
    let ns = Netns(format!("lbt-{}-export", std::process::id()));
    let out = Command::new("ip").args(["netns", "add", &ns.0]).output().unwrap();
    assert!(out.status.success(), "ip netns add {}: {}", ns.0, String::from_utf8_lossy(&out.stderr));
    let mut check = Command::new("ip")
        .args(["netns", "exec", &ns.0, "nft", "-c", "-f", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    check.stdin.take().unwrap().write_all(export("nft").as_bytes()).unwrap();
    let out = check.wait_with_output().unwrap();
    assert!(out.status.success(), "nft -c refused the export: {}", String::from_utf8_lossy(&out.stderr));
}
