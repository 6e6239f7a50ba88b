//! `[defaults]`: what VIPs inherit unless they say otherwise. `health` is the first layer of
//! every VIP's check (the VIP's table, then each backend's, override it key by key), and
//! `proxy` the first layer of every proxy VIP's `[vip.proxy]` (merged key by key, at any
//! depth). Each table is checked on its own where it is written, so mistakes keep their line.
use lb_proxy::ProxyOptions;
use serde::Deserialize as _;
use toml::{Spanned, Table, Value};

use super::raw::{RawFile, RawHealth};

/// The `[defaults]` of a file, ready for its VIPs.
pub(super) struct Defaults<'a> {
    pub health: Option<&'a Spanned<RawHealth>>,
    /// `[defaults.proxy]` as written.
    proxy: Option<Table>,
    /// Each VIP's `[vip.proxy]` as written, by VIP index.
    vip_proxy: Vec<Option<Table>>,
}

impl<'a> Defaults<'a> {
    /// `text` is the whole file, which already deserialized as `raw`.
    pub fn of(raw: &'a RawFile, text: &str) -> Defaults<'a> {
        let table: Table = text.parse().unwrap_or_default();
        let proxy_of = |v: &Value| v.get("proxy").and_then(Value::as_table).cloned();
        let vips = table.get("vip").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        Defaults {
            health: raw.defaults.as_ref().and_then(|d| d.get_ref().health.as_ref()),
            proxy: table.get("defaults").and_then(proxy_of),
            vip_proxy: vips.iter().map(proxy_of).collect(),
        }
    }

    /// The health layers a VIP's checks start from: the defaults', then the VIP's own.
    pub fn health_layers(&self, vip: Option<&'a Spanned<RawHealth>>) -> Vec<&'a Spanned<RawHealth>> {
        self.health.into_iter().chain(vip).collect()
    }

    /// The proxy options of VIP `index`: `[defaults.proxy]` under its own `[vip.proxy]`. None
    /// when neither is written (the proxy's built-in defaults).
    pub fn proxy_options(&self, index: usize) -> Option<ProxyOptions> {
        let own = self.vip_proxy.get(index).cloned().flatten();
        let merged = match (self.proxy.clone(), own) {
            (None, None) => return None,
            (Some(d), None) => d,
            (None, Some(v)) => v,
            (Some(mut d), Some(v)) => {
                merge(&mut d, v);
                d
            }
        };
        // Both layers were checked where they are written; their union is well-formed too.
        ProxyOptions::deserialize(Value::Table(merged)).ok()
    }
}

/// Writes `over` onto `base`: tables merge key by key, anything else replaces.
fn merge(base: &mut Table, over: Table) {
    for (key, value) in over {
        match (base.get_mut(&key), value) {
            (Some(Value::Table(b)), Value::Table(o)) => merge(b, o),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_merge_key_by_key_at_any_depth() {
        let mut base: Table = "a = 1\n[t]\nx = 1\ny = 2\n".parse().unwrap();
        merge(&mut base, "b = 2\n[t]\ny = 3\n".parse().unwrap());
        assert_eq!(base, "a = 1\nb = 2\n[t]\nx = 1\ny = 3\n".parse::<Table>().unwrap());
    }
}
