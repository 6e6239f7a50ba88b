//! How a proxy-only daemon (`lb-ctl proxy`) starts, reloads and stops, as an operator sees it
//! on loopback, without root: every listener closes at once on SIGTERM, and what it prints and
//! logs is about a proxy, not about an XDP balancer it does not have.
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

// The unit tests' port picker: these tests run in parallel too.
#[path = "../src/testing/ports.rs"]
mod ports;
use ports::free_port;

const BIN: &str = env!("CARGO_BIN_EXE_lb-ctl");

/// A TCP backend that reads what it is sent and never answers: a relay to it stays in flight
/// until the client closes. Counts the connections that carried data (health checks carry none).
struct SilentBackend {
    addr: SocketAddr,
    with_data: Arc<AtomicUsize>,
}

impl SilentBackend {
    fn start() -> SilentBackend {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let with_data = Arc::new(AtomicUsize::new(0));
        let counted = with_data.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let counted = counted.clone();
                std::thread::spawn(move || {
                    let mut stream = stream;
                    let mut buf = [0u8; 256];
                    let mut seen = false;
                    while let Ok(n) = stream.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        if !seen {
                            seen = true;
                            counted.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                });
            }
        });
        SilentBackend { addr, with_data }
    }
}

/// `lb-ctl proxy` run by the test, its stderr kept in a file; killed when dropped.
struct Proxy {
    child: Option<Child>,
    socket: PathBuf,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Proxy {
    /// `lb-ctl --socket SOCKET proxy ARGS` (ARGS without the socket), once `ready` connects.
    fn start(dir: tempfile::TempDir, args: &[&str], ready: &[SocketAddr]) -> Proxy {
        Proxy::start_with_env(dir, args, ready, &[])
    }

    /// [`Proxy::start`] with `env` added to the environment it is started with.
    fn start_with_env(dir: tempfile::TempDir, args: &[&str], ready: &[SocketAddr], env: &[(&str, &str)]) -> Proxy {
        let socket = dir.path().join("proxy.sock");
        let log = dir.path().join("proxy.log");
        let child = Command::new(BIN)
            .arg("--socket")
            .arg(&socket)
            .arg("proxy")
            .args(args)
            .envs(env.iter().copied())
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let proxy = Proxy { child: Some(child), socket, log, _dir: dir };
        let deadline = Instant::now() + Duration::from_secs(15);
        for addr in ready {
            while TcpStream::connect_timeout(addr, Duration::from_millis(100)).is_err() {
                assert!(Instant::now() < deadline, "{addr} did not open:\n{}", proxy.log_text());
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        proxy
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `lb-ctl --socket SOCKET ARGS`, asserting success; its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = Command::new(BIN).arg("--socket").arg(&self.socket).args(args).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "lb-ctl {args:?}: {stdout}{}", String::from_utf8_lossy(&out.stderr));
        stdout
    }

    fn sigterm(&self) {
        let pid = self.child.as_ref().expect("running").id();
        // SAFETY: kill(2) on the pid of our own child, not reaped yet.
        unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    }

    /// Waits for the exit after a SIGTERM.
    fn wait_exit(&mut self, within: Duration) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("lb-ctl proxy did not stop within {within:?}:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// lb.toml with TCP proxy VIPs on 127.0.0.1 at `ports`, each with `backend`.
fn tcp_vips(socket: &Path, ports: &[u16], backend: SocketAddr, grace: &str) -> String {
    let mut text = format!("[daemon]\napi_socket = \"{}\"\nshutdown_grace = \"{grace}\"\n", socket.display());
    for (i, port) in ports.iter().enumerate() {
        text.push_str(&format!(
            "\n[[vip]]\nname = \"v{i}\"\naddress = \"127.0.0.1\"\nport = {port}\nprotocol = \"tcp\"\n\
             forwarding = \"proxy\"\nbackends = [ {{ address = \"127.0.0.1\", port = {} }} ]\n",
            backend.port()
        ));
    }
    text
}

/// A stop with several proxy VIPs, each with a relay in flight and a long grace: every
/// listener is closed at once on SIGTERM (not one VIP after another, each waiting out its own
/// grace while the others still accept), and the grace runs once for all of them.
#[test]
fn a_stop_closes_every_proxy_listener_at_once() {
    let backend = SilentBackend::start();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("proxy.sock");
    let ports = [free_port(), free_port(), free_port()];
    let vips: Vec<SocketAddr> = ports.iter().map(|p| SocketAddr::from(([127, 0, 0, 1], *p))).collect();
    let config = dir.path().join("lb.toml");
    std::fs::write(&config, tcp_vips(&socket, &ports, backend.addr, "60s")).unwrap();
    let config = config.to_str().unwrap().to_string();
    let mut proxy = Proxy::start(dir, &["--log-level", "info", "--config", &config], &vips);

    // One relay in flight through every VIP.
    let held: Vec<TcpStream> = vips
        .iter()
        .map(|vip| {
            let mut s = TcpStream::connect(vip).unwrap();
            s.write_all(b"hello").unwrap();
            s
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while backend.with_data.load(Ordering::SeqCst) < vips.len() {
        assert!(Instant::now() < deadline, "the relays did not reach the backend:\n{}", proxy.log_text());
        std::thread::sleep(Duration::from_millis(20));
    }

    proxy.sigterm();
    // Every listener closes long before the 60 s grace is over.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let still: Vec<SocketAddr> = vips
            .iter()
            .copied()
            .filter(|v| TcpStream::connect_timeout(v, Duration::from_millis(200)).is_ok())
            .collect();
        if still.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after SIGTERM these proxy VIPs still accept connections: {still:?}\n{}",
            proxy.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The relays in flight end with their clients; then the daemon is done.
    drop(held);
    let status = proxy.wait_exit(Duration::from_secs(30));
    assert!(status.success(), "{status}:\n{}", proxy.log_text());
}

/// A proxy-only daemon tells the truth about itself: its VIPs' balancing is the proxy's
/// (`round_robin`), not the XDP hash; `stats` has no XDP counters; a change of its backends
/// file is logged as that, not as a SIGHUP from outside; and its stop does not claim that a
/// balancer keeps forwarding.
#[test]
fn a_proxy_only_daemon_reads_as_a_proxy() {
    let backend = SilentBackend::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("backends.txt");
    std::fs::write(&file, format!("{}\n", backend.addr)).unwrap();
    let vip = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let (listen, file_arg) = (vip.to_string(), file.to_str().unwrap().to_string());
    let mut proxy =
        Proxy::start(dir, &["--log-level", "info", "--listen", &listen, "--backends-file", &file_arg], &[vip]);

    let vips = proxy.ok(&["vips", "list"]);
    println!("{vips}");
    assert!(vips.contains("round_robin"), "the proxy VIP balances round-robin:\n{vips}");
    let json: serde_json::Value = serde_json::from_str(&proxy.ok(&["vips", "list", "--json"])).unwrap();
    assert_eq!(json[0]["hash"], "round_robin", "{json}");

    let stats = proxy.ok(&["stats"]);
    println!("{stats}");
    assert!(!stats.contains("COUNTER"), "a proxy-only daemon has no XDP counters:\n{stats}");

    // The backends file changes: one reload, logged as the file's.
    std::fs::write(&file, format!("{}\n127.0.0.1:9\n", backend.addr)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while !proxy.log_text().contains("reloaded") {
        assert!(Instant::now() < deadline, "the backends file change was not reloaded:\n{}", proxy.log_text());
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = proxy.log_text();
    assert!(log.contains("backends file changed"), "{log}");
    assert!(!log.contains("SIGHUP"), "nobody sent a SIGHUP:\n{log}");

    proxy.sigterm();
    let status = proxy.wait_exit(Duration::from_secs(30));
    let log = proxy.log_text();
    assert!(status.success(), "{status}:\n{log}");
    assert!(log.contains("stopped"), "{log}");
    assert!(!log.contains("keeps forwarding"), "nothing keeps forwarding after a proxy-only daemon stops:\n{log}");
}

/// The daemon runs with glibc's per-thread cache sized for the proxy (it starts itself again
/// with the tunable set, same pid), and keeps an operator's own `tcache_count` and other
/// tunables as they are.
#[test]
fn the_daemon_runs_with_its_malloc_tuning_unless_the_operator_chose_one() {
    let backend = SilentBackend::start();
    let run = |env: &[(&str, &str)]| {
        let vip = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let listen = vip.to_string();
        let backend = backend.addr.to_string();
        let proxy = Proxy::start_with_env(
            tempfile::tempdir().unwrap(),
            &["--listen", &listen, "--backend", &backend],
            &[vip],
            env,
        );
        proxy.ok(&["status"]);
        // Logged from the environment glibc gave the process (/proc/PID/environ shows the
        // original as glibc rewrote it, cut at its first tunable).
        let log = proxy.log_text();
        let line = log.lines().find(|l| l.contains("glibc_tunables=")).unwrap_or_else(|| panic!("{log}")).to_string();
        line.split("glibc_tunables=").nth(1).and_then(|v| v.split_whitespace().next()).unwrap_or_default().to_string()
    };
    assert_eq!(run(&[]), lb_proxy::MALLOC_TUNING);
    let other = "glibc.malloc.arena_max=4";
    assert_eq!(run(&[("GLIBC_TUNABLES", other)]), format!("{other}:{}", lb_proxy::MALLOC_TUNING));
    let own = "glibc.malloc.tcache_count=7";
    assert_eq!(run(&[("GLIBC_TUNABLES", own)]), own, "the operator's choice stays");
}
