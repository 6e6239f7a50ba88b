//! End to end through the daemon: the real `lb-ctl attach` runs in the balancer namespace of a
//! namespace lab (entered with `nsenter --net`, so its bpffs pins live in the host's mount), and
//! the tests drive it with the real CLI over its control socket while HTTP flows from the
//! client namespace through the XDP program to the backends. Needs root.
//!
//! Each test has its own lab and daemon ([`lb_tests::lab`]: pin directory, state directory and
//! socket named `lbt-<pid>-<tag>`, the daemon stopped and detached even when the test panics).
use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lb_ctl::api::types::BackendView;
use lb_ctl::state::Health;
use lb_tests::lab::{Daemon, Hold, Lab, backend_addr, client_addr, http_get};
use lb_tests::netns::enter_named;
use lb_tests::privileges::require_root;

const VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);
const CLIENTS: usize = 16;
const INTERVAL_MS: u64 = 200;
const TIMEOUT_MS: u64 = 100;
const RISE: u64 = 2;
const FALL: u64 = 3;

fn vip() -> SocketAddrV4 {
    SocketAddrV4::new(VIP, 80)
}

fn backend(i: usize) -> String {
    format!("{}:8080", backend_addr(i))
}

fn backend_name(i: usize) -> String {
    format!("backend-{i}")
}

/// lb.toml for the VIP `web` with backends `members` (index, weight); `extra` lines go into the
/// VIP table (used to break the file on purpose).
fn config_text(socket: &Path, members: &[(usize, u32)], extra: &str) -> String {
    let backends: Vec<String> = members
        .iter()
        .map(|(i, w)| format!("  {{ address = \"{}\", port = 8080, weight = {w} }},", backend_addr(*i)))
        .collect();
    format!(
        "[daemon]\n\
         api_socket = \"{}\"\n\
         flow_table_size = 65536\n\
         \n\
         [[vip]]\n\
         name = \"web\"\n\
         address = \"{VIP}\"\n\
         port = 80\n\
         health = {{ kind = \"http\", path = \"/health\", interval = \"{INTERVAL_MS}ms\", timeout = \"{TIMEOUT_MS}ms\", rise = {RISE}, fall = {FALL} }}\n\
         {extra}\
         backends = [\n{}\n]\n",
        socket.display(),
        backends.join("\n")
    )
}

/// A lab with `backends` test backends on :8080 (named `backend-i`), `CLIENTS` client
/// addresses, and the XDP_PASS program on the switch port facing the balancer. Returns the
/// lab and the backends' pids.
fn lab(tag: &str, backends: usize) -> (Lab, Vec<u32>) {
    let mut lab = Lab::new(tag, backends, CLIENTS);
    let pids = lab.serve_test_backends(env!("CARGO_BIN_EXE_lb-test-backend"), backends);
    (lab, pids)
}

fn start_backend(lab: &mut Lab, i: usize) -> u32 {
    lab.start_test_backend(env!("CARGO_BIN_EXE_lb-test-backend"), i)
}

/// The daemon under test: `lb-ctl attach eth0` in the balancer namespace, native XDP.
fn daemon(lab: &Lab, tag: &str) -> Daemon {
    Daemon::new(&lab.lb, "eth0", tag, &["--xdp-mode", "native", "--log-level", "info,lb_ctl=debug"])
}

/// What the tests ask of the daemon, by backend index.
trait WebDaemon {
    /// Writes lb.toml with `members` (see [`config_text`]); returns its text.
    fn write_config(&self, members: &[(usize, u32)], extra: &str) -> String;
    fn backend(&self, i: usize) -> Option<BackendView>;
    fn wait_backend(&self, i: usize, within: Duration, what: &str, pred: impl Fn(&BackendView) -> bool) -> Duration;
    fn wait_up(&self, i: usize, within: Duration) -> Duration;
}

impl WebDaemon for Daemon {
    fn write_config(&self, members: &[(usize, u32)], extra: &str) -> String {
        let text = config_text(&self.socket(), members, extra);
        self.write_config_text(&text);
        text
    }

    fn backend(&self, i: usize) -> Option<BackendView> {
        self.find_backend(backend(i).parse().unwrap())
    }

    fn wait_backend(&self, i: usize, within: Duration, what: &str, pred: impl Fn(&BackendView) -> bool) -> Duration {
        self.wait_for_backend(backend(i).parse().unwrap(), within, what, pred)
    }

    fn wait_up(&self, i: usize, within: Duration) -> Duration {
        self.wait_backend(i, within, "up and in the ring", |b| b.health == Health::Up && b.in_ring)
    }
}

/// Which backend answers each client (by name), from the client namespace.
fn mapping(client_ns: &str) -> BTreeMap<Ipv4Addr, String> {
    let _in = enter_named(client_ns);
    (0..CLIENTS)
        .map(|i| {
            let src = client_addr(i);
            let (status, body) = http_get(src, vip(), "/").unwrap_or_else(|e| panic!("{src} -> {}: {e}", vip()));
            assert_eq!(status, 200, "{src}");
            (src, String::from_utf8(body).unwrap().trim().to_string())
        })
        .collect()
}

fn spread(m: &BTreeMap<Ipv4Addr, String>) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for name in m.values() {
        *out.entry(name.clone()).or_insert(0) += 1;
    }
    out
}

/// Clients of `before` that were not on `except` and now answer from another backend.
fn moved(before: &BTreeMap<Ipv4Addr, String>, after: &BTreeMap<Ipv4Addr, String>, except: &str) -> Vec<Ipv4Addr> {
    before.iter().filter(|(c, b)| b.as_str() != except && after[*c] != **b).map(|(c, _)| *c).collect()
}

/// A client of backend `name` in `m`.
fn client_of(m: &BTreeMap<Ipv4Addr, String>, name: &str) -> Ipv4Addr {
    *m.iter().find(|(_, b)| *b == name).unwrap_or_else(|| panic!("no client reaches {name}: {m:?}")).0
}

/// Requests from every client in turn, in a thread, until stopped (at most 3000 requests or
/// 40 s); counts answers per backend and keeps the failures.
struct Load {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<(BTreeMap<String, usize>, Vec<String>)>,
}

impl Load {
    fn start(client_ns: &str) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let ns = client_ns.to_string();
        let thread = std::thread::spawn(move || {
            let _in = enter_named(&ns);
            let started = Instant::now();
            let (mut answers, mut failures) = (BTreeMap::new(), Vec::new());
            for n in 0..3000 {
                if flag.load(Ordering::Relaxed) || started.elapsed() > Duration::from_secs(40) {
                    break;
                }
                let src = client_addr(n % CLIENTS);
                match http_get(src, vip(), "/") {
                    Ok((200, body)) => {
                        *answers.entry(String::from_utf8_lossy(&body).trim().to_string()).or_insert(0) += 1
                    }
                    Ok((status, _)) => failures.push(format!("{src}: status {status}")),
                    Err(e) => failures.push(format!("{src}: {e}")),
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            (answers, failures)
        });
        Load { stop, thread }
    }

    fn stop(self) -> (BTreeMap<String, usize>, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("load thread")
    }
}

/// Adding, draining and removing backends through the CLI while requests flow: an added
/// backend takes clients once up (and only clients move to it), a drained one keeps its
/// established connection but gets no new flows, and removing a dead backend moves its
/// clients while the others keep theirs.
#[test]
fn backends_change_while_traffic_flows() {
    if !require_root("backends_change_while_traffic_flows") {
        return;
    }
    let (mut lab, pids) = lab("a", 4);
    let cns = lab.client.name.clone();
    let mut d = daemon(&lab, "a");
    d.write_config(&[(0, 100), (1, 100), (2, 100)], "");
    let took = d.start();
    println!("daemon answering {} ms after start", took.as_millis());
    for i in 0..3 {
        d.wait_up(i, Duration::from_secs(5));
    }
    let m0 = mapping(&cns);
    println!("3 backends: {:?}", spread(&m0));
    assert!(spread(&m0).len() >= 2, "16 clients over 3 backends must reach at least 2: {m0:?}");

    let load = Load::start(&cns);
    // Add backend 3: pending until `rise` checks pass, then in the ring.
    let out = d.ok(&["backends", "add", "web", &backend(3)]);
    assert!(out.contains("added"), "{out}");
    let pending = d.backend(3).expect("backend 3 listed after add");
    assert_eq!(pending.origin, lb_ctl::state::Origin::Api);
    let up = d.wait_up(3, Duration::from_secs(5));
    println!("added backend 3 in the ring after {} ms (rise {RISE} x {INTERVAL_MS} ms)", up.as_millis());
    let m1 = mapping(&cns);
    println!("after add: {:?}", spread(&m1));
    let b3 = backend_name(3);
    assert!(m1.values().any(|b| *b == b3), "no client reaches the added backend: {m1:?}");
    let moved_add = moved(&m0, &m1, "");
    assert!(moved_add.iter().all(|c| m1[c] == b3), "clients moved between old backends on add: {m0:?} -> {m1:?}");
    println!("add moved {} of {CLIENTS} clients, all to backend 3", moved_add.len());

    // Drain backend 3 with a long-lived connection on it.
    let holder = client_of(&m1, &b3);
    let hold = Hold::open(&cns, vip(), holder, 3);
    let out = d.ok(&["backends", "drain", "web", &backend(3)]);
    assert!(out.contains("draining"), "{out}");
    let b = d.backend(3).unwrap();
    assert_eq!(b.state, "draining");
    assert!(!b.in_ring, "a drained backend leaves the ring: {b:?}");
    assert!(b.active_flows >= 1, "the held connection is in the connection table: {b:?}");
    let explained = d.ok(&["explain", "web", &hold.local().to_string()]);
    assert!(explained.contains("connection table") && explained.contains(&backend(3)), "{explained}");
    let m2 = mapping(&cns);
    println!("after drain: {:?}", spread(&m2));
    assert!(m2.values().all(|b| *b != b3), "a drained backend got a new flow: {m2:?}");
    let moved_drain = moved(&m1, &m2, &b3);
    assert!(moved_drain.is_empty(), "draining backend 3 moved clients of other backends: {moved_drain:?}");
    hold.finish("drain");
    println!("drain: the held connection on backend 3 finished; no new flow went to it");
    let (answers, failures) = load.stop();
    println!("background requests during add and drain: {answers:?}, {} failed", failures.len());
    assert!(failures.is_empty(), "requests failed while backends were added/drained: {failures:?}");
    assert!(answers.values().sum::<usize>() > 50, "the background load barely ran: {answers:?}");

    // A dead backend removed: its clients move, the others' clients keep theirs, and an
    // established connection to a surviving backend carries on.
    let survivor = if m2.values().any(|b| *b == backend_name(0)) { 0 } else { 2 };
    let hold = Hold::open(&cns, vip(), client_of(&m2, &backend_name(survivor)), 2);
    lab.kill(pids[1]);
    let started = Instant::now();
    let out = d.ok(&["backends", "remove", "web", &backend(1)]);
    assert!(out.contains("removed"), "{out}");
    assert!(d.backend(1).is_none(), "removed backend still listed");
    let m3 = mapping(&cns);
    println!("after removing dead backend 1 ({} ms): {:?}", started.elapsed().as_millis(), spread(&m3));
    assert!(m3.values().all(|b| *b != backend_name(1) && *b != b3), "{m3:?}");
    let moved_remove = moved(&m2, &m3, &backend_name(1));
    assert!(moved_remove.is_empty(), "removing backend 1 moved clients of other backends: {moved_remove:?}");
    let c = client_of(&m2, &backend_name(survivor));
    let explained = d.ok(&["explain", "web", &c.to_string()]);
    assert!(explained.contains(&backend(survivor)), "explain for {c}: {explained}");
    hold.finish("remove");
    println!("remove: clients of backend 1 moved, the others kept theirs, a held connection survived");
}

/// Health failover: a backend that stops answering (SIGSTOP: connections hang) leaves the ring
/// within fall x interval + timeout; one whose server dies (connection refused) at once;
/// traffic then reaches only healthy backends, and `rise` puts the backend back, as does a
/// `backends add` after it was removed.
#[test]
fn health_failover_and_recovery() {
    if !require_root("health_failover_and_recovery") {
        return;
    }
    let (mut lab, pids) = lab("h", 3);
    let cns = lab.client.name.clone();
    let mut d = daemon(&lab, "h");
    d.write_config(&[(0, 100), (1, 100), (2, 100)], "");
    d.start();
    for i in 0..3 {
        d.wait_up(i, Duration::from_secs(5));
    }
    let m0 = mapping(&cns);
    println!("3 healthy backends: {:?}", spread(&m0));
    // Pick a backend that has clients.
    let victim = (0..3).find(|i| m0.values().any(|b| *b == backend_name(*i))).unwrap();
    let bound = Duration::from_millis(FALL * INTERVAL_MS + TIMEOUT_MS);
    let slack = Duration::from_millis(400);
    let is_out = |b: &BackendView| b.health == Health::Down && !b.in_ring;

    // 1. The server hangs: checks time out, `fall` of them in a row take it down.
    // SAFETY: kill(2) on a backend process this test started.
    unsafe { libc::kill(pids[victim] as i32, libc::SIGSTOP) };
    let hung = d.wait_backend(victim, bound * 4, "down after hanging", is_out);
    println!(
        "hung backend {victim} out of the ring after {} ms (bound fall {FALL} x {INTERVAL_MS} ms + timeout {TIMEOUT_MS} ms = {} ms)",
        hung.as_millis(),
        bound.as_millis()
    );
    assert!(hung <= bound + slack, "detection took {hung:?}, more than {bound:?} + {slack:?}");
    assert!(hung >= Duration::from_millis((FALL - 1) * INTERVAL_MS), "down after {hung:?}: fewer than {FALL} checks?");
    let m1 = mapping(&cns);
    println!("while backend {victim} hangs: {:?}", spread(&m1));
    assert!(m1.values().all(|b| *b != backend_name(victim)), "traffic reached the down backend: {m1:?}");
    assert!(moved(&m0, &m1, &backend_name(victim)).is_empty(), "healthy backends' clients moved: {m0:?} -> {m1:?}");
    // SAFETY: as above.
    unsafe { libc::kill(pids[victim] as i32, libc::SIGCONT) };
    let back = d.wait_up(victim, Duration::from_secs(5));
    println!("backend {victim} back in the ring {} ms after it answered again (rise {RISE})", back.as_millis());
    assert_eq!(mapping(&cns), m0, "after recovery every client is back where it was");

    // 2. The server dies: the refused connection takes it down at the next check.
    lab.kill(pids[victim]);
    let died = d.wait_backend(victim, bound * 4, "down after dying", is_out);
    println!(
        "dead backend {victim} out of the ring after {} ms (connection refused: at the next check)",
        died.as_millis()
    );
    assert!(died <= Duration::from_millis(INTERVAL_MS + TIMEOUT_MS) + slack, "refused detection took {died:?}");
    let m2 = mapping(&cns);
    assert!(m2.values().all(|b| *b != backend_name(victim)), "traffic reached the dead backend: {m2:?}");

    // 3. Removed while dead, server back, added again: pending until `rise`, then as before.
    d.ok(&["backends", "remove", "web", &backend(victim)]);
    start_backend(&mut lab, victim);
    // The clock starts before the request: the first check runs as the backend is added.
    let added = Instant::now();
    d.ok(&["backends", "add", "web", &backend(victim)]);
    let b = d.backend(victim).unwrap();
    assert!(matches!(b.health, Health::Pending | Health::Up), "{b:?}");
    d.wait_up(victim, Duration::from_secs(5));
    let rejoined = added.elapsed();
    println!("re-added backend {victim} in the ring after {} ms", rejoined.as_millis());
    assert!(
        rejoined >= Duration::from_millis((RISE - 1) * INTERVAL_MS),
        "up after {rejoined:?}: fewer than {RISE} checks?"
    );
    assert_eq!(mapping(&cns), m0, "the ring after re-adding is the original one");
}

/// `lb-ctl reload` with a broken file changes nothing and says why (exit 1, FILE:LINE); a
/// good file applies only its difference: unchanged backends keep id, health and their
/// established connections.
#[test]
fn reload_refuses_mistakes_and_applies_differences() {
    if !require_root("reload_refuses_mistakes_and_applies_differences") {
        return;
    }
    let (lab, _pids) = lab("r", 3);
    let cns = lab.client.name.clone();
    let mut d = daemon(&lab, "r");
    d.write_config(&[(0, 100), (1, 100)], "");
    d.start();
    d.wait_up(0, Duration::from_secs(5));
    d.wait_up(1, Duration::from_secs(5));
    let before = d.backends();
    let m0 = mapping(&cns);
    println!("before reload: {:?}", spread(&m0));

    // Broken files: an unknown key; a backend weight out of range.
    let config = d.config().display().to_string();
    for (members, extra, needle) in [
        (&[(0, 100), (1, 100), (2, 100)][..], "colour = \"blue\"\n", "colour"),
        (&[(0, 100), (1, 100), (2, 70000)][..], "", "70000"),
    ] {
        let text = d.write_config(members, extra);
        let line = text.lines().position(|l| l.contains(needle)).unwrap() + 1;
        let out = d.ctl(&["reload"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        println!("bad reload ({needle}): exit {:?}: {}", out.status.code(), stderr.trim());
        assert_eq!(out.status.code(), Some(1), "a refused reload exits 1");
        assert!(stderr.contains("nothing changed"), "{stderr}");
        let at = format!("{config}:{line}:");
        assert!(stderr.contains(&at), "the mistake on line {line} ({needle}) is not reported as {at}: {stderr}");
    }
    assert_eq!(
        d.backends().iter().map(|b| (b.id, b.address, b.weight, b.health)).collect::<Vec<_>>(),
        before.iter().map(|b| (b.id, b.address, b.weight, b.health)).collect::<Vec<_>>(),
        "a refused reload changed the backends"
    );
    let status = d.ok(&["status"]);
    assert!(status.contains("last reload REFUSED"), "{status}");
    assert_eq!(mapping(&cns), m0, "a refused reload changed where clients go");

    // A good file: backend 2 added, backend 1 reweighted, backend 0 as it was.
    let client0 = client_of(&m0, &backend_name(0));
    let hold = Hold::open(&cns, vip(), client0, 2);
    d.write_config(&[(0, 100), (1, 50), (2, 100)], "");
    let out = d.ok(&["reload"]);
    println!("good reload: {}", out.trim());
    let after = d.backends();
    let find = |list: &[BackendView], i: usize| list.iter().find(|b| b.address == backend(i).parse().unwrap()).cloned();
    let (b0, b0_before) = (find(&after, 0).unwrap(), find(&before, 0).unwrap());
    assert_eq!((b0.id, b0.weight, b0.health), (b0_before.id, 100, Health::Up), "backend 0 must be untouched");
    let (b1, b1_before) = (find(&after, 1).unwrap(), find(&before, 1).unwrap());
    assert_eq!(
        (b1.id, b1.weight, b1.health),
        (b1_before.id, 50, Health::Up),
        "backend 1: same id and health, new weight"
    );
    let b2 = find(&after, 2).expect("backend 2 added by the reload");
    assert_eq!(b2.health, Health::Pending, "a new checked backend starts pending");
    assert!(!before.iter().any(|b| b.id == b2.id), "backend 2 got a fresh id");
    // Only the reweighted ring and the new backend are written: no VIP, no other backend.
    assert!(out.contains("1 backends written") && out.contains("1 rings written"), "{out}");
    assert!(!out.contains("VIPs") && !out.contains("removed"), "{out}");
    d.wait_up(2, Duration::from_secs(5));
    let m1 = mapping(&cns);
    println!("after reload: {:?}", spread(&m1));
    assert!(m1.values().any(|b| *b == backend_name(2)), "no client reaches the backend the reload added: {m1:?}");
    hold.finish("reload");
    // Reloading the same file again changes nothing.
    let out = d.ok(&["reload"]);
    assert!(out.contains("no change"), "{out}");

    // Forwarding turned off after attach: the reload goes through and says what that breaks.
    lab.lb.exec(&["sysctl", "-qw", "net.ipv4.ip_forward=0"]);
    let out = d.ok(&["reload"]);
    lab.lb.exec(&["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
    assert!(out.contains("warning: net.ipv4.ip_forward=0: new flows of the NAT and DSR VIPs are dropped"), "{out}");
}

/// The daemon stops (SIGTERM) and starts again: the balancer forwards while it is down, and a
/// long-lived connection established before the restart carries on through the pinned
/// connection table after it.
#[test]
fn restart_keeps_established_connections() {
    if !require_root("restart_keeps_established_connections") {
        return;
    }
    let (lab, _pids) = lab("s", 2);
    let cns = lab.client.name.clone();
    let mut d = daemon(&lab, "s");
    d.write_config(&[(0, 100), (1, 100)], "");
    d.start();
    d.wait_up(0, Duration::from_secs(5));
    d.wait_up(1, Duration::from_secs(5));
    let m0 = mapping(&cns);
    let ids: HashMap<SocketAddr, u32> = d.backends().iter().map(|b| (b.address, b.id)).collect();
    let hold = Hold::open(&cns, vip(), client_addr(0), 4);
    let local = hold.local();

    let status = d.stop();
    assert!(status.success(), "the daemon exits cleanly on SIGTERM: {status}");
    assert!(!d.socket().exists(), "the stopped daemon removed its socket");
    assert_eq!(mapping(&cns), m0, "with the daemon stopped the pinned balancer still forwards");
    let restarted = d.start();
    println!("daemon restarted in {} ms", restarted.as_millis());
    assert!(d.log_text().contains("reused_maps=true"), "the restarted daemon did not reuse the pinned maps");
    let after: HashMap<SocketAddr, u32> = d.backends().iter().map(|b| (b.address, b.id)).collect();
    assert_eq!(after, ids, "backends keep their ids across the restart");
    let explained = d.ok(&["explain", "web", &local.to_string()]);
    assert!(explained.contains("connection table"), "the held flow is in the kept table: {explained}");
    hold.finish("restart");
    d.wait_up(0, Duration::from_secs(5));
    assert_eq!(mapping(&cns), m0, "clients go where they went before the restart");
    println!("a connection opened before the restart finished after it");
}

/// The control socket is for root: a non-root user's CLI is refused by the file mode, and even
/// with the file opened up the daemon refuses the connection by its peer credentials.
#[test]
fn control_socket_refuses_non_root() {
    use std::os::unix::fs::PermissionsExt;
    if !require_root("control_socket_refuses_non_root") {
        return;
    }
    let (lab, _pids) = lab("p", 1);
    let mut d = daemon(&lab, "p");
    d.write_config(&[(0, 100)], "");
    d.start();
    let socket = d.socket();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&socket), 0o600, "socket mode");
    assert_eq!(mode(socket.parent().unwrap()), 0o700, "socket directory mode");
    // A copy of the CLI that user nobody can run (the build tree may not be readable).
    let bin = d.dir().join("lb-ctl");
    std::fs::copy(lb_tests::lb_ctl_bin(), &bin).unwrap();
    std::fs::set_permissions(d.dir(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let as_nobody = |args: &[&str]| {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&bin)
            .arg("--socket")
            .arg(&socket)
            .args(args)
            .output()
            .unwrap()
    };
    for args in [&["status"][..], &["backends", "remove", "web", &backend(0)][..]] {
        let out = as_nobody(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        println!("nobody: lb-ctl {args:?}: exit {:?}: {}", out.status.code(), stderr.trim());
        assert_eq!(out.status.code(), Some(3), "refused at the socket: {stderr}");
        assert!(stderr.contains("ermission denied"), "{stderr}");
    }
    // Past the file mode, the daemon checks the peer's uid.
    std::fs::set_permissions(socket.parent().unwrap(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = as_nobody(&["backends", "remove", "web", &backend(0)]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("nobody, socket opened up: exit {:?}: {}", out.status.code(), stderr.trim());
    assert!(!out.status.success(), "a non-root peer was served");
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(d.backend(0).is_some(), "the refused remove must not have happened");
    assert!(d.log_text().contains("refused a connection from a non-root user"), "{}", d.log_text());
    // Root is still served.
    d.ok(&["status"]);
}

/// An attach that fails (here: no such interface) leaves no pinned maps and no control socket
/// behind: the next attempt starts clean, and nothing looks like a running balancer.
#[test]
fn a_failed_attach_leaves_nothing_behind() {
    if !require_root("a_failed_attach_leaves_nothing_behind") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("run/lb.sock");
    let pins = Path::new("/sys/fs/bpf").join(lb_tests::netns::run_name("failed-attach"));
    std::fs::write(
        dir.path().join("lb.toml"),
        format!(
            "[daemon]\napi_socket = \"{}\"\n[[vip]]\naddress = \"203.0.113.10\"\nport = 80\nbackends = [ {{ address = \"198.51.100.1\" }} ]\n",
            socket.display()
        ),
    )
    .unwrap();
    let out = Command::new(lb_tests::lb_ctl_bin())
        .args(["attach", "lbt-no-such0", "--log-level", "warn", "--config"])
        .arg(dir.path().join("lb.toml"))
        .arg("--pin-dir")
        .arg(&pins)
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "attach to a missing interface fails");
    assert!(stderr.contains("lbt-no-such0"), "the error names the interface: {stderr}");
    let left = pins.exists();
    let _ = std::fs::remove_dir_all(&pins);
    assert!(!left, "no pinned maps left in {}", pins.display());
    assert!(!socket.exists(), "no control socket left");
}

/// kill -9 under load, an immediate restart, then a reload: no request to a healthy backend
/// fails, a connection to a backend added through the API keeps going, and a backend known
/// dead stays out of the ring after the restart.
#[test]
fn kill_9_restart_and_reload_under_load_fail_no_request() {
    if !require_root("kill_9_restart_and_reload_under_load_fail_no_request") {
        return;
    }
    let (mut lab, pids) = lab("k", 3);
    let cns = lab.client.name.clone();
    lab.kill(pids[2]); // backend-2 is dead from the start
    let mut d = daemon(&lab, "k");
    d.write_config(&[(0, 100), (2, 100)], "");
    d.start();
    d.wait_up(0, Duration::from_secs(5));
    d.wait_backend(2, Duration::from_secs(5), "down", |b| b.health == Health::Down);
    d.ok(&["backends", "add", "web", &backend(1)]);
    d.wait_up(1, Duration::from_secs(5));
    let m = mapping(&cns);
    let hold = Hold::open(&cns, vip(), client_of(&m, &backend_name(1)), 6);

    let load = Load::start(&cns);
    std::thread::sleep(Duration::from_millis(500));
    d.kill9();
    let restarted = d.start();
    println!("restarted {} ms after kill -9", restarted.as_millis());
    let dead = d.backend(2).expect("backend-2 is still configured");
    assert_eq!(dead.health, Health::Down, "the restarted daemon remembers backend-2 is down");
    assert!(!dead.in_ring, "a backend known dead is not put back in the ring");
    let added = d.backend(1).expect("the API-added backend survives the restart");
    assert!(added.in_ring && added.health == Health::Up, "{added:?}");
    std::thread::sleep(Duration::from_millis(500));
    // The operator writes the API change into the file, then reloads under load.
    d.write_config(&[(0, 100), (1, 100), (2, 100)], "");
    let reloaded = d.ok(&["reload"]);
    assert!(reloaded.contains("reloaded"), "{reloaded}");
    std::thread::sleep(Duration::from_millis(500));
    let (answers, failures) = load.stop();
    println!("answers per backend during kill -9, restart and reload: {answers:?}");
    assert!(failures.is_empty(), "requests failed: {failures:?}");
    assert!(!answers.contains_key(&backend_name(2)), "the dead backend answered?");
    assert!(answers.values().sum::<usize>() > 50, "the load ran: {answers:?}");
    hold.finish("kill -9, restart and reload");
}

/// `stats` through the real XDP program: per-CPU figures add up to the totals (every verdict
/// counter, and the VIP's packets), and `stats --watch` prints the VIP's rate.
#[test]
fn stats_per_cpu_add_up_and_watch_prints_rates() {
    if !require_root("stats_per_cpu_add_up_and_watch_prints_rates") {
        return;
    }
    let (lab, _pids) = lab("w", 1);
    let mut d = daemon(&lab, "w");
    d.write_config(&[(0, 100)], "");
    d.start();
    d.wait_up(0, Duration::from_secs(10));
    mapping(&lab.client.name);
    let stats: lb_ctl::api::types::StatsView = serde_json::from_str(&d.ok(&["stats", "--json"])).unwrap();
    assert!(!stats.cpus.is_empty(), "per-CPU figures: {stats:?}");
    let verdicts: u64 = stats
        .counters
        .iter()
        .filter(|c| ["pass_", "drop_", "forward_"].iter().any(|p| c.name.starts_with(p)))
        .map(|c| c.value)
        .sum();
    assert_eq!(stats.cpus.iter().map(|c| c.packets).sum::<u64>(), verdicts, "{stats:?}");
    let vip_packets: u64 = stats.vips.iter().map(|v| v.packets).sum();
    assert!(vip_packets > 0, "{stats:?}");
    assert_eq!(stats.cpus.iter().map(|c| c.vip_packets).sum::<u64>(), vip_packets, "{stats:?}");
    let watch = d.ok(&["stats", "--watch", "--interval", "0.2", "--count", "2"]);
    println!("{watch}");
    assert_eq!(watch.matches("--- ").count(), 2, "{watch}");
    assert!(watch.contains("\nCPU "), "{watch}");
}
