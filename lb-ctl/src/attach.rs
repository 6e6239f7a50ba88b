//! Putting the balancer on an interface (`lb-ctl attach`) and taking it off (`lb-ctl detach`):
//! where the maps are pinned, where the ids are kept, and the calls into the data plane.
//!
//! The program stays attached while the daemon runs; the maps are pinned under
//! [`pin_dir`], so a restarted daemon finds the connection table, rings and counters as they
//! were. `detach` removes the pins and the saved ids.
use std::path::PathBuf;

use crate::dataplane::load::{self, AttachMode, LoadOptions};
use crate::dataplane::maps::AyaDataplane;
use crate::dataplane::{Dataplane, DataplaneError};

/// bpffs directory of the maps of interface `iface`.
pub fn pin_dir(iface: &str) -> PathBuf {
    PathBuf::from("/sys/fs/bpf/lb-ctl").join(iface)
}

/// File keeping the VIP and backend ids of interface `iface` across restarts.
pub fn ids_file(iface: &str) -> PathBuf {
    PathBuf::from(format!("/run/lb-ctl/{iface}.ids.json"))
}

/// How to open the data plane.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    pub mode: AttachMode,
    pub pin_dir: PathBuf,
    pub ring_size: u32,
    pub flow_table_size: u32,
}

/// The attached data plane, and the mode it got (`native` or `skb`).
pub struct Opened {
    pub dataplane: Box<dyn Dataplane>,
    pub mode: &'static str,
}

/// Loads the balancer with its maps pinned in (or reused from) `options.pin_dir`, and attaches
/// it to `iface`. In `auto` mode a driver that refuses native XDP gets the program in skb
/// mode, with a warning saying why.
pub fn open(iface: &str, options: &OpenOptions) -> Result<Opened, DataplaneError> {
    // ---- Calls into lb_ctl::dataplane. To be replaced by `dataplane::open(iface, ...)` once the
    // ---- data plane provides it; until then composed from its loader and map writer.
    let load_options = LoadOptions {
        pin_dir: Some(options.pin_dir.clone()),
        ring_size: options.ring_size,
        flow_table_size: options.flow_table_size,
    };
    let ebpf = load::load_ingress(&load_options)?;
    let mut dataplane = AyaDataplane::new(ebpf, options.ring_size);
    let (mode, native_refused) =
        load::attach(dataplane.ebpf_mut(), lb_common::program_names::INGRESS, iface, options.mode)?;
    // ---- end of the calls into lb_ctl::dataplane.
    if let Some(why) = native_refused {
        tracing::warn!(
            interface = iface,
            reason = %why,
            "the driver refused native XDP; attached in skb (generic) mode, which is slower"
        );
    }
    let mode = match mode {
        aya::programs::XdpMode::Skb => "skb",
        aya::programs::XdpMode::Driver => "native",
        aya::programs::XdpMode::Hardware => "offload",
        aya::programs::XdpMode::Default => "default",
    };
    Ok(Opened { dataplane: Box::new(dataplane), mode })
}

/// Removes what `attach` left for a restart: the pinned maps (connection table included) and
/// the saved ids. The program itself goes when its daemon stops.
pub fn detach(iface: &str) -> std::io::Result<()> {
    // ---- Call into lb_ctl::dataplane (to be replaced by `dataplane::detach` once it exists).
    load::remove_pins(&pin_dir(iface))?;
    match std::fs::remove_file(ids_file(iface)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}
