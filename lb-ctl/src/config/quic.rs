//! `quic = true` or `[vip.quic]`, and each backend's `quic_server_id`: QUIC routing by the
//! server id in connection IDs (`lb_common::quic`, Katran's encoding). Checked here, each
//! mistake at its key's line: UDP VIPs only, ids within the VIP's CID version and unique in
//! the VIP, each id on a backend written as an IP address (a host name may give several).
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::{IpAddr, SocketAddr};

use lb_common::quic::CidVersion;
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use toml::Spanned;

use super::checker::Checker;
use super::raw::RawVip;
use super::{Forwarding, Protocol};

/// `quic` as written: `true`/`false`, or a table of settings (which turns it on).
#[derive(Debug)]
pub(super) enum RawQuic {
    Switch(bool),
    Table(RawQuicTable),
}

/// `[vip.quic]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawQuicTable {
    pub cid_version: Option<Spanned<i64>>,
}

impl<'de> Deserialize<'de> for RawQuic {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Either;
        impl<'de> Visitor<'de> for Either {
            type Value = RawQuic;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("true, false or a table such as { cid_version = 1 }")
            }
            fn visit_bool<E: de::Error>(self, on: bool) -> Result<RawQuic, E> {
                Ok(RawQuic::Switch(on))
            }
            // A table keeps its own type's messages (an unknown key names the keys it takes).
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawQuic, A::Error> {
                RawQuicTable::deserialize(de::value::MapAccessDeserializer::new(map)).map(RawQuic::Table)
            }
        }
        deserializer.deserialize_any(Either)
    }
}

/// Default of `[vip.quic] cid_version`: version 1 (16-bit server ids), mvfst's and Katran's
/// default.
pub const DEFAULT_CID_VERSION: CidVersion = CidVersion::V1;

/// A VIP's QUIC routing: the CID version its backends write, and the server id of each
/// backend that declares one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuicSpec {
    pub cid_version: CidVersion,
    /// Backend address → its `quic_server_id`.
    pub server_ids: BTreeMap<SocketAddr, u32>,
}

/// A VIP's `quic` key and its backends' `quic_server_id`s, checked; None when QUIC routing is
/// off (or the settings have mistakes, reported).
pub(super) fn quic(
    c: &mut Checker<'_>,
    at: &str,
    v: &RawVip,
    protocol: Protocol,
    forwarding: Forwarding,
) -> Option<QuicSpec> {
    let (on, version) = match v.quic.as_ref().map(|q| (q, q.get_ref())) {
        None | Some((_, RawQuic::Switch(false))) => (None, DEFAULT_CID_VERSION),
        Some((q, RawQuic::Switch(true))) => (Some(q.span()), DEFAULT_CID_VERSION),
        Some((q, RawQuic::Table(t))) => {
            let version = match &t.cid_version {
                Some(n) => c
                    .int(n, 1..=3, &format!("{at}: quic.cid_version"))
                    .and_then(|n| CidVersion::from_number(n as u8))
                    .unwrap_or(DEFAULT_CID_VERSION),
                None => DEFAULT_CID_VERSION,
            };
            (Some(q.span()), version)
        }
    };
    if let Some(span) = &on
        && (protocol != Protocol::Udp || !forwarding.is_xdp())
    {
        c.error(
            span.clone(),
            format!("{at}: quic applies to protocol \"udp\" VIPs (QUIC runs over UDP), not \"{}\"", protocol.as_str()),
        );
    }
    let vip_port = u16::try_from(*v.port.get_ref()).ok();
    let mut server_ids = BTreeMap::new();
    let mut taken: HashMap<u32, usize> = HashMap::new();
    for b in v.backends.iter().map(Spanned::get_ref) {
        let Some(id) = &b.quic_server_id else { continue };
        if on.is_none() {
            c.error(id.span(), format!("{at}: quic_server_id only applies to a VIP with quic = true"));
            continue;
        }
        let max = i64::from(version.max_server_id());
        let what = format!("{at}: quic_server_id (CID version {})", version.number());
        let Some(n) = c.int(id, 1..=max, &what).map(|n| n as u32) else { continue };
        let line = c.line_of(id.span());
        if let Some(first) = taken.insert(n, line) {
            c.error(
                id.span(),
                format!(
                    "{at}: quic_server_id {n} is already the backend's at line {first}: each backend needs its own"
                ),
            );
        }
        let Ok(ip) = b.address.get_ref().parse::<IpAddr>() else {
            c.error(
                b.address.span(),
                format!("{at}: a backend with quic_server_id must be written as an IP address (a host name may give several backends, and an id names one)"),
            );
            continue;
        };
        let port = b.port.as_ref().and_then(|p| u16::try_from(*p.get_ref()).ok()).or(vip_port);
        if let Some(port) = port {
            server_ids.insert(SocketAddr::new(ip, port), n);
        }
    }
    let span = on?;
    if server_ids.is_empty() && !v.backends.is_empty() {
        c.warn(span, format!("{at}: quic is on but no backend declares quic_server_id: every packet is placed by the connection table and ring"));
    }
    Some(QuicSpec { cid_version: version, server_ids })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use lb_common::quic::CidVersion;

    use crate::config::Config;
    use crate::config::tests::{errors, parse};

    const VIP: &str = "[[vip]]\nname = \"h3\"\naddress = \"203.0.113.10\"\nport = 443\nprotocol = \"udp\"\n";

    #[test]
    fn quic_true_or_a_table_turns_it_on_with_each_backends_id() {
        let text = format!(
            "{VIP}quic = true\nbackends = [\n  {{ address = \"198.51.100.11\", quic_server_id = 1 }},\n  {{ address = \"198.51.100.12\", port = 4433, quic_server_id = 65535 }},\n  {{ address = \"198.51.100.13\" }},\n]\n"
        );
        let c = parse(&text).unwrap();
        let quic = c.vips[0].quic.as_ref().expect("quic on");
        assert_eq!(quic.cid_version, CidVersion::V1);
        let ids: Vec<(String, u32)> = quic.server_ids.iter().map(|(a, id)| (a.to_string(), *id)).collect();
        assert_eq!(ids, [("198.51.100.11:443".to_string(), 1), ("198.51.100.12:4433".to_string(), 65535)]);
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);

        let text = format!(
            "{VIP}backends = [ {{ address = \"198.51.100.11\", quic_server_id = 16777215 }} ]\n[vip.quic]\ncid_version = 2\n"
        );
        let quic = parse(&text).unwrap().vips[0].quic.clone().unwrap();
        assert_eq!(
            (quic.cid_version, quic.server_ids.values().copied().collect::<Vec<_>>()),
            (CidVersion::V2, vec![0xff_ffff])
        );

        let off = parse(&format!("{VIP}quic = false\nbackends = [ {{ address = \"198.51.100.11\" }} ]\n")).unwrap();
        assert!(off.vips[0].quic.is_none());
        let none = parse(&format!("{VIP}backends = [ {{ address = \"198.51.100.11\" }} ]\n")).unwrap();
        assert!(none.vips[0].quic.is_none());
    }

    #[test]
    fn quic_mistakes_are_reported_at_their_lines_all_at_once() {
        let text = "\
[[vip]]
address = \"203.0.113.10\"
port = 443
quic = true
backends = [ { address = \"198.51.100.11\", quic_server_id = 1 } ]

[[vip]]
address = \"203.0.113.11\"
port = 443
protocol = \"udp\"
backends = [ { address = \"198.51.100.11\", quic_server_id = 1 } ]

[[vip]]
address = \"203.0.113.12\"
port = 443
protocol = \"udp\"
quic = true
backends = [
  { address = \"198.51.100.11\", quic_server_id = 7 },
  { address = \"198.51.100.12\", quic_server_id = 7 },
  { address = \"198.51.100.13\", quic_server_id = 65536 },
  { address = \"198.51.100.14\", quic_server_id = 0 },
  { address = \"app.test\", quic_server_id = 9 },
]

[[vip]]
address = \"203.0.113.13\"
port = 443
protocol = \"udp\"
quic = { cid_version = 4 }
";
        let resolve: crate::config::hosts::Resolver =
            std::sync::Arc::new(|_, port| Ok(vec![std::net::SocketAddr::from(([198, 51, 100, 30], port))]));
        let got = match Config::parse_with(text, Path::new("lb.toml"), &resolve) {
            Ok(c) => panic!("expected errors, got {c:#?}"),
            Err(e) => e.problems(),
        };
        assert_eq!(
            got,
            [
                "lb.toml:4: vip \"203.0.113.10:443/tcp\": quic applies to protocol \"udp\" VIPs (QUIC runs over UDP), not \"tcp\"",
                "lb.toml:11: vip \"203.0.113.11:443/udp\": quic_server_id only applies to a VIP with quic = true",
                "lb.toml:20: vip \"203.0.113.12:443/udp\": quic_server_id 7 is already the backend's at line 19: each backend needs its own",
                "lb.toml:21: vip \"203.0.113.12:443/udp\": quic_server_id (CID version 1) must be 1-65535, got 65536",
                "lb.toml:22: vip \"203.0.113.12:443/udp\": quic_server_id (CID version 1) must be 1-65535, got 0",
                "lb.toml:23: vip \"203.0.113.12:443/udp\": a backend with quic_server_id must be written as an IP address (a host name may give several backends, and an id names one)",
                "lb.toml:30: vip \"203.0.113.13:443/udp\": quic.cid_version must be 1-3, got 4",
            ]
        );
    }

    #[test]
    fn an_unknown_key_in_the_quic_table_names_the_keys_it_takes() {
        let got =
            errors(&format!("{VIP}backends = [ {{ address = \"198.51.100.11\" }} ]\n[vip.quic]\ncid_versoin = 2\n"));
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(
            got[0].starts_with("lb.toml:8:") && got[0].contains("cid_versoin") && got[0].contains("cid_version"),
            "{got:?}"
        );
        let got = errors(&format!("{VIP}quic = \"yes\"\n"));
        assert!(got[0].starts_with("lb.toml:6:") && got[0].contains("true, false or a table"), "{got:?}");
    }

    #[test]
    fn quic_with_no_server_ids_is_valid_with_a_warning() {
        let c = parse(&format!("{VIP}quic = true\nbackends = [ {{ address = \"198.51.100.11\" }} ]\n")).unwrap();
        assert_eq!(c.warnings.len(), 1);
        assert!(
            c.warnings[0]
                .to_string()
                .starts_with("lb.toml:6: warning: vip \"h3\": quic is on but no backend declares quic_server_id")
        );
    }
}
