//! Builds Katran's balancer object in a checkout that has none, as Katran's
//! build_bpf_modules_opensource.sh does (the same copies into `_build/deps/bpfprog`, then its
//! Makefile-bpf), with Debian's clang and llc (`cargo xtask setup` installs them) in place of
//! the clang 12 that build_katran.sh downloads.
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context as _;

/// Where the build leaves the object, relative to the checkout (where Katran's own build does).
pub const OBJECT: &str = "_build/deps/bpfprog/bpf/balancer.bpf.o";
/// What marks a Katran checkout.
const MAKEFILE: &str = "katran/lib/Makefile-bpf";

/// Whether `dir` is a Katran checkout this can build.
pub fn is_checkout(dir: &Path) -> bool {
    dir.join(MAKEFILE).is_file()
}

/// Builds `checkout`'s balancer object; returns its path.
pub fn build(checkout: &Path) -> anyhow::Result<PathBuf> {
    let work = checkout.join("_build/deps/bpfprog");
    println!("Katran: building {OBJECT} in {} with Debian's clang", checkout.display());
    if work.exists() {
        std::fs::remove_dir_all(&work).with_context(|| format!("removing {}", work.display()))?;
    }
    for dir in ["include", "katran/lib"] {
        std::fs::create_dir_all(work.join(dir))?;
    }
    std::fs::copy(checkout.join(MAKEFILE), work.join("Makefile"))?;
    let src = |p: &str| checkout.join(p).into_os_string();
    run(Command::new("cp")
        .arg("-r")
        .arg(src("katran/lib/bpf"))
        .arg(src("katran/lib/linux_includes"))
        .arg(work.join("katran/lib")))?;
    run(Command::new("cp").arg("-r").arg(src("katran/decap/bpf")).arg(&work))?;
    let includes = std::fs::read_dir(checkout.join("katran/lib/linux_includes"))?;
    for entry in includes {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            std::fs::copy(entry.path(), work.join("include").join(entry.file_name()))?;
        }
    }
    run(Command::new("make").current_dir(&work).args(["CLANG=clang", "LLC=llc", "bpf/balancer.bpf.o"]))
        .context("building Katran's balancer (cargo xtask setup installs clang and llvm)")?;
    Ok(checkout.join(OBJECT))
}

fn run(command: &mut Command) -> anyhow::Result<()> {
    let status = command.status().with_context(|| format!("running {command:?}"))?;
    anyhow::ensure!(status.success(), "{command:?} failed ({status})");
    Ok(())
}
