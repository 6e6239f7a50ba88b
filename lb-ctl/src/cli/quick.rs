//! `lb-ctl proxy --listen ADDR:PORT --backend HOST:PORT …`: one proxy VIP without a file, the
//! way the small balancers lb-ctl replaces are started. The flags become an lb.toml, written
//! next to the control socket and checked like any other, so the daemon, its API, its metrics
//! and reloads are exactly those of `lb-ctl proxy --config`. `--backends-file FILE` (one
//! `HOST:PORT` a line, `#` comments) is read at start and again whenever it changes; a file
//! with mistakes is refused with FILE:LINE and the running backends stay. A backend given by
//! host name is written as that name, so the daemon resolves it again every
//! `resolve_interval` (the path of names in any lb.toml).
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{Context as _, bail};

use super::args::{QuickBalance, QuickStart};
use crate::config::{Config, ConfigError, hosts};

/// A backend spec (`HOST:PORT`, `IP:PORT`, `[IPv6]:PORT`) as lb.toml writes it: an address
/// and a port. A host name stays a name: the daemon resolves it at load and again every
/// `daemon.resolve_interval`, each address a backend, as for names written in lb.toml.
pub fn split(spec: &str) -> Result<(String, u16), String> {
    if let Ok(addr) = spec.parse::<SocketAddr>() {
        return match addr.port() {
            0 => Err("port 0 is not a port to connect to (1-65535)".into()),
            port => Ok((addr.ip().to_string(), port)),
        };
    }
    let Some((host, port)) = spec.rsplit_once(':') else {
        return Err("not HOST:PORT (e.g. 127.0.0.1:8080, [::1]:8080 or app.internal:8080)".into());
    };
    let port = match port.parse::<u64>() {
        Ok(p @ 1..=65535) => p as u16,
        Ok(p) => return Err(format!("port {p} is out of range (1-65535)")),
        Err(_) => return Err(format!("port {port:?} is not a number (HOST:PORT)")),
    };
    if !hosts::is_host_name(host) {
        return Err(format!("{host:?} is neither an IP address nor a host name"));
    }
    Ok((host.to_string(), port))
}

/// A backend of the quick start and where it was given, for messages: `--backend SPEC` or
/// `FILE:LINE`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Given {
    spec: String,
    origin: String,
}

/// The backends of a backends file: one `HOST:PORT` a line; blank lines and `#` comments are
/// skipped.
fn backends_file(path: &Path) -> anyhow::Result<Vec<Given>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let spec = line.split('#').next().unwrap_or("").trim();
        if !spec.is_empty() {
            out.push(Given { spec: spec.to_string(), origin: format!("{}:{}", path.display(), i + 1) });
        }
    }
    Ok(out)
}

impl Given {
    /// `what` (a mistake about this backend) said where the backend was given.
    fn blame(&self, what: &str) -> String {
        match self.origin.starts_with("--") {
            true => format!("{} {}: {what}", self.origin, self.spec),
            false => format!("{}: {:?}: {what}", self.origin, self.spec),
        }
    }
}

/// A backend, `(address or host name, port)`, and where it was given.
type Backend = ((String, u16), Given);

/// Every backend of the quick start: the `--backend` flags and the backends file, as
/// `(address or host name, port)` with where each was given, and the mistakes in the others.
fn backends(q: &QuickStart) -> anyhow::Result<(Vec<Backend>, Vec<String>)> {
    let mut given: Vec<Given> =
        q.backend.iter().map(|spec| Given { spec: spec.clone(), origin: "--backend".into() }).collect();
    if let Some(file) = &q.backends_file {
        given.extend(backends_file(file)?);
    }
    let mut out: Vec<Backend> = Vec::new();
    let mut mistakes = Vec::new();
    for g in given {
        match split(&g.spec) {
            Ok(backend) if out.iter().any(|(b, _)| *b == backend) => {}
            Ok(backend) => out.push((backend, g)),
            Err(e) => mistakes.push(g.blame(&e)),
        }
    }
    Ok((out, mistakes))
}

fn toml_string(text: &str) -> String {
    toml::Value::String(text.to_string()).to_string()
}

/// The lb.toml the flags stand for, checked: a mistake about a backend is said where the
/// backend was given (its flag, or its line of the backends file), not at a line of this
/// generated file, which the user never wrote.
pub fn config_text(q: &QuickStart, socket: &Path) -> anyhow::Result<String> {
    let (text, lines, mut mistakes) = generate(q, socket)?;
    // Parsed from memory: the only error is a list of mistakes.
    if let Err(ConfigError::Invalid(problems)) = Config::parse(&text, &config_path(socket)) {
        for p in problems {
            mistakes.push(match p.line.and_then(|l| lines.iter().find(|(line, _)| *line == l)) {
                Some((_, given)) => given.blame(p.message.strip_prefix("vip \"quick\": ").unwrap_or(&p.message)),
                None => p.to_string(),
            });
        }
    }
    match mistakes.is_empty() {
        true => Ok(text),
        false => bail!("{}", mistakes.join("\n")),
    }
}

/// The lb.toml text, the line of each backend in it with where that backend was given, and
/// the backends that could not be written (each a mistake, in words).
type Generated = (String, Vec<(usize, Given)>, Vec<String>);

fn generate(q: &QuickStart, socket: &Path) -> anyhow::Result<Generated> {
    let listen = q.listen.context("--listen")?;
    let (backends, mistakes) = backends(q)?;
    let mut text = format!("[daemon]\napi_socket = {}\n", toml_string(&socket.display().to_string()));
    if let Some(metrics) = q.metrics {
        text.push_str(&format!("metrics = {}\n", toml_string(&metrics.to_string())));
    }
    let (protocol, forwarding) = if q.tcp { ("tcp", "\nforwarding = \"proxy\"") } else { ("http", "") };
    text.push_str(&format!(
        "\n[[vip]]\nname = \"quick\"\naddress = {}\nport = {}\nprotocol = \"{protocol}\"{forwarding}\n",
        toml_string(&listen.ip().to_string()),
        listen.port()
    ));
    // A TCP check, as HAProxy's `check`: a backend that refuses connections leaves at once.
    text.push_str("health = { kind = \"tcp\", interval = \"2s\", rise = 1 }\n");
    text.push_str("backends = [\n");
    let mut lines = Vec::new();
    for ((address, port), given) in backends {
        text.push_str(&format!("  {{ address = {}, port = {port} }},\n", toml_string(&address)));
        lines.push((text.lines().count(), given));
    }
    text.push_str("]\n");
    let balance = match q.balance {
        QuickBalance::RoundRobin => "\"round_robin\"",
        QuickBalance::WeightedRoundRobin => "\"weighted_round_robin\"",
        QuickBalance::LeastConnections => "\"least_connections\"",
        QuickBalance::PowerOfTwo => "\"power_of_two\"",
        QuickBalance::IpHash => "{ consistent_hash = { key = \"client_ip\" } }",
    };
    text.push_str(&format!("[vip.proxy]\nbalance = {balance}\n"));
    Ok((text, lines, mistakes))
}

/// Where the quick start's lb.toml lives: beside its control socket.
pub fn config_path(socket: &Path) -> PathBuf {
    socket.with_file_name("proxy-quick.toml")
}

/// Follows the backends file: when it changes, writes the new lb.toml and asks the daemon to
/// reload it (a file with mistakes, or a name that no longer resolves, is logged and changes
/// nothing). Runs until the process ends.
pub fn follow_backends_file(q: QuickStart, socket: PathBuf) {
    let Some(file) = q.backends_file.clone() else { return };
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let mut last: Option<SystemTime> = modified(&file);
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(Duration::from_secs(1));
            let now = modified(&file);
            if now == last {
                continue;
            }
            last = now;
            let text = match config_text(&q, &socket) {
                Ok(t) => t,
                Err(e) => {
                    tracing::error!("{e:#}; the running backends stay");
                    continue;
                }
            };
            if let Err(e) = std::fs::write(config_path(&socket), text) {
                tracing::error!(error = %e, "cannot write the quick start's lb.toml");
                continue;
            }
            tracing::info!(file = %file.display(), "backends file changed: reloading");
            crate::daemon::reload_self();
        }
    });
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;
    use crate::cli::args::{Cli, Command};

    fn quick(args: &[&str]) -> QuickStart {
        let cli = Cli::try_parse_from([&["lb-ctl", "proxy"], args].concat()).unwrap();
        match cli.command {
            Command::Proxy(p) => p.quick,
            _ => unreachable!(),
        }
    }

    #[test]
    fn the_flags_make_a_valid_file() {
        let q = quick(&["--listen", "127.0.0.1:7777", "--backend", "127.0.0.1:8080", "--backend", "[::1]:9000"]);
        let text = config_text(&q, Path::new("/tmp/x/proxy.sock")).unwrap();
        let config = Config::parse(&text, Path::new("quick.toml")).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let vip = &config.vips[0];
        assert_eq!((vip.address.to_string(), vip.port), ("127.0.0.1".into(), 7777));
        let addrs: Vec<String> = vip.backends.iter().map(|b| b.address.to_string()).collect();
        assert_eq!(addrs, ["127.0.0.1:8080", "[::1]:9000"]);
        let tcp =
            quick(&["--listen", "127.0.0.1:7777", "--backend", "127.0.0.1:8080", "--tcp", "--balance", "ip-hash"]);
        let config = Config::parse(&config_text(&tcp, Path::new("/s")).unwrap(), Path::new("q.toml")).unwrap();
        assert_eq!(config.vips[0].forwarding.as_str(), "proxy");
    }

    #[test]
    fn quick_start_mistakes_are_clear() {
        let usage = |args: &[&str]| Cli::try_parse_from([&["lb-ctl", "proxy"], args].concat()).err().map(|e| e.kind());
        assert!(usage(&["--listen", "127.0.0.1:7777"]).is_some(), "a listener without backends");
        assert!(usage(&["--backend", "127.0.0.1:1"]).is_some(), "backends without a listener");
        assert!(usage(&["-c", "x.toml", "--listen", "127.0.0.1:7777", "--backend", "127.0.0.1:1"]).is_some());
        assert!(usage(&[]).is_some(), "neither a file nor a listener");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("backends");
        std::fs::write(&file, "127.0.0.1:80\n\n# c\n127.0.0.1 80\n127.0.0.1:99999\n").unwrap();
        let mut q = quick(&["--listen", "127.0.0.1:7777", "--backend", "127.0.0.1:0"]);
        q.backends_file = Some(file.clone());
        let e = config_text(&q, Path::new("/s")).unwrap_err().to_string();
        let f = file.display();
        let lines: Vec<&str> = e.lines().collect();
        assert_eq!(lines.len(), 3, "{e}");
        assert_eq!(lines[0], "--backend 127.0.0.1:0: port 0 is not a port to connect to (1-65535)");
        assert!(lines[1].starts_with(&format!("{f}:4: \"127.0.0.1 80\": not HOST:PORT")), "{e}");
        assert_eq!(lines[2], format!("{f}:5: \"127.0.0.1:99999\": port 99999 is out of range (1-65535)"));
        assert!(split("no-port").is_err() && split("app:0").is_err() && split("a b:80").is_err());
    }

    #[test]
    fn host_names_are_left_for_the_daemon_to_resolve_again() {
        let q = quick(&["--listen", "127.0.0.1:7777", "--backend", "app.internal:9000", "--backend", "127.0.0.1:8080"]);
        // Unchecked: the name resolves only through the resolver below.
        let text = generate(&q, Path::new("/s")).unwrap().0;
        let resolve: hosts::Resolver = std::sync::Arc::new(|host, port| {
            assert_eq!(host, "app.internal");
            Ok(vec![SocketAddr::from(([127, 0, 0, 2], port)), SocketAddr::from(([127, 0, 0, 3], port))])
        });
        let config = Config::parse_with(&text, Path::new("q.toml"), &resolve).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let vip = &config.vips[0];
        // A host-name backend of the file: the resolver task re-resolves `hosts` every interval.
        let named: Vec<(&str, u16)> = vip.hosts.iter().map(|h| (h.host.as_str(), h.port)).collect();
        assert_eq!(named, [("app.internal", 9000)], "{text}");
        let addrs: Vec<String> = vip.backends.iter().map(|b| b.address.to_string()).collect();
        assert_eq!(addrs, ["127.0.0.2:9000", "127.0.0.3:9000", "127.0.0.1:8080"]);
        assert_eq!(config.daemon.resolve_interval, crate::config::DEFAULT_RESOLVE_INTERVAL);
    }
}
