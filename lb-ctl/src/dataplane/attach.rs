//! Putting the balancer on an interface so that it outlives the daemon: maps *and* the XDP link
//! are pinned under a per-interface bpffs directory ([`crate::paths`]). A restarted daemon
//! reuses the maps (connection table included) and swaps its freshly loaded program into the
//! pinned link atomically, so packets never see a gap. Pinned maps of an older layout are
//! migrated first ([`super::layout`], [`super::migrate`]). `detach` unpins everything, which
//! removes the program, and the saved ids with it. The same for the DSR decapsulator on
//! backends.
use std::path::Path;

use aya::programs::links::{FdLink, PinnedLink};
use aya::programs::{XdpMode, xdp::XdpLink};
use ipnet::IpNet;
use lb_common::layout::LAYOUT_VERSION;
use lb_common::{map_names, program_names};

use super::aya::AyaDataplane;
use super::load::{self, AttachMode, LoadOptions};
use super::pins::{PinKeeper, Placement};
use super::previous::PreviousProgram;
use super::{DataplaneError, Result, err};
use super::{layout, messages, migrate};
use crate::paths::{self, AttachPaths};

/// The pinned XDP link's file name inside a pin directory.
const LINK: &str = "link";

/// How to open the balancer.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    pub mode: AttachMode,
    pub paths: AttachPaths,
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
    /// The pinned maps of an older layout that were migrated to this build's.
    pub migrated_maps: Vec<&'static str>,
    /// A pinned link existed and now runs the new program (no detach in between): the program
    /// it ran, held until the start is done (a failed start puts it back).
    pub previous_program: Option<PreviousProgram>,
}

impl Opened {
    /// The mode as shown to operators.
    pub fn mode_name(&self) -> &'static str {
        match self.mode {
            XdpMode::Skb => "skb",
            XdpMode::Driver => "native",
            XdpMode::Hardware => "offload",
            XdpMode::Default => "default",
        }
    }
}

/// How to start a command that pins from inside a named network namespace.
const NSENTER_HINT: &str = "pins made here would vanish when this process ends (the balancer with them, \
     and its connection table). `ip netns exec` gives the command a mount namespace of its own \
     with a private /sys; enter only the network namespace instead: \
     `nsenter --net=/run/netns/NAME lb-ctl ...`, which pins into the host's /sys/fs/bpf";

/// Mounts bpffs on /sys/fs/bpf if it is not there (a fresh host or a minimal one), and refuses
/// a bpffs that will not outlive this process: one private to a mount namespace of its own
/// (`ip netns exec`), where the pins vanish with the namespace.
pub fn ensure_bpffs() -> Result<()> {
    const BPF_FS_MAGIC: i64 = 0xcafe4a11;
    let path = c"/sys/fs/bpf";
    let private_mounts = !paths::in_lasting_mount_namespace();
    // SAFETY: statfs with a valid path and a zeroed out-buffer.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(path.as_ptr(), &mut st) } == 0 && st.f_type as i64 == BPF_FS_MAGIC {
        if private_mounts && !paths::same_filesystem_as_lasting("/sys/fs/bpf") {
            return Err(err(format!("/sys/fs/bpf is not the host's bpffs: {NSENTER_HINT}")));
        }
        return Ok(());
    }
    if private_mounts {
        return Err(err(format!("/sys/fs/bpf is not mounted in this mount namespace: {NSENTER_HINT}")));
    }
    // SAFETY: mount(2) with valid C strings.
    let rc = unsafe { libc::mount(c"bpf".as_ptr(), path.as_ptr(), c"bpf".as_ptr(), 0, std::ptr::null()) };
    if rc != 0 {
        return Err(err(format!("mounting bpffs on /sys/fs/bpf: {}", std::io::Error::last_os_error())));
    }
    Ok(())
}

/// Loads the balancer with its maps pinned in (or reused from) `options.paths.pin_dir` and puts
/// it on `iface`: into the pinned link if there is one, else attached anew and pinned. In
/// `auto` mode a driver that refuses native XDP gets the program in skb mode, with a warning
/// saying why.
pub fn open(iface: &str, options: &OpenOptions) -> Result<Opened> {
    ensure_bpffs()?;
    let pin_dir = &options.paths.pin_dir;
    let plan = layout::plan(pin_dir, options.ring_size, options.flow_table_size)?;
    let reused_maps = plan.found();
    let moves = plan.migrations();
    let migrated_maps: Vec<&'static str> = moves.iter().map(|m| m.0).collect();
    // Staged maps of a start that died mid-migration are stale copies: start over.
    migrate::remove_staged(pin_dir, load::PINNED_MAPS);
    let loaded = load::load_ingress(&LoadOptions {
        pin_dir: Some(pin_dir.clone()),
        ring_size: options.ring_size,
        flow_table_size: options.flow_table_size,
        fresh: migrated_maps.clone(),
        debug_messages: messages::wanted(),
        object: None,
    })
    .and_then(|mut ebpf| {
        // The old program forwards through the old maps until the swap.
        let migrating = match moves.is_empty() {
            true => None,
            false => Some(migrate::Migrating::copy(&ebpf, pin_dir, &moves)?),
        };
        match put_on(&mut ebpf, program_names::INGRESS, iface, options.mode, &options.paths) {
            Ok(attached) => Ok((ebpf, attached, migrating)),
            Err(e) => {
                if let Some(m) = migrating {
                    m.abandon();
                }
                Err(e)
            }
        }
    });
    let (ebpf, (mode, native_refused, previous_program), migrating) = match loaded {
        Ok(done) => done,
        Err(e) => {
            // A failed first attach (no such interface, a driver refusing XDP) leaves nothing
            // behind; pins that were there before belong to a running balancer and stay.
            if !reused_maps {
                let _ = load::remove_pins(pin_dir);
            }
            return Err(e);
        }
    };
    // From here the new program is on the link: a failure puts the one it replaced back.
    let finished = finish_open(ebpf, pin_dir, iface, mode, (&plan, migrating, &migrated_maps), options.ring_size);
    let dataplane = match finished {
        Ok(dataplane) => dataplane,
        Err(e) => return Err(put_back_after(e, previous_program)),
    };
    let replaced_program = previous_program.is_some();
    let opened = Opened { dataplane, mode, native_refused, reused_maps, migrated_maps, previous_program };
    if let Some(why) = &opened.native_refused {
        tracing::warn!(
            interface = iface,
            reason = %why,
            "the driver refused native XDP; attached in skb (generic) mode, which is slower"
        );
    }
    tracing::info!(
        interface = iface,
        mode = opened.mode_name(),
        reused_maps,
        replaced_program,
        "balancer on the interface"
    );
    Ok(opened)
}

/// The rest of [`open`] once the program is on the link: the migration finished, the layout
/// recorded, the messages forwarded, the daemon's own hold on the link.
fn finish_open(
    ebpf: aya::Ebpf,
    pin_dir: &Path,
    iface: &str,
    mode: XdpMode,
    (plan, migrating, migrated_maps): (&layout::Plan, Option<migrate::Migrating>, &[&'static str]),
    ring_size: u32,
) -> Result<AyaDataplane> {
    if let Some(migrating) = migrating {
        let moved = migrating.finish()?;
        tracing::info!(
            maps = ?migrated_maps,
            from = ?plan.recorded.values().min(),
            to = LAYOUT_VERSION,
            copied = moved.copied,
            recopied = moved.recopied,
            kept_new = moved.kept_new,
            "migrated the pinned maps to this build's layout"
        );
    }
    layout::write_header(pin_dir)?;
    let mut ebpf = ebpf;
    messages::forward(&mut ebpf)?;
    let mut dataplane = AyaDataplane::new(ebpf, ring_size);
    // The daemon's own reference on the link: removed pins no longer take the program off.
    let link_path = pin_dir.join(LINK);
    if link_path.exists() {
        // Attached again as it is now: in skb mode if that is what the driver gave.
        let mode = if mode == XdpMode::Skb { AttachMode::Skb } else { AttachMode::Native };
        let placement = Placement { iface: iface.to_string(), mode };
        dataplane.keep_pins(PinKeeper::open(pin_dir, &link_path, placement)?);
    }
    Ok(dataplane)
}

/// `e`, after putting `previous` (if any) back on its link; or `e` with what went wrong then.
fn put_back_after(e: DataplaneError, previous: Option<PreviousProgram>) -> DataplaneError {
    match previous.map(PreviousProgram::put_back) {
        Some(Err(undo)) => err(format!("{e}; and putting the previous program back failed: {undo}")),
        _ => e,
    }
}

/// Runs program `name` on `iface` through the link pinned in `dir`: replaces the program of an
/// existing pinned link (the one it ran is returned, held), or attaches and pins a new one.
fn put_on(
    ebpf: &mut aya::Ebpf,
    name: &str,
    iface: &str,
    mode: AttachMode,
    paths: &AttachPaths,
) -> Result<(XdpMode, Option<String>, Option<PreviousProgram>)> {
    let dir = &paths.pin_dir;
    let link_path = dir.join(LINK);
    if link_path.exists() {
        let program = load::program(ebpf, name)?;
        let pinned = PinnedLink::from_pin(&link_path).map_err(|e| err(format!("{}: {e}", link_path.display())))?;
        let fd_link = FdLink::from(pinned);
        let ours = program.info().map_err(|e| err(format!("the new program: {e}")))?.id();
        // Held before the swap: after it, this descriptor is all that keeps that program.
        let previous = PreviousProgram::of(&fd_link, &link_path, ours)?;
        let link = XdpLink::try_from(fd_link).map_err(|e| err(format!("pinned link: {e}")))?;
        let id = program.attach_to_link(link).map_err(|e| err(format!("replacing the program on {iface}: {e}")))?;
        // The kernel keeps the link through its pin; this handle may go without detaching.
        let _ = program.take_link(id).map_err(err)?;
        let skb = std::fs::read_to_string(paths.mode_file()).is_ok_and(|m| m.trim() == "skb");
        return Ok((if skb { XdpMode::Skb } else { XdpMode::Driver }, None, Some(previous)));
    }
    let attached = load::attach(ebpf, name, iface, mode)?;
    let link = load::program(ebpf, name)?.take_link(attached.link).map_err(err)?;
    // Netlink attachments (kernels without XDP links) cannot be pinned; they stay until
    // removed anyway.
    if let Ok(fd_link) = FdLink::try_from(link) {
        std::fs::create_dir_all(dir).map_err(|e| err(format!("{}: {e}", dir.display())))?;
        fd_link.pin(&link_path).map_err(|e| err(format!("pinning {}: {e}", link_path.display())))?;
        let label = if attached.mode == XdpMode::Skb { "skb" } else { "native" };
        let file = paths.mode_file();
        paths::create_private_dir(&paths.state_dir).map_err(|e| err(format!("{}: {e}", paths.state_dir.display())))?;
        std::fs::write(&file, label).map_err(|e| err(format!("{}: {e}", file.display())))?;
    }
    Ok((attached.mode, attached.native_refused, None))
}

/// Puts the program back on its interface after its link lost it (`keeper.attached()` false:
/// `bpftool link detach`, the interface deleted and made again): a new link, pinned in the
/// old one's place, and a keeper of it. Fails, changing nothing the next try needs, while no
/// interface of that name exists.
pub fn attach_again(ebpf: &mut aya::Ebpf, keeper: &PinKeeper) -> Result<PinKeeper> {
    let placement = keeper.placement().clone();
    let iface = &placement.iface;
    let attached = load::attach(ebpf, program_names::INGRESS, iface, placement.mode)?;
    let link = load::program(ebpf, program_names::INGRESS)?.take_link(attached.link).map_err(err)?;
    let fd_link = FdLink::try_from(link).map_err(|e| err(format!("the new link on {iface}: {e}")))?;
    let link_path = keeper.link_path();
    // The old pin holds a link with no interface: the new one takes its place.
    let _ = std::fs::remove_file(link_path);
    fd_link.pin(link_path).map_err(|e| err(format!("pinning {}: {e}", link_path.display())))?;
    PinKeeper::open(keeper.dir(), link_path, placement)
}

/// What [`detach`] found and removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Detached {
    /// The pinned XDP link (the program came off the interface with it).
    pub program: bool,
    /// Pinned maps.
    pub maps: usize,
    /// The saved ids.
    pub saved_ids: bool,
}

impl std::fmt::Display for Detached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if self.program {
            parts.push("XDP program detached".to_string());
        }
        if self.maps > 0 {
            parts.push(format!("{} pinned maps removed", self.maps));
        }
        if self.saved_ids {
            parts.push("saved ids removed".to_string());
        }
        match parts.is_empty() {
            true => write!(f, "nothing to remove (no pinned program or maps, no saved ids)"),
            false => write!(f, "{}", parts.join(", ")),
        }
    }
}

/// Takes the balancer off: unpins the link (the program stops) and the maps (the connection
/// table goes), and removes its run-time files (attach mode, saved ids). Says what was there.
pub fn detach(paths: &AttachPaths) -> Result<Detached> {
    let program = unpin_link(paths)?;
    let maps = load::remove_pins(&paths.pin_dir).map_err(|e| err(format!("{}: {e}", paths.pin_dir.display())))?;
    let saved_ids = remove_if_present(&paths.ids_file())?;
    Ok(Detached { program, maps, saved_ids })
}

/// Removes `file`; whether it was there.
fn remove_if_present(file: &Path) -> Result<bool> {
    match std::fs::remove_file(file) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(err(format!("{}: {e}", file.display()))),
        Err(_) => Ok(false),
        Ok(()) => Ok(true),
    }
}

/// Whether a decapsulator is attached (pinned) on `iface` of this network namespace.
pub fn decap_attached(iface: &str) -> bool {
    AttachPaths::decap(iface).pin_dir.join(LINK).exists()
}

/// Unpins the link; whether there was one.
fn unpin_link(paths: &AttachPaths) -> Result<bool> {
    let link_path = paths.pin_dir.join(LINK);
    let pinned = link_path.exists();
    if pinned {
        let pinned = PinnedLink::from_pin(&link_path).map_err(|e| err(format!("{}: {e}", link_path.display())))?;
        // Dropping the last reference after unpinning detaches the program.
        drop(pinned.unpin().map_err(|e| err(format!("{}: {e}", link_path.display())))?);
    }
    remove_if_present(&paths.mode_file())?;
    Ok(pinned)
}

/// Puts the DSR decapsulator on `iface` (a backend's interface), pinned so it stays after
/// this process exits, opening IPIP only from outer sources in `sources`. Returns the mode it
/// got and, for auto mode's fallback, why.
pub fn attach_decap(iface: &str, mode: AttachMode, sources: &[IpNet]) -> Result<(XdpMode, Option<String>)> {
    ensure_bpffs()?;
    let paths = AttachPaths::decap(iface);
    let mut ebpf = load::load_decap()?;
    load::allow_decap_sources(&mut ebpf, sources)?;
    let (mode, refused, _) = put_on(&mut ebpf, program_names::DECAP, iface, mode, &paths)?;
    if let Some(map) = ebpf.map(map_names::DECAP_COUNTERS) {
        let path = paths.pin_dir.join(map_names::DECAP_COUNTERS);
        if !path.exists() {
            map.pin(&path).map_err(|e| err(format!("pinning {}: {e}", path.display())))?;
        }
    }
    Ok((mode, refused))
}

/// Takes the decapsulator off `iface`.
pub fn detach_decap(iface: &str) -> Result<()> {
    detach_decap_at(&AttachPaths::decap(iface))
}

/// Takes off the decapsulator pinned at `paths`.
pub fn detach_decap_at(paths: &AttachPaths) -> Result<()> {
    unpin_link(paths)?;
    let _ = std::fs::remove_file(paths.pin_dir.join(map_names::DECAP_COUNTERS));
    match std::fs::remove_dir(&paths.pin_dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(err(format!("{}: {e}", paths.pin_dir.display()))),
        _ => Ok(()),
    }
}
