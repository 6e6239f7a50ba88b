//! Runtime specs of proxy VIPs. lb-ctl parses lb.toml and builds these; they also deserialize
//! (serde) with defaults for every optional part, so a spec can be written as JSON/TOML in tests.
use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;

/// One VIP served by lb-proxy.
#[derive(Clone, Debug, Deserialize)]
pub struct ProxyVipSpec {
    /// The VIP's name (as in lb.toml); the handle addresses VIPs by it.
    pub name: String,
    /// Where to listen. Tests and the daemon may instead pass an already bound listener.
    pub listen: SocketAddr,
    #[serde(default)]
    pub mode: Mode,
    #[serde(default)]
    pub balance: Balance,
    #[serde(default)]
    pub backends: Vec<BackendSpec>,
    #[serde(default)]
    pub timeouts: Timeouts,
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    pub forwarded: ForwardedHeaders,
    #[serde(default)]
    pub proxy_protocol: ProxyProtocol,
    #[serde(default)]
    pub retries: Retries,
    #[serde(default)]
    pub outlier: Outlier,
    /// Seed of the client-address hash (the data plane's `hash_seed`, so a consistent-hash
    /// VIP places a client as an XDP VIP with `hash = "ip"` would).
    #[serde(default)]
    pub hash_seed: u32,
}

impl ProxyVipSpec {
    /// A spec with every option at its default.
    pub fn new(name: impl Into<String>, listen: SocketAddr, mode: Mode) -> Self {
        ProxyVipSpec {
            name: name.into(),
            listen,
            mode,
            balance: Balance::default(),
            backends: Vec::new(),
            timeouts: Timeouts::default(),
            limits: Limits::default(),
            forwarded: ForwardedHeaders::default(),
            proxy_protocol: ProxyProtocol::default(),
            retries: Retries::default(),
            outlier: Outlier::default(),
            hash_seed: 0,
        }
    }
}

/// What the VIP speaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// HTTP/1.1 and h2c from clients, HTTP/1.1 to backends.
    #[default]
    Http,
    /// A byte relay: each client connection gets one backend connection.
    Tcp,
}

/// How a backend is chosen for a request (HTTP) or a connection (TCP).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Balance {
    #[default]
    RoundRobin,
    /// Smooth weighted round-robin (nginx's): shares follow the weights, evenly interleaved.
    WeightedRoundRobin,
    /// Fewest active requests relative to weight.
    LeastConnections,
    /// Two random backends, the less loaded one wins: near least-connections without a scan.
    PowerOfTwo,
    /// Maglev ring (the data plane's code) indexed by a hash of `key`.
    ConsistentHash { key: HashKey },
}

/// What the consistent hash is computed from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HashKey {
    /// The client address (the same hash as the data plane's `hash = "ip"`).
    #[default]
    ClientIp,
    /// A request header's value; requests without it fall back to the client address.
    Header(String),
    /// A cookie's value; requests without it fall back to the client address.
    Cookie(String),
}

/// A backend of a VIP.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct BackendSpec {
    pub addr: SocketAddr,
    /// Relative share; 0 drains the backend (no new requests, in-flight ones finish).
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// Most concurrent requests (HTTP) or connections (TCP) to this backend; more wait in a
    /// bounded queue (`Limits::queue_per_backend`) and get 503 when it is full.
    #[serde(default)]
    pub max_connections: Option<u32>,
}

fn default_weight() -> u32 {
    1
}

impl BackendSpec {
    pub fn new(addr: SocketAddr) -> Self {
        BackendSpec {
            addr,
            weight: 1,
            max_connections: None,
        }
    }
}

/// Timeouts. In lb.toml-style text they read `"2s"`, `"500ms"`, or a number of milliseconds.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Timeouts {
    /// Establishing a backend connection (each attempt).
    #[serde(with = "duration")]
    pub connect: Duration,
    /// A client must send a complete request head within this (slow-loris defence).
    #[serde(with = "duration")]
    pub client_header: Duration,
    /// A backend must answer with a response head within this (each attempt); then 504.
    #[serde(with = "duration")]
    pub backend_header: Duration,
    /// Keep-alive idle time of client and pooled backend connections, and of TCP relays
    /// with no traffic either way.
    #[serde(with = "duration")]
    pub idle: Duration,
    /// The whole budget from request head to response head: queueing, retries, every attempt.
    #[serde(with = "duration")]
    pub request: Duration,
    /// How long a request may wait in a backend's maxconn queue.
    #[serde(with = "duration")]
    pub queue: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(3),
            client_header: Duration::from_secs(10),
            backend_header: Duration::from_secs(30),
            idle: Duration::from_secs(60),
            request: Duration::from_secs(60),
            queue: Duration::from_secs(5),
        }
    }
}

/// Limits on what clients may send and hold.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Limits {
    /// Most bytes of a request head (request line and headers); more gets 431.
    pub max_header_bytes: usize,
    /// Most header fields in a request; more gets 431.
    pub max_headers: usize,
    /// Most bytes of the request target; longer gets 414.
    pub max_request_line: usize,
    /// Most concurrent client connections to the VIP; more are answered 503 (HTTP) or closed.
    pub max_connections: usize,
    /// Requests waiting for a full backend (per backend); more get 503.
    pub queue_per_backend: usize,
    /// Idle pooled connections kept per backend.
    pub pool_idle_per_backend: usize,
    /// HTTP/2 streams per client connection.
    pub h2_max_streams: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_header_bytes: 16 * 1024,
            max_headers: 100,
            max_request_line: 8 * 1024,
            max_connections: 10_000,
            queue_per_backend: 128,
            pool_idle_per_backend: 256,
            h2_max_streams: 128,
        }
    }
}

/// Which client-information headers are added to requests.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct ForwardedHeaders {
    /// X-Forwarded-For / -Proto / -Host.
    pub x_forwarded: bool,
    /// RFC 7239 `Forwarded`.
    pub forwarded: bool,
    /// Keep what the client sent in these headers and append to it (only right behind another
    /// trusted proxy); by default the client's copies are dropped, so they cannot be spoofed.
    pub trust_incoming: bool,
}

impl Default for ForwardedHeaders {
    fn default() -> Self {
        ForwardedHeaders {
            x_forwarded: true,
            forwarded: false,
            trust_incoming: false,
        }
    }
}

/// PROXY protocol header sent first on every backend connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProxyProtocol {
    #[default]
    None,
    V1,
    V2,
}

/// Retries, bounded.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Retries {
    /// Extra attempts after the first one, each on another backend when there is one.
    /// Connection failures are always retried; failures after the request was sent only
    /// for idempotent requests without a body.
    pub max: u32,
}

impl Default for Retries {
    fn default() -> Self {
        Retries { max: 2 }
    }
}

/// Passive outlier detection.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Outlier {
    /// Consecutive connect errors or 5xx that eject a backend; 0 disables ejection.
    pub consecutive_failures: u32,
    /// First ejection time; each further ejection in a row doubles it, up to `max_ejection`.
    #[serde(with = "duration")]
    pub base_ejection: Duration,
    #[serde(with = "duration")]
    pub max_ejection: Duration,
}

impl Default for Outlier {
    fn default() -> Self {
        Outlier {
            consecutive_failures: 5,
            base_ejection: Duration::from_secs(10),
            max_ejection: Duration::from_secs(300),
        }
    }
}

/// Serde for durations: `"2s"`, `"150ms"`, `"1m"`, or an integer number of milliseconds.
mod duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, de::Error};

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Millis(u64),
        Text(String),
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        match Raw::deserialize(d)? {
            Raw::Millis(ms) => Ok(Duration::from_millis(ms)),
            Raw::Text(s) => parse(&s).ok_or_else(|| {
                D::Error::custom(format!(
                    "invalid duration {s:?}: expected e.g. \"2s\", \"150ms\", \"1m\""
                ))
            }),
        }
    }

    pub fn parse(s: &str) -> Option<Duration> {
        let s = s.trim();
        let split = s.find(|c: char| !c.is_ascii_digit())?;
        let (num, unit) = s.split_at(split);
        let n: u64 = num.parse().ok()?;
        match unit.trim() {
            "ms" => Some(Duration::from_millis(n)),
            "s" => Some(Duration::from_secs(n)),
            "m" => Some(Duration::from_secs(n.checked_mul(60)?)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimal_spec_gets_defaults() {
        let spec: ProxyVipSpec = serde_json::from_str(
            r#"{"name":"web","listen":"127.0.0.1:0","backends":[{"addr":"127.0.0.1:81"}]}"#,
        )
        .unwrap();
        assert_eq!(spec.mode, Mode::Http);
        assert_eq!(spec.balance, Balance::RoundRobin);
        assert_eq!(spec.backends[0].weight, 1);
        assert_eq!(spec.timeouts, Timeouts::default());
        assert_eq!(spec.proxy_protocol, ProxyProtocol::None);
    }

    #[test]
    fn full_spec_parses() {
        let spec: ProxyVipSpec = serde_json::from_str(
            r#"{"name":"t","listen":"127.0.0.1:0","mode":"tcp",
                "balance":{"consistent_hash":{"key":{"cookie":"session"}}},
                "backends":[{"addr":"127.0.0.1:81","weight":3,"max_connections":10}],
                "timeouts":{"connect":"250ms","idle":"2m","request":1500},
                "proxy_protocol":"v2","retries":{"max":4},
                "outlier":{"consecutive_failures":3,"base_ejection":"1s"}}"#,
        )
        .unwrap();
        assert_eq!(spec.mode, Mode::Tcp);
        assert_eq!(
            spec.balance,
            Balance::ConsistentHash {
                key: HashKey::Cookie("session".into())
            }
        );
        assert_eq!(spec.backends[0].max_connections, Some(10));
        assert_eq!(spec.timeouts.connect, Duration::from_millis(250));
        assert_eq!(spec.timeouts.idle, Duration::from_secs(120));
        assert_eq!(spec.timeouts.request, Duration::from_millis(1500));
        assert_eq!(
            spec.timeouts.client_header,
            Timeouts::default().client_header
        );
        assert_eq!(spec.proxy_protocol, ProxyProtocol::V2);
        assert_eq!(spec.retries.max, 4);
        assert_eq!(spec.outlier.base_ejection, Duration::from_secs(1));
    }

    #[test]
    fn bad_duration_is_an_error() {
        let r: Result<Timeouts, _> = serde_json::from_str(r#"{"connect":"3 parsecs"}"#);
        assert!(r.unwrap_err().to_string().contains("invalid duration"));
    }
}
