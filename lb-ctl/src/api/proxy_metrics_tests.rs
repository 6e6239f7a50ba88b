//! The proxy's figures in `/v1/metrics`, from real requests through a proxy VIP: responses by
//! status class, the response-time histogram, retries, and the map-write histogram.
use std::collections::HashMap;

use axum::http::Method;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::testing::rig::{Daemon, lb_toml};

/// `series → value` of every sample line, after Prometheus's own parser (`promtool check
/// metrics`) read the whole text with no complaint but "no help text" (an artefact of reading
/// OpenMetrics as the older text format: HELP names the family, not its `_total` series).
async fn scrape(d: &Daemon) -> HashMap<String, f64> {
    let (_, body) = d.client.raw::<()>(Method::GET, "/v1/metrics", None).await.unwrap();
    let text = String::from_utf8(body.to_vec()).unwrap();
    let mut promtool = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus; `cargo xtask setup` installs it)");
    std::io::Write::write_all(&mut promtool.stdin.take().unwrap(), text.as_bytes()).unwrap();
    let out = promtool.wait_with_output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let complaints: Vec<&str> = said.lines().filter(|l| !l.ends_with(" no help text")).collect();
    assert!(complaints.is_empty(), "promtool: {complaints:?}\n{text}");
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap();
            (series.to_string(), value.parse().unwrap_or_else(|_| panic!("value: {l:?}")))
        })
        .collect()
}

/// One HTTP/1.1 request on its own connection; the status code.
async fn get(port: u16, path: &str) -> u16 {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: app\r\nConnection: close\r\n\r\n");
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out).await;
    out.get(9..12).and_then(|code| code.parse().ok()).unwrap_or_else(|| panic!("no status: {out:?}"))
}

#[tokio::test]
async fn proxy_responses_are_counted_by_class_with_their_times_and_retries() {
    // A backend that answers 503 to /fail and 200 to the rest, and a port that refuses.
    let backend = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backend_port = backend.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = backend.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 2048];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let status = if buf[..n].starts_with(b"GET /fail") { "503 Service Unavailable" } else { "200 OK" };
                let answer = format!("HTTP/1.1 {status}\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
                let _ = s.write_all(answer.as_bytes()).await;
            });
        }
    });
    let refusing = crate::testing::ports::free_port();
    let port = crate::testing::ports::free_port();
    let proxy_vip = format!(
        "[[vip]]\nname = \"app\"\naddress = \"127.0.0.1\"\nport = {port}\nforwarding = \"proxy\"\n\
         protocol = \"http\"\n\
         backends = [ {{ address = \"127.0.0.1\", port = {backend_port} }}, {{ address = \"127.0.0.1\", port = {refusing} }} ]\n"
    );
    let d = Daemon::start(&lb_toml(&proxy_vip)).await;
    let mut statuses = Vec::new();
    for path in ["/a", "/b", "/c", "/fail", "/fail"] {
        statuses.push(get(port, path).await);
    }
    assert_eq!(statuses, [200, 200, 200, 503, 503], "GETs are retried on the live backend");

    let m = scrape(&d).await;
    let class = |c: &str| m[&format!("lb_proxy_responses_total{{vip=\"app\",class=\"{c}\"}}")];
    assert_eq!((class("1xx"), class("2xx"), class("3xx"), class("4xx"), class("5xx")), (0.0, 3.0, 0.0, 0.0, 2.0));
    assert!(m["lb_proxy_retries_total{vip=\"app\"}"] >= 1.0, "the refusing backend's turns were retried");
    assert_eq!(m["lb_proxy_response_seconds_count{vip=\"app\"}"], 5.0);
    assert_eq!(m["lb_proxy_response_seconds_bucket{le=\"+Inf\",vip=\"app\"}"], 5.0);
    let sum = m["lb_proxy_response_seconds_sum{vip=\"app\"}"];
    assert!(sum > 0.0 && sum < 10.0, "{sum}");
    let queued = format!("lb_proxy_queue_depth{{vip=\"app\",backend=\"127.0.0.1:{backend_port}\"}}");
    assert_eq!(m[&queued], 0.0);
    assert!(
        m.contains_key(&format!("lb_proxy_outlier_ejections_total{{vip=\"app\",backend=\"127.0.0.1:{refusing}\"}}"))
    );
    assert_eq!(m["lb_map_write_duration_seconds_count"], 0.0);

    // A change through the API writes the maps, timed.
    d.client.drain_backend(&d.req("app", &format!("127.0.0.1:{refusing}"), None)).await.unwrap();
    let m = scrape(&d).await;
    assert_eq!(m["lb_map_write_duration_seconds_count"], 1.0);
    assert_eq!(m["lb_map_write_duration_seconds_bucket{le=\"+Inf\"}"], 1.0);
    d.stop().await;
}
