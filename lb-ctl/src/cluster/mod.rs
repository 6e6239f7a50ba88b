//! Flow sharing between the balancers of a scale-out group (`[cluster]`). A flow that started
//! before a backend change is pinned to its old backend by the connection table of the node
//! that placed it; when ECMP moves it to another node (a node died or was drained), that
//! node's ring may now choose another backend. So each node tells its peers which backend each
//! new flow got, and a peer records those flows as if it had placed them.
//!
//! The program reports the flows it records on FLOW_EVENTS; [`share`]'s sender turns the ids
//! into addresses (each node numbers VIPs and backends its own way) and sends them in batches
//! over UDP, signed with the shared key ([`wire`]). The receiver accepts messages only from the
//! peers' addresses, with a valid signature, at a bounded rate; the daemon's writer (the one map
//! writer) records them. Everything refused is counted ([`Counters`]).
pub mod share;
#[cfg(test)]
mod tests;
pub mod wire;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::state::{State, VipIdentity};

/// What flow sharing counted since the daemon started.
#[derive(Debug, Default)]
pub struct Counters {
    /// Messages and flows sent to peers (each message once per peer).
    pub messages_sent: AtomicU64,
    pub flows_sent: AtomicU64,
    /// Messages accepted, and the flows in them.
    pub messages_received: AtomicU64,
    pub flows_received: AtomicU64,
    /// Flows written into the connection table (not already there, VIP and backend known).
    pub flows_recorded: AtomicU64,
    /// Flows whose VIP or backend this node does not have (or a NAT VIP's): not recorded.
    pub flows_unknown: AtomicU64,
    /// Messages refused: from an address that is no peer, with a wrong signature, malformed,
    /// or over the rate.
    pub refused_not_peer: AtomicU64,
    pub refused_bad_key: AtomicU64,
    pub refused_malformed: AtomicU64,
    pub refused_rate: AtomicU64,
    /// Messages refused as played again (a sequence not above the last one of that peer) or
    /// stale (far from this node's clock).
    pub refused_replay: AtomicU64,
}

impl Counters {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// (name, value) of every counter, for metrics and status.
    pub fn values(&self) -> Vec<(&'static str, u64)> {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        vec![
            ("messages_sent", get(&self.messages_sent)),
            ("flows_sent", get(&self.flows_sent)),
            ("messages_received", get(&self.messages_received)),
            ("flows_received", get(&self.flows_received)),
            ("flows_recorded", get(&self.flows_recorded)),
            ("flows_unknown", get(&self.flows_unknown)),
            ("refused_not_peer", get(&self.refused_not_peer)),
            ("refused_bad_key", get(&self.refused_bad_key)),
            ("refused_malformed", get(&self.refused_malformed)),
            ("refused_rate", get(&self.refused_rate)),
            ("refused_replay", get(&self.refused_replay)),
        ]
    }
}

/// This node's ids as addresses, for the sender (kept current by the writer).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IdBook {
    pub vips: HashMap<u32, VipIdentity>,
    pub backends: HashMap<u32, SocketAddr>,
}

impl IdBook {
    pub fn of(state: &State) -> IdBook {
        IdBook {
            vips: state.vips.iter().map(|v| (v.id, v.identity())).collect(),
            backends: state.vips.iter().flat_map(|v| v.backends.iter().map(|b| (b.id, b.address))).collect(),
        }
    }
}
