//! `cargo xtask bench proxy`: lb-proxy, nginx and HAProxy in one run, over the same local
//! backends and with equal worker counts. Per workload (keep-alive, new connection per request,
//! 300 KiB, h2 multiplexed, TLS keep-alive and new connection, TCP mode, TCP bulk) it prints
//! requests/s (MiB/s for bulk), p50/p99/p99.9 latency, errors and the proxy's CPU time per
//! request (per MiB for bulk); asserts nothing. `LB_BENCH_ROUNDS=N` repeats every workload N
//! times (peers interleaved) and compares medians; `LB_BENCH_TESTS=a,b` runs only the
//! workloads whose names contain one of those words (case-insensitive); a workload's whole
//! name runs it and those named after it (`"HTTP 1 KiB, new conn"`: that one alone). `--instructions`
//! counts user-space instructions per request instead (see [`instructions`]). Everything listens on
//! 127.0.0.1, and every process started here is stopped by its pid when the run ends (also on error).
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::stats::median;
pub use configs::nginx_main;
use configs::{Cert, haproxy_conf, nginx_conf};
pub use wrk::parse_wrk;
use wrk::{Measured, fmt_ms, print_row, wrk};

pub mod backend;
mod configs;
pub mod frontend;
pub mod instructions;
mod loads;
mod syscalls;
mod wrk;

/// Worker threads/processes for each proxy (and the generators' threads).
const WORKERS: usize = 2;
const BACKENDS: usize = 4;
const CONNECTIONS: usize = 50;
const DURATION_SECS: u32 = 4;

/// Where one peer listens, by what it serves.
#[derive(Clone, Copy)]
pub struct Ports {
    /// HTTP/1.1 (and, for lb-proxy, h2c: it reads the client's preface).
    http: u16,
    /// TCP mode over the HTTP backends.
    tcp: u16,
    /// HTTPS: TLS terminated, HTTP/1.1 to the backends.
    tls: u16,
    /// h2c with prior knowledge (nginx needs a listener of its own for it).
    h2c: u16,
    /// TCP mode to the one bulk (iperf3) server.
    bulk: u16,
}

/// What a workload's generator is.
#[derive(Clone, Copy, PartialEq)]
enum Load {
    /// wrk on a port (`tls`: over HTTPS), `close`: a new connection for every request.
    Wrk { tcp: bool, tls: bool, close: bool },
    /// h2load over h2c, streams multiplexed.
    H2,
    /// iperf3 through the bulk port.
    Bulk,
}

#[derive(Clone, Copy)]
struct Test {
    name: &'static str,
    path: &'static str,
    load: Load,
}

/// A new connection for every request (`Connection: close`) measures the connection setup
/// and teardown of the proxy, as the small balancers lb-ctl replaces were measured (with ab,
/// which alone would saturate a core here; wrk spreads the same load over its threads).
const TESTS: [Test; 8] = [
    Test { name: "HTTP 1 KiB", path: "/1k", load: Load::Wrk { tcp: false, tls: false, close: false } },
    Test { name: "HTTP 1 KiB, new conn", path: "/1k", load: Load::Wrk { tcp: false, tls: false, close: true } },
    Test { name: "HTTP 300 KiB", path: "/300k", load: Load::Wrk { tcp: false, tls: false, close: false } },
    Test { name: "h2 1 KiB, 10x10 streams", path: "/1k", load: Load::H2 },
    Test { name: "TLS 1 KiB", path: "/1k", load: Load::Wrk { tcp: false, tls: true, close: false } },
    Test { name: "TLS 1 KiB, new conn", path: "/1k", load: Load::Wrk { tcp: false, tls: true, close: true } },
    Test { name: "TCP mode, 1 KiB", path: "/1k", load: Load::Wrk { tcp: true, tls: false, close: false } },
    Test { name: "TCP bulk (iperf3)", path: "", load: Load::Bulk },
];

/// Rounds of all tests (env `LB_BENCH_ROUNDS`, default 1); with more than one, the summary
/// compares medians, which a shared machine's noise moves less.
fn rounds() -> usize {
    std::env::var("LB_BENCH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(1usize).max(1)
}

/// Whether a workload is selected by `LB_BENCH_TESTS` (all workloads when unset), to profile
/// or tune one workload without the whole run.
fn selected(test: &str) -> bool {
    std::env::var("LB_BENCH_TESTS").map_or(true, |wanted| selects(&wanted, test))
}

/// Whether `wanted` selects workload `test`, in any case: a workload's whole name selects it
/// and the workloads named after it ("HTTP 1 KiB" also selects "HTTP 1 KiB, new conn", and
/// "HTTP 1 KiB, new conn" only that one, though it holds a comma); otherwise comma-separated
/// parts of names.
fn selects(wanted: &str, test: &str) -> bool {
    let wanted = wanted.trim().to_lowercase();
    if TESTS.iter().any(|t| t.name.to_lowercase() == wanted) {
        return test.to_lowercase().starts_with(&wanted);
    }
    let test = test.to_lowercase();
    wanted.split(',').map(str::trim).any(|w| !w.is_empty() && test.contains(w))
}

/// Whether a peer is selected by `LB_BENCH_PEERS` (comma-separated names; all peers when
/// unset), to count or profile one peer without waiting for the others.
fn peer_selected(peer: &str) -> bool {
    let Ok(wanted) = std::env::var("LB_BENCH_PEERS") else { return true };
    wanted.split(',').any(|w| w.trim().eq_ignore_ascii_case(peer))
}

/// One run of a peer, for the report.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ProxyRun {
    pub peer: String,
    pub test: String,
    /// Requests a second, or MiB a second when `unit` is "MiB" (bulk).
    pub requests_per_sec: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: Option<f64>,
    pub errors: u64,
    /// CPU time of the proxy's processes per request (per MiB for bulk), in microseconds
    /// (not for `direct`).
    pub cpu_us_per_request: Option<f64>,
    /// The user-space share of `cpu_us_per_request`.
    pub user_us_per_request: Option<f64>,
    pub unit: String,
}

/// A self-signed ECDSA P-256 certificate for 127.0.0.1 (openssl), served by every peer.
fn make_cert(dir: &Path) -> Result<()> {
    let status = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"])
        .args(["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"])
        .arg("-keyout")
        .arg(dir.join("key.pem"))
        .arg("-out")
        .arg(dir.join("chain.pem"))
        .stderr(Stdio::null())
        .status()
        .context("running openssl")?;
    anyhow::ensure!(status.success(), "openssl could not make the benchmark's certificate");
    let combined = std::fs::read_to_string(dir.join("chain.pem"))? + &std::fs::read_to_string(dir.join("key.pem"))?;
    std::fs::write(dir.join("combined.pem"), combined)?;
    Ok(())
}

/// Prints the protocol and suite each peer's TLS port negotiates with OpenSSL's client (the
/// one wrk uses): peers that differ there do different work per handshake and per byte.
fn print_tls_sessions(peers: &[(&str, Ports)]) -> Result<()> {
    let mut seen = Vec::new();
    for (name, p) in peers {
        let out = Command::new("openssl")
            .args(["s_client", "-connect", &format!("127.0.0.1:{}", p.tls)])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .context("running openssl s_client")?;
        let text = String::from_utf8_lossy(&out.stdout);
        // "New, TLSv1.3, Cipher is TLS_AES_128_GCM_SHA256"
        let session = text.lines().find(|l| l.starts_with("New, ")).unwrap_or("no TLS session").to_string();
        println!("TLS {name}: {session}");
        seen.push(session);
    }
    if seen.windows(2).any(|w| w[0] != w[1]) {
        println!("WARNING: the peers negotiate different TLS sessions: the TLS rows compare unlike work");
    }
    Ok(())
}

/// What every peer runs against, started: the backends and the bulk server; and each peer's
/// command with its ports (configurations written beside the certificate and printed).
struct Rig {
    /// The backends and the bulk server (stopped before `dir` is removed).
    procs: Procs,
    peers: Vec<(&'static str, Ports, Command)>,
    backend_ports: Vec<u16>,
    bulk_server: u16,
    dir: tempfile::TempDir,
}

impl Rig {
    fn start() -> Result<Rig> {
        // The backends and the lb-proxy front end are this same program (`lb-bench
        // proxy-backend`, `lb-bench proxy-frontend`).
        let me = std::env::current_exe().context("own path")?;
        let dir = tempfile::Builder::new().prefix("lb-bench-proxy-").tempdir()?;
        // Each peer's configuration is printed as it is written: figures come with their setup.
        let write = |name: &str, text: &str| -> Result<std::path::PathBuf> {
            let path = dir.path().join(name);
            std::fs::write(&path, text)?;
            println!("--- {name} ---\n{}", text.trim_end());
            Ok(path)
        };
        make_cert(dir.path())?;
        let (chain, key, combined) =
            (dir.path().join("chain.pem"), dir.path().join("key.pem"), dir.path().join("combined.pem"));
        let cert = Cert { chain: &chain, key: &key, combined: &combined };
        // The peers' own messages go to files beside their configurations, shown if one stops.
        let mut procs = Procs { logs: dir.path().to_path_buf(), running: Vec::new() };

        let backend_ports: Vec<u16> = (0..BACKENDS).map(|_| free_port()).collect::<Result<_>>()?;
        let mut cmd = Command::new(&me);
        cmd.arg("proxy-backend").arg(WORKERS.to_string()).args(backend_ports.iter().map(u16::to_string));
        procs.spawn("backends", cmd)?;
        let bulk_server = free_port()?;
        let mut cmd = Command::new("iperf3");
        cmd.args(["-s", "-B", "127.0.0.1", "-p", &bulk_server.to_string()]);
        procs.spawn("iperf3", cmd)?;
        for &p in backend_ports.iter().chain([&bulk_server]) {
            wait_port(p, PEER_START)?;
        }
        let ports = || -> Result<Ports> {
            Ok(Ports {
                http: free_port()?,
                tcp: free_port()?,
                tls: free_port()?,
                h2c: free_port()?,
                bulk: free_port()?,
            })
        };

        let mut peers = Vec::new();
        let mut lb = ports()?;
        lb.h2c = lb.http;
        let mut cmd = Command::new(&me);
        cmd.arg("proxy-frontend")
            .args(
                [WORKERS, lb.http.into(), lb.tcp.into(), lb.tls.into(), lb.bulk.into(), bulk_server.into()]
                    .map(|n: usize| n.to_string()),
            )
            .args([&chain, &key])
            .args(backend_ports.iter().map(u16::to_string));
        println!(
            "--- lb-proxy ---\nlb-bench proxy-frontend: {WORKERS} workers, default options (pool of idle backend connections, smooth weighted round robin, rustls with its default session cache), X-Forwarded-* off, no access log; h2c on the HTTP port"
        );
        peers.push(("lb-proxy", lb, cmd));

        let ng = ports()?;
        let conf = write("nginx.conf", &nginx_conf(dir.path(), &ng, &cert, &backend_ports, bulk_server))?;
        let mut cmd = Command::new("nginx");
        cmd.arg("-c").arg(&conf).arg("-p").arg(dir.path()).args(["-e", "stderr"]);
        peers.push(("nginx", ng, cmd));

        let ha = ports()?;
        let conf = write("haproxy.cfg", &haproxy_conf(&ha, &cert, &backend_ports, bulk_server))?;
        let mut cmd = Command::new("haproxy");
        cmd.arg("-db").arg("-f").arg(&conf);
        peers.push(("haproxy", ha, cmd));
        Ok(Rig { procs, peers, backend_ports, bulk_server, dir })
    }
}

/// How long a peer may take to listen on all its ports.
const PEER_START: Duration = Duration::from_secs(10);

/// Waits until `ports` all accept a connection.
fn wait_ports(p: &Ports, timeout: Duration) -> Result<()> {
    for port in [p.http, p.tcp, p.tls, p.h2c, p.bulk] {
        wait_port(port, timeout)?;
    }
    Ok(())
}

pub fn run() -> Result<Vec<ProxyRun>> {
    run_counting(false)
}

/// [`run`], and with `count_syscalls` the system calls each peer made per request on each
/// workload, printed under its row (`syscalls`).
pub fn run_counting(count_syscalls: bool) -> Result<Vec<ProxyRun>> {
    // Not destructured: the rig's processes stop before its directory goes.
    let mut rig = Rig::start()?;
    let mut peers = Vec::new();
    for (name, p, cmd) in std::mem::take(&mut rig.peers).into_iter().filter(|(n, ..)| peer_selected(n)) {
        rig.procs.spawn(name, cmd)?;
        peers.push((name, p));
    }
    let (procs, backend_ports, bulk_server, dir) = (&mut rig.procs, &rig.backend_ports, rig.bulk_server, &rig.dir);
    for (_, p) in &peers {
        wait_ports(p, PEER_START)?;
    }
    procs.check_alive()?;
    print_tls_sessions(&peers)?;

    println!(
        "lb-proxy vs nginx vs HAProxy: {BACKENDS} backends, {WORKERS} workers each, wrk -t{WORKERS} -c{CONNECTIONS} -d{DURATION_SECS}s, h2load -t{WORKERS} -c10 -m10, iperf3 -P{WORKERS}; loopback, {} CPUs shared by all",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "{:<10} {:<36} {:>12} {:>10} {:>10} {:>10} {:>8} {:>20}",
        "peer", "test", "requests/s", "p50", "p99", "p99.9", "errors", "CPU/req (user)"
    );
    let p999 = dir.path().join("p999.lua");
    std::fs::write(&p999, wrk::P999_SCRIPT)?;
    let h2_log = dir.path().join("h2load.log");
    let measure = |load: Load, path: &str, port: Option<&Ports>| -> Result<Measured> {
        // No peer: the backends (or the bulk server) directly, the floor of the same run.
        match (load, port) {
            (Load::Wrk { tls: true, close, .. }, Some(p)) => wrk(p.tls, path, &p999, close, true),
            (Load::Wrk { tcp: true, close, .. }, Some(p)) => wrk(p.tcp, path, &p999, close, false),
            (Load::Wrk { close, .. }, Some(p)) => wrk(p.http, path, &p999, close, false),
            (Load::Wrk { close, .. }, None) => wrk(backend_ports[0], path, &p999, close, false),
            (Load::H2, Some(p)) => loads::h2load(p.h2c, path, &h2_log),
            (Load::H2, None) => bail!("the backends speak HTTP/1.1 only: h2 has no direct row"),
            (Load::Bulk, Some(p)) => loads::iperf3(p.bulk),
            (Load::Bulk, None) => loads::iperf3(bulk_server),
        }
    };
    let rounds = rounds();
    let mut results = Vec::new();
    for round in 1..=rounds {
        if rounds > 1 {
            println!("round {round}/{rounds}");
        }
        for Test { name: test, path, load } in TESTS.into_iter().filter(|t| selected(t.name)) {
            // A direct run gives the backends' own ceiling in the same conditions (the
            // backends speak HTTP/1.1 in the clear only: no direct row for h2 and TLS).
            if matches!(load, Load::Bulk | Load::Wrk { tls: false, .. }) {
                print_row("direct", &format!("{test} (1 backend)"), &measure(load, path, None)?);
            }
            for (name, p) in &peers {
                let pid = procs.pid(name);
                let counter = match pid {
                    Some(pid) if count_syscalls => Some(syscalls::Counter::start(pid, dir.path())?),
                    _ => None,
                };
                let before = pid.map(super::cpu::tree_seconds);
                let mut r = measure(load, path, Some(p))?;
                if let (Some(pid), Some(before)) = (pid, before) {
                    let used = super::cpu::tree_seconds(pid) - before;
                    r.cpu_us_per_request = Some(used.per(1e6 / r.requests.max(1) as f64));
                }
                print_row(name, test, &r);
                if let Some(counter) = counter {
                    println!("{:<10} {:<36} {}", "", "", counter.stop()?.per_unit(r.requests, r.unit));
                }
                results.push((*name, test, r));
            }
            procs.check_alive()?;
        }
    }
    println!();
    if rounds > 1 {
        println!("medians of {rounds} rounds:");
    }
    for Test { name: test, load, .. } in TESTS {
        let median = |peer: &str| {
            let runs: Vec<&Measured> =
                results.iter().filter(|(n, t, _)| *n == peer && *t == test).map(|(_, _, r)| r).collect();
            (!runs.is_empty()).then(|| {
                (
                    median(runs.iter().map(|r| r.rps)),
                    median(runs.iter().map(|r| r.p99_ms)),
                    median(runs.iter().filter_map(|r| r.cpu_us_per_request).map(|t| t.total())),
                    median(runs.iter().filter_map(|r| r.cpu_us_per_request).map(|t| t.user)),
                )
            })
        };
        let Some((lb_rate, lb_p99, lb_cpu, lb_user)) = median("lb-proxy") else { continue };
        for peer in ["nginx", "haproxy"] {
            let Some((rate, p99, cpu, user)) = median(peer) else { continue };
            let latency = if load == Load::Bulk {
                String::new()
            } else {
                format!("   p99 {} vs {}", fmt_ms(lb_p99), fmt_ms(p99))
            };
            println!(
                "{test:<24} lb-proxy/{peer:<8} CPU per {}: {:.2}x (user {:.2}x)   rate: {:.2}x{latency}",
                if load == Load::Bulk { "MiB" } else { "request" },
                lb_cpu / cpu.max(f64::MIN_POSITIVE),
                lb_user / user.max(f64::MIN_POSITIVE),
                lb_rate / rate.max(f64::MIN_POSITIVE),
            );
        }
    }
    println!(
        "targets (issue): CPU per request <= nginx's everywhere, <= 0.8x keep-alive and TCP; p99 <= nginx's; rate >= nginx's"
    );
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
            cpu_us_per_request: r.cpu_us_per_request.map(|t| t.total()),
            user_us_per_request: r.cpu_us_per_request.map(|t| t.user),
            unit: r.unit.to_string(),
        })
        .collect())
}

/// A free loopback port (bound and released; the tiny race is acceptable for a benchmark).
fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn wait_port(port: u16, timeout: Duration) -> Result<()> {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("nothing listens on 127.0.0.1:{port} after {} s", timeout.as_secs())
}

/// The processes this run started; each is killed by its own pid and reaped on drop. Their
/// stderr goes to `logs/NAME.log`.
struct Procs {
    logs: std::path::PathBuf,
    running: Vec<(&'static str, Child)>,
}

impl Procs {
    fn spawn(&mut self, name: &'static str, mut cmd: Command) -> Result<()> {
        let log = std::fs::File::create(self.logs.join(format!("{name}.log")))?;
        let child = cmd.stdout(Stdio::null()).stderr(log).spawn().with_context(|| format!("starting {name}"))?;
        self.running.push((name, child));
        Ok(())
    }

    /// The pid of the process started as `name`.
    fn pid(&self, name: &str) -> Option<u32> {
        self.running.iter().find(|(n, _)| *n == name).map(|(_, c)| c.id())
    }

    fn check_alive(&mut self) -> Result<()> {
        for (name, child) in &mut self.running {
            if let Some(status) = child.try_wait()? {
                let log = std::fs::read_to_string(self.logs.join(format!("{name}.log"))).unwrap_or_default();
                bail!("{name} exited early: {status}\n{log}");
            }
        }
        Ok(())
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        for (_, child) in self.running.iter_mut().rev() {
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

#[cfg(test)]
mod tests {
    use super::selects;

    #[test]
    fn a_whole_name_selects_that_workload_and_parts_select_every_match() {
        assert!(selects("HTTP 1 KiB, new conn", "HTTP 1 KiB, new conn"));
        assert!(!selects("HTTP 1 KiB, new conn", "HTTP 1 KiB"));
        assert!(!selects("http 1 kib, new conn", "TLS 1 KiB, new conn"));
        assert!(selects("HTTP 1 KiB", "HTTP 1 KiB, new conn"));
        assert!(selects("HTTP 1 KiB", "HTTP 1 KiB"));
        assert!(selects("tcp mode, h2", "h2 1 KiB, 10x10 streams"));
        assert!(selects("tcp mode, h2", "TCP mode, 1 KiB"));
        assert!(!selects("tcp mode, h2", "HTTP 300 KiB"));
    }
}
