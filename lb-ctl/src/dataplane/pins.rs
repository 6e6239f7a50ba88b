//! The running daemon's own hold on the balancer it pinned, and what puts the pins back.
//!
//! The pins are what let the balancer outlive the daemon, but they are files: an operator's
//! `rm -rf`, a tmpfiles rule or a container restart removes them, and a pinned link that was
//! the program's only holder then takes the program off the interface at once. So the daemon
//! keeps a descriptor of its own on the XDP link (the program stays attached while it runs,
//! pins or not), and checks every few seconds that the pins are there, pinning again what is
//! missing from the descriptors it holds (the link's, the maps' in the loaded object).
//!
//! The link can also lose its interface: `bpftool link detach`, or the interface deleted and
//! made again (a driver reload, a bond or VLAN rebuilt). The program is then off the
//! interface while the daemon runs; the same check attaches it again, by the interface's
//! name, as soon as there is one (`attach::attach_again`).
use std::ffi::CString;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use aya::Ebpf;

use super::load::{AttachMode, PINNED_MAPS};
use super::{Result, err};

/// The bpf(2) commands used here (uapi/linux/bpf.h).
const BPF_OBJ_PIN: libc::c_long = 6;
const BPF_OBJ_GET: libc::c_long = 7;

/// `union bpf_attr` as BPF_OBJ_PIN and BPF_OBJ_GET read it.
#[repr(C)]
#[derive(Default)]
struct ObjAttr {
    pathname: u64,
    bpf_fd: u32,
    file_flags: u32,
    path_fd: i32,
    _pad: u32,
}

fn c_path(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| err(format!("{}: a NUL in the path", path.display())))
}

/// bpf(2) with `attr`, a `union bpf_attr` member as the command reads it.
pub(super) fn bpf<A>(cmd: libc::c_long, attr: &A) -> std::io::Result<libc::c_long> {
    // SAFETY: bpf(2) with an attribute of the size passed, which lives across the call.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr as *const A, size_of::<A>()) };
    if rc < 0 { Err(std::io::Error::last_os_error()) } else { Ok(rc) }
}

/// A new descriptor of the BPF object pinned at `path`.
pub(super) fn obj_get(path: &Path) -> Result<OwnedFd> {
    let name = c_path(path)?;
    let attr = ObjAttr { pathname: name.as_ptr() as u64, ..Default::default() };
    let fd = bpf(BPF_OBJ_GET, &attr).map_err(|e| err(format!("opening {}: {e}", path.display())))?;
    // SAFETY: BPF_OBJ_GET returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Pins the object of `fd` at `path`.
fn obj_pin(fd: &OwnedFd, path: &Path) -> Result<()> {
    let name = c_path(path)?;
    let attr = ObjAttr { pathname: name.as_ptr() as u64, bpf_fd: fd.as_raw_fd() as u32, ..Default::default() };
    bpf(BPF_OBJ_PIN, &attr).map(|_| ()).map_err(|e| err(format!("pinning {}: {e}", path.display())))
}

/// Where the balancer was put, for attaching it again: the interface's name and the mode.
#[derive(Clone, Debug)]
pub struct Placement {
    pub iface: String,
    pub mode: AttachMode,
}

/// The daemon's hold on the balancer's pins: its own descriptor on the XDP link.
pub struct PinKeeper {
    dir: PathBuf,
    link_path: PathBuf,
    /// The XDP link: while this is open, the program stays on the interface.
    link: OwnedFd,
    placement: Placement,
}

impl PinKeeper {
    /// Takes a descriptor of the link pinned as `link_path` in `dir`, which put the program
    /// on the interface as `placement` says.
    pub fn open(dir: &Path, link_path: &Path, placement: Placement) -> Result<PinKeeper> {
        Ok(PinKeeper {
            dir: dir.to_path_buf(),
            link_path: link_path.to_path_buf(),
            link: obj_get(link_path)?,
            placement,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn link_path(&self) -> &Path {
        &self.link_path
    }

    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// Pins again whatever of the directory, the maps of `ebpf` and the link is missing;
    /// returns what was put back (empty: nothing was missing).
    pub fn restore(&self, ebpf: &Ebpf) -> Result<Vec<String>> {
        let mut restored = Vec::new();
        if !self.dir.exists() {
            std::fs::create_dir_all(&self.dir).map_err(|e| err(format!("creating {}: {e}", self.dir.display())))?;
            restored.push(format!("directory {}", self.dir.display()));
        }
        for name in PINNED_MAPS {
            let path = self.dir.join(name);
            if path.exists() {
                continue;
            }
            let Some(map) = ebpf.map(name) else { continue };
            map.pin(&path).map_err(|e| err(format!("pinning {}: {e}", path.display())))?;
            restored.push(format!("map {name}"));
        }
        if !self.link_path.exists() {
            obj_pin(&self.link, &self.link_path)?;
            restored.push("XDP link".into());
        }
        // The layout record too, so the next start knows what it finds (sizes alone do not).
        if !self.dir.join(super::layout::HEADER).exists() {
            super::layout::write_header(&self.dir)?;
            restored.push("layout record".into());
        }
        Ok(restored)
    }

    /// Whether the link still has the program on an interface: the kernel shows the link's
    /// interface in its fdinfo, 0 once it was detached (`bpftool link detach`, interface gone).
    pub fn attached(&self) -> bool {
        let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", self.link.as_raw_fd())).unwrap_or_default();
        ifindex_of(&info).is_none_or(|i| i != 0)
    }
}

/// The `ifindex:` line of an XDP link's fdinfo.
fn ifindex_of(fdinfo: &str) -> Option<u32> {
    fdinfo.lines().find_map(|l| l.strip_prefix("ifindex:")).and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interface_is_read_from_the_links_fdinfo() {
        let attached =
            "pos:\t0\nflags:\t02000000\nlink_type:\txdp\nlink_id:\t7\nprog_tag:\tab\nprog_id:\t31\nifindex:\t2\n";
        assert_eq!(ifindex_of(attached), Some(2));
        assert_eq!(ifindex_of("link_type:\txdp\nifindex:\t0\n"), Some(0));
        assert_eq!(ifindex_of("link_type:\txdp\n"), None);
    }
}
