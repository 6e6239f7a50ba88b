//! What each node records in the fleet (under its lease), what it knows of its own link to
//! etcd, and `lb-ctl fleet status`'s reading of every node's record.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A node's record at `P/nodes/NAME` (JSON): gone when the node's lease expires.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    pub name: String,
    /// lb-ctl's version.
    pub version: String,
    /// The fleet revision the node's maps hold.
    pub applied_revision: i64,
    /// The last fleet state it refused (malformed or invalid), and why; it keeps the last good.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// Ring digest per XDP VIP (`ADDR:PORT/PROTOCOL`), of the ring in the node's maps.
    pub rings: BTreeMap<String, String>,
    /// Health and admin state of each backend as this node sees it.
    pub backends: Vec<BackendRecord>,
    /// The node is drained (`lb-ctl node drain`).
    pub node_drained: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendRecord {
    /// `ADDR:PORT/PROTOCOL` of its VIP.
    pub vip: String,
    pub address: std::net::SocketAddr,
    /// `up`, `down`, `unknown`.
    pub health: String,
    /// `active`, `draining`, ...
    pub state: String,
}

/// The follower's link to etcd, shown in `status` and metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetView {
    pub node: String,
    pub prefix: String,
    /// Whether the node reaches etcd now.
    pub connected: bool,
    /// The fleet revision applied to the maps (0: none yet).
    pub applied_revision: i64,
    /// The last error talking to etcd, while not connected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The last refused fleet state, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    pub applied_total: u64,
    pub refused_total: u64,
    /// Times the link to etcd was lost.
    pub disconnects_total: u64,
    /// Some ring of this node differs from the one most nodes of the fleet have.
    #[serde(default)]
    pub rings_differ: bool,
}

pub type SharedView = std::sync::Arc<std::sync::Mutex<FleetView>>;

/// `lb-ctl fleet status`: every node's record against the fleet.
#[derive(Clone, Debug, Serialize)]
pub struct FleetStatus {
    /// The revision of the fleet's last write.
    pub revision: i64,
    pub nodes: Vec<NodeStatus>,
    /// Backends every node that has them sees down.
    pub down_everywhere: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct NodeStatus {
    pub record: NodeRecord,
    /// Whether it has applied the fleet's last write.
    pub current: bool,
    /// Whether each of its rings equals the one most nodes have.
    pub rings_agree: bool,
    /// VIPs whose ring differs from most nodes'.
    pub rings_differ: Vec<String>,
}

/// Compares the records: a VIP's ring is "the fleet's" when most nodes have it (equal
/// backends give equal rings by construction; a node that differs lags or sees other health).
pub fn compare(revision: i64, records: Vec<NodeRecord>) -> FleetStatus {
    let mut votes: BTreeMap<&str, BTreeMap<&str, usize>> = BTreeMap::new();
    for r in &records {
        for (vip, digest) in &r.rings {
            *votes.entry(vip).or_default().entry(digest).or_default() += 1;
        }
    }
    let majority: BTreeMap<String, String> = votes
        .iter()
        .filter_map(|(vip, d)| {
            d.iter().max_by_key(|(_, n)| **n).map(|(digest, _)| (vip.to_string(), digest.to_string()))
        })
        .collect();
    let mut seen: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for b in records.iter().flat_map(|r| &r.backends) {
        let entry = seen.entry(format!("{} {}", b.vip, b.address)).or_default();
        entry.0 += 1;
        entry.1 += usize::from(b.health == "down");
    }
    let down_everywhere = seen.into_iter().filter(|(_, (n, down))| n == down).map(|(k, _)| k).collect();
    let nodes = records
        .into_iter()
        .map(|record| {
            let rings_differ: Vec<String> = majority
                .iter()
                .filter(|(vip, digest)| record.rings.get(*vip) != Some(*digest))
                .map(|(vip, _)| vip.clone())
                .collect();
            NodeStatus {
                current: record.applied_revision >= revision,
                rings_agree: rings_differ.is_empty(),
                rings_differ,
                record,
            }
        })
        .collect();
    FleetStatus { revision, nodes, down_everywhere }
}
