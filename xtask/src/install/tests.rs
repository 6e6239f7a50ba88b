//! Install into a temporary prefix and use what was installed; uninstall; the .deb's contents;
//! the units as systemd reads them. Uses the debug lb-ctl binary (`cargo test -p lb-ctl` and
//! `cargo xtask test` build it): the release build is the only step not exercised here.
use std::path::{Path, PathBuf};
use std::process::Command;

use super::*;
use crate::package;

/// The lb-ctl binary the tests install.
fn lb_ctl_binary() -> PathBuf {
    let binary = target_dir().join("debug/lb-ctl");
    if !binary.exists() {
        cmd("cargo", &["build", "-p", "lb-ctl"]).expect("building lb-ctl");
    }
    binary
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(files_under(&path));
        } else {
            found.push(path);
        }
    }
    found
}

fn run_ok(program: &Path, args: &[&str]) -> String {
    let out = Command::new(program).args(args).output().unwrap();
    assert!(out.status.success(), "{} {args:?}: {}", program.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn install_runs_from_the_prefix_and_uninstall_leaves_it_empty() {
    let prefix = tempfile::tempdir().unwrap();
    let layout = Layout::for_prefix(Some(prefix.path()));
    install(&lb_ctl_binary(), &layout).unwrap();

    let bin = prefix.path().join("bin/lb-ctl");
    assert!(run_ok(&bin, &["--version"]).starts_with(&format!("lb-ctl {}", package::VERSION)));
    let example = prefix.path().join("etc/lb-ctl/lb.toml.example");
    assert!(run_ok(&bin, &["validate", "--config", example.to_str().unwrap()]).contains(": ok ("));
    for path in [
        "lib/systemd/system/lb-ctl@.service",
        "lib/systemd/system/lb-ctl-proxy.service",
        "share/bash-completion/completions/lb-ctl",
        "share/zsh/site-functions/_lb-ctl",
        "share/fish/vendor_completions.d/lb-ctl.fish",
        "share/man/man1/lb-ctl.1",
        "share/man/man1/lb-ctl-attach.1",
        "share/man/man1/lb-ctl-backends-add.1",
        "share/doc/lb-ctl/lb.toml.example",
        "share/doc/lb-ctl/monitoring/grafana-dashboard.json",
        "share/doc/lb-ctl/monitoring/alerts.yml",
    ] {
        assert!(prefix.path().join(path).is_file(), "{path} not installed");
    }
    // The units name the installed binary and configuration.
    let unit = std::fs::read_to_string(prefix.path().join("lib/systemd/system/lb-ctl@.service")).unwrap();
    assert!(
        unit.contains(&format!("ExecStart={} attach %i --config {}/%i.toml", bin.display(), layout.config.display())),
        "{unit}"
    );
    verify_units(&prefix.path().join("lib/systemd/system"));

    // A second install keeps the operator's configuration.
    std::fs::write(&example, "# edited\n").unwrap();
    install(&lb_ctl_binary(), &layout).unwrap();
    assert_eq!(std::fs::read_to_string(&example).unwrap(), "# edited\n");
    std::fs::remove_file(&example).unwrap();
    install(&lb_ctl_binary(), &layout).unwrap();

    uninstall(&layout).unwrap();
    let left: Vec<_> = std::fs::read_dir(prefix.path()).unwrap().collect();
    assert!(left.is_empty(), "uninstall left {left:?}");
}

#[test]
fn uninstall_keeps_files_it_did_not_install() {
    let prefix = tempfile::tempdir().unwrap();
    let layout = Layout::for_prefix(Some(prefix.path()));
    install(&lb_ctl_binary(), &layout).unwrap();
    let mine = prefix.path().join("etc/lb-ctl/eth0.toml");
    std::fs::write(&mine, "# the operator's\n").unwrap();
    uninstall(&layout).unwrap();
    assert_eq!(files_under(prefix.path()), vec![mine]);
}

#[test]
fn the_deb_holds_the_binary_units_completions_and_man_pages() {
    let out = tempfile::tempdir().unwrap();
    let deb = package::build_deb(&lb_ctl_binary(), out.path(), package::Compression::None).unwrap();
    let name = deb.file_name().unwrap().to_str().unwrap().to_string();
    assert!(name.starts_with(&format!("lb-ctl_{}_", package::VERSION)), "{name}");
    let listing = run_ok(Path::new("dpkg-deb"), &["-c", deb.to_str().unwrap()]);
    for path in [
        "./usr/bin/lb-ctl",
        "./lib/systemd/system/lb-ctl@.service",
        "./lib/systemd/system/lb-ctl-proxy.service",
        "./usr/share/bash-completion/completions/lb-ctl",
        "./usr/share/zsh/site-functions/_lb-ctl",
        "./usr/share/fish/vendor_completions.d/lb-ctl.fish",
        "./usr/share/man/man1/lb-ctl.1",
        "./usr/share/man/man1/lb-ctl-proxy.1",
        "./etc/lb-ctl/lb.toml.example",
        "./usr/share/doc/lb-ctl/monitoring/alerts.yml",
    ] {
        assert!(listing.lines().any(|l| l.ends_with(path)), "{path} not in the .deb:\n{listing}");
    }
    assert!(!listing.contains("installed-files"), "the install manifest is not packaged");
    let info = run_ok(Path::new("dpkg-deb"), &["-f", deb.to_str().unwrap(), "Version"]);
    assert_eq!(info.trim(), package::VERSION);
}

/// `systemd-analyze verify` on the installed units (it also checks the binary they name exists).
/// Without systemd-analyze (Debian package systemd, which `cargo xtask setup` installs) it says
/// SKIPPED, and under CI (`CI` set) fails instead.
fn verify_units(dir: &Path) {
    let found = Command::new("systemd-analyze").arg("--version").output().is_ok();
    if !can_verify(found, std::env::var_os("CI").is_some()) {
        return;
    }
    for unit in ["lb-ctl@eth0.service", "lb-ctl-proxy.service"] {
        // A template is verified through an instance; systemd finds it next to the instance name.
        let template = unit.replace("eth0", "");
        let instance = dir.join(unit);
        if unit != template {
            std::os::unix::fs::symlink(dir.join(&template), &instance).unwrap();
        }
        let out = Command::new("systemd-analyze").arg("verify").arg(&instance).output().unwrap();
        if unit != template {
            std::fs::remove_file(&instance).unwrap();
        }
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "systemd-analyze verify {unit}: {err}");
        assert!(!err.contains(&dir.display().to_string()) || err.trim().is_empty(), "{unit}: {err}");
    }
}

/// Whether the units can be verified: without systemd-analyze it prints SKIPPED, or under CI
/// fails.
fn can_verify(systemd_analyze: bool, ci: bool) -> bool {
    if systemd_analyze {
        return true;
    }
    assert!(
        !ci,
        "verify_units: systemd-analyze not found (Debian package systemd; `cargo xtask setup` installs it) and CI is set: refusing to skip"
    );
    eprintln!("SKIPPED (needs systemd-analyze, Debian package systemd): installed units not verified");
    false
}

#[test]
#[should_panic(expected = "CI is set: refusing to skip")]
fn units_not_verifiable_fail_under_ci() {
    can_verify(false, true);
}

#[test]
fn units_not_verifiable_skip_outside_ci() {
    assert!(!can_verify(false, false));
    assert!(can_verify(true, true));
}

/// `cargo xtask setup` installs what verify_units runs: on Debian 12 systemd-analyze is in the
/// systemd package.
#[test]
fn setup_installs_systemd_analyze() {
    assert!(crate::setup::DEBIAN_PACKAGES.contains(&"systemd"));
}
