//! The shipped monitoring files (`monitoring/`: Grafana dashboard, Prometheus alert rules) name
//! only metrics the daemon exports, and the rules are valid for Prometheus (`promtool`).
use std::collections::HashSet;
use std::path::Path;

use axum::http::Method;

use crate::testing::rig::{Daemon, lb_toml};

/// The metric names in `text` (`lb_…` words).
fn metric_names(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("lb_") {
        let before_ok = at == 0 || !rest.as_bytes()[at - 1].is_ascii_alphanumeric() && rest.as_bytes()[at - 1] != b'_';
        let word: String =
            rest[at..].chars().take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_').collect();
        if before_ok {
            out.push(word.clone());
        }
        rest = &rest[at + word.len().max(1)..];
    }
    out
}

fn monitoring_file(name: &str) -> (std::path::PathBuf, String) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("monitoring").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (path, text)
}

/// Every PromQL expression of the dashboard.
fn dashboard_exprs(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("expr", serde_json::Value::String(e)) => out.push(e.clone()),
                    _ => dashboard_exprs(v, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| dashboard_exprs(v, out)),
        _ => {}
    }
}

#[tokio::test]
async fn dashboard_and_alerts_use_only_exported_metrics() {
    // A proxy VIP too: the proxy's metrics exist only with one; announced, for the announce
    // metrics.
    let port = crate::testing::ports::free_port();
    let proxy_vip = format!(
        "[[vip]]\nname = \"app\"\naddress = \"127.0.0.1\"\nport = {port}\nforwarding = \"proxy\"\n\
         announce = {{ min_healthy = 1 }}\nbackends = [ {{ address = \"127.0.0.1\", port = 9 }} ]\n"
    );
    let d = Daemon::start(&lb_toml(&proxy_vip)).await;
    let (_, body) = d.client.raw::<()>(Method::GET, "/v1/metrics", None).await.unwrap();
    let text = String::from_utf8(body.to_vec()).unwrap();
    // A node in a fleet adds its `lb_fleet_*` metrics (made by the same function).
    let mut fleet = prometheus_client::registry::Registry::with_prefix("lb");
    crate::fleet::metrics::register(&mut fleet, &Default::default());
    let mut text = text;
    prometheus_client::encoding::text::encode(&mut text, &fleet).unwrap();
    let exported: HashSet<String> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next().map(Into::into))
        .collect();
    d.stop().await;
    assert!(exported.contains("lb_flow_table_capacity") && exported.contains("lb_flow_table_entries"));

    let (_, dashboard) = monitoring_file("grafana-dashboard.json");
    let dashboard: serde_json::Value = serde_json::from_str(&dashboard).expect("the dashboard is JSON");
    let mut exprs = Vec::new();
    dashboard_exprs(&dashboard, &mut exprs);
    assert!(exprs.len() >= 10, "{exprs:?}");
    let panels = dashboard["panels"].as_array().expect("panels");
    for p in panels {
        assert!(p["targets"].as_array().is_some_and(|t| !t.is_empty()), "panel without a query: {}", p["title"]);
    }
    let (_, alerts) = monitoring_file("alerts.yml");
    let alert_exprs: Vec<String> =
        alerts.lines().filter(|l| l.trim_start().starts_with("expr:")).map(Into::into).collect();
    assert!(alert_exprs.len() >= 5, "{alert_exprs:?}");
    for expr in exprs.iter().chain(&alert_exprs) {
        for name in metric_names(expr) {
            assert!(exported.contains(&name), "{name} (in {expr:?}) is not exported; exported: {exported:?}");
        }
    }
}

#[test]
fn alert_rules_pass_promtool() {
    let (path, _) = monitoring_file("alerts.yml");
    let out = std::process::Command::new("promtool")
        .args(["check", "rules"])
        .arg(&path)
        .output()
        .expect("promtool (Debian package prometheus; `cargo xtask setup` installs it)");
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}

#[test]
fn metric_names_are_found_in_expressions() {
    assert_eq!(
        metric_names("sum by (vip) (rate(lb_vip_packets_total{x=\"lb_no\"}[1m])) / lb_flow_table_capacity"),
        ["lb_vip_packets_total", "lb_no", "lb_flow_table_capacity"]
    );
}

/// The status page on the metrics port shows every backend `backends list` has, with its
/// health, and `/status.json` carries the same list.
#[tokio::test]
async fn the_status_page_shows_the_backends_list() {
    let d = Daemon::start(&lb_toml("")).await;
    let get = |path: &'static str| d.metrics_get(path);
    let page = get("/").await;
    assert!(page.starts_with("HTTP/1.1 200") && page.contains("text/html"), "{page}");
    assert!(!page.contains("src=\"http") && !page.contains("href=\"http"), "no external assets");
    let list = d.list().await;
    assert!(!list.is_empty());
    for b in &list {
        let row = format!("data-backend-id=\"{}\" data-vip=\"{}\" data-backend=\"{}\"", b.id, b.vip, b.address);
        assert!(page.contains(&row), "{row} missing:\n{page}");
    }
    assert_eq!(page.matches("<tr data-backend-id=").count(), list.len());
    let json = get("/status.json").await;
    let body = &json[json.find("\r\n\r\n").unwrap() + 4..];
    let snapshot: serde_json::Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    let backends: Vec<crate::api::types::BackendView> = serde_json::from_value(snapshot["backends"].clone()).unwrap();
    assert_eq!(backends, list);
    d.stop().await;
}

/// A drain and a reload are recent events: in `/status.json` newest first, with their time,
/// and on the page.
#[tokio::test]
async fn the_status_page_shows_recent_events() {
    let d = Daemon::start(&lb_toml("")).await;
    let get = |path: &'static str| d.metrics_get(path);
    let page = get("/").await;
    assert!(page.contains("<h2>Recent events</h2>") && page.contains("none since the daemon started"), "{page}");
    d.client.drain_backend(&d.req("web", "198.51.100.1:8080", None)).await.unwrap();
    d.client.reload().await.unwrap();
    let json = get("/status.json").await;
    let body = &json[json.find("\r\n\r\n").unwrap() + 4..];
    let snapshot: serde_json::Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    let events: Vec<crate::api::types::EventView> = serde_json::from_value(snapshot["events"].clone()).unwrap();
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["reload", "drain"], "newest first: {events:#?}");
    let drain = &events[1];
    assert_eq!((drain.vip.as_deref(), drain.backend), (Some("web"), Some("198.51.100.1:8080".parse().unwrap())));
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    assert!(drain.at_unix <= now && drain.at_unix + 60 > now, "{drain:?}");
    assert!(
        events[0].message.starts_with("reloaded: ") && events[0].message.contains("undid 1 API changes"),
        "{events:#?}"
    );
    let page = get("/").await;
    let row = format!(
        "<tr data-kind=\"drain\"><td>{}</td><td>drain</td><td>web</td><td>198.51.100.1:8080</td><td>web: backend 198.51.100.1:8080 draining",
        super::status_page::event_time(drain.at_unix)
    );
    assert!(page.contains(&row), "{row} missing:\n{page}");
    assert!(page.find("data-kind=\"reload\"").unwrap() < page.find("data-kind=\"drain\"").unwrap(), "newest first");
    d.stop().await;
}
