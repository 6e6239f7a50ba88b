//! Running commands and saying what is being done.
use std::process::{Command, Stdio};

use anyhow::{Context as _, bail};

/// Prints a step the task is taking.
pub fn step(what: &str) {
    println!("==> {what}");
}

/// Runs a command with inherited output; fails if it fails.
pub fn cmd(program: &str, args: &[&str]) -> anyhow::Result<()> {
    cmd_env(program, args, &[])
}

/// Runs a command with extra environment variables; fails if it fails.
pub fn cmd_env(program: &str, args: &[&str], env: &[(&str, &str)]) -> anyhow::Result<()> {
    let status = Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .status()
        .with_context(|| format!("starting {program}"))?;
    if !status.success() {
        bail!("{program} {} failed: {status}", args.join(" "));
    }
    Ok(())
}

/// Runs a command quietly and returns its stdout if it succeeded.
pub fn output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).stderr(Stdio::null()).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether the current user is root.
pub fn is_root() -> bool {
    output("id", &["-u"]).is_some_and(|uid| uid.trim() == "0")
}

/// The workspace's target directory (`CARGO_TARGET_DIR`, else `target/`).
pub fn target_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
}
