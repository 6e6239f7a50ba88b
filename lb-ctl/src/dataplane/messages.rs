//! The XDP program's debug messages (aya-log) into the daemon's log, under the target
//! `lb_ctl::xdp`: a line for each packet the balancer drops, saying why.
//!
//! Whether the program makes them is fixed when it is loaded: AYA_LOG_LEVEL is a read-only
//! global, which the verifier reads as a constant, so a program loaded below debug carries
//! no trace of them. [`wanted`] decides it from the log's filter at that moment.
use std::os::fd::AsRawFd as _;

use aya::Ebpf;
use aya_log::{EbpfLogger, Level};

use super::{DataplaneError, Result};

/// The log target of the program's messages (`--log-level lb_ctl::xdp=debug` turns on only them).
pub const TARGET: &str = "lb_ctl::xdp";

/// The global the program reads its message level from (aya-log's).
pub const LEVEL_GLOBAL: &str = "AYA_LOG_LEVEL";

/// Whether the daemon's log would show the program's debug messages now.
pub fn wanted() -> bool {
    tracing::enabled!(target: TARGET, tracing::Level::DEBUG)
}

/// The level the program is loaded with: debug when its messages are wanted, else info (it has
/// none at info and above: the calls are left out).
pub fn level(debug: bool) -> u8 {
    if debug { Level::Debug as u8 } else { Level::Info as u8 }
}

/// Reads the program's messages off its AYA_LOGS ring, as they come, into the log (through the
/// `log` crate, which the daemon's tracing subscriber takes in), on a thread of its own for the
/// daemon's life.
pub fn forward(ebpf: &mut Ebpf) -> Result<()> {
    let mut logger =
        EbpfLogger::init(ebpf).map_err(|e| DataplaneError::Load(format!("reading the program's messages: {e}")))?;
    let spawned = std::thread::Builder::new().name("xdp-messages".into()).spawn(move || {
        loop {
            let mut ready = libc::pollfd { fd: logger.as_raw_fd(), events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd; no timeout.
            let rc = unsafe { libc::poll(&mut ready, 1, -1) };
            if rc < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                tracing::warn!(error = %std::io::Error::last_os_error(), "reading the XDP program's messages stopped");
                return;
            }
            logger.flush();
        }
    });
    spawned.map(drop).map_err(|e| DataplaneError::Load(format!("starting the program's message reader: {e}")))
}
