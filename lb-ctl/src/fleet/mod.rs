//! The fleet: one desired state in etcd that every node follows (`[fleet]` in lb.toml).
//!
//! - [`state`]: how the fleet's VIPs and backends are laid out in etcd and read back
//!   (one key per VIP, its `[[vip]]` table as TOML; a size limit; a malformed value refused).
//! - [`store`]: the etcd client: read the whole state at one revision, write a new one in one
//!   transaction guarded by the revision it was read at.
//! - [`follow`]: a node's side: watch from the applied revision, apply each change through
//!   the daemon's one writer (as one reload), record the node under a lease; a lost etcd
//!   changes nothing in forwarding.
//! - [`record`]: what each node records (name, version, applied revision, ring digests,
//!   health, drains) and `lb-ctl fleet status`'s comparison of them.
//!
//! Layout under the prefix `P` (docs/scale-out.md):
//! ```text
//! P/state/generation        changed by every write: the transactions' guard
//! P/state/defaults          the [defaults] table (TOML)
//! P/state/vips/ADDR:PORT/PROTO   one [[vip]] table (TOML), plus `drained = ["ADDR:PORT", ..]`
//! P/nodes/NAME              each node's record (JSON), under the node's lease
//! ```
pub mod edit;
pub mod follow;
pub mod metrics;
pub mod record;
pub mod state;
pub mod store;

pub use state::Snapshot;
pub use store::{Store, StoreError};

#[cfg(test)]
mod tests;
