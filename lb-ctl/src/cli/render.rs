//! API answers as text for people (the `--json` flags print the answers as they come).
use crate::api::types::{BackendView, Decision, ExplainView, StatsView, StatusView, VipView};

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
            row
        })
        .collect();
    let mut headers = vec!["VIP", "BACKEND", "WEIGHT", "HEALTH", "STATE", "PACKETS", "BYTES", "FLOWS", "IN RING"];
    if proxied {
        headers.extend(["REQUESTS", "ERRORS"]);
    }
    table(&headers, &rows)
}

/// `lb-ctl vips list`.
pub fn vips(list: &[VipView]) -> String {
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|v| {
            vec![
                v.name.clone().unwrap_or_else(|| "-".into()),
                format!("{}:{}/{}", v.address, v.port, v.protocol),
                v.forwarding.clone(),
                v.hash.clone(),
                format!("{}/{}", v.healthy, v.backends),
                if v.all_down { format!("all down ({})", v.all_down_policy) } else { "ok".into() },
                v.packets.to_string(),
                v.bytes.to_string(),
            ]
        })
        .collect();
    table(&["NAME", "VIP", "FORWARDING", "HASH", "HEALTHY", "STATE", "PACKETS", "BYTES"], &rows)
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
    if s.api_changes > 0 {
        out.push_str(&format!(
            "api changes {} (the running backends differ from the file; kept across restarts, undone by reload)\n",
            s.api_changes
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
    let mut out = table(&["COUNTER", "VALUE"], &counters);
    let traffic = |rows: &[crate::api::types::TrafficView]| -> Vec<Vec<String>> {
        rows.iter().map(|t| vec![t.name.clone(), t.packets.to_string(), t.bytes.to_string()]).collect()
    };
    out.push('\n');
    out.push_str(&table(&["VIP", "PACKETS", "BYTES"], &traffic(&s.vips)));
    out.push('\n');
    out.push_str(&table(&["BACKEND", "PACKETS", "BYTES"], &traffic(&s.backends)));
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
        };
        let text = backends(&[b]);
        assert_eq!(
            text,
            "VIP  BACKEND            WEIGHT  HEALTH  STATE   PACKETS  BYTES  FLOWS  IN RING\n\
             web  198.51.100.1:8080     100  up      active    12345    999      7  yes\n"
        );
    }
}
