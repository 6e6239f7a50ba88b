//! The status page on the metrics port (`GET /`): a read-only HTML view of the daemon, its
//! VIPs and backends (health, ring membership, flows, traffic) and the data plane's counters,
//! like HAProxy's stats page. It needs nothing but itself: no external assets. A small inline
//! script polls `/status.json` every 2 s and shows per-second rates; without it the page shows
//! the figures as of its loading.
use axum::Json;
use axum::extract::State;
use axum::response::Html;
use serde::Serialize;

use super::ApiError;
use super::request::{Request, Response, Service};
use super::types::{BackendView, EventView, StatsView, StatusView, VipView};

/// Everything the page shows, also served as `/status.json`.
#[derive(Serialize)]
pub struct Snapshot {
    status: StatusView,
    vips: Vec<VipView>,
    backends: Vec<BackendView>,
    stats: StatsView,
    /// The recent events, newest first.
    events: Vec<EventView>,
}

async fn snapshot<S: Service>(service: &S) -> Result<Snapshot, ApiError> {
    let unexpected = || ApiError::internal("unexpected answer from the daemon");
    let Response::Status(status) = service.call(Request::Status).await? else { return Err(unexpected()) };
    let Response::Vips(vips) = service.call(Request::Vips).await? else { return Err(unexpected()) };
    let Response::Backends(backends) = service.call(Request::Backends { vip: None }).await? else {
        return Err(unexpected());
    };
    let Response::Stats(stats) = service.call(Request::Stats).await? else { return Err(unexpected()) };
    let Response::Events(events) = service.call(Request::Events).await? else { return Err(unexpected()) };
    Ok(Snapshot { status: *status, vips, backends, stats, events })
}

pub async fn json<S: Service>(State(service): State<S>) -> Result<Json<Snapshot>, ApiError> {
    snapshot(&service).await.map(Json)
}

pub async fn page<S: Service>(State(service): State<S>) -> Result<Html<String>, ApiError> {
    snapshot(&service).await.map(|s| Html(render(&s)))
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn row(cells: &[String]) -> String {
    format!("<tr>{}</tr>", cells.iter().map(|c| format!("<td>{c}</td>")).collect::<String>())
}

fn render(s: &Snapshot) -> String {
    let st = &s.status;
    let mut body = format!(
        "<h1>lb-ctl on {}</h1>\n<p class=\"meta\">version {} &middot; XDP mode {} &middot; up {} s &middot; config {} \
         &middot; backends {} up, {} down, {} draining &middot; API changes not in the file: {}</p>\n",
        escape(&st.interface),
        escape(&st.version),
        escape(st.xdp_mode.as_deref().unwrap_or("none")),
        st.uptime_secs,
        escape(&st.config),
        st.backends_up,
        st.backends_down,
        st.backends_draining,
        st.api_changes
    );
    if let Some(r) = &st.last_reload {
        body.push_str(&format!(
            "<p class=\"meta\">last reload: {} &mdash; {}</p>\n",
            if r.ok { "ok" } else { "refused" },
            escape(&r.message)
        ));
    }
    body.push_str(
        "<h2>VIPs</h2>\n<table id=\"vips\"><tr><th>VIP</th><th>address</th><th>forwarding</th><th>hash</th>\
         <th>healthy / backends</th><th>packets</th><th>bytes</th><th>packets/s</th></tr>\n",
    );
    for v in &s.vips {
        let label = v.name.clone().unwrap_or_else(|| std::net::SocketAddr::new(v.address, v.port).to_string());
        let class = if v.healthy == 0 && v.backends > 0 { " class=\"bad\"" } else { "" };
        body.push_str(&format!(
            "<tr data-vip-id=\"{}\"{class}><td>{}</td><td>{}/{}</td><td>{}</td><td>{}</td><td>{} / {}</td>\
             <td class=\"packets\">{}</td><td>{}</td><td class=\"rate\">&ndash;</td></tr>\n",
            v.id,
            escape(&label),
            std::net::SocketAddr::new(v.address, v.port),
            escape(&v.protocol),
            escape(&v.forwarding),
            escape(&v.hash),
            v.healthy,
            v.backends,
            v.packets,
            v.bytes
        ));
    }
    body.push_str(
        "</table>\n<h2>Backends</h2>\n<table id=\"backends\"><tr><th>VIP</th><th>backend</th><th>id</th><th>weight</th>\
         <th>state</th><th>health</th><th>in ring</th><th>flows</th><th>packets</th><th>packets/s</th>\
         <th>requests</th><th>errors</th></tr>\n",
    );
    for b in &s.backends {
        let health = serde_json::to_value(b.health).ok().and_then(|v| v.as_str().map(str::to_string));
        let health = health.unwrap_or_default();
        let class = if health == "down" { " class=\"bad\"" } else { "" };
        body.push_str(&format!(
            "<tr data-backend-id=\"{}\" data-vip=\"{}\" data-backend=\"{}\"{class}><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td class=\"health\">{}</td><td>{}</td><td>{}</td><td class=\"packets\">{}</td>\
             <td class=\"rate\">&ndash;</td><td>{}</td><td>{}</td></tr>\n",
            b.id,
            escape(&b.vip),
            b.address,
            escape(&b.vip),
            b.address,
            b.id,
            b.weight,
            escape(&b.state),
            escape(&health),
            if b.in_ring { "yes" } else { "no" },
            b.active_flows,
            b.packets,
            b.requests.map_or("&ndash;".into(), |n| n.to_string()),
            b.errors.map_or("&ndash;".into(), |n| n.to_string()),
        ));
    }
    body.push_str(&format!(
        "</table>\n<h2>Recent events</h2>\n<table id=\"events\"><tr><th>time (UTC)</th><th>event</th><th>VIP</th>\
         <th>backend</th><th>what</th></tr>\n{}",
        s.events.iter().map(event_row).collect::<String>()
    ));
    if s.events.is_empty() {
        body.push_str("<tr class=\"none\"><td colspan=\"5\">none since the daemon started</td></tr>\n");
    }
    body.push_str("</table>\n<h2>Data plane counters (non-zero)</h2>\n<table id=\"counters\">");
    for c in s.stats.counters.iter().filter(|c| c.value > 0) {
        body.push_str(&row(&[escape(&c.name), c.value.to_string()]));
    }
    body.push_str("</table>\n<p class=\"meta\" id=\"updated\">figures as of loading</p>\n");
    format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>lb-ctl status</title>\n<style>{STYLE}</style>\
         </head><body>\n{body}<script>{SCRIPT}</script>\n</body></html>\n"
    )
}

/// When an event happened, as the page shows it: `2026-01-02 03:04:05`, UTC.
pub(super) fn event_time(at_unix: u64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(at_unix);
    humantime::format_rfc3339_seconds(at).to_string().replace('T', " ").trim_end_matches('Z').to_string()
}

fn event_row(e: &EventView) -> String {
    let class = if (e.kind == "health" && e.message.starts_with("backend is down")) || e.kind == "ejected" {
        " class=\"bad\""
    } else {
        ""
    };
    format!(
        "<tr{class} data-kind=\"{}\">{}</tr>\n",
        escape(&e.kind),
        [
            event_time(e.at_unix),
            escape(&e.kind),
            escape(e.vip.as_deref().unwrap_or("")),
            e.backend.map(|b| b.to_string()).unwrap_or_default(),
            escape(&e.message),
        ]
        .iter()
        .map(|c| format!("<td>{c}</td>"))
        .collect::<String>()
    )
}

const STYLE: &str = "body{font-family:sans-serif;margin:1.5em;color:#222}table{border-collapse:collapse;margin-bottom:1em}\
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left;font-size:14px}th{background:#eee}\
tr.bad td{background:#fdd}.meta{color:#555;font-size:13px}";

/// Polls `/status.json` and fills the packets/s cells from two successive reads.
const SCRIPT: &str = r#"
let last = null;
async function poll() {
  try {
    const s = await (await fetch('/status.json', {cache: 'no-store'})).json();
    const now = performance.now();
    if (last) {
      const dt = (now - last.t) / 1000;
      for (const v of s.vips) {
        const row = document.querySelector(`#vips tr[data-vip-id="${v.id}"]`);
        const before = last.vips[v.id];
        if (row && before !== undefined) {
          row.querySelector('.rate').textContent = ((v.packets - before) / dt).toFixed(1);
          row.querySelector('.packets').textContent = v.packets;
        }
      }
      for (const b of s.backends) {
        const row = document.querySelector(`#backends tr[data-backend-id="${b.id}"]`);
        const before = last.backends[b.id];
        if (row && before !== undefined) {
          row.querySelector('.rate').textContent = ((b.packets - before) / dt).toFixed(1);
          row.querySelector('.packets').textContent = b.packets;
          row.querySelector('.health').textContent = b.health;
        }
      }
      const events = document.getElementById('events');
      while (events.rows.length > 1) events.deleteRow(1);
      for (const e of s.events) {
        const row = events.insertRow();
        row.dataset.kind = e.kind;
        if ((e.kind === 'health' && e.message.startsWith('backend is down')) || e.kind === 'ejected') row.className = 'bad';
        const time = new Date(e.at_unix * 1000).toISOString().replace('T', ' ').slice(0, 19);
        for (const text of [time, e.kind, e.vip || '', e.backend || '', e.message]) row.insertCell().textContent = text;
      }
      document.getElementById('updated').textContent = 'updated ' + new Date().toLocaleTimeString();
    }
    last = {t: now, vips: {}, backends: {}};
    for (const v of s.vips) last.vips[v.id] = v.packets;
    for (const b of s.backends) last.backends[b.id] = b.packets;
  } catch (e) {
    document.getElementById('updated').textContent = 'cannot reach the daemon: ' + e;
  }
}
poll();
setInterval(poll, 2000);
"#;
