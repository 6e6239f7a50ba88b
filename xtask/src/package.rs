//! `cargo xtask package`: a Debian package (built with dpkg-deb) holding what `cargo xtask
//! install` installs, laid out for /usr, version from Cargo.toml.
use std::path::{Path, PathBuf};

use anyhow::Context as _;

use crate::install::{self, Layout};
use crate::util::{cmd, output, step, target_dir};

pub const VERSION: &str = env!("CARGO_PKG_VERSION");

pub fn run() -> anyhow::Result<()> {
    let binary = install::build_release()?;
    let deb = build_deb(&binary, &target_dir().join("debian"), Compression::Xz)?;
    println!("built {}", deb.display());
    Ok(())
}

/// How dpkg-deb compresses the package.
pub enum Compression {
    /// For a package to ship.
    Xz,
    /// For the tests, which package a large debug binary.
    #[cfg_attr(not(test), allow(dead_code))]
    None,
}

/// Builds `lb-ctl_VERSION_ARCH.deb` in `out_dir` around `binary`; returns its path.
pub fn build_deb(binary: &Path, out_dir: &Path, compression: Compression) -> anyhow::Result<PathBuf> {
    let arch = output("dpkg", &["--print-architecture"]).context("dpkg --print-architecture (is this Debian?)")?;
    let arch = arch.trim();
    let root = install::scratch_dir("deb-root")?;
    step(&format!("staging lb-ctl {VERSION} ({arch}) in {}", root.display()));
    // Files under /etc are the operator's: dpkg keeps their changes (conffiles).
    let files = install::install(binary, &Layout::debian(&root))?;
    // The manifest is for `install --uninstall`; dpkg keeps its own list.
    let manifest = files.last().context("an install creates files")?;
    std::fs::remove_file(root.join(manifest.strip_prefix("/")?))?;
    std::fs::remove_dir(root.join(manifest.parent().unwrap().strip_prefix("/")?))?;
    let conffiles: String = files
        .iter()
        .filter(|p| p.starts_with("/etc") && root.join(p.strip_prefix("/").unwrap()).is_file())
        .map(|p| format!("{}\n", p.display()))
        .collect();
    let debian = root.join("DEBIAN");
    std::fs::create_dir_all(&debian)?;
    std::fs::write(debian.join("control"), control(arch))?;
    std::fs::write(debian.join("conffiles"), conffiles)?;
    std::fs::create_dir_all(out_dir)?;
    let deb = out_dir.join(format!("lb-ctl_{VERSION}_{arch}.deb"));
    let compression = match compression {
        Compression::Xz => "-Zxz",
        Compression::None => "-Znone",
    };
    cmd(
        "dpkg-deb",
        &[compression, "--root-owner-group", "--build", &root.display().to_string(), &deb.display().to_string()],
    )?;
    std::fs::remove_dir_all(&root)?;
    Ok(deb)
}

fn control(arch: &str) -> String {
    format!(
        "Package: lb-ctl\n\
         Version: {VERSION}\n\
         Architecture: {arch}\n\
         Maintainer: lb-ctl developers <dev@lb-ctl.invalid>\n\
         Section: net\n\
         Priority: optional\n\
         Depends: libc6\n\
         Description: XDP load balancer: daemon and control commands\n \
         lb-ctl loads an XDP Maglev balancer on an interface, owns its maps and serves\n \
         the control API; it also runs the userspace proxy for HTTP/TLS VIPs.\n"
    )
}
