//! `[fleet]`: this node follows a fleet whose VIPs, backends, weights and drains are kept in
//! etcd (see `crate::fleet`). The file keeps what is per node: `[daemon]`, `[cluster]`, and
//! the `[fleet]` table itself; its `[[vip]]` and `[defaults]` tables are what `lb-ctl fleet
//! push` writes, and are not served by a node in a fleet.
//!
//! This module holds the two textual halves of that split: [`FileTables`] (the fleet's part
//! of a file, as written) and [`Config::with_fleet`] (a node's file with the fleet's part put
//! in place, validated by the same checks as any file).
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use toml::Spanned;

use super::checker::Checker;
use super::{Config, ConfigError, Problem};

/// `[fleet]`, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetSettings {
    /// etcd client URLs (`http://ADDR:PORT`, or `https://` with the TLS options).
    pub endpoints: Vec<String>,
    /// Every key of the fleet starts with this (one fleet per prefix); no trailing `/`.
    pub prefix: String,
    /// This node's name in the fleet (its record's key); default: the host name.
    pub node: String,
    /// This node's outer source addresses for DSR encapsulation, one per family: they replace
    /// the fleet's `encap_source` of each VIP (it is a per-node address).
    pub encap_source: Vec<IpAddr>,
    /// TLS: the CA that signed the etcd members' certificates.
    pub ca_file: Option<PathBuf>,
    /// TLS client certificate and key (both or neither).
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
}

/// `[fleet]` as written.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFleet {
    pub endpoints: Vec<Spanned<String>>,
    pub prefix: Spanned<String>,
    pub node: Option<Spanned<String>>,
    #[serde(default)]
    pub encap_source: Vec<Spanned<String>>,
    pub ca_file: Option<Spanned<String>>,
    pub cert_file: Option<Spanned<String>>,
    pub key_file: Option<Spanned<String>>,
}

pub(super) fn fleet(c: &mut Checker<'_>, raw: &Spanned<RawFleet>, source: &Path) -> Option<FleetSettings> {
    let r = raw.get_ref();
    let before = c.problems.len();
    if r.endpoints.is_empty() {
        c.error(
            raw.span(),
            "fleet: endpoints is empty (the etcd members' client URLs, e.g. \"http://192.0.2.50:2379\")",
        );
    }
    let tls = r.ca_file.is_some() || r.cert_file.is_some();
    for e in &r.endpoints {
        let url = e.get_ref();
        let ok = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
            (Some(rest), None) | (None, Some(rest)) => !rest.is_empty() && !rest.contains('/'),
            _ => false,
        };
        if !ok {
            c.error(e.span(), format!("fleet: endpoint {url:?} is not http://HOST:PORT or https://HOST:PORT"));
        } else if url.starts_with("https://") && !tls {
            c.error(
                e.span(),
                format!(
                    "fleet: endpoint {url:?} is https: set ca_file (and cert_file, key_file for a client certificate)"
                ),
            );
        }
    }
    let prefix = r.prefix.get_ref();
    if !prefix.starts_with('/') || prefix.ends_with('/') || prefix.len() < 2 || prefix.chars().any(char::is_whitespace)
    {
        c.error(
            r.prefix.span(),
            format!(
                "fleet: prefix {prefix:?} must start with '/', not end with '/', and hold no spaces (e.g. \"/lb/prod\")"
            ),
        );
    }
    let node = match &r.node {
        Some(n) => {
            let name = n.get_ref();
            if name.is_empty() || !name.chars().all(|ch| ch.is_ascii_alphanumeric() || "-_.".contains(ch)) {
                c.error(n.span(), format!("fleet: node {name:?} must be letters, digits, '-', '_', '.'"));
            }
            name.clone()
        }
        None => host_name(),
    };
    let mut encap_source = Vec::new();
    for s in &r.encap_source {
        let Some(ip) = c.ip(s, "fleet: encap_source") else { continue };
        if encap_source.iter().any(|e: &IpAddr| e.is_ipv4() == ip.is_ipv4()) {
            c.error(s.span(), "fleet: encap_source names two addresses of one family (one IPv4, one IPv6 at most)");
        } else {
            encap_source.push(ip);
        }
    }
    // Relative files are relative to the configuration file, as `[cluster] key_file`.
    let file = |c: &mut Checker<'_>, s: &Option<Spanned<String>>, what: &str| {
        let s = s.as_ref()?;
        let path = source.parent().unwrap_or(Path::new(".")).join(s.get_ref());
        if let Err(e) = std::fs::metadata(&path) {
            c.error(s.span(), format!("fleet: {what} {}: {e}", path.display()));
        }
        Some(path)
    };
    let ca_file = file(c, &r.ca_file, "ca_file");
    let cert_file = file(c, &r.cert_file, "cert_file");
    let key_file = file(c, &r.key_file, "key_file");
    if cert_file.is_some() != key_file.is_some() {
        c.error(raw.span(), "fleet: cert_file and key_file go together (the client certificate and its key)");
    }
    if c.problems.len() > before {
        return None;
    }
    Some(FleetSettings {
        endpoints: r.endpoints.iter().map(|e| e.get_ref().clone()).collect(),
        prefix: prefix.clone(),
        node,
        encap_source,
        ca_file,
        cert_file,
        key_file,
    })
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_else(|_| "node".into())
}

/// The fleet's part of a file, as written: its `[defaults]` and `[[vip]]` tables.
#[derive(Clone, Debug, PartialEq)]
pub struct FileTables {
    pub defaults: Option<toml::Table>,
    pub vips: Vec<toml::Table>,
}

/// A file's text as TOML (a YAML file translated).
fn toml_text(path: &Path) -> Result<String, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| ConfigError::Read { path: path.display().to_string(), source })?;
    if !super::is_yaml(path) {
        return Ok(text);
    }
    super::yaml::translate(&text).map(|t| t.toml).map_err(|(line, message)| {
        ConfigError::Invalid(vec![Problem { file: path.display().to_string(), line: Some(line), message }])
    })
}

fn table(text: &str, file: &str) -> Result<toml::Table, ConfigError> {
    text.parse::<toml::Table>()
        .map_err(|e| ConfigError::Invalid(vec![Problem { file: file.into(), line: None, message: e.message().into() }]))
}

impl FileTables {
    /// The fleet's part of the file at `path`, validated with the file (every mistake is
    /// reported as `validate` reports it). Returns the validated file too.
    pub fn read(path: &Path) -> Result<(Config, FileTables), ConfigError> {
        let config = Config::load(path)?;
        let mut whole = table(&toml_text(path)?, &path.display().to_string())?;
        let defaults = match whole.remove("defaults") {
            Some(toml::Value::Table(t)) => Some(t),
            _ => None,
        };
        let vips = match whole.remove("vip") {
            Some(toml::Value::Array(list)) => {
                list.into_iter().filter_map(|v| if let toml::Value::Table(t) = v { Some(t) } else { None }).collect()
            }
            _ => Vec::new(),
        };
        Ok((config, FileTables { defaults, vips }))
    }
}

impl Config {
    /// The node's file at `path` with the fleet's `[defaults]` and `[[vip]]` tables in place
    /// of its own, validated as one file. `name` is what messages call the fleet's part (its
    /// etcd key); a problem in it is reported without a line (the text is composed).
    pub fn with_fleet(path: &Path, fleet: &FileTables, name: &str) -> Result<Config, ConfigError> {
        let mut whole = table(&toml_text(path)?, &path.display().to_string())?;
        // This node's own addresses, read from the text: the composed file is validated below
        // (with its [fleet] table), so the node's file is parsed once, not loaded again.
        let own: Vec<IpAddr> = whole
            .get("fleet")
            .and_then(|f| f.get("encap_source"))
            .and_then(|e| e.as_array())
            .map(|list| list.iter().filter_map(|e| e.as_str()?.parse().ok()).collect())
            .unwrap_or_default();
        whole.remove("defaults");
        if let Some(d) = &fleet.defaults {
            whole.insert("defaults".into(), toml::Value::Table(d.clone()));
        }
        let vips: Vec<toml::Value> = fleet
            .vips
            .iter()
            .map(|v| {
                let mut v = v.clone();
                // A per-node address: this node's of the same family, when it names one.
                let family = v.get("encap_source").and_then(|e| e.as_str()).and_then(|e| e.parse::<IpAddr>().ok());
                if let Some(mine) = family.and_then(|f| own.iter().find(|o| o.is_ipv4() == f.is_ipv4())) {
                    v.insert("encap_source".into(), toml::Value::String(mine.to_string()));
                }
                toml::Value::Table(v)
            })
            .collect();
        whole.insert("vip".into(), toml::Value::Array(vips));
        let text = toml::to_string(&whole).map_err(|e| {
            ConfigError::Invalid(vec![Problem { file: name.into(), line: None, message: e.to_string() }])
        })?;
        // Validated as TOML whatever the node's file is (YAML was translated).
        let as_toml = path.with_extension("toml");
        let mut config = Config::parse(&text, &as_toml).map_err(|e| match e {
            ConfigError::Invalid(problems) => ConfigError::Invalid(
                problems.into_iter().map(|p| Problem { file: name.into(), line: None, message: p.message }).collect(),
            ),
            e => e,
        })?;
        config.source = path.to_path_buf();
        config.warnings.clear();
        Ok(config)
    }
}
