//! Backends named by host name (`address = "app.internal"`): each address the name resolves to
//! is a backend, at load and again every `daemon.resolve_interval` (as HAProxy's resolvers do).
//! The daemon applies what changed: a new address is added; one the name no longer gives is
//! drained (its established flows stay) and removed after `daemon.resolve_hold`; a name that
//! fails to resolve changes nothing (a DNS outage must not empty a VIP).
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;

use super::rules;
use super::{Forwarding, HealthSpec};

/// What becomes a backend for each address a name resolves to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HostBackends {
    pub host: String,
    pub port: u16,
    pub weight: u32,
    pub health: Option<HealthSpec>,
    /// Line of the backend's `address` key, for messages.
    pub line: usize,
}

/// Resolves a host name and port to addresses (the system's resolver, or a test's).
pub type Resolver = Arc<dyn Fn(&str, u16) -> std::io::Result<Vec<SocketAddr>> + Send + Sync>;

/// The system's resolver (getaddrinfo: /etc/hosts, then DNS, as nsswitch.conf says).
pub fn system_resolver() -> Resolver {
    Arc::new(|host, port| Ok((host, port).to_socket_addrs()?.collect()))
}

/// Whether `text` is written as a host name (letters, digits, '-' and '.', at most 253
/// characters, labels of at most 63 that neither start nor end with '-').
pub fn is_host_name(text: &str) -> bool {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    let name = text.strip_suffix('.').unwrap_or(text);
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(label_ok)
        && name.bytes().any(|b| b.is_ascii_alphabetic())
}

/// The addresses of `resolved` that can serve the VIP at `vip` (in order, each once), and the
/// reason the first refused one was refused. A name giving both families keeps the addresses of
/// the family the VIP's forwarding can reach.
pub fn usable(
    forwarding: Forwarding,
    vip: SocketAddr,
    encap_source: Option<IpAddr>,
    resolved: &[SocketAddr],
) -> (Vec<SocketAddr>, Option<String>) {
    let mut out: Vec<SocketAddr> = Vec::new();
    let mut refused = None;
    for &addr in resolved {
        match rules::address(forwarding, vip, encap_source, addr) {
            Ok(()) if !out.contains(&addr) => out.push(addr),
            Ok(()) => {}
            Err(rule) => {
                refused.get_or_insert(rule.to_string());
            }
        }
    }
    (out, refused)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::{Config, ConfigError};

    /// A resolver that knows `app.test` (two addresses and a loopback one), `local.test`
    /// (loopback and IPv6 only) and nothing else.
    fn fake() -> Resolver {
        Arc::new(|host, port| {
            let ips: &[&str] = match host {
                "app.test" => &["198.51.100.1", "198.51.100.2", "127.0.0.1"],
                "local.test" => &["127.0.0.1", "2001:db8::1"],
                _ => return Err(std::io::Error::other("failed to lookup address information: Name does not resolve")),
            };
            Ok(ips.iter().map(|ip| SocketAddr::new(ip.parse().unwrap(), port)).collect())
        })
    }

    fn parse(backends: &str) -> Result<Config, ConfigError> {
        let text = format!(
            "[daemon]\nresolve_interval = \"10s\"\nresolve_hold = \"1m\"\n\n[[vip]]\nname = \"web\"\naddress = \"203.0.113.10\"\nport = 80\nbackends = [\n{backends}]\n"
        );
        Config::parse_with(&text, Path::new("lb.toml"), &fake())
    }

    #[test]
    fn a_name_is_a_backend_per_usable_address() {
        let c = parse("  { address = \"app.test\", port = 8080, weight = 50 },\n").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.daemon.resolve_interval, std::time::Duration::from_secs(10));
        assert_eq!(c.daemon.resolve_hold, std::time::Duration::from_secs(60));
        let web = &c.vips[0];
        let got: Vec<(String, Option<&str>, u32)> =
            web.backends.iter().map(|b| (b.address.to_string(), b.host.as_deref(), b.weight)).collect();
        assert_eq!(
            got,
            [("198.51.100.1:8080".into(), Some("app.test"), 50), ("198.51.100.2:8080".into(), Some("app.test"), 50)],
            "loopback is not usable behind NAT"
        );
        assert_eq!(
            web.hosts,
            [HostBackends { host: "app.test".into(), port: 8080, weight: 50, health: None, line: 10 }]
        );
    }

    #[test]
    fn an_address_written_and_resolved_is_one_backend() {
        let c = parse("  { address = \"198.51.100.1\", port = 8080 },\n  { address = \"app.test\", port = 8080 },\n")
            .unwrap_or_else(|e| panic!("{e}"));
        let got: Vec<(String, Option<&str>)> =
            c.vips[0].backends.iter().map(|b| (b.address.to_string(), b.host.as_deref())).collect();
        assert_eq!(got, [("198.51.100.1:8080".into(), None), ("198.51.100.2:8080".into(), Some("app.test"))]);
    }

    #[test]
    fn names_that_give_nothing_usable_are_mistakes() {
        let problems = |backends: &str| parse(backends).unwrap_err().problems();
        assert_eq!(
            problems("  { address = \"nowhere.test\" },\n"),
            [
                "lb.toml:10: vip \"web\": backend host \"nowhere.test\" does not resolve: failed to lookup address information: Name does not resolve"
            ]
        );
        assert_eq!(
            problems("  { address = \"local.test\" },\n"),
            [
                "lb.toml:10: vip \"web\": backend host \"local.test\" gives no usable address (backend 127.0.0.1:80: a loopback address is this host, which the XDP data plane cannot forward to (use forwarding = \"proxy\"))"
            ]
        );
        let text = "[daemon]\nresolve_interval = \"soon\"\nresolve_hold = \"2d\"\n";
        let e = Config::parse_with(text, Path::new("lb.toml"), &fake()).unwrap_err().problems();
        assert!(e[0].starts_with("lb.toml:2: daemon: resolve_interval \"soon\": "), "{e:?}");
        assert_eq!(e[1], "lb.toml:3: daemon: resolve_hold must be at most 24h");
    }

    #[test]
    fn host_names() {
        for good in ["app", "app.internal", "backend-1.example.", "a1.b2.example"] {
            assert!(is_host_name(good), "{good}");
        }
        for bad in ["", "-app", "app-", "a..b", "app_1", "198.51.100.1", "[::1]", "a b", &"a".repeat(64)] {
            assert!(!is_host_name(bad), "{bad}");
        }
    }

    #[test]
    fn only_usable_addresses_once() {
        let sa = |s: &str| s.parse::<SocketAddr>().unwrap();
        let vip = sa("203.0.113.10:80");
        let resolved = [sa("198.51.100.1:80"), sa("[2001:db8::1]:80"), sa("198.51.100.1:80"), sa("198.51.100.2:80")];
        let (ok, refused) = usable(Forwarding::Nat, vip, None, &resolved);
        assert_eq!(ok, [sa("198.51.100.1:80"), sa("198.51.100.2:80")]);
        assert!(refused.unwrap().contains("an IPv6 backend cannot serve the IPv4 VIP"));
        assert_eq!(usable(Forwarding::Proxy, vip, None, &resolved).0.len(), 3);
        let encap6 = Some("2001:db8::fe".parse().unwrap());
        assert_eq!(usable(Forwarding::DsrIpip, vip, encap6, &resolved).0, [sa("[2001:db8::1]:80")]);
    }
}
