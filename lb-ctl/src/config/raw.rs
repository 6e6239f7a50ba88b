//! The file as written: serde structs with the source span of every value, so validation can
//! name the line of each mistake. Unknown keys are rejected everywhere.
use serde::Deserialize;
use toml::Spanned;

use super::{AllDownPolicy, Forwarding, HashMode, HealthKind, Protocol};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFile {
    pub daemon: Option<Spanned<RawDaemon>>,
    pub defaults: Option<Spanned<RawDefaults>>,
    pub cluster: Option<Spanned<RawCluster>>,
    pub fleet: Option<Spanned<super::fleet::RawFleet>>,
    #[serde(default)]
    pub vip: Vec<Spanned<RawVip>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDaemon {
    pub api_socket: Option<Spanned<String>>,
    pub api_tcp: Option<Spanned<String>>,
    pub api_tcp_allow_remote: Option<Spanned<bool>>,
    pub metrics: Option<Spanned<String>>,
    pub ring_size: Option<Spanned<i64>>,
    pub flow_table_size: Option<Spanned<i64>>,
    pub hash_seed: Option<Spanned<i64>>,
    pub new_flow_budget: Option<Spanned<i64>>,
    pub nexthop_ttl: Option<Spanned<String>>,
    pub shutdown_grace: Option<Spanned<String>>,
    pub resolve_interval: Option<Spanned<String>>,
    pub resolve_hold: Option<Spanned<String>>,
    pub log_level: Option<Spanned<String>>,
    pub proxy_workers: Option<Spanned<i64>>,
    pub announce_table: Option<Spanned<i64>>,
    pub bird_socket: Option<Spanned<String>>,
    pub all_down: Option<Spanned<AllDownPolicy>>,
}

/// `[cluster]`: the other balancers, for flow sharing (`cluster.rs`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCluster {
    pub listen: Spanned<String>,
    #[serde(default)]
    pub peers: Vec<Spanned<String>>,
    pub key_file: Spanned<String>,
    pub max_messages_per_second: Option<Spanned<i64>>,
}

/// `[defaults]`: what VIPs inherit (see `defaults.rs`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDefaults {
    pub health: Option<Spanned<RawHealth>>,
    /// The daemon's log filter, as `[daemon] log_level` (one of the two).
    pub log_level: Option<Spanned<String>>,
    /// Deserialized only to be checked here, with its lines; `defaults.rs` merges the table
    /// as written into each proxy VIP's options.
    #[allow(dead_code)]
    pub proxy: Option<Spanned<lb_proxy::ProxyOptions>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawVip {
    pub name: Option<Spanned<String>>,
    pub address: Spanned<String>,
    pub port: Spanned<i64>,
    pub protocol: Option<Spanned<Protocol>>,
    pub forwarding: Option<Spanned<Forwarding>>,
    pub hash: Option<Spanned<HashMode>>,
    pub encap_source: Option<Spanned<String>>,
    pub all_down: Option<Spanned<AllDownPolicy>>,
    pub health: Option<Spanned<RawHealth>>,
    #[serde(default)]
    pub backends: Vec<Spanned<RawBackend>>,
    pub proxy: Option<Spanned<lb_proxy::ProxyOptions>>,
    pub announce: Option<Spanned<RawAnnounce>>,
    /// `quic = true` or `[vip.quic]` (see `quic.rs`).
    pub quic: Option<Spanned<super::quic::RawQuic>>,
}

/// `[vip.announce]`: when this node announces the VIP's address (see `announce/`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAnnounce {
    pub min_healthy: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBackend {
    pub address: Spanned<String>,
    pub port: Option<Spanned<i64>>,
    pub weight: Option<Spanned<i64>>,
    pub health: Option<Spanned<RawHealth>>,
    pub quic_server_id: Option<Spanned<i64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHealth {
    pub kind: Option<Spanned<HealthKind>>,
    pub address: Option<Spanned<String>>,
    pub path: Option<Spanned<String>>,
    pub status: Option<Spanned<i64>>,
    pub interval: Option<Spanned<String>>,
    pub timeout: Option<Spanned<String>>,
    pub rise: Option<Spanned<i64>>,
    pub fall: Option<Spanned<i64>>,
}
