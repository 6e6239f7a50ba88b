//! Putting the balancer on an interface (`lb-ctl attach`) and taking it off (`lb-ctl detach`):
//! the daemon's view of `dataplane::attach`, plus where the ids are kept.
//!
//! The program and its maps are pinned under [`pin_dir`]: the balancer keeps forwarding while
//! the daemon restarts, and a restarted daemon swaps its program in and finds the connection
//! table, rings and counters as they were. `detach` unpins all of it and removes the saved ids.
use std::path::PathBuf;

use crate::dataplane::attach as dp_attach;
use crate::dataplane::{Dataplane, DataplaneError};

pub use crate::dataplane::attach::{OpenOptions, pin_dir};

/// File keeping the VIP and backend ids of interface `iface` across restarts.
pub fn ids_file(iface: &str) -> PathBuf {
    PathBuf::from(format!("/run/lb-ctl/{iface}{}.ids.json", crate::netns::suffix()))
}

/// The attached data plane, and the mode it got (`native` or `skb`).
pub struct Opened {
    pub dataplane: Box<dyn Dataplane>,
    pub mode: &'static str,
}

/// Loads the balancer with its maps pinned in (or reused from) `options.pin_dir`, and puts it
/// on `iface`. In `auto` mode a driver that refuses native XDP gets the program in skb mode,
/// with a warning saying why.
pub fn open(iface: &str, options: &OpenOptions) -> Result<Opened, DataplaneError> {
    let opened = dp_attach::open(iface, options)?;
    if let Some(why) = &opened.native_refused {
        tracing::warn!(
            interface = iface,
            reason = %why,
            "the driver refused native XDP; attached in skb (generic) mode, which is slower"
        );
    }
    let mode = match opened.mode {
        aya::programs::XdpMode::Skb => "skb",
        aya::programs::XdpMode::Driver => "native",
        aya::programs::XdpMode::Hardware => "offload",
        aya::programs::XdpMode::Default => "default",
    };
    tracing::info!(
        interface = iface,
        mode,
        reused_maps = opened.reused_maps,
        replaced_program = opened.replaced_program,
        "balancer on the interface"
    );
    Ok(Opened { dataplane: Box::new(opened.dataplane), mode })
}

/// Takes the balancer off `iface`: the pinned link (the program stops), the pinned maps
/// (connection table included) and the saved ids.
pub fn detach(iface: &str) -> Result<(), DataplaneError> {
    dp_attach::detach(&pin_dir(iface))?;
    match std::fs::remove_file(ids_file(iface)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(DataplaneError::Load(format!("{}: {e}", ids_file(iface).display())))
        }
        _ => Ok(()),
    }
}
