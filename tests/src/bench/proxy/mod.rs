//! `cargo xtask bench proxy`: wrk against lb-proxy, nginx and HAProxy in one run, over the same
//! local backends and with equal worker counts. Prints requests/s and p50/p99 latency for 1 KiB
//! and 300 KiB responses and for TCP mode; asserts nothing. `LB_BENCH_ROUNDS=N` repeats every
//! test N times (peers interleaved) and compares medians. Everything listens on 127.0.0.1,
//! and every process started here is stopped by its pid when the run ends (also on error).
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::stats::median;
pub use configs::nginx_main;
use configs::{haproxy_conf, nginx_conf};
pub use wrk::parse_wrk;
use wrk::{WrkResult, fmt_ms, print_row, wrk};

pub mod backend;
mod configs;
pub mod frontend;
mod wrk;

/// Worker threads/processes for each proxy (and wrk's threads).
const WORKERS: usize = 2;
const BACKENDS: usize = 4;
const CONNECTIONS: usize = 50;
const DURATION: &str = "4s";
/// One workload: wrk fetching `path` from the peer's HTTP port, or its TCP-mode port.
#[derive(Clone, Copy)]
struct Test {
    name: &'static str,
    path: &'static str,
    tcp: bool,
    /// A new connection for every request (`Connection: close`): the connection setup and
    /// teardown of the proxy, as the small balancers lb-ctl replaces were measured (with ab,
    /// which alone would saturate a core here; wrk spreads the same load over its threads).
    new_connection: bool,
}

const TESTS: [Test; 4] = [
    Test { name: "HTTP 1 KiB", path: "/1k", tcp: false, new_connection: false },
    Test { name: "HTTP 1 KiB, new conn", path: "/1k", tcp: false, new_connection: true },
    Test { name: "HTTP 300 KiB", path: "/300k", tcp: false, new_connection: false },
    Test { name: "TCP mode, 1 KiB", path: "/1k", tcp: true, new_connection: false },
];

/// Rounds of all tests (env `LB_BENCH_ROUNDS`, default 1); with more than one, the summary
/// compares medians, which a shared machine's noise moves less.
fn rounds() -> usize {
    std::env::var("LB_BENCH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(1usize).max(1)
}

/// One wrk run of a peer, for the report.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ProxyRun {
    pub peer: String,
    pub test: String,
    pub requests_per_sec: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: Option<f64>,
    pub errors: u64,
    /// CPU time of the proxy's processes per request, in microseconds (not for `direct`).
    pub cpu_us_per_request: Option<f64>,
}

pub fn run() -> Result<Vec<ProxyRun>> {
    // The backends and the lb-proxy front end are this same program (`lb-bench proxy-backend`,
    // `lb-bench proxy-frontend`).
    let me = std::env::current_exe().context("own path")?;
    let dir = tempfile::Builder::new().prefix("lb-bench-proxy-").tempdir()?;
    // Each peer's configuration is printed as it is written: figures come with their setup.
    let write = |name: &str, text: &str| -> Result<std::path::PathBuf> {
        let path = dir.path().join(name);
        std::fs::write(&path, text)?;
        println!("--- {name} ---\n{}", text.trim_end());
        Ok(path)
    };
    let mut procs = Procs::default();

    let backend_ports: Vec<u16> = (0..BACKENDS).map(|_| free_port()).collect::<Result<_>>()?;
    let mut cmd = Command::new(&me);
    cmd.arg("proxy-backend").arg(WORKERS.to_string()).args(backend_ports.iter().map(u16::to_string));
    procs.spawn("backends", cmd)?;
    for &p in &backend_ports {
        wait_port(p)?;
    }

    let mut peers: Vec<(&str, u16, u16)> = Vec::new();
    let (lb_http, lb_tcp) = (free_port()?, free_port()?);
    let mut cmd = Command::new(&me);
    cmd.arg("proxy-frontend")
        .args([WORKERS.to_string(), lb_http.to_string(), lb_tcp.to_string()])
        .args(backend_ports.iter().map(u16::to_string));
    println!(
        "--- lb-proxy ---\nlb-bench proxy-frontend: {WORKERS} workers, default options (pool of idle backend connections, smooth weighted round robin), X-Forwarded-* off, no access log"
    );
    procs.spawn("lb-proxy", cmd)?;
    peers.push(("lb-proxy", lb_http, lb_tcp));

    let (ng_http, ng_tcp) = (free_port()?, free_port()?);
    let conf = write("nginx.conf", &nginx_conf(dir.path(), ng_http, ng_tcp, &backend_ports))?;
    let mut cmd = Command::new("nginx");
    cmd.arg("-c").arg(&conf).arg("-p").arg(dir.path()).args(["-e", "stderr"]);
    procs.spawn("nginx", cmd)?;
    peers.push(("nginx", ng_http, ng_tcp));

    let (ha_http, ha_tcp) = (free_port()?, free_port()?);
    let conf = write("haproxy.cfg", &haproxy_conf(ha_http, ha_tcp, &backend_ports))?;
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
    let p999 = dir.path().join("p999.lua");
    std::fs::write(&p999, wrk::P999_SCRIPT)?;
    let rounds = rounds();
    let mut results = Vec::new();
    for round in 1..=rounds {
        if rounds > 1 {
            println!("round {round}/{rounds}");
        }
        for Test { name: test, path, tcp, new_connection } in TESTS {
            // A direct run gives the backends' own ceiling in the same conditions.
            let direct = wrk(backend_ports[0], path, &p999, new_connection)?;
            print_row("direct", &format!("{test} (1 backend)"), &direct);
            for &(name, h, t) in &peers {
                let pid = procs.pid(name);
                let before = pid.map(super::cpu::tree_seconds);
                let mut r = wrk(if tcp { t } else { h }, path, &p999, new_connection)?;
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
    for Test { name: test, .. } in TESTS {
        let median = |peer: &str| {
            let runs: Vec<&WrkResult> =
                results.iter().filter(|(n, t, _)| *n == peer && *t == test).map(|(_, _, r)| r).collect();
            (!runs.is_empty()).then(|| {
                (
                    median(runs.iter().map(|r| r.rps)),
                    median(runs.iter().map(|r| r.p99_ms)),
                    median(runs.iter().filter_map(|r| r.cpu_us_per_request)),
                )
            })
        };
        if let (Some((lb_rps, lb_p99, lb_cpu)), Some((ng_rps, ng_p99, ng_cpu))) = (median("lb-proxy"), median("nginx"))
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
    Ok(results
        .into_iter()
        .map(|(peer, test, r)| ProxyRun {
            peer: peer.to_string(),
            test: test.to_string(),
            requests_per_sec: r.rps,
            p50_ms: r.p50_ms,
            p99_ms: r.p99_ms,
            p999_ms: r.p999_ms,
            errors: r.errors,
            cpu_us_per_request: r.cpu_us_per_request,
        })
        .collect())
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
        let child = cmd.stdout(Stdio::null()).spawn().with_context(|| format!("starting {name}"))?;
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
            let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
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
