//! lb-ctl as a library: the daemon's parts, so tests drive them with temp sockets and a fake
//! data plane. `main.rs` is the thin CLI over it.
pub mod api;
pub mod attach;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod dataplane;
pub mod health;
pub mod netns;
pub mod proxy;
pub mod state;

#[cfg(test)]
pub(crate) mod testing;
