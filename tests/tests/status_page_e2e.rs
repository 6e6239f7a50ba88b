//! The status page of a running daemon, loaded in headless Chromium (Debian's `chromium`) from
//! the balancer's namespace of a namespace lab: the backends it shows, with their health, are
//! those of `lb-ctl backends list`, its recent events show a backend going down, and its
//! script fills the rates. A screenshot is kept in
//! `target/test-artifacts/status-page.png`. Needs root.
use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr};
use std::process::Command;
use std::time::Duration;

use lb_ctl::state::Health;
use lb_tests::lab::{Daemon, Lab, backend_addr};
use lb_tests::privileges::require_root;

const METRICS: &str = "127.0.0.1:9721";

/// `(vip, backend, health)` of every backend row of the page's DOM.
fn rows_of(dom: &str) -> BTreeSet<(String, String, String)> {
    let attr = |tag: &str, name: &str| {
        let start = tag.find(&format!("{name}=\""))? + name.len() + 2;
        Some(tag[start..start + tag[start..].find('"')?].to_string())
    };
    let mut out = BTreeSet::new();
    for piece in dom.split("<tr data-backend-id=").skip(1) {
        let tag = &piece[..piece.find('>').unwrap_or(piece.len())];
        let health = piece.split("class=\"health\">").nth(1).and_then(|h| h.split('<').next()).unwrap_or("");
        if let (Some(vip), Some(backend)) = (attr(tag, "data-vip"), attr(tag, "data-backend")) {
            out.insert((vip, backend, health.to_string()));
        }
    }
    out
}

#[test]
fn the_status_page_in_a_browser_shows_the_backends_list() {
    if !require_root("the_status_page_in_a_browser_shows_the_backends_list") {
        return;
    }
    let mut lab = Lab::new("sp", 3, 1);
    // Backends 0 and 1 serve; nothing listens on backend 2, so its check is refused: down. Three
    // failures in a row take a backend down, so a check slowed by Chromium starting on the same
    // two cores cannot flip a serving backend between the page and `backends list`.
    lab.serve_test_backends(env!("CARGO_BIN_EXE_lb-test-backend"), 2);
    let mut daemon = Daemon::new(&lab.lb, "eth0", "sp", &["--xdp-mode", "native"]);
    let backends: Vec<String> =
        (0..3).map(|i| format!("{{ address = \"{}\", port = 8080 }}", backend_addr(i))).collect();
    daemon.write_config_text(&format!(
        "[daemon]\napi_socket = \"{}\"\nmetrics = \"{METRICS}\"\nflow_table_size = 65536\n\n[[vip]]\nname = \"web\"\n\
         address = \"{}\"\nport = 80\nhealth = {{ kind = \"tcp\", interval = \"300ms\", timeout = \"250ms\", rise = 1, fall = 3 }}\n\
         backends = [ {} ]\n",
        daemon.socket().display(),
        Ipv4Addr::new(203, 0, 113, 10),
        backends.join(", ")
    ));
    daemon.start();
    let down: SocketAddr = format!("{}:8080", backend_addr(2)).parse().unwrap();
    daemon.wait_for_backend(down, Duration::from_secs(10), "down", |b| b.health == Health::Down);
    for i in 0..2 {
        let up: SocketAddr = format!("{}:8080", backend_addr(i)).parse().unwrap();
        daemon.wait_for_backend(up, Duration::from_secs(10), "up", |b| b.health == Health::Up);
    }

    let artifacts = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let profile = tempfile::tempdir().unwrap();
    let chromium = |extra: &[&str]| {
        let out = Command::new("ip")
            .args(["netns", "exec", &lab.lb.name, "chromium", "--headless", "--no-sandbox", "--disable-gpu"])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            // Virtual time lets the page's 2 s poll run twice before the DOM is taken.
            .args(["--virtual-time-budget=5000", "--window-size=1280,800"])
            .args(extra)
            .arg(format!("http://{METRICS}/"))
            .output()
            .expect("chromium (Debian package chromium; `cargo xtask setup` installs it)");
        assert!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let dom = chromium(&["--dump-dom"]);
    let shown = rows_of(&dom);
    let listed: BTreeSet<(String, String, String)> = daemon
        .backends()
        .into_iter()
        .map(|b| {
            let health = serde_json::to_value(b.health).unwrap().as_str().unwrap().to_string();
            (b.vip, b.address.to_string(), health)
        })
        .collect();
    assert_eq!(shown.len(), 3, "{dom}");
    assert_eq!(shown, listed, "the page against backends list");
    assert!(dom.contains("updated "), "the page's script polled /status.json: {dom}");
    // Recent events: backend 2 going down is one, with its VIP, address and time.
    let events = dom.split("<table id=\"events\">").nth(1).and_then(|t| t.split("</table>").next()).expect(&dom);
    let down_event =
        events.split("<tr").find(|row| row.contains("data-kind=\"health\"") && row.contains(&down.to_string()));
    let down_event = down_event.unwrap_or_else(|| panic!("no health event for {down} in the recent events: {events}"));
    assert!(down_event.contains("<td>web</td>") && down_event.contains("backend is down"), "{down_event}");
    let year = down_event.split("<td>").nth(1).and_then(|t| t.get(..4)).and_then(|y| y.parse::<u32>().ok());
    assert!(year.is_some_and(|y| y >= 2025), "a UTC time first: {down_event}");
    let shot = artifacts.join("status-page.png");
    let _ = std::fs::remove_file(&shot);
    chromium(&[&format!("--screenshot={}", shot.display())]);
    let png = std::fs::read(&shot).expect("the screenshot");
    assert!(png.starts_with(b"\x89PNG") && png.len() > 10_000, "a screenshot of the page");
}
