//! Where lb-ctl keeps things on the host: the run directory (control sockets, saved ids, the
//! attach mode), and the bpffs directories of pinned programs and maps. Every path is built
//! here, nowhere else.
//!
//! Names of per-interface things are shared by every network namespace on the host, interface
//! names are not: outside the initial namespace they carry the namespace's inode
//! (`eth0@netns4026532xxx`), see [`netns_suffix`].
use std::io;
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

/// The run directory: control sockets, saved ids, attach modes. Root only (0700).
pub const RUN_DIR: &str = "/run/lb-ctl";
/// bpffs directory holding one directory per attached program.
pub const BPFFS_ROOT: &str = "/sys/fs/bpf/lb-ctl";

/// The initial namespace's fixed inode (PROC_NET_INIT_INO), for when /proc/1 is not ours to
/// read (containers, sandboxes).
const PROC_NET_INIT_INO: u64 = 0xEFFF_FFF9;

/// "" in the initial network namespace, "@netnsINODE" in any other.
pub fn netns_suffix() -> String {
    let inode = |path: &str| std::fs::metadata(path).map(|m| m.ino()).ok();
    let Some(own) = inode("/proc/thread-self/ns/net") else { return String::new() };
    let init = inode("/proc/1/ns/net").unwrap_or(PROC_NET_INIT_INO);
    if own == init || own == PROC_NET_INIT_INO { String::new() } else { format!("@netns{own}") }
}

/// The /proc directory of a process whose mount namespace outlives this process: pid 1 (the
/// host's, or a container's for its whole life), else the parent (where pid 1 cannot be read,
/// as in some sandboxes; `ip netns exec` gives its command a mount namespace its parent does
/// not share).
fn lasting_process() -> Option<String> {
    // SAFETY: getppid has no preconditions.
    let parent = unsafe { libc::getppid() };
    [1, parent].into_iter().map(|pid| format!("/proc/{pid}")).find(|p| std::fs::metadata(format!("{p}/ns/mnt")).is_ok())
}

/// Whether this process shares the mount namespace of a lasting process (see
/// [`lasting_process`]): mounts made in another one vanish with it. True when none can be read.
pub fn in_lasting_mount_namespace() -> bool {
    let inode = |path: &str| std::fs::metadata(path).map(|m| m.ino()).ok();
    let Some(lasting) = lasting_process() else { return true };
    match (inode("/proc/thread-self/ns/mnt"), inode(&format!("{lasting}/ns/mnt"))) {
        (Some(own), Some(other)) => own == other,
        _ => true,
    }
}

/// Whether `path` is the same filesystem here as for a lasting process (true when that
/// cannot be read).
pub fn same_filesystem_as_lasting(path: &str) -> bool {
    let dev = |p: &str| std::fs::metadata(p).map(|m| m.dev()).ok();
    let Some(lasting) = lasting_process() else { return true };
    match (dev(path), dev(&format!("{lasting}/root{path}"))) {
        (Some(own), Some(other)) => own == other,
        _ => true,
    }
}

/// `iface` as named in host-wide paths: with the namespace suffix.
fn host_name(iface: &str) -> String {
    format!("{iface}{}", netns_suffix())
}

/// The default control socket of the daemon on `iface`.
pub fn api_socket(iface: &str) -> PathBuf {
    Path::new(RUN_DIR).join(format!("{}.sock", host_name(iface)))
}

/// Whether `path` (in [`RUN_DIR`]) is the control socket of a daemon of this network namespace.
pub fn is_own_socket(path: &Path) -> bool {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let suffix = netns_suffix();
    name.ends_with(".sock")
        && if suffix.is_empty() { !name.contains("@netns") } else { name.ends_with(&format!("{suffix}.sock")) }
}

/// The default control socket of `lb-ctl proxy`: in [`RUN_DIR`] for root (named for its
/// network namespace, like a daemon's, so the commands of that namespace find it), else in the
/// user's own run directory (see [`user_run_dir`]).
pub fn proxy_socket() -> PathBuf {
    match user_run_dir() {
        None => Path::new(RUN_DIR).join(format!("{}.sock", host_name("proxy"))),
        Some(dir) => dir.join("proxy.sock"),
    }
}

/// Where an unprivileged user's `lb-ctl proxy` keeps its socket: under the user's runtime
/// directory (or /tmp/lb-ctl-UID). None for root, whose sockets are in [`RUN_DIR`].
pub fn user_run_dir() -> Option<PathBuf> {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    if uid == 0 {
        return None;
    }
    Some(match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(dir) => PathBuf::from(dir).join("lb-ctl"),
        None => PathBuf::from(format!("/tmp/lb-ctl-{uid}")),
    })
}

/// bpffs directory of the balancer on `iface`.
pub fn pin_dir(iface: &str) -> PathBuf {
    Path::new(BPFFS_ROOT).join(host_name(iface))
}

/// bpffs directory of the DSR decapsulator on `iface`.
pub fn decap_pin_dir(iface: &str) -> PathBuf {
    Path::new(BPFFS_ROOT).join(format!("decap-{}", host_name(iface)))
}

/// Where the files of one attached program live: its pins and its run-time files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttachPaths {
    /// bpffs directory of the program's link and maps.
    pub pin_dir: PathBuf,
    /// Directory of the saved ids and the attach mode ([`RUN_DIR`] unless `--state-dir`).
    pub state_dir: PathBuf,
    /// The file-name stem of the run-time files (interface and namespace suffix).
    stem: String,
}

impl AttachPaths {
    /// The balancer on `iface`, with the directories given on the command line, if any.
    pub fn balancer(iface: &str, pin_dir: Option<PathBuf>, state_dir: Option<PathBuf>) -> Self {
        AttachPaths {
            pin_dir: pin_dir.unwrap_or_else(|| self::pin_dir(iface)),
            state_dir: state_dir.unwrap_or_else(|| PathBuf::from(RUN_DIR)),
            stem: host_name(iface),
        }
    }

    /// The decapsulator on `iface`.
    pub fn decap(iface: &str) -> Self {
        AttachPaths {
            pin_dir: decap_pin_dir(iface),
            state_dir: PathBuf::from(RUN_DIR),
            stem: format!("decap-{}", host_name(iface)),
        }
    }

    /// The VIP and backend ids, kept across restarts.
    pub fn ids_file(&self) -> PathBuf {
        self.state_dir.join(format!("{}.ids.json", self.stem))
    }

    /// The lock a running daemon holds for its life (see `cli::instance`).
    pub fn lock_file(&self) -> PathBuf {
        self.state_dir.join(format!("{}.lock", self.stem))
    }

    /// The attach mode of the pinned link, which the link itself does not tell (bpffs holds
    /// only BPF objects).
    pub fn mode_file(&self) -> PathBuf {
        self.state_dir.join(format!("{}.xdp-mode", self.stem))
    }
}

/// Creates `dir` and its missing parents, root only (0700): sockets and saved state are
/// nobody else's business. The run directory is made 0700 even when it exists.
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    if !dir.exists() {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    } else if dir == Path::new(RUN_DIR) {
        // Older versions' `decap attach` made it 0755.
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Makes `path` readable and writable by its owner only.
pub fn make_private(path: &Path) -> io::Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_dir_moves_every_run_time_file() {
        let p = AttachPaths::balancer("eth0", None, Some(PathBuf::from("/tmp/x")));
        let stem = host_name("eth0");
        assert_eq!(p.ids_file(), PathBuf::from(format!("/tmp/x/{stem}.ids.json")));
        assert_eq!(p.mode_file(), PathBuf::from(format!("/tmp/x/{stem}.xdp-mode")));
        assert_eq!(p.pin_dir, pin_dir("eth0"));
    }

    #[test]
    fn defaults_live_in_the_run_dir() {
        let p = AttachPaths::balancer("eth0", None, None);
        assert!(p.ids_file().starts_with(RUN_DIR));
        assert!(api_socket("eth0").starts_with(RUN_DIR));
        assert!(AttachPaths::decap("eth0").mode_file().starts_with(RUN_DIR));
        assert_ne!(AttachPaths::decap("eth0").mode_file(), p.mode_file());
    }
}
