//! `lb.toml`: the model of the file, its parsing and its validation.
//!
//! [`Config::load`] reads and checks the whole file before anything uses it: every mistake is
//! reported as `FILE:LINE: what is wrong`, all of them at once, and a file with any mistake
//! yields no [`Config`]. Every key is documented in `lb-ctl/lb.toml.example`. A file named
//! `*.yaml` or `*.yml` holds the same schema in YAML (see `yaml.rs`).
mod checker;
pub mod cluster;
mod defaults;
pub mod fleet;
mod health;
pub mod hosts;
pub mod log_level;
mod proxy;
pub mod quic;
mod raw;
pub mod rules;
mod spans;
mod unknown;
mod validate;
pub mod words;
mod yaml;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use checker::parse_duration;

/// Highest accepted backend weight. Weights are relative: a backend of weight 200 gets twice
/// the ring slots of one of weight 100. Weight 0 means drained (no new flows).
pub const MAX_WEIGHT: u32 = 65_535;
/// Weight of a backend that names none.
pub const DEFAULT_WEIGHT: u32 = 100;
/// Largest accepted ring size (RINGS holds `MAX_VIPS` rings of this many 4-byte slots).
pub const MAX_RING_SIZE: u32 = 1 << 20;
/// Largest accepted connection-table size.
pub const MAX_FLOW_TABLE_SIZE: u32 = 1 << 24;

/// A validated configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The file it was read from, for reloads and messages.
    pub source: PathBuf,
    pub daemon: DaemonSettings,
    /// `[cluster]`: the other balancers flows are shared with; None: no sharing.
    pub cluster: Option<cluster::ClusterSettings>,
    /// `[fleet]`: the VIPs and backends come from etcd (see `crate::fleet`); None: from this
    /// file.
    pub fleet: Option<fleet::FleetSettings>,
    /// VIPs in file order.
    pub vips: Vec<VipConfig>,
    /// What is allowed but probably not meant (a VIP with no backends), FILE:LINE like
    /// mistakes: `validate` prints them, the daemon logs them.
    pub warnings: Vec<Problem>,
}

/// Default of `daemon.shutdown_grace`.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// Default of `daemon.resolve_interval`.
pub const DEFAULT_RESOLVE_INTERVAL: Duration = Duration::from_secs(30);
/// Default of `daemon.resolve_hold`.
pub const DEFAULT_RESOLVE_HOLD: Duration = Duration::from_secs(300);

/// `[daemon]`: settings of the whole balancer.
#[derive(Clone, Debug, PartialEq)]
pub struct DaemonSettings {
    /// Control socket; `None` means [`crate::paths::api_socket`] of the interface.
    pub api_socket: Option<PathBuf>,
    /// Optional TCP admin listener (same API, no authentication): loopback unless
    /// `api_tcp_allow_remote = true`.
    pub api_tcp: Option<SocketAddr>,
    /// Optional TCP listener serving only `/metrics` (read-only, for Prometheus).
    pub metrics: Option<SocketAddr>,
    /// Maglev slots per VIP (a prime). Fixed for the life of the maps: a reload cannot change it.
    pub ring_size: u32,
    /// Connection-table entries. Fixed for the life of the maps.
    pub flow_table_size: u32,
    /// Seed of the flow hash. Changing it re-places every flow that is not in the connection table.
    pub hash_seed: u32,
    /// New flows each CPU records a second; past it new flows are placed unrecorded. 0 = no limit.
    pub new_flow_budget: u32,
    /// How long the data plane reuses a next-hop (route + neighbour) lookup, in ms; 0 looks
    /// up every packet.
    pub nexthop_ttl_ms: u32,
    /// How long a stopping daemon lets proxy VIPs' requests and relays in progress finish.
    pub shutdown_grace: Duration,
    /// How often backends named by host name are resolved again; zero: only at load.
    pub resolve_interval: Duration,
    /// How long an address its name no longer gives stays, drained, before it is removed.
    pub resolve_hold: Duration,
    /// The daemon's log filter (a tracing filter) when `--log-level` does not set one.
    pub log_level: String,
    /// Worker threads of the userspace proxy, each with its own listener on every proxy VIP
    /// (SO_REUSEPORT); None: one per CPU. Fixed for the daemon's life.
    pub proxy_workers: Option<u32>,
    /// What a VIP does when none of its backends is healthy (a VIP may override it).
    pub all_down: AllDownPolicy,
    /// The kernel routing table that holds the announced VIPs' routes, for the routing
    /// daemon (BIRD's `kernel` protocol) to learn. Fixed for the daemon's life.
    pub announce_table: u32,
    /// The control socket of the BIRD that announces them (`bird -s`): the daemon connects to
    /// it to tell whether BIRD runs, and says so at start and in `status`.
    pub bird_socket: std::path::PathBuf,
}

/// Default of `daemon.announce_table`.
pub const DEFAULT_ANNOUNCE_TABLE: u32 = 4242;
/// Default of `daemon.bird_socket`: where Debian's bird2 listens.
pub const DEFAULT_BIRD_SOCKET: &str = "/run/bird/bird.ctl";

impl Default for DaemonSettings {
    fn default() -> Self {
        DaemonSettings {
            api_socket: None,
            api_tcp: None,
            metrics: None,
            ring_size: lb_common::limits::DEFAULT_RING_SIZE,
            flow_table_size: lb_common::limits::DEFAULT_FLOWS,
            hash_seed: 0,
            new_flow_budget: lb_common::limits::DEFAULT_NEW_FLOW_BUDGET,
            nexthop_ttl_ms: lb_common::limits::DEFAULT_NEXTHOP_TTL_MS,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            resolve_interval: DEFAULT_RESOLVE_INTERVAL,
            resolve_hold: DEFAULT_RESOLVE_HOLD,
            log_level: "info".into(),
            proxy_workers: None,
            all_down: AllDownPolicy::Forward,
            announce_table: DEFAULT_ANNOUNCE_TABLE,
            bird_socket: DEFAULT_BIRD_SOCKET.into(),
        }
    }
}

/// What a VIP is, apart from its backends: the same for the file ([`VipConfig`]) and the
/// running state (`state::VipState`), which both hold one.
#[derive(Clone, Debug, PartialEq)]
pub struct VipSpec {
    /// Optional name, usable wherever a VIP is referred to.
    pub name: Option<String>,
    pub address: IpAddr,
    pub port: u16,
    pub protocol: Protocol,
    pub forwarding: Forwarding,
    pub hash: HashMode,
    /// Outer source address of encapsulated packets (`dsr-ipip` and `dsr-gue` only, required
    /// there).
    pub encap_source: Option<IpAddr>,
    pub all_down: AllDownPolicy,
    /// The VIP's own health table (with defaults): what backends added at run time get.
    pub health: Option<HealthSpec>,
    /// `[vip.proxy]`: lb-proxy's options (proxy VIPs only).
    pub proxy: Option<lb_proxy::ProxyOptions>,
    /// `[vip.announce]`: announce the VIP's address over the routing daemon while it can be
    /// served (scale-out behind ECMP).
    pub announce: Option<Announce>,
    /// `quic = true` or `[vip.quic]`: QUIC short-header packets go to the backend their
    /// connection ID names (UDP VIPs only).
    pub quic: Option<quic::QuicSpec>,
}

/// `[vip.announce]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Announce {
    /// Backends that must be healthy (and not drained) for the VIP to be announced.
    pub min_healthy: u32,
}

/// What identifies a VIP across reloads and restarts: address, port, wire protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct VipIdentity {
    pub address: IpAddr,
    pub port: u16,
    pub ip_proto: u8,
}

impl VipSpec {
    pub fn identity(&self) -> VipIdentity {
        VipIdentity { address: self.address, port: self.port, ip_proto: self.protocol.ip_proto() }
    }
    /// How the VIP is named in messages: its name, or `ADDR:PORT/PROTOCOL`.
    pub fn label(&self) -> String {
        self.name.clone().unwrap_or_else(|| self.address_label())
    }
    /// `ADDR:PORT/PROTOCOL`.
    pub fn address_label(&self) -> String {
        format!("{}/{}", SocketAddr::new(self.address, self.port), self.protocol.as_str())
    }
}

/// `[[vip]]`: one virtual service.
#[derive(Clone, Debug, PartialEq)]
pub struct VipConfig {
    pub spec: VipSpec,
    pub backends: Vec<BackendConfig>,
    /// Backends named by host name: what each address they resolve to becomes (those
    /// resolved at load are in `backends` too).
    pub hosts: Vec<hosts::HostBackends>,
    /// Line of the VIP's `address` key, for messages.
    pub line: usize,
}

impl std::ops::Deref for VipConfig {
    type Target = VipSpec;
    fn deref(&self) -> &VipSpec {
        &self.spec
    }
}

/// One backend of a VIP.
#[derive(Clone, Debug, PartialEq)]
pub struct BackendConfig {
    pub address: SocketAddr,
    /// The host name it was resolved from, if it was written as one.
    pub host: Option<String>,
    pub weight: u32,
    /// The check that applies to this backend (the VIP's, with this backend's overrides);
    /// `None`: not checked, always considered healthy.
    pub health: Option<HealthSpec>,
}

/// A health check, as it applies to one backend.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct HealthSpec {
    pub check: CheckKind,
    /// Where the check connects when not the backend's own address (HAProxy's `addr`/`port`):
    /// e.g. a separate health port, or a backend reached through a tunnel.
    #[serde(default)]
    pub address: Option<SocketAddr>,
    pub interval: Duration,
    pub timeout: Duration,
    /// Successes in a row that bring a backend up.
    pub rise: u32,
    /// Failures in a row that take a backend down.
    pub fall: u32,
}

/// What a health check does.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CheckKind {
    /// A TCP connect.
    Tcp,
    /// An HTTP/1.1 `GET path` that must answer `status`.
    Http { path: String, status: u16 },
}

/// Health-check defaults, applied to keys a `health` table leaves out.
pub mod health_defaults {
    use std::time::Duration;
    pub const INTERVAL: Duration = Duration::from_secs(2);
    pub const TIMEOUT: Duration = Duration::from_secs(1);
    pub const RISE: u32 = 2;
    pub const FALL: u32 = 3;
    pub const HTTP_PATH: &str = "/";
    pub const HTTP_STATUS: u16 = 200;
}

/// `protocol`: what a VIP carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    Tcp,
    Udp,
    /// HTTP, served by the userspace proxy (L7).
    Http,
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Http => "http",
        }
    }
    /// The IP protocol on the wire (HTTP runs over TCP).
    pub fn ip_proto(self) -> u8 {
        match self {
            Protocol::Udp => lb_common::ip_proto::UDP,
            Protocol::Tcp | Protocol::Http => lb_common::ip_proto::TCP,
        }
    }
    /// What lb-proxy speaks for a proxy VIP of this protocol.
    pub fn proxy_mode(self) -> lb_proxy::Mode {
        if self == Protocol::Http { lb_proxy::Mode::Http } else { lb_proxy::Mode::Tcp }
    }
}

/// `forwarding`: how packets reach backends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Forwarding {
    /// XDP rewrites the destination; replies come back through the balancer.
    Nat,
    /// XDP encapsulates IP in IP; backends answer clients directly. The outer header's family
    /// is `encap_source`'s (and the backends'): IPv4-in-IPv4, IPv6-in-IPv4, IPv4-in-IPv6 or
    /// IPv6-in-IPv6 follows from the VIP's and `encap_source`'s families. `dsr-ip6ip6` is
    /// another spelling of the same mode.
    #[serde(alias = "dsr-ip6ip6")]
    DsrIpip,
    /// XDP sends the packet unchanged to the backend's MAC address (the backend is on the
    /// balancer's segment and holds the VIP on `lo`); backends answer clients directly.
    DsrL2,
    /// XDP encapsulates in UDP (GUE, port 6080); backends answer clients directly.
    DsrGue,
    /// The userspace proxy terminates the connection.
    Proxy,
}

impl Forwarding {
    pub fn as_str(self) -> &'static str {
        match self {
            Forwarding::Nat => "nat",
            Forwarding::DsrIpip => "dsr-ipip",
            Forwarding::DsrL2 => "dsr-l2",
            Forwarding::DsrGue => "dsr-gue",
            Forwarding::Proxy => "proxy",
        }
    }
    /// Whether the XDP data plane serves this VIP (as opposed to the userspace proxy).
    pub fn is_xdp(self) -> bool {
        !matches!(self, Forwarding::Proxy)
    }
}

/// `hash`: what picks the ring slot of a new flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HashMode {
    /// The client address: a client sticks to one backend.
    Ip,
    /// The 5-tuple: every connection is placed on its own.
    Flow,
}

impl HashMode {
    pub fn as_str(self) -> &'static str {
        match self {
            HashMode::Ip => "ip",
            HashMode::Flow => "flow",
        }
    }
    /// The mode as VIP_INFO stores it (`lb_common::vip::hash_mode`).
    pub fn wire(self) -> u8 {
        match self {
            HashMode::Ip => lb_common::vip::hash_mode::CLIENT_IP,
            HashMode::Flow => lb_common::vip::hash_mode::FLOW,
        }
    }
}

/// `all_down`: what a VIP does when none of its backends is healthy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AllDownPolicy {
    /// Fail open: spread new flows over all backends, as if all were healthy.
    Forward,
    /// Drop new flows (established ones keep their backend while it exists).
    Drop,
}

impl AllDownPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            AllDownPolicy::Forward => "forward",
            AllDownPolicy::Drop => "drop",
        }
    }
}

/// `health.kind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HealthKind {
    Tcp,
    Http,
    /// No check: the backend is always considered healthy (to switch a VIP's check off for
    /// one backend).
    None,
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The file has mistakes; each names its line.
    #[error("{}", list(.0))]
    Invalid(Vec<Problem>),
}

impl ConfigError {
    /// The individual problems (one for a read error).
    pub fn problems(&self) -> Vec<String> {
        match self {
            ConfigError::Read { .. } => vec![self.to_string()],
            ConfigError::Invalid(problems) => problems.iter().map(|p| p.to_string()).collect(),
        }
    }
}

fn list(problems: &[Problem]) -> String {
    problems.iter().map(|p| p.to_string()).collect::<Vec<_>>().join("\n")
}

/// One mistake in a configuration file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub file: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{}: {}", self.file, line, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

impl Config {
    /// Logs the configuration's warnings.
    pub fn log_warnings(&self) {
        for w in &self.warnings {
            tracing::warn!("{w}");
        }
    }

    /// Reads and validates `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let bytes =
            std::fs::read(path).map_err(|source| ConfigError::Read { path: path.display().to_string(), source })?;
        // Lines that are not UTF-8 are mistakes at their line; the rest is checked all the same.
        let not_utf8 = not_utf8(&bytes, &path.display().to_string());
        match (Config::parse(&String::from_utf8_lossy(&bytes), path), not_utf8.is_empty()) {
            (Ok(config), true) => Ok(config),
            (Ok(_), false) => Err(ConfigError::Invalid(not_utf8)),
            (Err(ConfigError::Invalid(mut problems)), false) => {
                // What else is said of such a line is about the replacement character.
                problems.retain(|p| !not_utf8.iter().any(|n| n.line == p.line));
                problems.extend(not_utf8);
                problems.sort_by_key(|p| p.line.unwrap_or(usize::MAX));
                Err(ConfigError::Invalid(problems))
            }
            (Err(e), _) => Err(e),
        }
    }

    /// Validates `text`, read from `path` (used in messages and kept for reloads): YAML when
    /// `path` ends in `.yaml` or `.yml`, TOML otherwise.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        Config::parse_with(text, path, &hosts::system_resolver())
    }

    /// [`Config::parse`], resolving host names with `resolve`.
    pub fn parse_with(text: &str, path: &Path, resolve: &hosts::Resolver) -> Result<Config, ConfigError> {
        if !is_yaml(path) {
            return validate::parse(text, path, resolve);
        }
        let file = path.display().to_string();
        let translated = yaml::translate(text).map_err(|(line, message)| {
            ConfigError::Invalid(vec![Problem { file: file.clone(), line: Some(line), message }])
        })?;
        // Validation names lines of the TOML text; each maps back to its YAML line.
        let to_yaml = |p: Problem| Problem { line: p.line.map(|l| translated.yaml_line(l)), ..p };
        match validate::parse(&translated.toml, path, resolve) {
            Ok(mut config) => {
                config.warnings = config.warnings.into_iter().map(to_yaml).collect();
                for vip in &mut config.vips {
                    vip.line = translated.yaml_line(vip.line);
                }
                Ok(config)
            }
            Err(ConfigError::Invalid(problems)) => {
                Err(ConfigError::Invalid(problems.into_iter().map(to_yaml).collect()))
            }
            Err(e) => Err(e),
        }
    }

    /// The control socket path for interface `iface`.
    pub fn api_socket(&self, iface: &str) -> PathBuf {
        self.daemon.api_socket.clone().unwrap_or_else(|| crate::paths::api_socket(iface))
    }
}

/// A problem for each line of `bytes` that is not UTF-8 text.
fn not_utf8(bytes: &[u8], file: &str) -> Vec<Problem> {
    let mut found: Vec<Problem> = Vec::new();
    for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
        if let Err(e) = std::str::from_utf8(line) {
            let at = e.valid_up_to();
            found.push(Problem {
                file: file.to_string(),
                line: Some(i + 1),
                message: format!(
                    "byte 0x{:02X} at column {} is not UTF-8 text: save the file as UTF-8 (an editor set to Latin-1 writes é as 0xE9)",
                    line[at],
                    at + 1
                ),
            });
        }
    }
    found
}

/// Whether `path` names a YAML file.
fn is_yaml(path: &Path) -> bool {
    matches!(path.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"))
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod yaml_tests;
