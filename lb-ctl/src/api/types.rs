//! What goes over the control API (`/v1/...`), shared by the server and the client.
use std::net::{IpAddr, SocketAddr};

use serde::{Deserialize, Serialize};

use crate::state::{Health, Origin};

/// The version prefix of every path.
pub const PREFIX: &str = "/v1";

/// `POST /v1/backends` (add), `/v1/backends/remove`, `/v1/backends/drain`, `/v1/backends/undrain`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendRequest {
    /// VIP name, `ADDR:PORT[/PROTOCOL]`, or `ADDR`.
    pub vip: String,
    /// `ADDR:PORT`, or `ADDR` for the VIP's port.
    pub address: String,
    /// Add only; default 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u64>,
}

/// The query of `GET /v1/backends`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendsQuery {
    /// Only this VIP's backends (name, `ADDR:PORT[/PROTOCOL]` or `ADDR`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vip: Option<String>,
}

/// `POST /v1/explain`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExplainRequest {
    pub vip: String,
    /// `ADDR` or `ADDR:PORT`.
    pub client: String,
    /// A QUIC destination connection ID (hex) the client sends: which backend its server id
    /// routes to, on a VIP with quic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quic_cid: Option<String>,
}

/// Answer to add/remove/drain/undrain.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Changed {
    pub vip: String,
    pub backend: SocketAddr,
    pub backend_id: u32,
    /// What was done, in words.
    pub message: String,
}

/// `GET /v1/vips`: one VIP.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VipView {
    pub id: u32,
    pub name: Option<String>,
    pub address: IpAddr,
    pub port: u16,
    pub protocol: String,
    pub forwarding: String,
    /// `dsr-ipip` and `dsr-gue`: the outer header's source address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encap_source: Option<IpAddr>,
    pub hash: String,
    /// The all-down policy.
    pub all_down_policy: String,
    /// Whether no backend is healthy right now (the policy applies).
    pub all_down: bool,
    pub backends: usize,
    /// Backends in the ring (healthy, not drained).
    pub healthy: usize,
    pub packets: u64,
    pub bytes: u64,
    /// Proxy VIPs: whether the VIP accepts connections (false: its listener failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listening: Option<bool>,
    /// XDP VIPs: a digest of the ring by backend address; balancers given the same backends
    /// (scale-out) show the same digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ring_digest: Option<String>,
}

/// `GET /v1/backends`: one backend.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendView {
    /// The VIP's label (name, or `ADDR:PORT/PROTOCOL`).
    pub vip: String,
    /// Unique over the daemon's VIPs; a route's backend has none (absent).
    #[serde(default = "no_id", skip_serializing_if = "is_no_id")]
    pub id: u32,
    pub address: SocketAddr,
    /// The host name it was resolved from, when lb.toml names it so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    pub weight: u32,
    pub health: Health,
    /// `active`, `draining`, `unresolved` (its host name no longer gives this address:
    /// drained until `resolve_hold` has passed), `ejected` (proxy VIPs: taken out by
    /// outlier detection), or `route` (proxy VIPs: a backend only a route names).
    pub state: String,
    pub origin: Origin,
    /// Whether the backend holds ring slots (it may while down, when the VIP fails open).
    pub in_ring: bool,
    pub packets: u64,
    pub bytes: u64,
    /// Connection-table entries pinned to it (XDP VIPs), or requests/relays in progress
    /// (proxy VIPs).
    pub active_flows: u64,
    /// Proxy VIPs: requests (HTTP) or relayed connections (TCP) sent to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<u64>,
    /// Proxy VIPs: connect failures, timeouts, broken responses and 5xx.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errors: Option<u64>,
    /// When its health last changed (seconds since the Unix epoch); none since the daemon
    /// started: absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_since_unix: Option<u64>,
    /// Why its health last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_reason: Option<String>,
    /// Health transitions since the daemon started.
    #[serde(default)]
    pub health_transitions: u64,
}

/// The id of a backend that has none (a proxy route's).
pub const NO_ID: u32 = u32::MAX;

fn no_id() -> u32 {
    NO_ID
}

fn is_no_id(id: &u32) -> bool {
    *id == NO_ID
}

/// One named counter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterView {
    pub name: String,
    pub value: u64,
}

/// Traffic of one VIP or backend.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrafficView {
    pub name: String,
    pub packets: u64,
    pub bytes: u64,
    /// Proxy VIPs: requests (HTTP) or relayed connections (TCP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<u64>,
    /// Proxy VIPs: connect failures, timeouts, broken responses and 5xx (for a VIP, also
    /// refused and broken client connections).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errors: Option<u64>,
}

/// What the XDP program saw on one CPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuView {
    pub cpu: u32,
    /// Every packet the program returned a verdict for (passed, dropped or forwarded).
    pub packets: u64,
    /// Packets and bytes to VIPs.
    pub vip_packets: u64,
    pub vip_bytes: u64,
}

/// `GET /v1/stats`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatsView {
    pub counters: Vec<CounterView>,
    pub vips: Vec<TrafficView>,
    pub backends: Vec<TrafficView>,
    /// Per CPU (XDP only; empty without the XDP program).
    #[serde(default)]
    pub cpus: Vec<CpuView>,
}

/// `GET /v1/status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusView {
    pub version: String,
    pub interface: String,
    pub xdp_mode: Option<String>,
    pub config: String,
    pub uptime_secs: u64,
    pub vips: usize,
    pub backends: usize,
    pub backends_up: usize,
    pub backends_down: usize,
    pub backends_draining: usize,
    pub health_checkers: usize,
    pub ring_size: u32,
    pub last_reload: Option<ReloadView>,
    /// Changes made through the API that the configuration file does not hold (backends
    /// added, drained, removed): a restart keeps them, a reload undoes them.
    #[serde(default)]
    pub api_changes: usize,
    /// The node is drained (`lb-ctl node drain`): it announces no VIP.
    #[serde(default)]
    pub node_drained: bool,
    /// VIP addresses announced now (routes in `announce_table`), and that table.
    #[serde(default)]
    pub announced: Vec<std::net::IpAddr>,
    #[serde(default)]
    pub announce_table: u32,
    /// "bird" when BIRD answers on its control socket (`[daemon] bird_socket`).
    #[serde(default)]
    pub routing_daemon: Option<String>,
    /// Otherwise, why not: BIRD not installed, or not running, and what to do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing_problem: Option<String>,
    /// Flow sharing counters (`[cluster]`), by name; absent without a cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow_sharing: Option<std::collections::BTreeMap<String, u64>>,
    /// The bpffs directory of the balancer's pinned link and maps (an attached balancer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pin_dir: Option<String>,
    /// Times the pins were found removed and pinned again, and the last time (unix seconds).
    #[serde(default)]
    pub pins_restored: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pins_restored_at_unix: Option<u64>,
    /// The program is off the interface (its link detached under the daemon) and could not be
    /// attached again yet (no interface of that name); the daemon retries every few seconds.
    #[serde(default)]
    pub xdp_detached: bool,
    /// Times the program was found off the interface and attached again since the start.
    #[serde(default)]
    pub xdp_attached_again: u64,
    /// When it was last attached again (unix seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xdp_attached_again_at_unix: Option<u64>,
    /// `[fleet]`: the node's link to etcd and the fleet revision it applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<crate::fleet::record::FleetView>,
}

/// `POST /v1/node/drain` and `/v1/node/undrain`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeView {
    pub drained: bool,
    /// VIP addresses announced after the change.
    pub announced: Vec<std::net::IpAddr>,
    pub message: String,
}

/// `POST /v1/reload`, and the last reload in the status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReloadView {
    /// Seconds since the Unix epoch.
    pub at_unix: u64,
    pub ok: bool,
    /// What changed, or why nothing did.
    pub message: String,
}

/// One of the daemon's recent events (`GET /v1/events`, newest first; the status page's
/// "Recent events").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventView {
    /// Seconds since the Unix epoch.
    pub at_unix: u64,
    /// `health`, `ejected`, `drain`, `undrain`, `add`, `remove`, `resolve` or `reload`.
    pub kind: String,
    /// The VIP's label, when the event is about one.
    #[serde(default)]
    pub vip: Option<String>,
    /// The backend, when the event is about one.
    #[serde(default)]
    pub backend: Option<SocketAddr>,
    /// What happened (for a reload: what changed).
    pub message: String,
}

/// How `explain` decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Decision {
    /// The connection table pins the flow to a backend.
    Conntrack,
    /// A new flow: the ring slot of its hash.
    Ring,
    /// A QUIC short header: the server id in its connection ID names the backend.
    QuicServerId,
}

/// `POST /v1/explain`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExplainView {
    pub vip: String,
    pub client: String,
    pub decision: Decision,
    /// `None` when the slot is empty (no usable backend).
    pub backend: Option<SocketAddr>,
    pub backend_id: Option<u32>,
    pub hash: Option<u32>,
    pub slot: Option<u32>,
    pub ring_size: u32,
    /// Why, in words.
    pub reason: String,
}

/// The body of every error answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
}
