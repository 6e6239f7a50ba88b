//! Runtime specs of proxy VIPs. A spec is the VIP's identity (name, address, mode, backends)
//! plus its [`ProxyOptions`], the type lb.toml's `[vip.proxy]` table deserializes into.
//! Every table rejects keys it does not know, so a misspelt option is an error, not a default.
use std::net::SocketAddr;

use serde::Deserialize;

pub(crate) mod duration;
mod tls;
mod tuning;

pub use tls::{BackendTls, CertificateFiles, SniRoute, SniRouting, TlsTermination};
pub use tuning::{ForwardedHeaders, H2_WINDOW_BYTES, Limits, Outlier, ProxyProtocol, Retries, Timeouts};

/// One VIP served by lb-proxy.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyVipSpec {
    /// The VIP's name (as in lb.toml); the handle addresses VIPs by it.
    pub name: String,
    /// Where to listen. Tests and the daemon may instead pass an already bound listener.
    pub listen: SocketAddr,
    #[serde(default)]
    pub mode: Mode,
    #[serde(default)]
    pub backends: Vec<BackendSpec>,
    /// Seed of the client-address hash (the data plane's `hash_seed`, so a consistent-hash
    /// VIP places a client as an XDP VIP with `hash = "ip"` would).
    #[serde(default)]
    pub hash_seed: u32,
    #[serde(default)]
    pub options: ProxyOptions,
}

impl ProxyVipSpec {
    /// A spec with every option at its default.
    pub fn new(name: impl Into<String>, listen: SocketAddr, mode: Mode) -> Self {
        ProxyVipSpec {
            name: name.into(),
            listen,
            mode,
            backends: Vec::new(),
            hash_seed: 0,
            options: ProxyOptions::default(),
        }
    }
}

/// How lb-proxy serves one VIP: lb.toml's `[vip.proxy]` table (every key optional).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProxyOptions {
    pub balance: Balance,
    pub timeouts: Timeouts,
    pub limits: Limits,
    pub forwarded: ForwardedHeaders,
    pub proxy_protocol: ProxyProtocol,
    pub retries: Retries,
    pub outlier: Outlier,
    /// Most concurrent requests/connections per backend, for backends that set none of their
    /// own (more wait in a bounded queue).
    pub max_connections: Option<u32>,
    /// TLS termination (HTTP VIPs): clients speak TLS to the proxy.
    pub tls: Option<TlsTermination>,
    /// TLS from the proxy to the backends (HTTP VIPs).
    pub backend_tls: Option<BackendTls>,
    /// TLS passthrough routed by the ClientHello's server name (TCP VIPs).
    pub sni: Option<SniRouting>,
    /// HTTP requests routed to other backends by Host and path (HTTP VIPs), first match wins;
    /// requests no route takes go to the VIP's own backends.
    pub routes: Vec<HttpRoute>,
    /// Every request carries an `X-Request-ID` to its backend, back to its client and in its
    /// access log line: the client's own when it sent one, else a new one (32 hex digits, as
    /// nginx's `$request_id`).
    pub request_id: bool,
    /// Session persistence by an inserted cookie of this name (HAProxy's `cookie NAME insert`):
    /// a request carrying it goes to the backend it names while that backend takes requests,
    /// and a response from another backend sets it. None: no cookie.
    pub sticky_cookie: Option<String>,
    /// Plain-HTTP requests answered with a redirect to the same URL over HTTPS (port 443), with
    /// this status (301, 302, 303, 307 or 308), instead of being forwarded.
    pub https_redirect: Option<u16>,
    /// Header fields set on every request to the backends, replacing the client's (after the
    /// forwarded headers); an empty value removes the field.
    pub request_headers: std::collections::BTreeMap<String, String>,
    /// Header fields set on every response to clients, the proxy's own errors included
    /// (e.g. `Strict-Transport-Security`); an empty value removes the field.
    pub response_headers: std::collections::BTreeMap<String, String>,
    /// HTTP/1 clients: answer every response with `Connection: close` and close the connection
    /// after it, instead of keeping it alive for the next request (HAProxy's `httpclose`).
    /// HTTP/2 connections are not affected.
    pub close_after_response: bool,
    /// One log line per HTTP request (at info, target `access`): off by default.
    pub access_log: bool,
    /// `text` (HAProxy httplog-like) or `json`.
    pub access_log_format: AccessLogFormat,
}

impl ProxyOptions {
    /// The same options with relative certificate, key and CA paths taken under `dir` (the
    /// configuration file's directory), so they do not depend on the daemon's working directory.
    pub fn files_relative_to(mut self, dir: &std::path::Path) -> Self {
        let under = |p: &mut std::path::PathBuf| {
            if p.is_relative() {
                *p = dir.join(&*p);
            }
        };
        for c in self.tls.iter_mut().flat_map(|t| t.certificates.iter_mut()) {
            under(&mut c.chain);
            under(&mut c.key);
        }
        if let Some(b) = &mut self.backend_tls {
            under(&mut b.ca_file);
        }
        self
    }
}

/// A route of an HTTP VIP (HAProxy's `use_backend` on `hdr(host)` and `path_beg`, nginx's
/// `server_name` and `location`): requests whose Host matches one of `hosts` (exact, or
/// `*.example.org` for one label; none: any host) and whose path starts with `path_prefix`
/// (none: any path) go to `backends`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpRoute {
    #[serde(default)]
    pub hosts: Vec<String>,
    #[serde(default)]
    pub path_prefix: Option<String>,
    pub backends: Vec<SocketAddr>,
}

impl ProxyOptions {
    /// Every mistake in the routes and HTTP rules of a VIP that speaks `mode`, in words (none:
    /// empty). lb.toml's checks report them all; starting a VIP refuses the first.
    pub fn mistakes(&self, mode: Mode) -> Vec<String> {
        let mut found: Vec<String> =
            [self.check_routes(), self.check_http_rules()].into_iter().filter_map(Result::err).collect();
        if mode == Mode::Tcp && !self.routes.is_empty() {
            found.push("routes apply to HTTP VIPs; TCP VIPs route TLS by server name (sni)".into());
        }
        if mode == Mode::Tcp && self.has_http_rules() {
            found.push(
                "sticky_cookie, request_id, https_redirect, request_headers and response_headers apply to HTTP VIPs"
                    .into(),
            );
        }
        if self.https_redirect.is_some() && self.tls.is_some() {
            found.push("https_redirect is for plain-HTTP VIPs: this one terminates TLS".into());
        }
        found
    }

    /// The mistakes in `routes`, in words.
    fn check_routes(&self) -> Result<(), String> {
        for (i, r) in self.routes.iter().enumerate() {
            let at = format!("routes[{i}]");
            if r.hosts.is_empty() && r.path_prefix.is_none() {
                return Err(format!(
                    "{at}: give hosts, path_prefix or both (a route for everything is the VIP's own backends)"
                ));
            }
            if r.backends.is_empty() {
                return Err(format!("{at}: no backends"));
            }
            if let Some(p) = &r.path_prefix
                && !p.starts_with('/')
            {
                return Err(format!("{at}: path_prefix {p:?} must start with /"));
            }
            if let Some(h) = r.hosts.iter().find(|h| !is_host_pattern(h)) {
                return Err(format!("{at}: host {h:?} is not a host name or *.suffix (no port, no scheme)"));
            }
        }
        Ok(())
    }
}

impl ProxyOptions {
    /// Whether any HTTP-only rule is set (sticky cookie, redirect, header fields).
    fn has_http_rules(&self) -> bool {
        self.sticky_cookie.is_some()
            || self.request_id
            || self.https_redirect.is_some()
            || !self.request_headers.is_empty()
            || !self.response_headers.is_empty()
    }

    /// The mistakes in `sticky_cookie`, `https_redirect`, `request_headers` and
    /// `response_headers`, in words.
    fn check_http_rules(&self) -> Result<(), String> {
        if let Some(name) = &self.sticky_cookie
            && (name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)))
        {
            return Err(format!("sticky_cookie {name:?} is not a cookie name (letters, digits, !#$%&'*+-.^_`|~)"));
        }
        if let Some(status) = self.retries.on_status.iter().find(|s| !(500..600).contains(*s)) {
            return Err(format!("retries.on_status: {status} is not a 5xx status"));
        }
        if let Some(status) = self.https_redirect
            && ![301, 302, 303, 307, 308].contains(&status)
        {
            return Err(format!("https_redirect = {status}: a redirect status is 301, 302, 303, 307 or 308"));
        }
        for (table, fields) in
            [("request_headers", &self.request_headers), ("response_headers", &self.response_headers)]
        {
            header_rules(fields).map_err(|e| format!("{table}: {e}"))?;
        }
        Ok(())
    }
}

/// Header fields to set (Some) or remove (None), parsed once.
pub(crate) type HeaderRules = Vec<(http::HeaderName, Option<http::HeaderValue>)>;

/// Fields that decide a message's framing or its connection's reuse: the proxy writes those.
const NOT_SETTABLE: [&str; 8] =
    ["connection", "content-length", "transfer-encoding", "keep-alive", "proxy-connection", "te", "trailer", "upgrade"];

pub(crate) fn header_rules(fields: &std::collections::BTreeMap<String, String>) -> Result<HeaderRules, String> {
    fields
        .iter()
        .map(|(name, value)| {
            let parsed =
                http::HeaderName::from_bytes(name.as_bytes()).map_err(|_| format!("{name:?} is not a header name"))?;
            if NOT_SETTABLE.contains(&parsed.as_str()) {
                return Err(format!("{name:?} frames the message or its connection: the proxy sets it"));
            }
            let value = match value.is_empty() {
                true => None,
                false => Some(
                    http::HeaderValue::from_str(value)
                        .map_err(|_| format!("{name}: {value:?} is not a header value"))?,
                ),
            };
            Ok((parsed, value))
        })
        .collect()
}

/// A host name, or `*.` and one: letters, digits, `-` and `.`, no empty label.
fn is_host_pattern(h: &str) -> bool {
    let name = h.strip_prefix("*.").unwrap_or(h);
    !name.is_empty()
        && name.split('.').all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
}

/// How access log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AccessLogFormat {
    /// `CLIENT [TIME] VIP BACKEND DURATION STATUS BYTES "METHOD URI VERSION"`.
    #[default]
    Text,
    /// One JSON object a line.
    Json,
}

/// What the VIP speaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// HTTP/1.1 and h2 from clients (h2c, or ALPN over TLS), HTTP/1.1 to backends.
    #[default]
    Http,
    /// A byte relay: each client connection gets one backend connection.
    Tcp,
}

/// How a backend is chosen for a request (HTTP) or a connection (TCP).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Balance {
    /// Smooth weighted round-robin (nginx's): shares follow the weights, evenly interleaved;
    /// a backend that cannot take a request gives its turn to all the others alike.
    #[default]
    RoundRobin,
    /// The same as `round_robin` (kept so older configurations keep their meaning).
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
#[serde(deny_unknown_fields)]
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
        BackendSpec { addr, weight: 1, max_connections: None }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn minimal_spec_gets_defaults() {
        let spec: ProxyVipSpec =
            serde_json::from_str(r#"{"name":"web","listen":"127.0.0.1:0","backends":[{"addr":"127.0.0.1:81"}]}"#)
                .unwrap();
        assert_eq!(spec.mode, Mode::Http);
        assert_eq!(spec.options, ProxyOptions::default());
        assert_eq!(spec.options.balance, Balance::RoundRobin);
        assert_eq!(spec.backends[0].weight, 1);
    }

    #[test]
    fn full_spec_parses() {
        let spec: ProxyVipSpec = serde_json::from_str(
            r#"{"name":"t","listen":"127.0.0.1:0","mode":"tcp",
                "backends":[{"addr":"127.0.0.1:81","weight":3,"max_connections":10}],
                "options":{
                "balance":{"consistent_hash":{"key":{"cookie":"session"}}},
                "timeouts":{"connect":"250ms","idle":"2m","request":1500,"tunnel":"1h"},
                "proxy_protocol":"v2","retries":{"max":4},
                "outlier":{"consecutive_failures":3,"base_ejection":"1s"}}}"#,
        )
        .unwrap();
        let o = &spec.options;
        assert_eq!(spec.mode, Mode::Tcp);
        assert_eq!(o.balance, Balance::ConsistentHash { key: HashKey::Cookie("session".into()) });
        assert_eq!(spec.backends[0].max_connections, Some(10));
        assert_eq!(o.timeouts.connect, Duration::from_millis(250));
        assert_eq!(o.timeouts.idle, Duration::from_secs(120));
        assert_eq!(o.timeouts.request, Duration::from_millis(1500));
        assert_eq!(o.timeouts.tunnel, Duration::from_secs(3600));
        assert_eq!(o.timeouts.client_header, Timeouts::default().client_header);
        assert_eq!(o.proxy_protocol, ProxyProtocol::V2);
        assert_eq!(o.retries.max, 4);
        assert_eq!(o.outlier.base_ejection, Duration::from_secs(1));
    }

    #[test]
    fn unknown_keys_are_refused_at_every_level() {
        for (what, text) in [
            ("top", r#"{"balanse":"round_robin"}"#),
            ("timeouts", r#"{"timeouts":{"conect":"1s"}}"#),
            ("limits", r#"{"limits":{"max_conns":5}}"#),
            ("forwarded", r#"{"forwarded":{"x_forwarded_for":true}}"#),
            ("retries", r#"{"retries":{"maximum":1}}"#),
            ("outlier", r#"{"outlier":{"failures":1}}"#),
            ("tls", r#"{"tls":{"certificates":[],"cert":"x"}}"#),
            ("tls certificate", r#"{"tls":{"certificates":[{"chain":"a","key":"b","pass":"c"}]}}"#),
            ("backend_tls", r#"{"backend_tls":{"ca":"x"}}"#),
            ("sni", r#"{"sni":{"route":[]}}"#),
            ("sni route", r#"{"sni":{"routes":[{"names":["a"],"backends":[],"weight":1}]}}"#),
        ] {
            let r: Result<ProxyOptions, _> = serde_json::from_str(text);
            let e = r.expect_err(what).to_string();
            assert!(e.contains("unknown field"), "{what}: {e}");
        }
    }

    #[test]
    fn bad_duration_is_an_error() {
        let r: Result<Timeouts, _> = serde_json::from_str(r#"{"connect":"3 parsecs"}"#);
        assert!(r.unwrap_err().to_string().contains("invalid duration"));
    }
}

#[cfg(test)]
mod files_tests {
    use std::path::{Path, PathBuf};

    use super::*;

    #[test]
    fn relative_tls_paths_are_taken_under_the_directory() {
        let options = ProxyOptions {
            tls: Some(TlsTermination {
                certificates: vec![CertificateFiles { chain: "certs/a.pem".into(), key: "/keys/a.key".into() }],
                alpn: vec![],
                min_version: "1.2".into(),
            }),
            backend_tls: Some(BackendTls { ca_file: "ca.pem".into(), server_name: "b".into() }),
            ..ProxyOptions::default()
        }
        .files_relative_to(Path::new("/etc/lb-ctl"));
        let cert = &options.tls.as_ref().unwrap().certificates[0];
        assert_eq!(
            (&cert.chain, &cert.key),
            (&PathBuf::from("/etc/lb-ctl/certs/a.pem"), &PathBuf::from("/keys/a.key"))
        );
        assert_eq!(options.backend_tls.unwrap().ca_file, PathBuf::from("/etc/lb-ctl/ca.pem"));
    }
}
