//! `cargo xtask install [--prefix DIR] [--uninstall]`: lb-ctl, its systemd units, shell
//! completions, man pages and example configuration, placed where the system looks for them.
//! What install puts there is listed in a manifest, which `--uninstall` removes exactly.
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};

use crate::util::{cmd, step, target_dir};

const DEFAULT_PREFIX: &str = "/usr/local";
/// The lb-ctl crate: units and example configuration ship from here.
const CRATE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../lb-ctl");
const UNITS: &[&str] = &["lb-ctl@.service", "lb-ctl-proxy.service"];
/// Where the units, as written, expect the binary and the configuration.
const UNIT_BINARY: &str = "/usr/local/bin/lb-ctl";
const UNIT_CONFIG_DIR: &str = "/etc/lb-ctl";

/// Where each kind of file goes. `root` is where files are written (a package's staging
/// directory, or /); the paths the units name are the same ones without `root`.
pub struct Layout {
    pub root: PathBuf,
    pub prefix: PathBuf,
    pub units: PathBuf,
    pub config: PathBuf,
}

impl Layout {
    /// `--prefix DIR` keeps everything under DIR; the default /usr/local puts the units and the
    /// configuration where systemd and the units look (/etc).
    pub fn for_prefix(prefix: Option<&Path>) -> Layout {
        match prefix {
            None => Layout {
                root: "/".into(),
                prefix: DEFAULT_PREFIX.into(),
                units: "/etc/systemd/system".into(),
                config: UNIT_CONFIG_DIR.into(),
            },
            Some(p) => Layout {
                root: "/".into(),
                prefix: p.into(),
                units: p.join("lib/systemd/system"),
                config: p.join("etc/lb-ctl"),
            },
        }
    }

    /// A Debian package's layout, written under `root`.
    pub fn debian(root: &Path) -> Layout {
        Layout {
            root: root.into(),
            prefix: "/usr".into(),
            units: "/lib/systemd/system".into(),
            config: UNIT_CONFIG_DIR.into(),
        }
    }

    fn share(&self) -> PathBuf {
        self.prefix.join("share")
    }

    /// The manifest of an install, listing what it created.
    fn manifest(&self) -> PathBuf {
        self.share().join("lb-ctl/installed-files")
    }

    /// `path` (absolute, as the system sees it) under `root`.
    fn staged(&self, path: &Path) -> PathBuf {
        self.root.join(path.strip_prefix("/").unwrap_or(path))
    }
}

/// `cargo xtask install`: release build, then every file.
pub fn run(prefix: Option<PathBuf>, uninstall: bool) -> anyhow::Result<()> {
    // The units name the installed paths: they must be absolute.
    let prefix = prefix.map(std::path::absolute).transpose().context("--prefix")?;
    let layout = Layout::for_prefix(prefix.as_deref());
    if uninstall {
        return self::uninstall(&layout);
    }
    let binary = build_release()?;
    let created = install(&binary, &layout)?;
    println!(
        "installed {} files under {} (uninstall: cargo xtask install --uninstall{})",
        created.len(),
        layout.prefix.display(),
        prefix.map(|p| format!(" --prefix {}", p.display())).unwrap_or_default()
    );
    Ok(())
}

pub fn build_release() -> anyhow::Result<PathBuf> {
    step("building lb-ctl (release)");
    cmd("cargo", &["build", "--release", "-p", "lb-ctl"])?;
    Ok(target_dir().join("release/lb-ctl"))
}

/// Installs `binary` and the files around it; returns what was created (files, then the
/// directories made for them), which is also written to the manifest.
pub fn install(binary: &Path, layout: &Layout) -> anyhow::Result<Vec<PathBuf>> {
    let mut created = Created::default();
    let bin = layout.prefix.join("bin/lb-ctl");
    created.copy(layout, binary, &bin, 0o755)?;
    for unit in UNITS {
        let text =
            std::fs::read_to_string(Path::new(CRATE_DIR).join(unit)).with_context(|| format!("reading {unit}"))?;
        let text = text
            .replace(UNIT_BINARY, &bin.display().to_string())
            .replace(UNIT_CONFIG_DIR, &layout.config.display().to_string())
            .replace("/usr/share/doc/lb-ctl", &layout.share().join("doc/lb-ctl").display().to_string());
        created.write(layout, &layout.units.join(unit), text.as_bytes(), 0o644)?;
    }
    let share = layout.share();
    for (shell, path) in [
        ("bash", "bash-completion/completions/lb-ctl"),
        ("zsh", "zsh/site-functions/_lb-ctl"),
        ("fish", "fish/vendor_completions.d/lb-ctl.fish"),
    ] {
        let script = run_binary(binary, &["completions", shell])?;
        created.write(layout, &share.join(path), &script, 0o644)?;
    }
    let pages = scratch_dir("man-pages")?;
    run_binary(binary, &["man", &pages.display().to_string()])?;
    let mut names: Vec<_> = std::fs::read_dir(&pages)?.map(|e| e.map(|e| e.file_name())).collect::<Result<_, _>>()?;
    names.sort();
    for name in names {
        created.copy(layout, &pages.join(&name), &share.join("man/man1").join(&name), 0o644)?;
    }
    std::fs::remove_dir_all(&pages)?;
    let example = Path::new(CRATE_DIR).join("lb.toml.example");
    created.copy(layout, &example, &share.join("doc/lb-ctl/lb.toml.example"), 0o644)?;
    // The Grafana dashboard and the Prometheus alert rules, for the monitoring stack to pick up.
    for file in ["grafana-dashboard.json", "alerts.yml"] {
        let from = Path::new(CRATE_DIR).join("monitoring").join(file);
        created.copy(layout, &from, &share.join("doc/lb-ctl/monitoring").join(file), 0o644)?;
    }
    // The operator's configuration directory: an existing file there is never overwritten.
    let config_example = layout.config.join("lb.toml.example");
    if layout.staged(&config_example).exists() {
        println!("kept the existing {}", config_example.display());
    } else {
        created.copy(layout, &example, &config_example, 0o644)?;
    }
    created.finish(layout)
}

/// Removes exactly what the manifest lists: files first, then the directories install made
/// (deepest first, and only if empty: anything added since stays).
pub fn uninstall(layout: &Layout) -> anyhow::Result<()> {
    let manifest = layout.staged(&layout.manifest());
    let text = std::fs::read_to_string(&manifest)
        .with_context(|| format!("reading {} (was lb-ctl installed with this prefix?)", manifest.display()))?;
    for line in text.lines().rev() {
        let path = layout.staged(Path::new(line));
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => {
                if let Err(e) = std::fs::remove_dir(&path) {
                    println!("kept {} ({e})", path.display());
                }
            }
            Ok(_) => std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?,
            Err(_) => println!("already gone: {}", path.display()),
        }
    }
    println!("uninstalled lb-ctl from {}", layout.prefix.display());
    Ok(())
}

/// The files and directories an install created, in creation order.
#[derive(Default)]
struct Created {
    paths: Vec<PathBuf>,
}

impl Created {
    fn write(&mut self, layout: &Layout, path: &Path, contents: &[u8], mode: u32) -> anyhow::Result<()> {
        use std::os::unix::fs::PermissionsExt as _;
        self.make_parents(layout, path)?;
        let staged = layout.staged(path);
        std::fs::write(&staged, contents).with_context(|| format!("writing {}", staged.display()))?;
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(mode))?;
        if !self.paths.iter().any(|p| p == path) {
            self.paths.push(path.into());
        }
        Ok(())
    }

    fn copy(&mut self, layout: &Layout, from: &Path, to: &Path, mode: u32) -> anyhow::Result<()> {
        let contents = std::fs::read(from).with_context(|| format!("reading {}", from.display()))?;
        self.write(layout, to, &contents, mode)
    }

    /// Creates the missing parents of `path`, recording each.
    fn make_parents(&mut self, layout: &Layout, path: &Path) -> anyhow::Result<()> {
        let mut missing: Vec<&Path> = path.ancestors().skip(1).take_while(|d| !layout.staged(d).exists()).collect();
        missing.reverse();
        for dir in missing {
            std::fs::create_dir(layout.staged(dir)).with_context(|| format!("creating {}", dir.display()))?;
            self.paths.push(dir.into());
        }
        Ok(())
    }

    /// Writes the manifest (itself listed in it, so uninstall removes it too).
    /// An earlier install's list comes first: its directories are still the ones install made.
    fn finish(mut self, layout: &Layout) -> anyhow::Result<Vec<PathBuf>> {
        let manifest = layout.manifest();
        self.make_parents(layout, &manifest)?;
        if let Ok(earlier) = std::fs::read_to_string(layout.staged(&manifest)) {
            let mut paths: Vec<PathBuf> = earlier.lines().map(PathBuf::from).filter(|p| *p != manifest).collect();
            paths.extend(self.paths.into_iter().filter(|p| !paths.contains(p)).collect::<Vec<_>>());
            self.paths = paths;
        }
        self.paths.push(manifest.clone());
        let text: String = self.paths.iter().map(|p| format!("{}\n", p.display())).collect();
        std::fs::write(layout.staged(&manifest), text)?;
        Ok(self.paths)
    }
}

fn run_binary(binary: &Path, args: &[&str]) -> anyhow::Result<Vec<u8>> {
    let out = Command::new(binary).args(args).output().with_context(|| format!("running {}", binary.display()))?;
    if !out.status.success() {
        bail!("{} {} failed: {}", binary.display(), args.join(" "), String::from_utf8_lossy(&out.stderr));
    }
    Ok(out.stdout)
}

/// A new empty directory under the target directory, one per call (installs may run side by
/// side in the tests).
pub fn scratch_dir(what: &str) -> anyhow::Result<PathBuf> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = target_dir().join("xtask-scratch").join(format!("{what}-{}-{n}", std::process::id()));
    if path.exists() {
        std::fs::remove_dir_all(&path).with_context(|| format!("emptying {}", path.display()))?;
    }
    std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests;
