//! `lb-ctl proxy` on loopback, without root: proxy VIPs served by the in-process lb-proxy,
//! steered by the daemon's health checks and backends API.
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

// The unit tests' port picker: these tests run in parallel too.
#[path = "../src/testing/ports.rs"]
mod ports;
use ports::free_port;

const BIN: &str = env!("CARGO_BIN_EXE_lb-ctl");

/// A tiny HTTP backend on 127.0.0.1:0 answering every request with its name, until stopped.
struct Backend {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl Backend {
    fn start(name: &'static str) -> Backend {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        listener.set_nonblocking(true).unwrap();
        std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        std::thread::spawn(move || serve(stream, name));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
            // Dropping the listener: connections are refused from now on.
        });
        Backend { addr, stop }
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn serve(stream: TcpStream, name: &str) {
    stream.set_nonblocking(false).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    loop {
        let mut line = String::new();
        let mut request_seen = false;
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
            request_seen = true;
        }
        if !request_seen {
            return;
        }
        let body = format!("{name}\n");
        if write!(out, "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len()).is_err() {
            return;
        }
    }
}

fn get(vip: SocketAddr) -> std::io::Result<String> {
    let mut s = TcpStream::connect_timeout(&vip, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    let (head, body) = raw.split_once("\r\n\r\n").ok_or_else(|| std::io::Error::other("no body"))?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(std::io::Error::other(head.lines().next().unwrap_or("").to_string()));
    }
    Ok(body.trim().to_string())
}

struct ProxyDaemon {
    child: Child,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for ProxyDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl ProxyDaemon {
    fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(BIN).arg("--socket").arg(&self.socket).args(args).output().unwrap()
    }
}

fn start(config: &str, dir: tempfile::TempDir, socket: PathBuf, vip: SocketAddr) -> ProxyDaemon {
    start_with(config, dir, socket, vip, &["--log-level", "warn"], Stdio::inherit())
}

fn start_with(
    config: &str,
    dir: tempfile::TempDir,
    socket: PathBuf,
    vip: SocketAddr,
    args: &[&str],
    stderr: Stdio,
) -> ProxyDaemon {
    let path = dir.path().join("lb.toml");
    std::fs::write(&path, config).unwrap();
    let child = Command::new(BIN)
        .arg("proxy")
        .args(args)
        .arg("--config")
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let d = ProxyDaemon { child, socket, _dir: dir };
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect_timeout(&vip, Duration::from_millis(100)).is_err() {
        assert!(Instant::now() < deadline, "the proxy VIP did not open");
        std::thread::sleep(Duration::from_millis(50));
    }
    d
}

/// A configuration with one HTTP VIP "api" on 127.0.0.1:`port` with backends on 127.0.0.1 at
/// `backends`, and `proxy` as its `[vip.proxy]` table.
fn api_config(socket: &Path, port: u16, backends: &[u16], proxy: &str) -> String {
    let backends: Vec<String> = backends.iter().map(|p| format!("{{ address = \"127.0.0.1\", port = {p} }}")).collect();
    format!(
        "[daemon]\napi_socket = \"{}\"\n\n[[vip]]\nname = \"api\"\naddress = \"127.0.0.1\"\nport = {port}\n\
         protocol = \"http\"\nbackends = [ {} ]\n[vip.proxy]\n{proxy}\n",
        socket.display(),
        backends.join(", ")
    )
}

fn answers(vip: SocketAddr, n: usize) -> Vec<String> {
    (0..n).map(|_| get(vip).expect("request through the proxy")).collect()
}

#[test]
fn proxy_vips_follow_health_and_the_backends_api() {
    let one = Backend::start("one");
    let two = Backend::start("two");
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("proxy.sock");
    let vip = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let config = format!(
        r#"[daemon]
api_socket = "{socket}"

[[vip]]
name = "api"
address = "127.0.0.1"
port = {port}
protocol = "http"
health = {{ kind = "tcp", interval = "100ms", timeout = "100ms", rise = 1, fall = 1 }}
backends = [ {{ address = "127.0.0.1", port = {p1} }}, {{ address = "127.0.0.1", port = {p2} }} ]
[vip.proxy]
balance = "round_robin"
"#,
        socket = socket.display(),
        port = vip.port(),
        p1 = one.addr.port(),
        p2 = two.addr.port()
    );
    let d = start(&config, dir, socket, vip);
    // Health checks bring both in (rise 1).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let seen = answers(vip, 6);
        if seen.iter().any(|n| n == "one") && seen.iter().any(|n| n == "two") {
            break;
        }
        assert!(Instant::now() < deadline, "both backends never answered: {seen:?}");
        std::thread::sleep(Duration::from_millis(100));
    }

    let list = d.cli(&["backends", "list", "api"]);
    assert!(list.status.success(), "{}", String::from_utf8_lossy(&list.stderr));
    let table = String::from_utf8_lossy(&list.stdout);
    assert!(table.contains(&one.addr.to_string()) && table.contains(&two.addr.to_string()), "{table}");
    assert!(table.lines().next().unwrap_or("").contains("REQUESTS"), "proxy columns: {table}");
    let json = d.cli(&["backends", "list", "api", "--json"]);
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&json.stdout).unwrap();
    let requests: u64 = rows.iter().map(|r| r["requests"].as_u64().expect("proxy VIPs report requests")).sum();
    assert!(requests >= 6, "requests counted by the proxy: {requests}");

    // `stats` shows the proxy VIP's requests and errors too (not zeros).
    let stats = d.cli(&["stats", "--json"]);
    assert!(stats.status.success(), "{}", String::from_utf8_lossy(&stats.stderr));
    let stats: serde_json::Value = serde_json::from_slice(&stats.stdout).unwrap();
    let vip_row = &stats["vips"][0];
    assert_eq!(vip_row["name"], "api", "{stats}");
    assert!(vip_row["requests"].as_u64().is_some_and(|r| r >= 6), "{stats}");
    assert_eq!(vip_row["errors"].as_u64(), Some(0), "{stats}");
    let per_backend: u64 = stats["backends"].as_array().unwrap().iter().map(|b| b["requests"].as_u64().unwrap()).sum();
    assert_eq!(Some(per_backend), vip_row["requests"].as_u64(), "{stats}");
    let text = String::from_utf8_lossy(&d.cli(&["stats"]).stdout).into_owned();
    assert!(text.contains("VIP  PACKETS  BYTES  REQUESTS  ERRORS\napi"), "{text}");

    // Drain through the API: no new requests go to it.
    let drained = d.cli(&["backends", "drain", "api", &one.addr.to_string()]);
    assert!(drained.status.success(), "{}", String::from_utf8_lossy(&drained.stderr));
    std::thread::sleep(Duration::from_millis(200));
    assert!(answers(vip, 8).iter().all(|n| n == "two"), "a drained backend got new requests");

    // Remove the drained one, add it back: it serves again.
    assert!(d.cli(&["backends", "remove", "api", &one.addr.to_string()]).status.success());
    assert!(d.cli(&["backends", "add", "api", &one.addr.to_string()]).status.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    while !answers(vip, 6).iter().any(|n| n == "one") {
        assert!(Instant::now() < deadline, "the re-added backend never served");
        std::thread::sleep(Duration::from_millis(100));
    }

    // Health: a dead backend leaves the proxy's rotation; requests keep succeeding.
    let dead = two.addr;
    drop(two);
    std::thread::sleep(Duration::from_millis(600));
    let after = answers(vip, 8);
    assert!(after.iter().all(|n| n == "one"), "requests after the failure: {after:?}");
    let table = String::from_utf8_lossy(&d.cli(&["backends", "list", "api"]).stdout).into_owned();
    let dead_row = table.lines().find(|l| l.contains(&dead.to_string())).unwrap_or("");
    assert!(dead_row.contains("down"), "the health checker marked it down:\n{table}");

    // Bad API input changes nothing.
    let bad = d.cli(&["backends", "add", "api", "not-an-address"]);
    assert!(!bad.status.success());
    assert!(answers(vip, 4).iter().all(|n| n == "one"));
}

#[test]
fn proxy_refuses_xdp_vips() {
    let dir = tempfile::tempdir().unwrap();
    let path: &Path = &dir.path().join("lb.toml");
    std::fs::write(
        path,
        "[[vip]]\naddress = \"203.0.113.10\"\nport = 80\nbackends = [ { address = \"198.51.100.1\" } ]\n",
    )
    .unwrap();
    let out = Command::new(BIN).args(["proxy", "--config"]).arg(path).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is forwarded by XDP") && err.contains("proxy VIPs only"), "{err}");
}

/// `[daemon] log_level` sets the daemon's log filter when `--log-level` does not, and a reload
/// applies a changed one.
#[test]
fn the_log_level_follows_the_file_and_its_reloads() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("proxy.sock");
    let log = dir.path().join("daemon.log");
    let vip = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let config = |level: &str| {
        format!(
            "[daemon]\napi_socket = \"{}\"\nlog_level = \"{level}\"\n\n[[vip]]\nname = \"api\"\naddress = \"127.0.0.1\"\n\
             port = {}\nprotocol = \"http\"\nbackends = [ {{ address = \"127.0.0.1\", port = 9 }} ]\n",
            socket.display(),
            vip.port()
        )
    };
    let config_path = dir.path().join("lb.toml");
    let stderr = std::fs::File::create(&log).unwrap();
    let d = start_with(&config("warn"), dir, socket.clone(), vip, &[], stderr.into());
    let text = || std::fs::read_to_string(&log).unwrap();
    // At warn, the start and a reload log nothing at info.
    assert!(d.cli(&["reload"]).status.success());
    assert!(!text().contains("INFO"), "info lines at warn:\n{}", text());
    std::fs::write(&config_path, config("info")).unwrap();
    let reload = d.cli(&["reload"]);
    let said = String::from_utf8_lossy(&reload.stdout).into_owned();
    assert!(reload.status.success() && said.contains("log level \"info\""), "{said}");
    // The next reload is logged at info.
    assert!(d.cli(&["reload"]).status.success());
    let deadline = Instant::now() + Duration::from_secs(5);
    while !text().contains("INFO") {
        assert!(Instant::now() < deadline, "no info line after the level changed:\n{}", text());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The quick start: `lb-ctl proxy --listen … --backend … --backends-file …` serves one proxy
/// VIP without a configuration file, and follows the backends file as it changes (a file with
/// mistakes changes nothing).
#[test]
fn quick_start_serves_flags_and_follows_the_backends_file() {
    let one = Backend::start("one");
    let two = Backend::start("two");
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("quick.sock");
    let file = dir.path().join("backends.txt");
    std::fs::write(&file, format!("# the second backend\n{}\n", two.addr)).unwrap();
    let vip = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut child = Command::new(BIN)
        .arg("--socket")
        .arg(&socket)
        .args(["proxy", "--log-level", "warn", "--listen", &vip.to_string(), "--backend", &one.addr.to_string()])
        .arg("--backends-file")
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    struct Kill<'a>(&'a mut Child);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _kill = Kill(&mut child);
    let until = |what: &str, pred: &dyn Fn(&[String]) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let seen: Vec<String> = (0..6).filter_map(|_| get(vip).ok()).collect();
            if seen.len() == 6 && pred(&seen) {
                return;
            }
            assert!(Instant::now() < deadline, "{what}: {seen:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    until("both backends answer", &|s| s.iter().any(|n| n == "one") && s.iter().any(|n| n == "two"));
    let list = Command::new(BIN).arg("--socket").arg(&socket).args(["backends", "list", "quick"]).output().unwrap();
    let table = String::from_utf8_lossy(&list.stdout);
    assert!(list.status.success() && table.contains(&two.addr.to_string()), "{table}");

    // The file loses the second backend: only the first answers.
    std::fs::write(&file, "# emptied\n").unwrap();
    until("the removed backend is gone", &|s| s.iter().all(|n| n == "one"));
    // A file with a mistake changes nothing.
    std::fs::write(&file, format!("{} extra words\n", two.addr)).unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    until("a bad file changes nothing", &|s| s.iter().all(|n| n == "one"));
    // And back.
    std::fs::write(&file, format!("{}\n", two.addr)).unwrap();
    until("the backend is back", &|s| s.iter().any(|n| n == "two"));
}

/// A proxy VIP whose address is taken stops `lb-ctl proxy` at start with the reason, instead of
/// a daemon that runs without the VIP and says it is fine.
#[test]
fn a_proxy_vip_that_cannot_listen_fails_the_start() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("proxy.sock");
    let path = dir.path().join("lb.toml");
    std::fs::write(&path, api_config(&socket, port, &[9], "")).unwrap();
    let mut child = Command::new(BIN)
        .args(["proxy", "--log-level", "warn", "--config"])
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("lb-ctl proxy kept running without its VIP's listener");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("cannot listen on 127.0.0.1:{port}")) && err.contains("in use"), "{err}");
    assert!(!socket.exists(), "no control socket is left behind");
    drop(taken);
}

/// A backend ejected by outlier detection is shown as `ejected`, not `active`.
#[test]
fn an_ejected_backend_is_listed_as_ejected() {
    let live = Backend::start("live");
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap(); // closed at once
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("proxy.sock");
    let vip = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let proxy = "balance = \"round_robin\"\noutlier = { consecutive_failures = 1, base_ejection = \"60s\" }";
    let config = api_config(&socket, vip.port(), &[live.addr.port(), dead.port()], proxy);
    let d = start(&config, dir, socket, vip);
    for _ in 0..6 {
        let _ = get(vip);
    }
    let json = d.cli(&["backends", "list", "api", "--json"]);
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&json.stdout).unwrap();
    let state = |addr: SocketAddr| rows.iter().find(|r| r["address"] == addr.to_string()).unwrap()["state"].clone();
    assert_eq!(state(dead), "ejected", "{rows:?}");
    assert_eq!(state(live.addr), "active", "{rows:?}");
}

/// `access_log = true`: one line per request on the daemon's log, text by default.
#[test]
fn access_log_writes_a_line_per_request() {
    let one = Backend::start("one");
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("proxy.sock");
    let vip = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let path = dir.path().join("lb.toml");
    std::fs::write(&path, api_config(&socket, vip.port(), &[one.addr.port()], "access_log = true")).unwrap();
    let log_path = dir.path().join("stderr.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let child = Command::new(BIN)
        .args(["proxy", "--log-level", "warn,access=info", "--config"])
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .spawn()
        .unwrap();
    let d = ProxyDaemon { child, socket, _dir: dir };
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect_timeout(&vip, Duration::from_millis(100)).is_err() {
        assert!(Instant::now() < deadline, "the proxy VIP did not open");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(answers(vip, 2), ["one", "one"]);
    let deadline = Instant::now() + Duration::from_secs(5);
    let want = format!(" api {} ", one.addr);
    loop {
        let text = std::fs::read_to_string(&log_path).unwrap();
        let lines: Vec<&str> = text.lines().filter(|l| l.contains(&want)).collect();
        if lines.len() >= 2 {
            assert!(lines.iter().all(|l| l.contains(" 200 ") && l.contains("\"GET / HTTP/1.1\"")), "{text}");
            break;
        }
        assert!(Instant::now() < deadline, "no access log lines in:\n{text}");
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(d);
}

/// `--log-format json`: every line of the daemon's log is a JSON object, the access log's
/// fields are fields of the record (not an escaped string in its message), and no field holds
/// Rust debug text (`Some(...)`).
#[test]
fn json_logs_hold_every_field_as_json() {
    let one = Backend::start("one");
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("proxy.sock");
    let vip = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let config = api_config(&socket, vip.port(), &[one.addr.port()], "access_log = true");
    let log_path = dir.path().join("stderr.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let d = start_with(&config, dir, socket.clone(), vip, &["--log-format", "json", "--log-level", "info"], log.into());
    assert_eq!(answers(vip, 1), ["one"]);
    let records = |text: &str| -> Vec<serde_json::Value> {
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("a log line that is not JSON ({e}): {l}")))
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    let (text, access) = loop {
        let text = std::fs::read_to_string(&log_path).unwrap();
        if let Some(r) = records(&text).into_iter().find(|r| r["target"] == "access") {
            break (text, r);
        }
        assert!(Instant::now() < deadline, "no access record in:\n{text}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let fields = &access["fields"];
    assert_eq!(fields["status"], 200, "{access}");
    assert_eq!(fields["vip"], "api", "{access}");
    assert_eq!(fields["backend"], one.addr.to_string(), "{access}");
    assert_eq!(fields["method"], "GET", "{access}");
    assert_eq!(fields["uri"], "/", "{access}");
    assert_eq!(fields["version"], "HTTP/1.1", "{access}");
    assert!(fields["client"].as_str().is_some_and(|c| c.starts_with("127.0.0.1:")), "{access}");
    assert!(fields["duration_ms"].is_u64(), "{access}");
    let started = records(&text).into_iter().find(|r| r["fields"]["message"] == "started").expect("a started record");
    assert_eq!(started["fields"]["socket"], socket.display().to_string(), "{started}");
    for r in records(&text) {
        for (key, value) in r["fields"].as_object().unwrap() {
            let shown = value.to_string();
            assert!(!shown.contains("Some(") && !shown.contains("None"), "field {key} holds Rust debug text: {r}");
        }
    }
    drop(d);
}

/// `backends list` shows the backends only a route names (`[vip.proxy.sni] routes`), with the
/// VIP's own.
#[test]
fn backends_list_shows_sni_route_backends() {
    let own = Backend::start("own");
    let route = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("proxy.sock");
    let vip = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let config = format!(
        "[daemon]\napi_socket = \"{}\"\n\n[[vip]]\nname = \"tls\"\naddress = \"127.0.0.1\"\nport = {}\n\
         forwarding = \"proxy\"\nbackends = [ {{ address = \"127.0.0.1\", port = {} }} ]\n\
         [vip.proxy.sni]\nroutes = [ {{ names = [\"a.test\"], backends = [\"{route}\"] }} ]\n",
        socket.display(),
        vip.port(),
        own.addr.port()
    );
    let d = start(&config, dir, socket, vip);
    let json = d.cli(&["backends", "list", "--json"]);
    assert!(json.status.success(), "{}", String::from_utf8_lossy(&json.stderr));
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&json.stdout).unwrap();
    let row = |addr: SocketAddr| rows.iter().find(|r| r["address"] == addr.to_string()).cloned();
    assert_eq!(row(own.addr).map(|r| r["state"].clone()), Some("active".into()), "{rows:?}");
    let routed = row(route).unwrap_or_else(|| panic!("the route's backend {route} is not listed: {rows:?}"));
    assert_eq!((routed["vip"].clone(), routed["state"].clone()), ("tls".into(), "route".into()), "{routed}");
    let text = String::from_utf8(d.cli(&["backends", "list"]).stdout).unwrap();
    assert!(text.lines().any(|l| l.contains(&route.to_string()) && l.contains("route")), "{text}");
}
