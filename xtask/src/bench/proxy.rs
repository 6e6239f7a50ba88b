//! `cargo xtask bench proxy`: wrk against lb-proxy, nginx and HAProxy in one run, over the same
//! local backends and with equal worker counts. Prints requests/s, p50/p99 latency and the
//! proxy process's CPU time per request (user + system of it and its workers over the run,
//! from /proc) for 1 KiB and 300 KiB responses and for TCP mode; asserts nothing. `LB_BENCH_ROUNDS=N` repeats every
//! test N times (peers interleaved) and compares medians. Everything listens on 127.0.0.1,
//! and every process started here is stopped by its pid when the run ends (also on error).
use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// Worker threads/processes for each proxy (and wrk's threads).
const WORKERS: usize = 2;
const BACKENDS: usize = 4;
const CONNECTIONS: usize = 50;
const DURATION: &str = "4s";
const PACKAGES: [(&str, &str); 4] = [
    ("wrk", "wrk"),
    ("nginx", "nginx"),
    ("haproxy", "haproxy"),
    (
        "/usr/lib/nginx/modules/ngx_stream_module.so",
        "libnginx-mod-stream",
    ),
];

/// The tests: name, path, TCP mode.
const TESTS: [(&str, &str, bool); 3] = [
    ("HTTP 1 KiB", "/1k", false),
    ("HTTP 300 KiB", "/300k", false),
    ("TCP mode, 1 KiB", "/1k", true),
];

/// Rounds of all tests (env `LB_BENCH_ROUNDS`, default 1); with more than one, the summary
/// compares medians, which a shared machine's noise moves less.
fn rounds() -> usize {
    std::env::var("LB_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1usize)
        .max(1)
}

fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.collect();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

pub fn run() -> Result<()> {
    install_missing()?;
    let examples = build_examples()?;
    let dir = TempDir::new()?;
    let mut procs = Procs::default();

    let backend_ports: Vec<u16> = (0..BACKENDS).map(|_| free_port()).collect::<Result<_>>()?;
    let mut cmd = Command::new(examples.join("bench_backend"));
    cmd.arg(WORKERS.to_string())
        .args(backend_ports.iter().map(u16::to_string));
    procs.spawn("backends", cmd)?;
    for &p in &backend_ports {
        wait_port(p)?;
    }

    let mut peers: Vec<(&str, u16, u16)> = Vec::new();
    let (lb_http, lb_tcp) = (free_port()?, free_port()?);
    let mut cmd = Command::new(examples.join("bench_proxy"));
    cmd.args([WORKERS.to_string(), lb_http.to_string(), lb_tcp.to_string()])
        .args(backend_ports.iter().map(u16::to_string));
    println!(
        "--- lb-proxy ---\nlb-proxy/examples/bench_proxy.rs: {WORKERS} workers, default options (pool of idle backend connections, smooth weighted round robin), X-Forwarded-* off, no access log\n--- end of lb-proxy ---"
    );
    procs.spawn("lb-proxy", cmd)?;
    peers.push(("lb-proxy", lb_http, lb_tcp));

    let (ng_http, ng_tcp) = (free_port()?, free_port()?);
    let conf = dir.write(
        "nginx.conf",
        &nginx_conf(&dir.0, ng_http, ng_tcp, &backend_ports),
    )?;
    print_config("nginx.conf", &conf)?;
    let mut cmd = Command::new("nginx");
    cmd.arg("-c")
        .arg(&conf)
        .arg("-p")
        .arg(&dir.0)
        .args(["-e", "stderr"]);
    procs.spawn("nginx", cmd)?;
    peers.push(("nginx", ng_http, ng_tcp));

    let (ha_http, ha_tcp) = (free_port()?, free_port()?);
    let conf = dir.write(
        "haproxy.cfg",
        &haproxy_conf(ha_http, ha_tcp, &backend_ports),
    )?;
    print_config("haproxy.cfg", &conf)?;
    let mut cmd = Command::new("haproxy");
    cmd.arg("-db").arg("-f").arg(&conf);
    procs.spawn("haproxy", cmd)?;
    peers.push(("haproxy", ha_http, ha_tcp));

    for &(_, h, t) in &peers {
        wait_port(h)?;
        wait_port(t)?;
    }
    procs.check_alive()?;

    println!(
        "lb-proxy vs nginx vs HAProxy: {BACKENDS} backends, {WORKERS} workers each, wrk -t{WORKERS} -c{CONNECTIONS} -d{DURATION}, loopback, {} CPUs shared by all",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "{:<10} {:<22} {:>12} {:>10} {:>10} {:>10} {:>8} {:>10}",
        "peer", "test", "requests/s", "p50", "p99", "p99.9", "errors", "CPU/req"
    );
    // wrk's --latency stops at the 99th percentile; its Lua hook reports the 99.9th.
    let tail_script = dir.write(
        "p999.lua",
        "done = function(summary, latency, requests)\n  io.write(string.format(\"99.9%% %.2fus\\n\", latency:percentile(99.9)))\nend\n",
    )?;
    let rounds = rounds();
    let mut results = Vec::new();
    for round in 1..=rounds {
        if rounds > 1 {
            println!("round {round}/{rounds}");
        }
        for (test, path, tcp) in TESTS {
            // A direct run gives the backends' own ceiling in the same conditions.
            let direct = wrk(backend_ports[0], path, &tail_script)?;
            print_row("direct", &format!("{test} (1 backend)"), &direct);
            for &(name, h, t) in &peers {
                let pid = procs.pid(name);
                let before = pid.map(super::cpu::tree_seconds);
                let mut r = wrk(if tcp { t } else { h }, path, &tail_script)?;
                if let (Some(pid), Some(before)) = (pid, before) {
                    let used = super::cpu::tree_seconds(pid) - before;
                    r.cpu_us_per_request = Some(used * 1e6 / r.requests.max(1) as f64);
                }
                print_row(name, test, &r);
                results.push((name, test, r));
            }
            procs.check_alive()?;
        }
    }
    println!();
    if rounds > 1 {
        println!("medians of {rounds} rounds:");
    }
    for (test, _, _) in TESTS {
        let median = |peer: &str| {
            let runs: Vec<&WrkResult> = results
                .iter()
                .filter(|(n, t, _)| *n == peer && *t == test)
                .map(|(_, _, r)| r)
                .collect();
            (!runs.is_empty()).then(|| {
                (
                    median(runs.iter().map(|r| r.rps)),
                    median(runs.iter().map(|r| r.p99_ms)),
                    median(runs.iter().filter_map(|r| r.cpu_us_per_request)),
                )
            })
        };
        if let (Some((lb_rps, lb_p99, lb_cpu)), Some((ng_rps, ng_p99, ng_cpu))) =
            (median("lb-proxy"), median("nginx"))
        {
            println!(
                "{test:<16} lb-proxy/nginx CPU per request: {:.2}x (target <= 1, <= 0.8 keep-alive and TCP)   requests/s: {:.2}x (target >= 1)   p99 lb-proxy {} vs nginx {} (target: no worse)",
                lb_cpu / ng_cpu.max(f64::MIN_POSITIVE),
                lb_rps / ng_rps.max(1.0),
                fmt_ms(lb_p99),
                fmt_ms(ng_p99)
            );
        }
    }
    Ok(())
}

struct WrkResult {
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
    p999_ms: Option<f64>,
    errors: u64,
    /// Requests wrk completed in the run.
    requests: u64,
    /// CPU time (user + system) of the proxy's processes per request, in microseconds.
    cpu_us_per_request: Option<f64>,
}

fn print_row(peer: &str, test: &str, r: &WrkResult) {
    let cpu = r
        .cpu_us_per_request
        .map_or("-".to_string(), |us| format!("{us:.1}us"));
    let p999 = r.p999_ms.map_or("-".to_string(), fmt_ms);
    println!(
        "{peer:<10} {test:<22} {:>12.0} {:>10} {:>10} {p999:>10} {:>8} {cpu:>10}",
        r.rps,
        fmt_ms(r.p50_ms),
        fmt_ms(r.p99_ms),
        r.errors
    );
}

fn fmt_ms(ms: f64) -> String {
    if ms < 1.0 {
        format!("{:.0}us", ms * 1000.0)
    } else {
        format!("{ms:.2}ms")
    }
}

fn wrk(port: u16, path: &str, script: &Path) -> Result<WrkResult> {
    let out = Command::new("wrk")
        .arg("-s")
        .arg(script)
        .args([
            format!("-t{WORKERS}"),
            format!("-c{CONNECTIONS}"),
            format!("-d{DURATION}"),
            "--timeout".into(),
            "5s".into(),
            "--latency".into(),
            format!("http://127.0.0.1:{port}{path}"),
        ])
        .output()
        .context("running wrk")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!("wrk failed: {text}{}", String::from_utf8_lossy(&out.stderr));
    }
    parse_wrk(&text).with_context(|| format!("unexpected wrk output:\n{text}"))
}

fn parse_wrk(text: &str) -> Option<WrkResult> {
    let mut rps = None;
    let (mut p50, mut p99, mut p999) = (None, None, None);
    let mut errors = 0u64;
    let mut requests = 0u64;
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["Requests/sec:", v] => rps = v.parse().ok(),
            [n, "requests", "in", ..] => requests = n.parse().unwrap_or(0),
            ["50%", v] => p50 = parse_duration_ms(v),
            ["99%", v] => p99 = parse_duration_ms(v),
            ["99.9%", v] => p999 = parse_duration_ms(v),
            // "Non-2xx or 3xx responses: N" and "Socket errors: connect A, read B, write C, timeout D"
            ["Non-2xx", "or", "3xx", "responses:", n] => errors += n.parse::<u64>().unwrap_or(0),
            ["Socket", "errors:", rest @ ..] => {
                errors += rest
                    .iter()
                    .filter_map(|w| w.trim_end_matches(',').parse::<u64>().ok())
                    .sum::<u64>()
            }
            _ => {}
        }
    }
    Some(WrkResult {
        rps: rps?,
        p50_ms: p50?,
        p99_ms: p99?,
        p999_ms: p999,
        errors,
        requests,
        cpu_us_per_request: None,
    })
}

/// wrk prints latencies like `812.00us`, `1.23ms`, `2.01s`.
fn parse_duration_ms(v: &str) -> Option<f64> {
    let split = v.find(|c: char| c.is_ascii_alphabetic())?;
    let (num, unit) = v.split_at(split);
    let n: f64 = num.parse().ok()?;
    Some(match unit {
        "us" => n / 1000.0,
        "ms" => n,
        "s" => n * 1000.0,
        "m" => n * 60_000.0,
        _ => return None,
    })
}

/// The peers' configurations go into the report: a figure is only as fair as its config.
fn print_config(name: &str, path: &Path) -> Result<()> {
    let text = fs::read_to_string(path).with_context(|| format!("reading {name}"))?;
    println!("--- {name} ---\n{}--- end of {name} ---", text);
    Ok(())
}

fn nginx_conf(dir: &Path, http: u16, tcp: u16, backends: &[u16]) -> String {
    let servers: String = backends
        .iter()
        .map(|p| format!("        server 127.0.0.1:{p};\n"))
        .collect();
    format!(
        "load_module /usr/lib/nginx/modules/ngx_stream_module.so;
daemon off;
master_process on;
worker_processes {WORKERS};
pid {dir}/nginx.pid;
error_log stderr error;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    keepalive_requests 100000;
    # Buffers sized for the largest payload (300 KiB), as an operator would: with the
    # default 4 KiB ones nginx spills to disk-backed temp buffers and loses the race.
    proxy_buffer_size 16k;
    proxy_buffers 32 16k;
    proxy_busy_buffers_size 64k;
    upstream backends {{
{servers}        keepalive 128;
    }}
    server {{
        listen 127.0.0.1:{http};
        location / {{
            proxy_pass http://backends;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
        }}
    }}
}}
stream {{
    upstream tcp_backends {{
{servers}    }}
    server {{
        listen 127.0.0.1:{tcp};
        proxy_pass tcp_backends;
    }}
}}
",
        dir = dir.display()
    )
}

fn haproxy_conf(http: u16, tcp: u16, backends: &[u16]) -> String {
    let servers: String = backends
        .iter()
        .enumerate()
        .map(|(i, p)| format!("    server b{i} 127.0.0.1:{p}\n"))
        .collect();
    format!(
        "global
    nbthread {WORKERS}
    maxconn 4000
    # Buffers sized for the payload (the 16 KiB default halves 300 KiB throughput).
    tune.bufsize 65536
defaults
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend http_in
    mode http
    bind 127.0.0.1:{http}
    default_backend http_out
backend http_out
    mode http
    balance roundrobin
    http-reuse always
{servers}frontend tcp_in
    mode tcp
    bind 127.0.0.1:{tcp}
    default_backend tcp_out
backend tcp_out
    mode tcp
    balance roundrobin
{servers}"
    )
}

fn install_missing() -> Result<()> {
    let missing: Vec<&str> = PACKAGES
        .iter()
        .filter(|(probe, _)| {
            if probe.starts_with('/') {
                !Path::new(probe).exists()
            } else {
                Command::new("sh")
                    .args([
                        "-c",
                        &format!("command -v {probe} || test -x /usr/sbin/{probe}"),
                    ])
                    .stdout(Stdio::null())
                    .status()
                    .map_or(true, |s| !s.success())
            }
        })
        .map(|(_, pkg)| *pkg)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    println!("installing {}", missing.join(" "));
    let status = Command::new("apt-get")
        .args(["install", "-y"])
        .args(&missing)
        .status()
        .context("apt-get")?;
    if !status.success() {
        bail!(
            "apt-get install -y {} failed (run as root, or install them first)",
            missing.join(" ")
        );
    }
    Ok(())
}

/// Builds the bench backend and lb-proxy front end in release mode; returns their directory.
fn build_examples() -> Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(&cargo)
        .args([
            "build",
            "--release",
            "-p",
            "lb-proxy",
            "--example",
            "bench_backend",
            "--example",
            "bench_proxy",
        ])
        .status()
        .context("cargo build")?;
    if !status.success() {
        bail!("building the lb-proxy bench examples failed");
    }
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(t) => PathBuf::from(t),
        None => {
            let root = Path::new(env!("CARGO_MANIFEST_DIR"))
                .parent()
                .context("workspace root")?;
            root.join("target")
        }
    };
    Ok(target.join("release").join("examples"))
}

/// A free loopback port (bound and released; the tiny race is acceptable for a benchmark).
fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn wait_port(port: u16) -> Result<()> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("nothing listens on 127.0.0.1:{port} after 10 s")
}

/// The processes this run started; each is killed by its own pid and reaped on drop.
#[derive(Default)]
struct Procs(Vec<(&'static str, Child)>);

impl Procs {
    fn spawn(&mut self, name: &'static str, mut cmd: Command) -> Result<()> {
        let child = cmd
            .stdout(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        self.0.push((name, child));
        Ok(())
    }

    /// The pid of the process started as `name`.
    fn pid(&self, name: &str) -> Option<u32> {
        self.0.iter().find(|(n, _)| *n == name).map(|(_, c)| c.id())
    }

    fn check_alive(&mut self) -> Result<()> {
        for (name, child) in &mut self.0 {
            if let Some(status) = child.try_wait()? {
                bail!("{name} exited early: {status}");
            }
        }
        Ok(())
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        for (_, child) in self.0.iter_mut().rev() {
            // SIGTERM first, so nginx's master also stops its workers; then make sure.
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(3);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A temporary directory for configs and pid files, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<TempDir> {
        let dir = std::env::temp_dir().join(format!("lb-bench-proxy-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir)?;
        Ok(TempDir(dir))
    }

    fn write(&self, name: &str, text: &str) -> Result<PathBuf> {
        let path = self.0.join(name);
        fs::write(&path, text)?;
        Ok(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median([3.0, 1.0, 2.0].into_iter()), 2.0);
        assert_eq!(median([4.0, 1.0, 2.0, 3.0].into_iter()), 2.5);
        assert_eq!(median(std::iter::empty()), 0.0);
    }

    #[test]
    fn parses_wrk_output() {
        let text = "Running 4s test @ http://127.0.0.1:1/1k
  2 threads and 50 connections
  Latency Distribution
     50%  812.00us
     75%    1.10ms
     90%    1.50ms
     99%    3.20ms
99.9% 5120.00us
  80000 requests in 4.00s, 90.00MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 5
Requests/sec:  20000.50
Transfer/sec:     22.50MB
";
        let r = parse_wrk(text).unwrap();
        assert_eq!(r.rps, 20000.5);
        assert!((r.p50_ms - 0.812).abs() < 1e-9);
        assert_eq!(r.p99_ms, 3.2);
        assert_eq!(r.p999_ms, Some(5.12));
        assert_eq!(r.errors, 8);
        assert_eq!(r.requests, 80000);
    }
}
