//! The tuning tables of [`super::ProxyOptions`]: timeouts, limits, client-information headers,
//! PROXY protocol, retries and outlier detection.
use std::num::{NonZeroU32, NonZeroU64};
use std::ops::RangeInclusive;
use std::time::Duration;

use serde::{Deserialize, Deserializer, de::Error};

use super::duration;

/// Timeouts. In lb.toml-style text they read `"2s"`, `"500ms"`, `"1m"`, `"1h"`, or a number
/// of milliseconds. Only `queue` (never wait) and `tcp_keepalive` (off) may be 0.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Timeouts {
    /// Establishing a backend connection (each attempt).
    #[serde(with = "duration::nonzero")]
    pub connect: Duration,
    /// A client must send a complete request head within this from its first byte (slow-loris
    /// defence); HTTP/1 clients then get 408.
    #[serde(with = "duration::nonzero")]
    pub client_header: Duration,
    /// A backend must answer with a response head within this once the request has been sent
    /// whole (each attempt); then 504. Upload time does not count.
    #[serde(with = "duration::nonzero")]
    pub backend_header: Duration,
    /// Keep-alive idle time: between requests on a client connection, and of pooled backend
    /// connections.
    #[serde(with = "duration::nonzero")]
    pub idle: Duration,
    /// The budget from the end of the request (head, and body if any) to the response head:
    /// queueing, retries, every attempt.
    #[serde(with = "duration::nonzero")]
    pub request: Duration,
    /// How long a request may wait in a backend's maxconn queue.
    #[serde(with = "duration")]
    pub queue: Duration,
    /// Inactivity while a request or response body streams: a client or backend that sends
    /// nothing for this long mid-body loses the exchange.
    #[serde(with = "duration::nonzero")]
    pub body: Duration,
    /// Sending to a client: one that takes no byte of what is written to it for this long
    /// (stopped reading its response) loses the connection, and its backend exchange ends
    /// (nginx's `send_timeout`). On h2, a stream whose client stops taking its data (its
    /// flow-control window stays shut) is cut the same way, and the connection serves on.
    #[serde(with = "duration::nonzero")]
    pub send: Duration,
    /// Inactivity of upgraded connections (WebSocket) and TCP relays, both ways together
    /// (HAProxy's `timeout tunnel`).
    #[serde(with = "duration::nonzero")]
    pub tunnel: Duration,
    /// TCP keepalive probes on client and backend sockets start after this much silence, so
    /// peers that vanished without a FIN are found; 0 turns them off.
    #[serde(with = "duration")]
    pub tcp_keepalive: Duration,
    /// TLS: a client must complete its handshake (or, with SNI routing, send its ClientHello)
    /// within this.
    #[serde(with = "duration::nonzero")]
    pub handshake: Duration,
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
            body: Duration::from_secs(60),
            send: Duration::from_secs(60),
            tunnel: Duration::from_secs(3600),
            tcp_keepalive: Duration::from_secs(60),
            handshake: Duration::from_secs(10),
        }
    }
}

/// Limits on what clients may send and hold.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Most bytes of a request head (request line and headers); more gets 431.
    pub max_header_bytes: usize,
    /// Most header fields in a request; more gets 431.
    pub max_headers: usize,
    /// Most bytes of the request target; longer gets 414.
    pub max_request_line: usize,
    /// Most concurrent client connections to the VIP; more are answered 503 (HTTP) or closed.
    pub max_connections: usize,
    /// Most concurrent connections from one client address (IPv6: one /64); more are answered
    /// 429 (plain HTTP) or closed (TLS, TCP). None: no cap but the VIP's (0 is refused: it would
    /// refuse everyone).
    #[serde(deserialize_with = "optional_limit_u32")]
    pub max_connections_per_client: Option<NonZeroU32>,
    /// Largest request body accepted; larger gets 413 (a declared length before any backend
    /// is asked, a streamed body once it grows past it). None: no limit (0 is refused: nginx reads
    /// it as "no limit", which an operator might mean).
    #[serde(deserialize_with = "optional_limit_u64")]
    pub max_body_bytes: Option<NonZeroU64>,
    /// Requests a second one client address (IPv6: one /64) may make on HTTP VIPs, new
    /// connections a second on TCP VIPs; past its burst, 429 with `Retry-After` (HTTP) or a
    /// close (TCP). None: no limit.
    #[serde(deserialize_with = "optional_limit_u32")]
    pub requests_per_second_per_client: Option<NonZeroU32>,
    /// How many requests a client may make at once above that rate (default: one second's).
    #[serde(deserialize_with = "optional_limit_u32")]
    pub burst_per_client: Option<NonZeroU32>,
    /// Requests waiting for a full backend (per backend); more get 503.
    pub queue_per_backend: usize,
    /// Idle pooled connections kept per backend.
    pub pool_idle_per_backend: usize,
    /// HTTP/2 streams per client connection.
    pub h2_max_streams: u32,
    /// An HTTP/2 client's flow-control window, for each stream and for the whole connection:
    /// the most request body one client connection may send ahead of what the backends take,
    /// which the proxy then holds. Within [`H2_WINDOW_BYTES`].
    pub h2_window_bytes: u32,
}

/// The windows HTTP/2 allows `Limits::h2_window_bytes` (RFC 9113 §6.9.2: a connection's is
/// never below the protocol's 65,535, and none above 2^31 - 1).
pub const H2_WINDOW_BYTES: RangeInclusive<u32> = 65_535..=(1 << 31) - 1;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_header_bytes: 16 * 1024,
            max_headers: 100,
            max_request_line: 8 * 1024,
            max_connections: 10_000,
            max_connections_per_client: None,
            max_body_bytes: None,
            requests_per_second_per_client: None,
            burst_per_client: None,
            queue_per_backend: 128,
            pool_idle_per_backend: 256,
            h2_max_streams: 128,
            // hyper's server default: a 1 MiB upload in flight without a WINDOW_UPDATE round
            // trip, at the cost of up to that much held per connection while backends stall.
            h2_window_bytes: 1024 * 1024,
        }
    }
}

impl Limits {
    /// Whether a body of the declared length (None: not declared) is over `max_body_bytes`.
    pub(crate) fn body_too_large(&self, declared: Option<u64>) -> bool {
        self.max_body_bytes.zip(declared).is_some_and(|(max, n)| n > max.get())
    }
}

/// An optional limit written as a number: 0 would refuse everything, or read as nginx reads it,
/// "no limit"; either way it is a mistake at its line.
fn optional_limit_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<NonZeroU64>, D::Error> {
    NonZeroU64::new(u64::deserialize(d)?)
        .map(Some)
        .ok_or_else(|| D::Error::custom("a limit of 0 would refuse everything: leave the key out for no limit"))
}

fn optional_limit_u32<'de, D: Deserializer<'de>>(d: D) -> Result<Option<NonZeroU32>, D::Error> {
    let n = optional_limit_u64(d)?.map(|n| u32::try_from(n.get()));
    n.transpose().map(|n| n.and_then(NonZeroU32::new)).map_err(|_| D::Error::custom("a limit above 4294967295"))
}

/// Which client-information headers are added to requests.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
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
        ForwardedHeaders { x_forwarded: true, forwarded: false, trust_incoming: false }
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
#[serde(default, deny_unknown_fields)]
pub struct Retries {
    /// Extra attempts after the first one, each on another backend when there is one.
    /// Connection failures are always retried; failures after the request was sent only
    /// for idempotent requests without a body.
    pub max: u32,
    /// Responses (5xx) that an idempotent request without a body tries on another backend
    /// (nginx's `proxy_next_upstream http_503`, HAProxy's `retry-on 503`), e.g. a backend
    /// shutting down for a deploy; the last one is answered when no other backend is left.
    pub on_status: Vec<u16>,
}

impl Default for Retries {
    fn default() -> Self {
        Retries { max: 2, on_status: Vec::new() }
    }
}

/// Passive outlier detection. Only backend faults count: connect refused or timed out, a
/// reset or malformed response, a backend timeout, a 5xx. A client's fault (a malformed or
/// aborted upload) never does.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Outlier {
    /// Consecutive backend faults that eject a backend; 0 disables ejection.
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
