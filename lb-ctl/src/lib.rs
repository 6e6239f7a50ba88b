//! lb-ctl as a library: the daemon's parts, so tests drive them with temp sockets and an in-memory
//! data plane. `main.rs` is the thin CLI over it. How the parts fit: docs/architecture.md.
//!
//! From the file to the maps:
//! - [`config`]: lb.toml (or YAML) parsed and validated whole; every mistake as `FILE:LINE`.
//! - [`state`]: the desired state (VIPs, backends, weights, drains, health), and in
//!   [`state::plan`] the map contents it implies and the difference to apply.
//! - [`daemon`]: the run loop, and the one writer task that applies every change (API calls,
//!   reloads, health transitions) through the data plane, rolling back what the data plane
//!   refuses.
//! - [`dataplane`]: the map operations (`Dataplane`), the real one over the loaded XDP program
//!   and an in-memory one; loading, attaching and pinning. The only code that writes maps.
//!
//! Around it:
//! - [`api`]: the control API (HTTP/JSON on a Unix socket), its client and the status page.
//! - [`cli`]: the command line: every subcommand, rendering, `top`, exports, completions.
//! - [`health`]: the health checkers and their rise/fall state machine.
//! - [`proxy`]: keeps lb-proxy (proxy VIPs) in step with the state; [`route_checks`] checks
//!   the backends of its SNI and HTTP routes.
//! - [`announce`]: announced VIPs as routes in a kernel table, for BIRD.
//! - [`cluster`]: flow sharing between the balancers of a scale-out group.
//! - [`fleet`]: a fleet's desired state in etcd, and a node following it.
//! - [`dsr_probe`]: the probe `backends verify` sends along the data plane's path.
//! - [`paths`]: every host path (sockets, pins, saved state); [`logging`]: the log and its
//!   reloadable level.
pub mod adjacency;
pub mod announce;
pub mod api;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod daemon;
pub mod dataplane;
pub mod dsr_probe;
pub mod fleet;
pub mod health;
pub mod host;
pub mod logging;
pub mod paths;
pub mod proxy;
pub mod state;

#[cfg(test)]
pub(crate) mod testing;
