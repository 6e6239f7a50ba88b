//! An upgrade to a build whose map layouts differ, under traffic: the daemon of the previous
//! layout (lb-ctl built with the test-only feature `layout-v1-test`, `lb_tests::lb_ctl_v1_bin`)
//! runs the balancer, keep-alive connections hold, the ring moves under some of them (only
//! their connection-table entries keep them on their backend), new connections keep opening,
//! and the build under test starts on its pins: it migrates the maps whose layout changed,
//! reuses the others, and nothing breaks. Then the older build, started on the newer pins, is
//! refused and changes nothing. Needs root.
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lb_tests::flood::LeakWatcher;
use lb_tests::lab::{
    Daemon, DecapPins, Entry, Hold, LB_BACKEND_SIDE, LB_PORT, Lab, backend_addr, client_addr, http_get,
    wait_for_listener,
};
use lb_tests::netns::enter_named;
use lb_tests::privileges::require_root;

const VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);
const DSR_VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 20);
const CLIENTS: usize = 16;
/// Seconds each held connection lasts: past the whole upgrade.
const HOLD_SECS: usize = 25;

fn vip() -> SocketAddrV4 {
    SocketAddrV4::new(VIP, 80)
}

fn dsr_vip() -> SocketAddrV4 {
    SocketAddrV4::new(DSR_VIP, 80)
}

/// lb.toml: the NAT VIP `web` (backends on :8080, checked) and the DSR VIP `dsr` (IPIP,
/// backends on :80), each with the first `backends` backends.
fn config(socket: &Path, backends: usize) -> String {
    let members = |port: u16| -> String {
        (0..backends)
            .map(|i| format!("  {{ address = \"{}\", port = {port} }},", backend_addr(i)))
            .collect::<Vec<_>>()
            .join("\n")
    };
    format!(
        "[daemon]\napi_socket = \"{}\"\nflow_table_size = 65536\n\n[[vip]]\nname = \"web\"\naddress = \"{VIP}\"\n\
         port = 80\nhealth = {{ kind = \"http\", path = \"/health\", interval = \"200ms\", timeout = \"100ms\", rise = 2, fall = 3 }}\n\
         backends = [\n{}\n]\n\n[[vip]]\nname = \"dsr\"\naddress = \"{DSR_VIP}\"\nport = 80\nforwarding = \"dsr-ipip\"\n\
         encap_source = \"{LB_BACKEND_SIDE}\"\nbackends = [\n{}\n]\n",
        socket.display(),
        members(8080),
        members(80)
    )
}

/// Which backend answers each client (by name) at each VIP, from the client namespace.
fn mapping(client_ns: &str) -> BTreeMap<(SocketAddrV4, Ipv4Addr), String> {
    let _in = enter_named(client_ns);
    [vip(), dsr_vip()]
        .into_iter()
        .flat_map(|vip| (0..CLIENTS).map(move |i| (vip, client_addr(i))))
        .map(|(vip, src)| {
            let (status, body) = http_get(src, vip, "/").unwrap_or_else(|e| panic!("{src} -> {vip}: {e}"));
            assert_eq!(status, 200, "{src} -> {vip}");
            ((vip, src), String::from_utf8(body).unwrap().trim().to_string())
        })
        .collect()
}

fn wait_backends_up(d: &Daemon, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let up = d
            .backends()
            .iter()
            .filter(|b| b.vip == "web" && b.health == lb_ctl::state::Health::Up && b.in_ring)
            .count();
        if up == n {
            return;
        }
        assert!(Instant::now() < deadline, "{up} of {n} backends up:\n{}", d.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// New connections, one after another from every client address, until stopped: (done, failed).
struct Opener {
    stop: Arc<AtomicBool>,
    done: Arc<AtomicUsize>,
    failed: Arc<AtomicUsize>,
    thread: std::thread::JoinHandle<()>,
}

impl Opener {
    fn start(client_ns: &str) -> Opener {
        let (stop, done, failed) = (Arc::new(AtomicBool::new(false)), Arc::default(), Arc::default());
        let (s, d, f): (Arc<AtomicBool>, Arc<AtomicUsize>, Arc<AtomicUsize>) =
            (stop.clone(), Arc::clone(&done), Arc::clone(&failed));
        let ns = client_ns.to_string();
        let thread = std::thread::spawn(move || {
            let _in = enter_named(&ns);
            let mut i = 0;
            // Bounded: at most ten minutes' worth even if never stopped.
            while !s.load(Ordering::Relaxed) && i < 100_000 {
                let target = if i % 2 == 0 { vip() } else { dsr_vip() };
                match http_get(client_addr(i / 2 % CLIENTS), target, "/") {
                    Ok((200, _)) => d.fetch_add(1, Ordering::Relaxed),
                    other => {
                        eprintln!("new connection {i} failed: {other:?}");
                        f.fetch_add(1, Ordering::Relaxed)
                    }
                };
                i += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        Opener { stop, done, failed, thread }
    }

    fn finish(self) -> (usize, usize) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap();
        (self.done.load(Ordering::Relaxed), self.failed.load(Ordering::Relaxed))
    }
}

/// `lb-ctl upgrade-check` of the build at `bin` on the daemon's pins: exit code and output.
fn upgrade_check(lab: &Lab, d: &Daemon, bin: &Path) -> (Option<i32>, String) {
    let out = std::process::Command::new("nsenter")
        .arg(format!("--net=/run/netns/{}", lab.lb.name))
        .arg(bin)
        .args(["upgrade-check", "eth0", "--config"])
        .arg(d.config())
        .arg("--pin-dir")
        .arg(d.pins())
        .output()
        .expect("running lb-ctl upgrade-check");
    (out.status.code(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn upgrade_to_another_layout_breaks_no_connection_and_a_downgrade_is_refused() {
    if !require_root("upgrade_to_another_layout_breaks_no_connection_and_a_downgrade_is_refused") {
        return;
    }
    let older = lb_tests::lb_ctl_v1_bin();
    let newer = lb_tests::lb_ctl_bin();
    let backend_bin = Path::new(env!("CARGO_BIN_EXE_lb-test-backend"));
    let mut lab = Lab::new("up", 3, CLIENTS);
    let mut decaps = DecapPins::default();
    for i in 0..3 {
        let ns = lab.backends[i].name.clone();
        lab.spawn(&ns, &[backend_bin.to_str().unwrap(), "0.0.0.0:8080", &format!("backend-{i}")]);
        lab.dsr_backend(i, DSR_VIP, 80, backend_bin, &mut decaps);
        let _in = lab.backends[i].enter();
        wait_for_listener(SocketAddr::from((backend_addr(i), 8080)), Duration::from_secs(10));
        wait_for_listener(SocketAddr::from((backend_addr(i), 80)), Duration::from_secs(10));
    }
    lab.pass_on_switch_port(LB_PORT);
    lab.resolve_backends();
    let cns = lab.client.name.clone();

    // The previous layout's daemon, two backends.
    let mut d = Daemon::new(&lab.lb, "eth0", "up", &["--xdp-mode", "native", "--log-level", "info"]);
    d.set_bin(&older);
    d.write_config_text(&config(&d.socket(), 2));
    d.start();
    wait_backends_up(&d, 2);
    let before = mapping(&cns);
    let leaks = LeakWatcher::start(&cns, (0..3).map(backend_addr).collect());
    let holds: Vec<((SocketAddrV4, Ipv4Addr), Hold)> = [vip(), dsr_vip()]
        .into_iter()
        .flat_map(|vip| (0..CLIENTS).map(move |i| (vip, client_addr(i))))
        .map(|(vip, src)| ((vip, src), Hold::open(&cns, vip, src, HOLD_SECS)))
        .collect();
    // A third backend: the ring moves under some held connections, which only their
    // connection-table entries keep on their backend from now on.
    d.write_config_text(&config(&d.socket(), 3));
    d.ok(&["reload"]);
    wait_backends_up(&d, 3);
    let after_reload = mapping(&cns);
    let moved: Vec<(SocketAddrV4, Ipv4Addr)> =
        before.keys().filter(|c| before[*c] != after_reload[*c]).copied().collect();
    println!("held connections whose ring slot moved: {} of {}", moved.len(), holds.len());
    for v in [vip(), dsr_vip()] {
        assert!(moved.iter().any(|m| m.0 == v), "no held connection to {v} moved: the test would prove nothing");
    }

    // What the newer build would do with these pins: migrate the maps whose layout changed.
    let (code, check) = upgrade_check(&lab, &d, &newer);
    println!("upgrade-check (newer build, older pins):\n{check}");
    assert_eq!(code, Some(0), "{check}");
    for line in ["migrate  FLOWS from version 1", "migrate  VIPS from version 1", "migrate  VIP_INFO from version 1"] {
        assert!(check.contains(line), "{line:?} missing:\n{check}");
    }
    assert!(check.contains("reuse    REVERSE_FLOWS") && check.contains("reuse    RINGS"), "{check}");

    // The upgrade, with new connections opening all along.
    let opener = Opener::start(&cns);
    std::thread::sleep(Duration::from_millis(300));
    assert!(d.stop().success(), "the older daemon stops cleanly");
    d.set_bin(&newer);
    let took = d.start();
    std::thread::sleep(Duration::from_millis(300));
    let (opened, failed) = opener.finish();
    let log = d.log_text();
    println!(
        "the newer daemon answered {} ms after its start; {opened} new connections, {failed} failed",
        took.as_millis()
    );
    assert!(log.contains("migrated the pinned maps to this build's layout"), "no migration logged:\n{log}");
    assert!(log.contains("reused_maps=true"), "{log}");
    assert_eq!(failed, 0, "new connections failed during the upgrade");
    assert!(opened > 0, "no new connection was tried");
    // A moved client's held flow is in the migrated connection table, on its old backend.
    let held = moved.iter().find(|m| m.0 == vip()).unwrap();
    let explained = d.ok(&["explain", "web", &holds.iter().find(|(c, _)| c == held).unwrap().1.local().to_string()]);
    // Found where the older build's table hash put it (`table_hash::kind`), not placed anew.
    assert!(explained.contains("by the connection table"), "the held flow is in the migrated table: {explained}");
    let mut broken = Vec::new();
    for ((vip, client), hold) in holds {
        if let Err(e) = hold.outcome() {
            broken.push(format!("{client} -> {vip}: {e}"));
        }
    }
    let leaked = leaks.stop();
    assert!(broken.is_empty(), "held connections broken by the upgrade: {broken:?}");
    assert_eq!(leaked, 0, "NAT replies reached the client with a backend's own address");
    assert_eq!(mapping(&cns), after_reload, "new connections go where they went before the upgrade");
    let (code, check) = upgrade_check(&lab, &d, &newer);
    assert!(code == Some(0) && check.contains("reuse: a start keeps every map"), "after the upgrade:\n{check}");

    // The downgrade: refused by upgrade-check and by attach, and nothing changes.
    assert!(d.stop().success());
    let (code, check) = upgrade_check(&lab, &d, &older);
    println!("upgrade-check (older build, newer pins):\n{check}");
    assert_eq!(code, Some(1), "{check}");
    let newer_version = format!("newer lb-ctl (layout version {})", lb_common::layout::LAYOUT_VERSION);
    assert!(check.contains(&newer_version) && check.contains("migrates from"), "{check}");
    d.set_bin(&older);
    let (status, log) = d.attach_expecting_failure(Entry::Nsenter);
    assert!(!status.success(), "the older build started on newer pins:\n{log}");
    assert!(log.contains(&newer_version), "{log}");
    assert_eq!(mapping(&cns), after_reload, "the pinned balancer forwards as before the refused start");
    d.set_bin(&newer);
    d.start();
    let log = d.log_text();
    assert!(log.contains("reused_maps=true") && !log.contains("migrated the pinned maps"), "{log}");
    assert_eq!(mapping(&cns), after_reload);
}
