//! The fleet's state as etcd holds it: keys relative to the prefix, values as text.
//!
//! One key per VIP (not one key for everything): a backend change rewrites one small value,
//! and a watch event names the VIP it changed. Each value is the VIP's `[[vip]]` table as
//! lb.toml writes it, so a node checks it with the very checks a file gets; drains ride in
//! the same value (`drained`), so a VIP's ring follows from one key.
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::config::fleet::FileTables;
use crate::config::{Config, ConfigError};

/// The key every write changes: transactions compare its revision.
pub const GENERATION: &str = "state/generation";
/// The `[defaults]` table.
pub const DEFAULTS: &str = "state/defaults";
/// Where the VIPs are: `state/vips/ADDR:PORT/PROTOCOL`.
pub const VIPS: &str = "state/vips/";
/// What a node watches.
pub const STATE: &str = "state/";
/// Where the nodes record themselves.
pub const NODES: &str = "nodes/";
/// Largest value accepted, written or read: a VIP of a few hundred backends is a few KiB;
/// etcd's own limit on a request is 1.5 MiB.
pub const MAX_VALUE_BYTES: usize = 64 * 1024;

/// The fleet's state at one revision: every value under `state/`, as text.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The store's revision it was read at (or the last change applied to it).
    pub revision: i64,
    /// The modification revision of [`GENERATION`] (0: never written): the guard of writes.
    pub generation: i64,
    /// Key (relative to the prefix) → value.
    pub values: BTreeMap<String, String>,
}

/// Backends the fleet drains: `(VIP key label, backend)`.
pub type Drains = Vec<(String, SocketAddr)>;

/// A snapshot made usable: the tables for [`Config::with_fleet`] and the drains.
#[derive(Clone, Debug, PartialEq)]
pub struct Decoded {
    pub tables: FileTables,
    /// `(VIP key label, backend)`: drained in the fleet.
    pub drained: Drains,
}

/// Why a value is refused; the key is named.
fn refused(key: &str, why: impl std::fmt::Display) -> String {
    format!("etcd key {key}: {why}")
}

impl Snapshot {
    /// The VIP keys' labels (`ADDR:PORT/PROTOCOL`) in key order.
    pub fn vip_labels(&self) -> Vec<&str> {
        self.values.keys().filter_map(|k| k.strip_prefix(VIPS)).collect()
    }

    /// Parses every value; any value too large, not TOML, or with a `drained` that is not a
    /// list of ADDR:PORT refuses the whole snapshot (each problem said with its key).
    pub fn decode(&self) -> Result<Decoded, Vec<String>> {
        let mut problems = Vec::new();
        let mut tables = FileTables { defaults: None, vips: Vec::new() };
        let mut drained = Vec::new();
        for (key, value) in &self.values {
            if key == GENERATION {
                continue;
            }
            if value.len() > MAX_VALUE_BYTES {
                problems.push(refused(key, format!("{} bytes, more than the {MAX_VALUE_BYTES} allowed", value.len())));
                continue;
            }
            let mut table = match value.parse::<toml::Table>() {
                Ok(t) => t,
                Err(e) => {
                    problems.push(refused(key, format!("not a TOML table: {}", e.message().trim())));
                    continue;
                }
            };
            if key == DEFAULTS {
                tables.defaults = Some(table);
            } else if let Some(label) = key.strip_prefix(VIPS) {
                match table.remove("drained").map(drains) {
                    None => {}
                    Some(Ok(list)) => drained.extend(list.into_iter().map(|a| (label.to_string(), a))),
                    Some(Err(e)) => problems.push(refused(key, e)),
                }
                tables.vips.push(table);
            } else {
                problems.push(refused(key, "not a key of the fleet's layout (state/defaults, state/vips/...)"));
            }
        }
        if problems.is_empty() { Ok(Decoded { tables, drained }) } else { Err(problems) }
    }

    /// The node's file at `path` with this state in place of its VIPs: validated whole, each
    /// VIP checked against its key, each drain against its VIP's backends.
    pub fn compose(&self, path: &Path) -> Result<(Config, Drains), Vec<String>> {
        let decoded = self.decode()?;
        let name = format!("fleet state at revision {}", self.revision);
        let config = Config::with_fleet(path, &decoded.tables, &name).map_err(|e| e.problems())?;
        let mut problems = Vec::new();
        for (vip, label) in config.vips.iter().zip(self.vip_labels()) {
            if vip.address_label() != label {
                problems.push(refused(&format!("{VIPS}{label}"), format!("holds VIP {}", vip.address_label())));
            }
        }
        for (label, backend) in &decoded.drained {
            let known = config.vips.iter().find(|v| v.address_label() == *label);
            if !known.is_some_and(|v| v.backends.iter().any(|b| b.address == *backend)) {
                problems.push(refused(&format!("{VIPS}{label}"), format!("drains {backend}, not one of its backends")));
            }
        }
        if problems.is_empty() { Ok((config, decoded.drained)) } else { Err(problems) }
    }
}

fn drains(value: toml::Value) -> Result<Vec<SocketAddr>, String> {
    let list = value.as_array().ok_or("drained must be a list of \"ADDR:PORT\"")?;
    list.iter()
        .map(|v| v.as_str().and_then(|s| s.parse().ok()).ok_or_else(|| format!("drained: {v} is not \"ADDR:PORT\"")))
        .collect()
}

/// The values a push of the file at `path` writes (every key under `state/` but the
/// generation): the file checked whole first, each value within the size limit.
pub fn values_of_file(path: &Path) -> Result<BTreeMap<String, String>, ConfigError> {
    let (config, tables) = FileTables::read(path)?;
    let file = path.display().to_string();
    let too_large = |what: String, len: usize| {
        ConfigError::Invalid(vec![crate::config::Problem {
            file: file.clone(),
            line: None,
            message: format!("{what} is {len} bytes in the fleet, more than the {MAX_VALUE_BYTES} allowed"),
        }])
    };
    let mut values = BTreeMap::new();
    if let Some(d) = &tables.defaults {
        let text = toml::to_string(d).expect("a table read from TOML writes back");
        if text.len() > MAX_VALUE_BYTES {
            return Err(too_large("[defaults]".into(), text.len()));
        }
        values.insert(DEFAULTS.to_string(), text);
    }
    // `Config::load` keeps the file's VIP order and refuses the file if any VIP is wrong.
    for (vip, table) in config.vips.iter().zip(&tables.vips) {
        let text = toml::to_string(table).expect("a table read from TOML writes back");
        if text.len() > MAX_VALUE_BYTES {
            return Err(too_large(format!("vip {:?}", vip.label()), text.len()));
        }
        values.insert(format!("{VIPS}{}", vip.address_label()), text);
    }
    Ok(values)
}

/// One line per key a write from `old` to `new` changes; empty: nothing.
pub fn diff(old: &BTreeMap<String, String>, new: &BTreeMap<String, String>) -> Vec<String> {
    let mut lines = Vec::new();
    let shown = |k: &str| k.strip_prefix(VIPS).map(|l| format!("vip {l}")).unwrap_or_else(|| "[defaults]".into());
    for (key, value) in new.iter().filter(|(k, _)| k.as_str() != GENERATION) {
        match old.get(key) {
            None => lines.push(format!("+ {}: {}", shown(key), summary(value))),
            Some(before) if before != value => {
                lines.push(format!("~ {}: {}", shown(key), changes(before, value)));
            }
            Some(_) => {}
        }
    }
    for key in old.keys().filter(|k| k.as_str() != GENERATION && !new.contains_key(*k)) {
        lines.push(format!("- {}", shown(key)));
    }
    lines
}

/// The backends of a VIP value, as `ADDR:PORT` → (weight, drained).
fn backends(value: &str) -> BTreeMap<String, (i64, bool)> {
    let Ok(table) = value.parse::<toml::Table>() else { return BTreeMap::new() };
    let port = table.get("port").and_then(|p| p.as_integer()).unwrap_or(0);
    let drained: Vec<&str> = table
        .get("drained")
        .and_then(|d| d.as_array())
        .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    let list = table.get("backends").and_then(|b| b.as_array()).cloned().unwrap_or_default();
    list.iter()
        .filter_map(|b| {
            let address = b.get("address")?.as_str()?;
            let port = b.get("port").and_then(|p| p.as_integer()).unwrap_or(port);
            let at = match address.parse::<std::net::IpAddr>() {
                Ok(ip) => SocketAddr::new(ip, port as u16).to_string(),
                Err(_) => address.to_string(),
            };
            let weight = b.get("weight").and_then(|w| w.as_integer()).unwrap_or(crate::config::DEFAULT_WEIGHT as i64);
            let is_drained = drained.contains(&at.as_str());
            Some((at, (weight, is_drained)))
        })
        .collect()
}

fn summary(value: &str) -> String {
    match backends(value).len() {
        1 => "1 backend".into(),
        n => format!("{n} backends"),
    }
}

fn changes(before: &str, after: &str) -> String {
    let (old, new) = (backends(before), backends(after));
    let mut parts = Vec::new();
    for (addr, (weight, drained)) in &new {
        match old.get(addr) {
            None => parts.push(format!("backend {addr} added")),
            Some((w, d)) => {
                if w != weight {
                    parts.push(format!("backend {addr} weight {w} -> {weight}"));
                }
                if d != drained {
                    parts.push(format!("backend {addr} {}", if *drained { "drained" } else { "undrained" }));
                }
            }
        }
    }
    parts.extend(old.keys().filter(|a| !new.contains_key(*a)).map(|a| format!("backend {a} removed")));
    let strip = |v: &str| {
        let mut t = v.parse::<toml::Table>().unwrap_or_default();
        t.remove("backends");
        t.remove("drained");
        t
    };
    if strip(before) != strip(after) {
        parts.push("VIP settings changed".into());
    }
    if parts.is_empty() { "rewritten (same content)".into() } else { parts.join(", ") }
}

/// A VIP value with `edit` applied to its table; the result within the size limit.
pub fn edit_vip(value: &str, edit: impl FnOnce(&mut toml::Table) -> Result<(), String>) -> Result<String, String> {
    let mut table = value.parse::<toml::Table>().map_err(|e| format!("not a TOML table: {}", e.message().trim()))?;
    edit(&mut table)?;
    let text = toml::to_string(&table).map_err(|e| e.to_string())?;
    if text.len() > MAX_VALUE_BYTES {
        return Err(format!(
            "the VIP would be {} bytes in the fleet, more than the {MAX_VALUE_BYTES} allowed",
            text.len()
        ));
    }
    Ok(text)
}

/// Drains, in `state`, the backends the fleet drains.
pub fn apply_drains(
    state: &mut crate::state::State,
    drains: &[(String, SocketAddr)],
) -> Result<(), crate::state::StateError> {
    for (vip, backend) in drains {
        state.drain_backend(vip, &backend.to_string())?;
    }
    Ok(())
}
