//! API answers as text for people (the `--json` flags print the answers as they come).
use super::rates::{Rate, Rates, human};
use crate::api::types::{BackendView, Decision, ExplainView, StatsView, StatusView, TrafficView, VipView};

/// Left-aligned columns separated by two spaces; numbers right-aligned.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let numeric: Vec<bool> =
        (0..header.len()).map(|i| !rows.is_empty() && rows.iter().all(|r| r[i].parse::<u64>().is_ok())).collect();
    let line = |cells: Vec<&str>| -> String {
        let parts: Vec<String> = cells
            .iter()
            .zip(&widths)
            .zip(&numeric)
            .map(|((c, w), num)| if *num { format!("{c:>w$}") } else { format!("{c:<w$}") })
            .collect();
        parts.join("  ").trim_end().to_string()
    };
    let mut out = line(header.to_vec());
    out.push('\n');
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
        out.push('\n');
    }
    out
}

/// `lb-ctl backends list`.
pub fn backends(list: &[BackendView]) -> String {
    // Proxy VIPs count requests, not packets: their columns appear when the list has one.
    let proxied = list.iter().any(|b| b.requests.is_some());
    // When a health changed since the daemon started: since when, and why.
    let changed = list.iter().any(|b| b.health_since_unix.is_some());
    // Backends named by host name: the name each address came from.
    let named = list.iter().any(|b| b.host.is_some());
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|b| {
            let mut row = vec![
                b.vip.clone(),
                b.address.to_string(),
                b.weight.to_string(),
                b.health.as_str().to_string(),
                b.state.clone(),
                b.packets.to_string(),
                b.bytes.to_string(),
                b.active_flows.to_string(),
                if b.in_ring { "yes".into() } else { "no".into() },
            ];
            if proxied {
                let or_dash = |v: Option<u64>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
                row.push(or_dash(b.requests));
                row.push(or_dash(b.errors));
            }
            if named {
                row.push(b.host.clone().unwrap_or_else(|| "-".into()));
            }
            if changed {
                row.push(b.health_since_unix.map_or_else(|| "-".to_string(), ago));
                row.push(b.health_reason.clone().unwrap_or_else(|| "-".into()));
            }
            row
        })
        .collect();
    let mut headers = vec!["VIP", "BACKEND", "WEIGHT", "HEALTH", "STATE", "PACKETS", "BYTES", "FLOWS", "IN RING"];
    if proxied {
        headers.extend(["REQUESTS", "ERRORS"]);
    }
    if named {
        headers.push("HOST");
    }
    if changed {
        headers.extend(["HEALTH SINCE", "LAST CHANGE"]);
    }
    table(&headers, &rows)
}

/// `12s ago`, `3m 5s ago` for a time in seconds since the Unix epoch.
fn ago(at_unix: u64) -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    format!("{} ago", humantime::format_duration(std::time::Duration::from_secs(now.saturating_sub(at_unix))))
}

/// `lb-ctl vips list`.
pub fn vips(list: &[VipView]) -> String {
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|v| {
            vec![
                v.name.clone().unwrap_or_else(|| "-".into()),
                format!("{}/{}", std::net::SocketAddr::new(v.address, v.port), v.protocol),
                v.forwarding.clone(),
                v.hash.clone(),
                format!("{}/{}", v.healthy, v.backends),
                if v.listening == Some(false) {
                    "down (not listening)".into()
                } else if v.all_down {
                    format!("all down ({})", v.all_down_policy)
                } else {
                    "ok".into()
                },
                v.packets.to_string(),
                v.bytes.to_string(),
                v.ring_digest.as_deref().map_or("-", |d| &d[..8]).to_string(),
            ]
        })
        .collect();
    table(&["NAME", "VIP", "FORWARDING", "HASH", "HEALTHY", "STATE", "PACKETS", "BYTES", "RING"], &rows)
}

/// `lb-ctl status`.
pub fn status(s: &StatusView) -> String {
    let mut out = format!(
        "lb-ctl {} on {}{}\nconfig      {}\nuptime      {}\nVIPs        {}\nbackends    {} ({} up, {} down or pending, {} draining)\nchecks      {} running\nring size   {}\n",
        s.version,
        s.interface,
        s.xdp_mode.as_deref().map(|m| format!(" (XDP {m})")).unwrap_or_default(),
        s.config,
        humantime::format_duration(std::time::Duration::from_secs(s.uptime_secs)),
        s.vips,
        s.backends,
        s.backends_up,
        s.backends_down,
        s.backends_draining,
        s.health_checkers,
        s.ring_size,
    );
    if let Some(dir) = &s.pin_dir {
        out.push_str(&format!("pins        {dir}\n"));
    }
    if let Some(f) = &s.fleet {
        out.push_str(&crate::cli::fleet::status_line(f));
    }
    if s.xdp_detached {
        out.push_str(
            "XDP         DETACHED: the program is off the interface; attaching it again when the interface is back\n",
        );
    }
    if s.xdp_attached_again > 0 {
        let at = s.xdp_attached_again_at_unix.map(|t| format!(", last {}", ago(t))).unwrap_or_default();
        out.push_str(&format!(
            "XDP         ATTACHED AGAIN {} times{at}: the program had come off the interface\n",
            s.xdp_attached_again
        ));
    }
    if s.pins_restored > 0 {
        let at = s.pins_restored_at_unix.map(|t| format!(", last {}", ago(t))).unwrap_or_default();
        out.push_str(&format!(
            "pins        RESTORED {} times{at}: they were removed under the running daemon and pinned again\n",
            s.pins_restored
        ));
    }
    if s.api_changes > 0 {
        out.push_str(&format!(
            "api changes {} (the running backends differ from the file; kept across restarts, undone by reload)\n",
            s.api_changes
        ));
    }
    if s.node_drained {
        out.push_str("node        DRAINED (announces no VIP; `lb-ctl node undrain` to announce again)\n");
    }
    if !s.announced.is_empty() {
        let list: Vec<String> = s.announced.iter().map(|a| a.to_string()).collect();
        let by = match (&s.routing_daemon, &s.routing_problem) {
            (Some(daemon), _) => format!("{daemon} runs"),
            (None, Some(problem)) => format!("nobody announces them: {problem}"),
            (None, None) => "nobody announces them: no routing daemon answers".into(),
        };
        out.push_str(&format!("announced   {} (routes in table {}; {by})\n", list.join(" "), s.announce_table));
    }
    if let Some(share) = &s.flow_sharing {
        let get = |k: &str| share.get(k).copied().unwrap_or(0);
        let refused: u64 = share.iter().filter(|(k, _)| k.starts_with("refused_")).map(|(_, v)| *v).sum();
        out.push_str(&format!(
            "flow share  sent {} flows ({} messages); received {} ({} messages), recorded {}, unknown {}; refused {refused} messages\n",
            get("flows_sent"),
            get("messages_sent"),
            get("flows_received"),
            get("messages_received"),
            get("flows_recorded"),
            get("flows_unknown"),
        ));
    }
    if let Some(r) = &s.last_reload {
        out.push_str(&format!(
            "last reload {}: {}\n",
            if r.ok { "ok" } else { "REFUSED" },
            r.message.replace('\n', "\n            ")
        ));
    }
    out
}

/// `lb-ctl stats`.
pub fn stats(s: &StatsView) -> String {
    let counters: Vec<Vec<String>> = s.counters.iter().map(|c| vec![c.name.clone(), c.value.to_string()]).collect();
    let mut out = String::new();
    // A proxy-only daemon has no XDP counters.
    if !counters.is_empty() {
        out.push_str(&table(&["COUNTER", "VALUE"], &counters));
        out.push('\n');
    }
    out.push_str(&traffic_table("VIP", &s.vips));
    out.push('\n');
    out.push_str(&traffic_table("BACKEND", &s.backends));
    if !s.cpus.is_empty() {
        let rows: Vec<Vec<String>> = s
            .cpus
            .iter()
            .map(|c| vec![c.cpu.to_string(), c.packets.to_string(), c.vip_packets.to_string(), c.vip_bytes.to_string()])
            .collect();
        out.push('\n');
        out.push_str(&table(&["CPU", "PACKETS", "VIP PACKETS", "VIP BYTES"], &rows));
    }
    out
}

/// Packets and bytes; requests and errors too when a proxy VIP is among the rows.
fn traffic_table(what: &str, rows: &[TrafficView]) -> String {
    let proxied = rows.iter().any(|t| t.requests.is_some());
    let or_dash = |v: Option<u64>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|t| {
            let mut row = vec![t.name.clone(), t.packets.to_string(), t.bytes.to_string()];
            if proxied {
                row.extend([or_dash(t.requests), or_dash(t.errors)]);
            }
            row
        })
        .collect();
    let mut headers = vec![what, "PACKETS", "BYTES"];
    if proxied {
        headers.extend(["REQUESTS", "ERRORS"]);
    }
    table(&headers, &cells)
}

/// One sample of `lb-ctl stats --watch`: per-second rates, then the drop reasons that grew.
pub fn rates(at: &str, r: &Rates) -> String {
    let proxied = r.vips.iter().any(|v| v.rps.is_some());
    let rows = |rates: &[Rate]| -> Vec<Vec<String>> {
        rates
            .iter()
            .map(|v| {
                let mut row = vec![v.name.clone(), human(v.pps), human(v.bps)];
                if proxied {
                    let or_dash = |x: Option<f64>| x.map_or_else(|| "-".to_string(), human);
                    row.extend([or_dash(v.rps), or_dash(v.errors_per_sec)]);
                }
                row
            })
            .collect()
    };
    let headers = |first: &'static str| {
        let mut h = vec![first, "PPS", "BPS"];
        if proxied {
            h.extend(["REQ/S", "ERR/S"]);
        }
        h
    };
    let mut out = format!("--- {at} (rates over {:.1} s)\n", r.seconds);
    out.push_str(&table(&headers("VIP"), &rows(&r.vips)));
    out.push_str(&table(&headers("BACKEND"), &rows(&r.backends)));
    if !r.cpus.is_empty() {
        let cpus: Vec<Vec<String>> = r.cpus.iter().map(|c| vec![c.name.clone(), human(c.pps), human(c.bps)]).collect();
        out.push_str(&table(&["CPU", "PPS", "VIP BPS"], &cpus));
    }
    if r.drops.is_empty() {
        out.push_str("drops: none\n");
    } else {
        let drops: Vec<Vec<String>> = r.drops.iter().map(|d| vec![d.reason.clone(), human(d.pps)]).collect();
        out.push_str(&table(&["DROP", "PPS"], &drops));
    }
    out
}

/// `lb-ctl explain`.
pub fn explain(e: &ExplainView) -> String {
    let target = match e.backend {
        Some(b) => b.to_string(),
        None => "no backend (dropped)".into(),
    };
    let how = match e.decision {
        Decision::Conntrack => "connection table",
        Decision::Ring => "Maglev ring",
        Decision::QuicServerId => "QUIC server id",
    };
    format!("{} -> {}: {target}\nby the {how}: {}\n", e.client, e.vip, e.reason)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{Health, Origin};

    #[test]
    fn backends_table_has_the_issue_columns() {
        let b = BackendView {
            vip: "web".into(),
            id: 3,
            address: "198.51.100.1:8080".parse().unwrap(),
            host: None,
            weight: 100,
            health: Health::Up,
            state: "active".into(),
            origin: Origin::Config,
            in_ring: true,
            packets: 12345,
            bytes: 999,
            active_flows: 7,
            requests: None,
            errors: None,
            health_since_unix: None,
            health_reason: None,
            health_transitions: 0,
        };
        let text = backends(&[b]);
        assert_eq!(
            text,
            "VIP  BACKEND            WEIGHT  HEALTH  STATE   PACKETS  BYTES  FLOWS  IN RING\n\
             web  198.51.100.1:8080     100  up      active    12345    999      7  yes\n"
        );
    }

    #[test]
    fn a_proxy_vip_without_its_listener_is_shown_down() {
        let v = VipView {
            id: 1,
            name: Some("api".into()),
            address: "127.0.0.1".parse().unwrap(),
            port: 8080,
            protocol: "http".into(),
            forwarding: "proxy".into(),
            encap_source: None,
            hash: "ip".into(),
            all_down_policy: "forward".into(),
            all_down: false,
            backends: 1,
            healthy: 1,
            packets: 0,
            bytes: 0,
            listening: Some(false),
            ring_digest: None,
        };
        let text = vips(&[v]);
        assert!(text.contains("1/1      down (not listening)"), "{text}");
    }

    #[test]
    fn ipv6_vips_print_their_address_in_brackets() {
        let v = VipView {
            id: 2,
            name: None,
            address: "2001:db8::10".parse().unwrap(),
            port: 80,
            protocol: "tcp".into(),
            forwarding: "nat".into(),
            encap_source: None,
            hash: "ip".into(),
            all_down_policy: "forward".into(),
            all_down: false,
            backends: 0,
            healthy: 0,
            packets: 0,
            bytes: 0,
            listening: None,
            ring_digest: None,
        };
        let text = vips(&[v]);
        assert!(text.contains("[2001:db8::10]:80/tcp"), "{text}");
    }
}
