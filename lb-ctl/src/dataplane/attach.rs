//! Putting the balancer on an interface so that it outlives the daemon: maps *and* the XDP link
//! are pinned under a per-interface bpffs directory. A restarted daemon reuses the maps
//! (connection table included) and swaps its freshly loaded program into the pinned link
//! atomically, so packets never see a gap; `detach` unpins everything, which removes the
//! program. The same for the DSR decapsulator on backends.
use std::mem::size_of;
use std::path::{Path, PathBuf};

use aya::maps::MapInfo;
use aya::programs::links::{FdLink, PinnedLink};
use aya::programs::{XdpMode, xdp::XdpLink};
use lb_common::backend::Backend;
use ipnet::Ipv4Net;
use lb_common::flow::{ForwardSet, ReverseSet, flow_sets};
use lb_common::limits::MAX_VIPS;
use lb_common::vip::{VipInfo, VipKey};
use lb_common::{map_names, program_names};

use super::load::{self, AttachMode, LoadOptions};
use super::maps::AyaDataplane;
use super::{DataplaneError, Result};

/// Where lb-ctl pins things: one directory per interface.
pub const BPFFS_ROOT: &str = "/sys/fs/bpf/lb-ctl";
/// The pinned XDP link's file name inside a pin directory.
const LINK: &str = "link";
/// The attach mode of a pinned link, which the link itself does not tell: recorded beside
/// the daemon's other run-time files (bpffs holds only BPF objects).
fn mode_file(dir: &Path) -> PathBuf {
    let name = dir.file_name().map_or_else(|| "lb".into(), |n| n.to_string_lossy().into_owned());
    Path::new("/run/lb-ctl").join(format!("{name}.xdp-mode"))
}

/// bpffs directory of the balancer on `iface` (of the caller's network namespace).
pub fn pin_dir(iface: &str) -> PathBuf {
    Path::new(BPFFS_ROOT).join(format!("{iface}{}", crate::netns::suffix()))
}

/// bpffs directory of the decapsulator on `iface` (of the caller's network namespace).
pub fn decap_pin_dir(iface: &str) -> PathBuf {
    Path::new(BPFFS_ROOT).join(format!("decap-{iface}{}", crate::netns::suffix()))
}

/// How to open the balancer.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    pub mode: AttachMode,
    pub pin_dir: PathBuf,
    pub ring_size: u32,
    pub flow_table_size: u32,
}

/// The attached balancer.
pub struct Opened {
    pub dataplane: AyaDataplane,
    /// The mode the program runs in.
    pub mode: XdpMode,
    /// Auto mode fell back to skb mode: why native mode was refused.
    pub native_refused: Option<String>,
    /// The maps were found pinned (a restart): the connection table was kept.
    pub reused_maps: bool,
    /// A pinned link existed and now runs the new program (no detach in between).
    pub replaced_program: bool,
}

fn err(what: impl std::fmt::Display) -> DataplaneError {
    DataplaneError::Load(what.to_string())
}

/// Mounts bpffs on /sys/fs/bpf if it is not there (a fresh namespace or a minimal host).
pub fn ensure_bpffs() -> Result<()> {
    const BPF_FS_MAGIC: i64 = 0xcafe4a11;
    let path = c"/sys/fs/bpf";
    // SAFETY: statfs with a valid path and a zeroed out-buffer.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(path.as_ptr(), &mut st) } == 0 && st.f_type as i64 == BPF_FS_MAGIC {
        return Ok(());
    }
    // SAFETY: mount(2) with valid C strings.
    let rc = unsafe { libc::mount(c"bpf".as_ptr(), path.as_ptr(), c"bpf".as_ptr(), 0, std::ptr::null()) };
    if rc != 0 {
        return Err(err(format!("mounting bpffs on /sys/fs/bpf: {}", std::io::Error::last_os_error())));
    }
    Ok(())
}

/// Refuses pinned maps that this build cannot use: other layouts (another version) or other
/// sizes (ring or connection-table size changed). Reusing them would corrupt the data plane.
fn check_pinned(dir: &Path, ring_size: u32, flow_table_size: u32) -> Result<bool> {
    let expect: &[(&str, usize, usize, Option<u32>)] = &[
        (map_names::VIPS, size_of::<VipKey>(), size_of::<VipInfo>(), None),
        (map_names::VIP_INFO, 4, size_of::<VipInfo>(), None),
        (map_names::BACKENDS, 4, size_of::<Backend>(), None),
        (map_names::NAT_BACKENDS, size_of::<VipKey>(), 4, None),
        (map_names::RINGS, 4, 4, Some(MAX_VIPS * ring_size)),
        (map_names::FLOWS, 4, size_of::<ForwardSet>(), Some(flow_sets(flow_table_size))),
        (map_names::REVERSE_FLOWS, 4, size_of::<ReverseSet>(), Some(flow_sets(flow_table_size))),
    ];
    let mut found = false;
    for (name, key, value, entries) in expect {
        let path = dir.join(name);
        if !path.exists() {
            continue;
        }
        found = true;
        let info = MapInfo::from_pin(&path).map_err(|e| err(format!("{}: {e}", path.display())))?;
        let mismatch = info.key_size() as usize != *key
            || info.value_size() as usize != *value
            || entries.is_some_and(|n| n != info.max_entries());
        if mismatch {
            return Err(err(format!(
                "the maps pinned in {} were made by another lb-ctl version or with another \
                 ring_size/flow_table_size ({name}: {} entries of {}+{} bytes); keep the old \
                 settings, or run `lb-ctl detach` first (this drops the connection table)",
                dir.display(),
                info.max_entries(),
                info.key_size(),
                info.value_size()
            )));
        }
    }
    Ok(found)
}

/// Loads the balancer with its maps pinned in (or reused from) `options.pin_dir` and puts it
/// on `iface`: into the pinned link if there is one, else attached anew and pinned.
pub fn open(iface: &str, options: &OpenOptions) -> Result<Opened> {
    ensure_bpffs()?;
    let reused_maps = check_pinned(&options.pin_dir, options.ring_size, options.flow_table_size)?;
    let mut ebpf = load::load_ingress(&LoadOptions {
        pin_dir: Some(options.pin_dir.clone()),
        ring_size: options.ring_size,
        flow_table_size: options.flow_table_size,
    })?;
    let (mode, native_refused, replaced_program) =
        put_on(&mut ebpf, program_names::INGRESS, iface, options.mode, &options.pin_dir)?;
    Ok(Opened {
        dataplane: AyaDataplane::new(ebpf, options.ring_size),
        mode,
        native_refused,
        reused_maps,
        replaced_program,
    })
}

/// Runs program `name` on `iface` through the link pinned in `dir`: replaces the program of an
/// existing pinned link, or attaches and pins a new one.
fn put_on(
    ebpf: &mut aya::Ebpf,
    name: &str,
    iface: &str,
    mode: AttachMode,
    dir: &Path,
) -> Result<(XdpMode, Option<String>, bool)> {
    let link_path = dir.join(LINK);
    if link_path.exists() {
        let program = load::program(ebpf, name)?;
        let pinned = PinnedLink::from_pin(&link_path).map_err(|e| err(format!("{}: {e}", link_path.display())))?;
        let link = XdpLink::try_from(FdLink::from(pinned)).map_err(|e| err(format!("pinned link: {e}")))?;
        let id = program.attach_to_link(link).map_err(|e| err(format!("replacing the program on {iface}: {e}")))?;
        // The kernel keeps the link through its pin; this handle may go without detaching.
        let _ = program.take_link(id).map_err(err)?;
        let skb = std::fs::read_to_string(mode_file(dir)).is_ok_and(|m| m.trim() == "skb");
        return Ok((if skb { XdpMode::Skb } else { XdpMode::Driver }, None, true));
    }
    let attached = load::attach(ebpf, name, iface, mode)?;
    let link = load::program(ebpf, name)?.take_link(attached.link).map_err(err)?;
    // Netlink attachments (kernels without XDP links) cannot be pinned; they stay until
    // removed anyway.
    if let Ok(fd_link) = FdLink::try_from(link) {
        std::fs::create_dir_all(dir).map_err(|e| err(format!("{}: {e}", dir.display())))?;
        fd_link.pin(&link_path).map_err(|e| err(format!("pinning {}: {e}", link_path.display())))?;
        let label = if attached.mode == XdpMode::Skb { "skb" } else { "native" };
        let file = mode_file(dir);
        let _ = std::fs::create_dir_all("/run/lb-ctl");
        std::fs::write(&file, label).map_err(|e| err(format!("{}: {e}", file.display())))?;
    }
    Ok((attached.mode, attached.native_refused, false))
}

/// Takes the balancer off `iface`: unpins the link (the program stops) and the maps (the
/// connection table goes).
pub fn detach(dir: &Path) -> Result<()> {
    unpin_link(dir)?;
    load::remove_pins(dir).map_err(|e| err(format!("{}: {e}", dir.display())))
}

fn unpin_link(dir: &Path) -> Result<()> {
    let link_path = dir.join(LINK);
    if link_path.exists() {
        let pinned = PinnedLink::from_pin(&link_path).map_err(|e| err(format!("{}: {e}", link_path.display())))?;
        // Dropping the last reference after unpinning detaches the program.
        drop(pinned.unpin().map_err(|e| err(format!("{}: {e}", link_path.display())))?);
    }
    match std::fs::remove_file(mode_file(dir)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(err(format!("{}: {e}", dir.display()))),
        _ => Ok(()),
    }
}

/// Puts the DSR decapsulator on `iface` (a backend's interface), pinned so it stays after
/// this process exits, opening IPIP only from outer sources in `sources`. Returns the mode it
/// got and, for auto mode's fallback, why.
pub fn attach_decap(iface: &str, mode: AttachMode, sources: &[Ipv4Net]) -> Result<(XdpMode, Option<String>)> {
    ensure_bpffs()?;
    let dir = decap_pin_dir(iface);
    let mut ebpf = load::load_decap()?;
    load::allow_decap_sources(&mut ebpf, sources)?;
    let (mode, refused, _) = put_on(&mut ebpf, program_names::DECAP, iface, mode, &dir)?;
    if let Some(map) = ebpf.map(map_names::DECAP_COUNTERS) {
        let path = dir.join(map_names::DECAP_COUNTERS);
        if !path.exists() {
            map.pin(&path).map_err(|e| err(format!("pinning {}: {e}", path.display())))?;
        }
    }
    Ok((mode, refused))
}

/// Takes the decapsulator off `iface`.
pub fn detach_decap(iface: &str) -> Result<()> {
    detach_decap_dir(&decap_pin_dir(iface))
}

/// Takes off the decapsulator pinned in `dir`.
pub fn detach_decap_dir(dir: &Path) -> Result<()> {
    let dir = dir.to_path_buf();
    unpin_link(&dir)?;
    let _ = std::fs::remove_file(dir.join(map_names::DECAP_COUNTERS));
    match std::fs::remove_dir(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(err(format!("{}: {e}", dir.display()))),
        _ => Ok(()),
    }
}
