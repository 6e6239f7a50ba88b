//! lb-ctl as a library: the daemon's parts, so tests drive them with temp sockets and an in-memory
//! data plane. `main.rs` is the thin CLI over it.
pub mod announce;
pub mod api;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod daemon;
pub mod dataplane;
pub mod dsr_probe;
pub mod health;
pub mod host;
pub mod logging;
pub mod paths;
pub mod proxy;
pub mod state;

#[cfg(test)]
pub(crate) mod testing;
