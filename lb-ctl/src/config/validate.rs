//! From [`raw`](super::raw) to [`Config`]: every check, each mistake tied to its line.
use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use lb_common::limits::{MAX_BACKENDS, MAX_VIPS};
use lb_common::maglev::is_prime;
use toml::Spanned;

use super::checker::{Checker, parse_duration};
use super::defaults::Defaults;
use super::health::health;
use super::hosts::{self, HostBackends, Resolver};
use super::raw::{RawBackend, RawDaemon, RawFile, RawHealth, RawVip};
use super::rules;
use super::{
    BackendConfig, Config, ConfigError, DEFAULT_WEIGHT, DaemonSettings, Forwarding, HashMode, MAX_FLOW_TABLE_SIZE,
    MAX_RING_SIZE, Problem, Protocol, VipConfig, VipSpec,
};

pub(super) fn parse(text: &str, path: &Path, resolve: &Resolver) -> Result<Config, ConfigError> {
    let file = path.display().to_string();
    // Every unknown key is a mistake; the rest of the file is checked without them.
    let found = super::unknown::deserialize::<RawFile>(text);
    let text = found.text.as_str();
    let mut c = Checker { file, text, resolve, problems: Vec::new(), warnings: Vec::new(), stand_ins: Vec::new() };
    for (span, message) in found.mistakes {
        match span {
            Some(span) => c.error(span, message),
            None => c.problems.push(Problem { file: c.file.clone(), line: None, message }),
        }
    }
    c.stand_ins = found.stand_ins;
    let Some(raw) = found.raw else { return Err(ConfigError::Invalid(c.problems)) };
    let mut daemon = match &raw.daemon {
        Some(d) => daemon(&mut c, d.get_ref()),
        None => DaemonSettings::default(),
    };
    defaults_log_level(&mut c, &raw, &mut daemon);
    let cluster = raw.cluster.as_ref().and_then(|r| super::cluster::cluster(&mut c, r, path));
    let fleet = raw.fleet.as_ref().and_then(|r| super::fleet::fleet(&mut c, r, path));
    let defaults = Defaults::of(&raw, text);
    if let Some(h) = defaults.health {
        // Checked where it is written, once (VIPs and backends add their layers to it).
        let _ = health(&mut c, "defaults", &[h]);
    }
    let mut vips = Vec::new();
    for (index, v) in raw.vip.iter().enumerate() {
        if let Some(vip) = vip(&mut c, v, &daemon, &defaults, index) {
            vips.push(vip);
        }
    }
    across_vips(&mut c, &raw.vip);
    if raw.cluster.is_some() {
        // Announced from several nodes, a NAT VIP's replies break whenever ECMP moves a flow.
        for v in vips.iter().filter(|v| v.announce.is_some() && v.forwarding == Forwarding::Nat) {
            let span = line_span(c.text, v.line);
            c.error(
                span,
                format!(
                    "vip {:?}: forwarding \"nat\" with announce in a [cluster]: backends answer through the node that translated each flow, so replies break when ECMP moves a flow to another node; use a DSR mode (dsr-ipip, dsr-gue, dsr-l2) to scale out",
                    v.label()
                ),
            );
        }
    }
    // A VIP's health table is checked once per backend: report each mistake once.
    let mut seen = HashSet::new();
    c.problems.retain(|p| seen.insert((p.line, p.message.clone())));
    if c.problems.is_empty() {
        let mut warnings = std::mem::take(&mut c.warnings);
        // A VIP nothing can be sent to: allowed (backends may come through the API), rarely meant.
        for v in &vips {
            let (what, until) = match &v.backends {
                b if b.is_empty() => ("has no backends", "one is added"),
                b if b.iter().all(|b| b.weight == 0) => ("has only backends of weight 0 (drained)", "one has a weight"),
                _ => continue,
            };
            warnings.push(Problem {
                file: c.file.clone(),
                line: Some(v.line),
                message: format!(
                    "warning: vip {:?} {what}: its packets are dropped (or refused by the proxy) until {until}",
                    v.label()
                ),
            });
        }
        Ok(Config { source: path.to_path_buf(), daemon, cluster, fleet, vips, warnings })
    } else {
        Err(ConfigError::Invalid(c.problems))
    }
}

fn daemon(c: &mut Checker<'_>, d: &RawDaemon) -> DaemonSettings {
    let mut out = DaemonSettings::default();
    if let Some(s) = &d.api_socket {
        if Path::new(s.get_ref()).is_absolute() {
            out.api_socket = Some(s.get_ref().into());
        } else {
            c.error(s.span(), format!("daemon: api_socket must be an absolute path, got {:?}", s.get_ref()));
        }
    }
    if let Some(s) = &d.api_tcp {
        let text = s.get_ref();
        let addr = match text.parse::<u16>() {
            Ok(port) => Ok(SocketAddr::from(([127, 0, 0, 1], port))),
            Err(_) => text.parse::<SocketAddr>(),
        };
        match addr {
            Ok(addr) => {
                let allow_remote = d.api_tcp_allow_remote.as_ref().is_some_and(|b| *b.get_ref());
                if !addr.ip().is_loopback() && !allow_remote {
                    c.error(
                        s.span(),
                        format!(
                            "daemon: api_tcp {addr} is not a loopback address; the API has no \
                             authentication, set api_tcp_allow_remote = true to expose it anyway"
                        ),
                    );
                } else {
                    out.api_tcp = Some(addr);
                }
            }
            Err(_) => c.error(s.span(), format!("daemon: api_tcp must be PORT or ADDR:PORT, got {text:?}")),
        }
    }
    if let Some(s) = &d.metrics {
        match s.get_ref().parse::<SocketAddr>() {
            Ok(addr) => out.metrics = Some(addr),
            Err(_) => c.error(s.span(), format!("daemon: metrics must be ADDR:PORT, got {:?}", s.get_ref())),
        }
    }
    if let Some(s) = &d.ring_size
        && let Some(v) = c.int(s, 2..=MAX_RING_SIZE as i64, "daemon: ring_size")
    {
        if is_prime(v as u32) {
            out.ring_size = v as u32;
        } else {
            c.error(s.span(), format!("daemon: ring_size must be a prime number (Maglev), got {v}; e.g. 65537"));
        }
    }
    if let Some(s) = &d.flow_table_size
        && let Some(v) = c.int(s, 1..=MAX_FLOW_TABLE_SIZE as i64, "daemon: flow_table_size")
    {
        out.flow_table_size = v as u32;
    }
    if let Some(s) = &d.hash_seed
        && let Some(v) = c.int(s, 0..=u32::MAX as i64, "daemon: hash_seed")
    {
        out.hash_seed = v as u32;
    }
    if let Some(s) = &d.new_flow_budget
        && let Some(v) = c.int(s, 0..=u32::MAX as i64, "daemon: new_flow_budget")
    {
        out.new_flow_budget = v as u32;
    }
    if let Some(s) = &d.nexthop_ttl {
        match parse_duration(s.get_ref()) {
            Ok(ttl) if ttl <= Duration::from_secs(3600) => out.nexthop_ttl_ms = ttl.as_millis() as u32,
            Ok(_) => c.error(s.span(), "daemon: nexthop_ttl must be at most 1h"),
            Err(e) => c.error(s.span(), format!("daemon: nexthop_ttl {:?}: {e}", s.get_ref())),
        }
    }
    for (value, what, out) in [
        (&d.resolve_interval, "resolve_interval", &mut out.resolve_interval),
        (&d.resolve_hold, "resolve_hold", &mut out.resolve_hold),
    ] {
        if let Some(s) = value {
            match parse_duration(s.get_ref()) {
                Ok(d) if d <= Duration::from_secs(86_400) => *out = d,
                Ok(_) => c.error(s.span(), format!("daemon: {what} must be at most 24h")),
                Err(e) => c.error(s.span(), format!("daemon: {what} {:?}: {e}", s.get_ref())),
            }
        }
    }
    if let Some(s) = &d.shutdown_grace {
        match parse_duration(s.get_ref()) {
            Ok(grace) if grace <= Duration::from_secs(600) => out.shutdown_grace = grace,
            Ok(_) => c.error(s.span(), "daemon: shutdown_grace must be at most 10m"),
            Err(e) => c.error(s.span(), format!("daemon: shutdown_grace {:?}: {e}", s.get_ref())),
        }
    }
    if let Some(s) = &d.proxy_workers
        && let Some(v) = c.int(s, 1..=256, "daemon: proxy_workers")
    {
        out.proxy_workers = Some(v as u32);
    }
    if let Some(level) = d.log_level.as_ref().and_then(|s| log_level(c, s, "daemon")) {
        out.log_level = level;
    }
    if let Some(s) = &d.all_down {
        out.all_down = *s.get_ref();
    }
    if let Some(s) = &d.announce_table {
        // 0 is no table; 253-255 are the kernel's default, main and local tables.
        match c.int(s, 1..=i64::from(u32::MAX), "daemon: announce_table") {
            Some(t @ 253..=255) => c.error(
                s.span(),
                format!("daemon: announce_table {t} is one of the kernel's own tables: choose another"),
            ),
            Some(t) => out.announce_table = t as u32,
            None => {}
        }
    }
    if let Some(s) = &d.bird_socket {
        if s.get_ref().starts_with('/') {
            out.bird_socket = s.get_ref().into();
        } else {
            c.error(
                s.span(),
                format!(
                    "daemon: bird_socket {:?} must be an absolute path (BIRD's `-s`, Debian: /run/bird/bird.ctl)",
                    s.get_ref()
                ),
            );
        }
    }
    out
}

/// A log filter (`log_level` of `[daemon]` or `[defaults]`), checked.
fn log_level(c: &mut Checker<'_>, s: &Spanned<String>, table: &str) -> Option<String> {
    super::log_level::check(s.get_ref()).map_err(|e| c.error(s.span(), format!("{table}: log_level: {e}"))).ok()
}

/// `log_level` may be written in `[daemon]` or in `[defaults]`; written in both, it must say
/// the same (the second one written is the mistake).
fn defaults_log_level(c: &mut Checker<'_>, raw: &RawFile, daemon: &mut DaemonSettings) {
    let in_defaults = raw.defaults.as_ref().and_then(|d| d.get_ref().log_level.as_ref());
    let in_daemon = raw.daemon.as_ref().and_then(|d| d.get_ref().log_level.as_ref());
    match (in_daemon, in_defaults) {
        (Some(a), Some(b)) if a.get_ref() != b.get_ref() => {
            let second = if a.span().start > b.span().start { a } else { b };
            c.error(
                second.span(),
                format!(
                    "log_level is set twice, to {:?} in [daemon] and to {:?} in [defaults]: keep one",
                    a.get_ref(),
                    b.get_ref()
                ),
            );
        }
        (None, Some(b)) => {
            if let Some(level) = log_level(c, b, "defaults") {
                daemon.log_level = level;
            }
        }
        _ => {}
    }
}

fn vip<'a>(
    c: &mut Checker<'_>,
    spanned: &'a Spanned<RawVip>,
    daemon: &DaemonSettings,
    defaults: &Defaults<'a>,
    index: usize,
) -> Option<VipConfig> {
    let v = spanned.get_ref();
    let before = c.problems.len();
    let line = c.line_of(v.address.span());
    // The label used in this VIP's messages.
    let protocol = v.protocol.as_ref().map(|p| *p.get_ref()).unwrap_or(Protocol::Tcp);
    let label = match &v.name {
        Some(n) => n.get_ref().clone(),
        None => match v.address.get_ref().parse::<std::net::Ipv6Addr>() {
            Ok(_) => format!("[{}]:{}/{}", v.address.get_ref(), v.port.get_ref(), protocol.as_str()),
            Err(_) => format!("{}:{}/{}", v.address.get_ref(), v.port.get_ref(), protocol.as_str()),
        },
    };
    let at = format!("vip {label:?}");

    if let Some(n) = &v.name {
        let name = n.get_ref();
        let valid_chars = name.chars().all(|ch| ch.is_ascii_alphanumeric() || "-_.".contains(ch));
        if name.is_empty() || !valid_chars || !name.starts_with(|ch: char| ch.is_ascii_alphabetic()) {
            c.error(
                n.span(),
                format!("{at}: name must start with a letter and use only letters, digits, '-', '_' and '.'"),
            );
        }
    }
    let address = c.ip(&v.address, &format!("{at}: address"));
    let port = c.int(&v.port, 1..=65535, &format!("{at}: port")).map(|p| p as u16);
    let forwarding = match (&v.forwarding, protocol) {
        (Some(f), _) => *f.get_ref(),
        (None, Protocol::Http) => Forwarding::Proxy,
        (None, _) => Forwarding::Nat,
    };
    let forwarding_span = v.forwarding.as_ref().map(|f| f.span()).unwrap_or(v.address.span());
    match (protocol, forwarding) {
        (Protocol::Http, Forwarding::Nat | Forwarding::DsrIpip | Forwarding::DsrL2 | Forwarding::DsrGue) => c.error(
            forwarding_span.clone(),
            format!("{at}: protocol \"http\" is served by the userspace proxy: forwarding must be \"proxy\""),
        ),
        (Protocol::Udp, Forwarding::Proxy) => c.error(
            forwarding_span.clone(),
            format!("{at}: forwarding \"proxy\" supports protocol \"tcp\" and \"http\", not \"udp\""),
        ),
        _ => {}
    }
    if forwarding.is_xdp()
        && let Some(ip) = address
        && rules::is_v4_mapped(ip)
    {
        c.error(v.address.span(), format!("{at}: address {ip} is IPv4-mapped (::ffff:0:0/96): write the IPv4 address"));
    }
    let hash = v.hash.as_ref().map(|h| *h.get_ref()).unwrap_or(HashMode::Ip);
    let encap_source = match (&v.encap_source, forwarding) {
        (Some(s), Forwarding::DsrIpip | Forwarding::DsrGue) => match c.ip(s, &format!("{at}: encap_source")) {
            Some(ip) if rules::is_v4_mapped(ip) => {
                c.error(
                    s.span(),
                    format!("{at}: encap_source {ip} is IPv4-mapped (::ffff:0:0/96): write the IPv4 address"),
                );
                None
            }
            Some(ip) if ip.is_unspecified() || ip.is_multicast() || rules::is_v6_link_local(ip) => {
                let what = "a unicast address of this host with a global scope (the outer header's source)";
                c.error(s.span(), format!("{at}: encap_source {ip} must be {what}"));
                None
            }
            ip => ip,
        },
        (Some(s), _) => {
            c.error(s.span(), format!("{at}: encap_source only applies to forwarding = \"dsr-ipip\" or \"dsr-gue\""));
            None
        }
        (None, Forwarding::DsrIpip | Forwarding::DsrGue) => {
            c.error(
                forwarding_span,
                format!("{at}: forwarding \"{}\" needs encap_source (the outer source address)", forwarding.as_str()),
            );
            None
        }
        (None, _) => None,
    };
    if let Some(p) = &v.proxy
        && forwarding.is_xdp()
    {
        c.error(p.span(), format!("{at}: [vip.proxy] only applies to forwarding = \"proxy\" VIPs"));
    }
    let all_down = v.all_down.as_ref().map(|a| *a.get_ref()).unwrap_or(daemon.all_down);
    let vip_health = defaults.health_layers(v.health.as_ref());

    let mut backends: Vec<BackendConfig> = Vec::new();
    let mut hosts = Vec::new();
    let mut seen = HashSet::new();
    for b in &v.backends {
        let vip_addr = address.zip(port).map(|(a, p)| SocketAddr::new(a, p));
        let Some((resolved, host)) = backend(c, &at, b.get_ref(), vip_addr, forwarding, encap_source, &vip_health)
        else {
            continue;
        };
        for backend in resolved {
            if seen.insert(backend.address) {
                backends.push(backend);
            } else if backend.host.is_none() {
                c.error(b.get_ref().address.span(), format!("{at}: duplicate backend {}", backend.address));
            }
            // An address a name gives that another backend already has is that backend.
        }
        hosts.extend(host);
    }
    if let Err(rule) = rules::ring_room(backends.len(), daemon.ring_size) {
        c.error(v.address.span(), format!("{at}: {rule}"));
    }
    // The VIP's own check (its mistakes are reported once: problems are deduplicated).
    let own_health = health(c, &at, &vip_health);
    let quic = super::quic::quic(c, &at, v, protocol, forwarding);

    if c.problems.len() > before {
        return None;
    }
    let announce = v.announce.as_ref().and_then(|a| announce(c, &at, a, forwarding, v.backends.len()));
    let spec = VipSpec {
        name: v.name.as_ref().map(|n| n.get_ref().clone()),
        address: address?,
        port: port?,
        protocol,
        forwarding,
        hash,
        encap_source,
        all_down,
        health: own_health,
        proxy: if forwarding.is_xdp() { None } else { super::proxy::options(c, &at, v, defaults, index, protocol) },
        announce,
        quic,
    };
    Some(VipConfig { spec, backends, hosts, line })
}

/// `[vip.announce]`, checked.
fn announce(
    c: &mut Checker<'_>,
    at: &str,
    a: &Spanned<super::raw::RawAnnounce>,
    forwarding: Forwarding,
    backends: usize,
) -> Option<super::Announce> {
    let min_healthy = match &a.get_ref().min_healthy {
        Some(m) => c.int(m, 1..=i64::from(MAX_BACKENDS), &format!("{at}: announce.min_healthy"))? as u32,
        None => 1,
    };
    if forwarding == Forwarding::Nat {
        c.warn(
            a.span(),
            format!(
                "{at}: announced NAT VIP: backends answer through the node that translated the flow, so behind ECMP over several balancers replies break when a flow moves; announce it from one node only, or use a DSR mode to scale out"
            ),
        );
    }
    if min_healthy as usize > backends {
        c.warn(
            a.span(),
            format!(
                "{at}: announce.min_healthy = {min_healthy} but the VIP has {}: it is not announced until more are added",
                super::words::counted(backends as u64, "backend", "backends")
            ),
        );
    }
    Some(super::Announce { min_healthy })
}

/// A backend as written: one address, or each address its host name resolves to (with what
/// the daemon needs to resolve it again).
fn backend(
    c: &mut Checker<'_>,
    at: &str,
    b: &RawBackend,
    vip: Option<SocketAddr>,
    forwarding: Forwarding,
    encap_source: Option<IpAddr>,
    vip_health: &[&Spanned<RawHealth>],
) -> Option<(Vec<BackendConfig>, Option<HostBackends>)> {
    let before = c.problems.len();
    let written = b.address.get_ref();
    let host = (written.parse::<IpAddr>().is_err() && hosts::is_host_name(written)).then(|| written.clone());
    let ip = match (&host, written.parse::<IpAddr>()) {
        (_, Ok(ip)) => Some(ip),
        (Some(_), _) => None,
        (None, Err(_)) => {
            let message = format!("{at}: backend address {written:?} is neither an IP address nor a host name");
            c.error(b.address.span(), message);
            None
        }
    };
    let port = match &b.port {
        Some(p) => c.int(p, 1..=65535, &format!("{at}: backend port")).map(|p| p as u16),
        None => vip.map(|v| v.port()),
    };
    if let (Some(ip), Some(port), Some(vip)) = (ip, port, vip)
        && let Err(rule) = rules::address(forwarding, vip, encap_source, SocketAddr::new(ip, port))
    {
        c.error(b.address.span(), format!("{at}: {rule}"));
    }
    let weight = match &b.weight {
        Some(w) => rules::weight(*w.get_ref()).map_err(|rule| c.error(w.span(), format!("{at}: backend {rule}"))).ok(),
        None => Some(DEFAULT_WEIGHT),
    };
    let layers: Vec<&Spanned<RawHealth>> = vip_health.iter().copied().chain(b.health.as_ref()).collect();
    let health = health(c, at, &layers);
    let addresses = match (&host, port, vip) {
        (Some(name), Some(port), Some(vip)) => {
            resolve(c, at, &b.address, name, (forwarding, encap_source), SocketAddr::new(vip.ip(), vip.port()), port)
        }
        _ => ip.zip(port).map(|(ip, port)| vec![SocketAddr::new(ip, port)]).unwrap_or_default(),
    };
    if c.problems.len() > before {
        return None;
    }
    let (weight, port, line) = (weight?, port?, c.line_of(b.address.span()));
    let template = host.as_ref().map(|h| HostBackends { host: h.clone(), port, weight, health: health.clone(), line });
    let backends = addresses
        .into_iter()
        .map(|address| BackendConfig { address, host: host.clone(), weight, health: health.clone() })
        .collect();
    Some((backends, template))
}

/// The usable addresses `name` resolves to (a problem when there is none).
fn resolve(
    c: &mut Checker<'_>,
    at: &str,
    written: &Spanned<String>,
    name: &str,
    (forwarding, encap_source): (Forwarding, Option<IpAddr>),
    vip: SocketAddr,
    port: u16,
) -> Vec<SocketAddr> {
    match (c.resolve)(name, port) {
        Err(e) => {
            c.error(written.span(), format!("{at}: backend host {name:?} does not resolve: {e}"));
            Vec::new()
        }
        Ok(found) => match hosts::usable(forwarding, vip, encap_source, &found) {
            (usable, _) if !usable.is_empty() => usable,
            (_, refused) => {
                let why = refused.unwrap_or_else(|| "no address".into());
                c.error(written.span(), format!("{at}: backend host {name:?} gives no usable address ({why})"));
                Vec::new()
            }
        },
    }
}

/// Checks that need every VIP: duplicates and limits.
fn across_vips(c: &mut Checker<'_>, raw: &[Spanned<RawVip>]) {
    let mut names = HashSet::new();
    for v in raw {
        if let Some(n) = &v.get_ref().name
            && !names.insert(n.get_ref().clone())
        {
            c.error(n.span(), format!("duplicate vip name {:?}", n.get_ref()));
        }
    }
    // From the VIPs as written, so a VIP with mistakes of its own is still seen twice.
    let mut keys = HashSet::new();
    for v in raw.iter().map(Spanned::get_ref) {
        let (Ok(address), Ok(port)) = (v.address.get_ref().parse::<IpAddr>(), u16::try_from(*v.port.get_ref())) else {
            continue;
        };
        let protocol = v.protocol.as_ref().map_or(Protocol::Tcp, |p| *p.get_ref());
        if !keys.insert((address, port, protocol.ip_proto())) {
            let written = || format!("{}/{}", SocketAddr::new(address, port), protocol.as_str());
            let label = v.name.as_ref().map_or_else(written, |n| n.get_ref().clone());
            c.error(
                v.address.span(),
                format!("vip {label:?}: duplicate VIP {}/{}", SocketAddr::new(address, port), wire(protocol)),
            );
        }
    }
    if raw.len() > MAX_VIPS as usize {
        let span = raw[MAX_VIPS as usize].get_ref().address.span();
        c.error(span, format!("too many VIPs: {} (at most {MAX_VIPS})", raw.len()));
    }
    let total: usize = raw.iter().map(|v| v.get_ref().backends.len()).sum();
    if total > MAX_BACKENDS as usize {
        c.problems.push(Problem {
            file: c.file.clone(),
            line: None,
            message: format!("too many backends: {total} over all VIPs (at most {MAX_BACKENDS})"),
        });
    }
}

fn wire(p: Protocol) -> &'static str {
    match p {
        Protocol::Udp => "udp",
        Protocol::Tcp | Protocol::Http => "tcp",
    }
}

/// A span that starts on `line` (1-based), to report a problem found on an already-built VIP.
fn line_span(text: &str, line: usize) -> Range<usize> {
    let start = text.split_inclusive('\n').take(line - 1).map(str::len).sum();
    start..start
}
