//! `cargo xtask demo`: the balancer in a namespace lab, driven by its own CLI.
//!
//! Topology (all in network namespaces named `lbd-<pid>-*`, documentation addresses only):
//! a switch namespace with a bridge; a client with 8 addresses (192.0.2.10-17); the balancer
//! (`eth0`: 192.0.2.1 and 198.51.100.1) running `lb-ctl attach eth0` with the XDP program in
//! native mode; three backends (198.51.100.11-13) running `lb-test-backend` on :8080.
//!
//! The demo sends bounded bursts of HTTP requests to the VIP 203.0.113.10:80, kills a backend
//! and times the health checks taking it out, then adds it back with `lb-ctl backends add`.
//! Everything it creates is torn down at the end, on failure, and on Ctrl-C; leftovers of a
//! run that was killed outright are removed by the next run.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};

use crate::util::{cmd, is_root, step};

const VIP: &str = "203.0.113.10";
const BACKENDS: usize = 3;
const CLIENTS: usize = 8;
/// Requests per burst (each a new connection).
const BURST: usize = 240;
const INTERVAL_MS: u64 = 300;
const TIMEOUT_MS: u64 = 200;
const RISE: u64 = 2;
const FALL: u64 = 3;
/// Prefix of everything a run creates; the pid follows.
const PREFIX: &str = "lbd-";

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

fn client_addr(i: usize) -> String {
    format!("192.0.2.{}", 10 + i)
}

fn backend_addr(i: usize) -> String {
    format!("198.51.100.{}", 11 + i)
}

fn backend(i: usize) -> String {
    format!("{}:8080", backend_addr(i))
}

fn check_interrupt() -> Result<()> {
    if INTERRUPTED.load(Ordering::Relaxed) {
        bail!("interrupted");
    }
    Ok(())
}

pub fn run() -> Result<()> {
    ensure!(is_root(), "the demo creates network namespaces and loads XDP programs: run it as root");
    crate::setup::run()?;
    step("building lb-ctl and the lab programs (lb-test-backend, lb-test-client)");
    cmd("cargo", &["build", "--quiet", "-p", "lb-ctl", "-p", "lb-tests", "--bins"])?;
    let bins = target_dir().join("debug");
    // Ctrl-C reaches the whole process group: the lab's processes stop by themselves, and this
    // process notices at its next step and tears the rest down.
    ctrlc::set_handler(|| {
        INTERRUPTED.store(true, Ordering::Relaxed);
        eprintln!("\ninterrupted: tearing the lab down");
    })
    .context("installing the Ctrl-C handler")?;
    remove_stale(&bins);

    let mut lab = Lab::new(bins);
    let started = Instant::now();
    let result = demo(&mut lab);
    let left = lab.leftovers();
    drop(lab);
    let left: Vec<String> = left.into_iter().filter(|p| Path::new(p).exists()).collect();
    if result.is_ok() {
        println!("\ndemo finished in {:.1} s", started.elapsed().as_secs_f64());
    }
    if left.is_empty() {
        println!("torn down: no namespace, pin or file of this run is left");
    } else {
        eprintln!("warning: left behind: {left:?}");
    }
    if INTERRUPTED.load(Ordering::Relaxed) {
        bail!("interrupted (Ctrl-C)");
    }
    result
}

fn demo(lab: &mut Lab) -> Result<()> {
    step(&format!(
        "building the lab: client ({CLIENTS} addresses), balancer, {BACKENDS} backends, one bridge (namespaces {PREFIX}{}-*)",
        std::process::id()
    ));
    lab.build()?;
    check_interrupt()?;

    step("starting the balancer: lb-ctl attach eth0 (in the balancer's namespace)");
    lab.write_config()?;
    lab.start_daemon()?;
    print_indented(&lab.ctl(&["status"])?);
    let up = lab.wait_health(&(0..BACKENDS).collect::<Vec<_>>(), "up", Duration::from_secs(10))?;
    println!("all {BACKENDS} backends passed {RISE} health checks in a row after {} ms", up.as_millis());

    step(&format!("{BURST} requests from {CLIENTS} client addresses (hash = \"ip\": each client sticks to one backend)"));
    let burst = lab.burst()?;
    burst.print();
    ensure!(burst.errors.is_empty(), "requests failed: {:?}", burst.errors);
    print_indented(&lab.ctl(&["backends", "list"])?);
    println!("why {} goes where it goes:", client_addr(0));
    print_indented(&lab.ctl(&["explain", "web", &client_addr(0)])?);

    let victim = 1;
    step(&format!("killing backend-{victim} ({})", backend(victim)));
    lab.kill_backend(victim)?;
    let down = lab.wait_health(&[victim], "down", Duration::from_secs(10))?;
    println!(
        "health checks took backend-{victim} out of the ring {} ms after it died \
         (a refused connection counts at once; a silent backend takes at most fall {FALL} x {INTERVAL_MS} ms + timeout {TIMEOUT_MS} ms = {} ms)",
        down.as_millis(),
        FALL * INTERVAL_MS + TIMEOUT_MS
    );
    let burst = lab.burst()?;
    burst.print();
    ensure!(burst.errors.is_empty(), "requests failed after the failover: {:?}", burst.errors);
    ensure!(!burst.answers.contains_key(&format!("backend-{victim}")), "traffic still reached the dead backend");
    println!("every request answered, none by backend-{victim}");

    step(&format!("bringing backend-{victim} back: lb-ctl backends remove, restart its server, lb-ctl backends add"));
    print_indented(&lab.ctl(&["backends", "remove", "web", &backend(victim)])?);
    lab.start_backend(victim)?;
    print_indented(&lab.ctl(&["backends", "add", "web", &backend(victim)])?);
    let rejoined = lab.wait_health(&[victim], "up", Duration::from_secs(10))?;
    println!("backend-{victim} healthy and back in the ring {} ms after the add (rise {RISE} x {INTERVAL_MS} ms)", rejoined.as_millis());
    let burst = lab.burst()?;
    burst.print();
    ensure!(burst.errors.is_empty(), "requests failed after the re-add: {:?}", burst.errors);
    ensure!(burst.answers.contains_key(&format!("backend-{victim}")), "the re-added backend got no traffic");
    print_indented(&lab.ctl(&["backends", "list"])?);
    Ok(())
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
}

fn print_indented(text: &str) {
    for line in text.lines() {
        println!("    {line}");
    }
}

/// Runs a command quietly; fails with its output if it fails.
fn run_quiet(command: &mut Command) -> Result<Output> {
    let out = command.stdin(Stdio::null()).output().with_context(|| format!("starting {command:?}"))?;
    if !out.status.success() {
        let tail = |bytes: &[u8]| {
            let text = String::from_utf8_lossy(bytes);
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(10)..].join("\n")
        };
        bail!("{command:?} failed ({}):\n{}\n{}", out.status, tail(&out.stdout), tail(&out.stderr));
    }
    Ok(out)
}

fn sh(args: &[&str]) -> Result<Output> {
    run_quiet(Command::new(args[0]).args(&args[1..]))
}

/// A command in network namespace `ns` only (host mounts: bpffs pins stay visible).
fn nsenter(ns: &str, program: &Path) -> Command {
    let mut c = Command::new("nsenter");
    c.arg(format!("--net=/run/netns/{ns}")).arg(program);
    c
}

/// The pid in a name `lbd-<pid>-…` / `lbd-<pid>` / `pl<pid>`, if it is one.
fn run_pid(name: &str, prefix: &str) -> Option<u32> {
    name.strip_prefix(prefix)?.split('-').next()?.parse().ok()
}

/// Gone, or a zombie nobody has reaped yet.
fn is_dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('Z')),
        Err(_) => true,
    }
}

/// Removes what a demo run that was killed outright left behind: its processes (by the pids
/// it recorded), pins, namespaces and files.
fn remove_stale(bins: &Path) {
    let mut dead = std::collections::BTreeSet::new();
    if let Ok(out) = Command::new("ip").args(["netns", "list"]).output() {
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            dead.extend(line.split_whitespace().next().and_then(|n| run_pid(n, PREFIX)).filter(|p| is_dead(*p)));
        }
    }
    for dir in ["/sys/fs/bpf", "/tmp"] {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            dead.extend(run_pid(&name, PREFIX).filter(|p| is_dead(*p)));
        }
    }
    for entry in std::fs::read_dir("/sys/fs/bpf/lb-ctl").into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let pid = name.strip_prefix("decap-pl").and_then(|n| n.split('@').next()?.parse::<u32>().ok());
        dead.extend(pid.filter(|p| is_dead(*p)));
    }
    for pid in dead {
        println!("removing the leftovers of demo run {pid}");
        let mut lab = Lab::for_pid(pid, bins.to_path_buf());
        lab.namespaces = lab.all_namespaces();
        if let Ok(pids) = std::fs::read_to_string(lab.dir.join("pids")) {
            for p in pids.lines().filter_map(|l| l.parse::<u32>().ok()) {
                // Only processes that are still the lab's: the daemon names the run directory,
                // the backends are lb-test-backend.
                let cmdline = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
                let cmdline = String::from_utf8_lossy(&cmdline);
                if cmdline.contains(&*lab.dir.to_string_lossy()) || cmdline.contains("lb-test-backend") {
                    let _ = Command::new("kill").args(["-KILL", &p.to_string()]).status();
                }
            }
        }
        lab.decap_attached = true;
        // Dropping tears it down.
    }
}

/// The lab of one run; dropping it tears everything down.
struct Lab {
    pid: u32,
    bins: PathBuf,
    /// Run directory: config, daemon log, socket, saved ids, recorded pids.
    dir: PathBuf,
    pins: PathBuf,
    /// Namespaces created so far.
    namespaces: Vec<String>,
    daemon: Option<Child>,
    backends: BTreeMap<usize, Child>,
    decap_attached: bool,
}

impl Lab {
    fn new(bins: PathBuf) -> Lab {
        Lab::for_pid(std::process::id(), bins)
    }

    fn for_pid(pid: u32, bins: PathBuf) -> Lab {
        Lab {
            pid,
            bins,
            dir: PathBuf::from(format!("/tmp/{PREFIX}{pid}")),
            pins: PathBuf::from(format!("/sys/fs/bpf/{PREFIX}{pid}")),
            namespaces: Vec::new(),
            daemon: None,
            backends: BTreeMap::new(),
            decap_attached: false,
        }
    }

    /// Paths that exist while the lab does (namespaces, pins, files).
    fn leftovers(&self) -> Vec<String> {
        let mut v: Vec<String> = self.all_namespaces().iter().map(|n| format!("/run/netns/{n}")).collect();
        v.push(self.pins.display().to_string());
        v.extend(self.decap_pins().iter().map(|p| p.display().to_string()));
        v.push(self.dir.display().to_string());
        v
    }

    /// Pin directories of the decapsulator on the switch port: `decap-PORT`, with a suffix
    /// naming the switch's namespace (lb-ctl tells namespaces apart).
    fn decap_pins(&self) -> Vec<PathBuf> {
        let name = format!("decap-{}", self.lb_port());
        std::fs::read_dir("/sys/fs/bpf/lb-ctl")
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n == name || n.starts_with(&format!("{name}@"))
            })
            .map(|e| e.path())
            .collect()
    }

    fn ns(&self, host: &str) -> String {
        format!("{PREFIX}{}-{host}", self.pid)
    }

    fn all_namespaces(&self) -> Vec<String> {
        let mut v: Vec<String> = ["sw", "lb", "c"].iter().map(|h| self.ns(h)).collect();
        v.extend((0..BACKENDS).map(|i| self.ns(&format!("b{i}"))));
        v
    }

    /// The switch port facing the balancer; unique per run because the XDP program on it is
    /// pinned under its name.
    fn lb_port(&self) -> String {
        format!("pl{}", self.pid)
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("ctl/lb.sock")
    }

    fn bin(&self, name: &str) -> PathBuf {
        self.bins.join(name)
    }

    fn in_ns(&self, host: &str, args: &[&str]) -> Result<Output> {
        let ns = self.ns(host);
        let mut full = vec!["ip", "netns", "exec", ns.as_str()];
        full.extend_from_slice(args);
        sh(&full)
    }

    fn build(&mut self) -> Result<()> {
        std::fs::create_dir_all(&self.dir).with_context(|| format!("creating {}", self.dir.display()))?;
        for ns in self.all_namespaces() {
            sh(&["ip", "netns", "add", &ns])?;
            self.namespaces.push(ns.clone());
            sh(&["ip", "-n", &ns, "link", "set", "lo", "up"])?;
        }
        let sw = self.ns("sw");
        sh(&["ip", "-n", &sw, "link", "add", "br0", "type", "bridge"])?;
        sh(&["ip", "-n", &sw, "link", "set", "br0", "up"])?;

        self.plug("lb", &self.lb_port())?;
        self.in_ns("lb", &["ip", "addr", "add", "192.0.2.1/24", "dev", "eth0"])?;
        self.in_ns("lb", &["ip", "addr", "add", "198.51.100.1/24", "dev", "eth0"])?;
        for key in ["net.ipv4.ip_forward=1", "net.ipv4.conf.all.send_redirects=0", "net.ipv4.conf.eth0.send_redirects=0"] {
            self.in_ns("lb", &["sysctl", "-qw", key])?;
        }
        self.plug("c", "p-c")?;
        for i in 0..CLIENTS {
            self.in_ns("c", &["ip", "addr", "add", &format!("{}/24", client_addr(i)), "dev", "eth0"])?;
        }
        self.in_ns("c", &["ip", "route", "add", "203.0.113.0/24", "via", "192.0.2.1"])?;
        for i in 0..BACKENDS {
            let host = format!("b{i}");
            self.plug(&host, &format!("p-b{i}"))?;
            self.in_ns(&host, &["ip", "addr", "add", &format!("{}/24", backend_addr(i)), "dev", "eth0"])?;
            self.in_ns(&host, &["ip", "route", "add", "default", "via", "198.51.100.1"])?;
            self.start_backend(i)?;
        }
        // Native XDP_TX on a veth delivers only if the peer runs an XDP program: the
        // decapsulator on the switch port passes everything that is not IPIP.
        let out = run_quiet(
            nsenter(&sw, &self.bin("lb-ctl")).args(["decap", "attach", &self.lb_port(), "--from", "198.51.100.1", "--xdp-mode", "native"]),
        )?;
        self.decap_attached = true;
        drop(out);
        for i in 0..BACKENDS {
            self.in_ns("lb", &["ping", "-c1", "-W2", &backend_addr(i)])?;
        }
        Ok(())
    }

    /// Links `host` to the bridge: `eth0` there, `port` on the bridge; two queues each and no
    /// offloads on the host end (XDP on the other end needs whole, checksummed frames).
    fn plug(&self, host: &str, port: &str) -> Result<()> {
        let (sw, ns) = (self.ns("sw"), self.ns(host));
        sh(&[
            "ip", "-n", &sw, "link", "add", port, "numtxqueues", "2", "numrxqueues", "2", "type", "veth", "peer",
            "name", "eth0", "netns", &ns, "numtxqueues", "2", "numrxqueues", "2",
        ])?;
        sh(&["ip", "-n", &sw, "link", "set", port, "master", "br0", "up"])?;
        sh(&["ip", "-n", &ns, "link", "set", "eth0", "up"])?;
        self.in_ns(host, &["ethtool", "-K", "eth0", "tx", "off", "tso", "off", "gso", "off"])?;
        Ok(())
    }

    fn record_pid(&self, pid: u32) -> Result<()> {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join("pids"))?;
        writeln!(f, "{pid}")?;
        Ok(())
    }

    fn start_backend(&mut self, i: usize) -> Result<()> {
        let ns = self.ns(&format!("b{i}"));
        let child = Command::new("ip")
            .args(["netns", "exec", &ns])
            .arg(self.bin("lb-test-backend"))
            .args(["0.0.0.0:8080", &format!("backend-{i}")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .context("starting lb-test-backend")?;
        self.record_pid(child.id())?;
        self.backends.insert(i, child);
        Ok(())
    }

    fn kill_backend(&mut self, i: usize) -> Result<()> {
        let mut child = self.backends.remove(&i).context("backend not running")?;
        child.kill()?;
        child.wait()?;
        Ok(())
    }

    fn write_config(&self) -> Result<()> {
        let backends: Vec<String> =
            (0..BACKENDS).map(|i| format!("  {{ address = \"{}\", port = 8080 }},", backend_addr(i))).collect();
        let text = format!(
            "# Written by `cargo xtask demo`.\n\
             [daemon]\n\
             api_socket = \"{}\"\n\
             flow_table_size = 65536\n\n\
             [[vip]]\n\
             name = \"web\"\n\
             address = \"{VIP}\"\n\
             port = 80\n\
             protocol = \"tcp\"\n\
             forwarding = \"nat\"\n\
             hash = \"ip\"\n\
             health = {{ kind = \"http\", path = \"/health\", interval = \"{INTERVAL_MS}ms\", timeout = \"{TIMEOUT_MS}ms\", rise = {RISE}, fall = {FALL} }}\n\
             backends = [\n{}\n]\n",
            self.socket().display(),
            backends.join("\n")
        );
        std::fs::write(self.dir.join("lb.toml"), text).context("writing lb.toml")
    }

    fn start_daemon(&mut self) -> Result<()> {
        let log = std::fs::File::create(self.dir.join("daemon.log"))?;
        let child = nsenter(&self.ns("lb"), &self.bin("lb-ctl"))
            .args(["attach", "eth0", "--xdp-mode", "native", "--log-format", "text", "--log-level", "info"])
            .arg("--config")
            .arg(self.dir.join("lb.toml"))
            .arg("--pin-dir")
            .arg(&self.pins)
            .arg("--state-dir")
            .arg(self.dir.join("state"))
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting lb-ctl attach")?;
        self.record_pid(child.id())?;
        self.daemon = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            check_interrupt()?;
            if self.ctl(&["status"]).is_ok() {
                return Ok(());
            }
            if let Some(status) = self.daemon.as_mut().map(|c| c.try_wait()).transpose()?.flatten() {
                self.daemon = None;
                bail!("lb-ctl attach exited ({status}):\n{}", self.daemon_log());
            }
            ensure!(Instant::now() < deadline, "the daemon did not answer within 20 s:\n{}", self.daemon_log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn daemon_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default()
    }

    /// `lb-ctl --socket SOCKET ARGS`: its output, or why it failed.
    fn ctl(&self, args: &[&str]) -> Result<String> {
        let out = run_quiet(Command::new(self.bin("lb-ctl")).arg("--socket").arg(self.socket()).args(args))?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// (address, health, in ring) of every backend, from `lb-ctl backends list`.
    fn health(&self) -> Result<Vec<(String, String, bool)>> {
        let text = self.ctl(&["backends", "list"])?;
        Ok(text
            .lines()
            .skip(1)
            .filter_map(|line| {
                let cols: Vec<&str> = line.split_whitespace().collect();
                Some((cols.get(1)?.to_string(), cols.get(3)?.to_string(), *cols.last()? == "yes"))
            })
            .collect())
    }

    /// Waits until the backends `which` are `up` (and in the ring) or `down` (and out of it);
    /// returns how long that took.
    fn wait_health(&self, which: &[usize], want: &str, within: Duration) -> Result<Duration> {
        let started = Instant::now();
        loop {
            check_interrupt()?;
            let rows = self.health()?;
            let done = which.iter().all(|i| {
                rows.iter().any(|(addr, health, in_ring)| *addr == backend(*i) && health == want && *in_ring == (want == "up"))
            });
            if done {
                return Ok(started.elapsed());
            }
            ensure!(started.elapsed() < within, "backends {which:?} not {want} within {within:?}: {rows:?}");
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// One burst from the client namespace.
    fn burst(&self) -> Result<Burst> {
        check_interrupt()?;
        let sources: Vec<String> = (0..CLIENTS).map(client_addr).collect();
        let started = Instant::now();
        let out = run_quiet(
            nsenter(&self.ns("c"), &self.bin("lb-test-client"))
                .arg(format!("{VIP}:80"))
                .arg(BURST.to_string())
                .args(&sources),
        )?;
        let took = started.elapsed();
        let mut burst = Burst { took, ..Burst::default() };
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let (src, answer) = line.split_once(' ').unwrap_or((line, ""));
            if let Some(e) = answer.strip_prefix("error: ") {
                burst.errors.push(format!("{src}: {e}"));
            } else {
                *burst.answers.entry(answer.to_string()).or_insert(0) += 1;
                burst.clients.entry(answer.to_string()).or_default().insert(src.to_string());
            }
        }
        check_interrupt()?;
        Ok(burst)
    }
}

#[derive(Default)]
struct Burst {
    took: Duration,
    answers: BTreeMap<String, usize>,
    clients: BTreeMap<String, std::collections::BTreeSet<String>>,
    errors: Vec<String>,
}

impl Burst {
    fn print(&self) {
        let total: usize = self.answers.values().sum::<usize>() + self.errors.len();
        println!("{total} requests in {} ms, {} failed", self.took.as_millis(), self.errors.len());
        for (name, n) in &self.answers {
            let bar = "#".repeat(n * 40 / total.max(1));
            let clients = self.clients[name].iter().map(|c| c.rsplit('.').next().unwrap_or(c)).collect::<Vec<_>>();
            println!("    {name:<10} {n:>4}  {bar:<40}  clients .{}", clients.join(" ."));
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if self.namespaces.is_empty() && !self.dir.exists() && !self.pins.exists() && !self.decap_attached {
            return;
        }
        step("tearing down: daemon, backends, pins, namespaces");
        if let Some(mut daemon) = self.daemon.take() {
            let _ = Command::new("kill").args(["-TERM", &daemon.id().to_string()]).status();
            let deadline = Instant::now() + Duration::from_secs(5);
            while daemon.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = daemon.kill();
            let _ = daemon.wait();
        }
        for (_, mut child) in std::mem::take(&mut self.backends) {
            let _ = child.kill();
            let _ = child.wait();
        }
        let lb_ctl = self.bin("lb-ctl");
        if self.pins.exists() {
            let out = Command::new(&lb_ctl)
                .arg("--socket")
                .arg(self.socket())
                .args(["detach", "eth0", "--pin-dir"])
                .arg(&self.pins)
                .arg("--state-dir")
                .arg(self.dir.join("state"))
                .output();
            if !out.as_ref().is_ok_and(|o| o.status.success()) {
                eprintln!("warning: lb-ctl detach failed: {out:?}");
            }
        }
        if self.decap_attached {
            // From the switch's namespace, where the pin's name is derived; a pin whose
            // namespace is already gone (a dead run) is unpinned by removing its files.
            if Path::new(&format!("/run/netns/{}", self.ns("sw"))).exists() {
                let _ = nsenter(&self.ns("sw"), &lb_ctl).args(["decap", "detach", &self.lb_port()]).output();
            }
            for dir in self.decap_pins() {
                for f in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                    let _ = std::fs::remove_file(f.path());
                }
                let _ = std::fs::remove_dir(&dir);
            }
        }
        for ns in self.namespaces.drain(..) {
            let _ = Command::new("ip").args(["netns", "del", &ns]).status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
