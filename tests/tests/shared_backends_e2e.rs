//! Two NAT VIPs on the same backends, through the real daemon with a small connection table:
//! a backend several VIPs share needs the reply entry of every connection (its answers have no
//! other way to their VIP), so the reply table must never fill with connections that ended.
//! Long-lived keep-alive connections and a churn of short ones run through one VIP for a while
//! (with and without a spoofed-SYN flood); then every new connection to either VIP must
//! connect and be answered. Needs root.
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use lb_tests::flood::{Flood, FloodSpec, KeepAlive, LeakWatcher, mac_bytes};
use lb_tests::lab::{Daemon, Lab, backend_addr, client_addr, http_get, mac_of};
use lb_tests::netns::enter_named;
use lb_tests::privileges::require_root;

const WEB: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);
const WEB2: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 12);
const BACKENDS: usize = 3;
/// Keep-alive connections through `web`, each from a client address of its own.
const LONG_LIVED: usize = 24;
/// Client addresses: the long-lived connections' and as many again for churn and probes.
const CLIENTS: usize = 2 * LONG_LIVED;
/// The churn's time limit (it stops earlier once it has made its connections).
const CHURN_TIME: Duration = Duration::from_secs(90);
/// New connections each VIP must take after the churn, one after another.
const PROBES: usize = 40;

fn config(socket: &std::path::Path, flows: u32) -> String {
    let backends: Vec<String> =
        (0..BACKENDS).map(|i| format!("  {{ address = \"{}\", port = 8080 }},", backend_addr(i))).collect();
    let backends = backends.join("\n");
    let vip = |name: &str, addr: Ipv4Addr| {
        format!(
            "[[vip]]\nname = \"{name}\"\naddress = \"{addr}\"\nport = 80\n\
             health = {{ kind = \"tcp\", interval = \"500ms\", timeout = \"400ms\", rise = 1, fall = 3 }}\n\
             backends = [\n{backends}\n]\n\n"
        )
    };
    format!(
        "[daemon]\napi_socket = \"{}\"\nflow_table_size = {flows}\n\n{}{}",
        socket.display(),
        vip("web", WEB),
        vip("web2", WEB2)
    )
}

/// The lab: three test backends on :8080, the client's addresses, and the daemon serving `web`
/// and `web2` on the same backends with a table of `flows`.
fn lab(tag: &str, flows: u32) -> (Lab, Daemon) {
    let mut lab = Lab::new(tag, BACKENDS, CLIENTS);
    lab.serve_test_backends(env!("CARGO_BIN_EXE_lb-test-backend"), BACKENDS);
    let mut daemon = Daemon::new(&lab.lb, "eth0", tag, &["--xdp-mode", "native"]);
    daemon.write_config_text(&config(&daemon.socket(), flows));
    daemon.start();
    for i in 0..BACKENDS {
        let address = SocketAddr::from((backend_addr(i), 8080));
        daemon.wait_for_backend(address, Duration::from_secs(20), "up", |b| b.in_ring);
    }
    (lab, daemon)
}

/// Short connections (`Connection: close`) through `vip` from the churn's client addresses,
/// one after another, until `count` of them or `CHURN_TIME` is up.
struct Churn {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<(u64, Vec<String>)>,
}

impl Churn {
    fn start(client_ns: &str, vip: SocketAddrV4, count: u64) -> Churn {
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, ns) = (stop.clone(), client_ns.to_string());
        let thread = std::thread::spawn(move || {
            let _in = enter_named(&ns);
            let started = Instant::now();
            let (mut done, mut errors) = (0u64, Vec::new());
            while !flag.load(Relaxed) && done < count && started.elapsed() < CHURN_TIME {
                let src = client_addr(LONG_LIVED + done as usize % LONG_LIVED);
                match http_get(src, vip, "/") {
                    Ok((200, _)) => {}
                    outcome => errors.push(format!("{src} -> {vip}: {outcome:?}")),
                }
                done += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            (done, errors)
        });
        Churn { stop, thread }
    }

    /// Lets the churn run for `time` (or until it ends), then stops it; returns the
    /// connections it made and its failures.
    fn stop_after(self, time: Duration) -> (u64, Vec<String>) {
        let deadline = Instant::now() + time;
        while Instant::now() < deadline && !self.thread.is_finished() {
            lb_tests::lab::stop_if_interrupted();
            std::thread::sleep(Duration::from_millis(100));
        }
        self.stop.store(true, Relaxed);
        self.thread.join().expect("churn thread")
    }
}

/// `PROBES` new connections to `vip`, one after another; returns the failures.
fn probe(client_ns: &str, vip: SocketAddrV4) -> Vec<String> {
    let _in = enter_named(client_ns);
    (0..PROBES)
        .filter_map(|n| {
            let src = client_addr(LONG_LIVED + n % LONG_LIVED);
            match http_get(src, vip, "/") {
                Ok((200, _)) => None,
                outcome => Some(format!("{src} -> {vip}: {outcome:?}")),
            }
        })
        .collect()
}

/// Churn through `web` beside the long-lived connections, `fills` times as many connections
/// as the table of `flows` holds (and a flood when `flood`), then probes to both VIPs: no
/// failure anywhere.
fn churn_then_probe(tag: &str, flows: u32, fills: u64, flood: bool) {
    let (lab, daemon) = lab(tag, flows);
    let client_ns = lab.client.name.clone();
    let web = SocketAddrV4::new(WEB, 80);
    let web2 = SocketAddrV4::new(WEB2, 80);
    let leaks = LeakWatcher::start(&client_ns, (0..BACKENDS).map(backend_addr).collect());
    let long_lived = KeepAlive::start(&client_ns, web, LONG_LIVED);
    std::thread::sleep(Duration::from_secs(1));
    let flooding = flood.then(|| {
        Flood::start(
            &client_ns,
            FloodSpec {
                target: web,
                src_mac: mac_bytes(&mac_of(&lab.client, "eth0")),
                dst_mac: mac_bytes(&mac_of(&lab.lb, "eth0")),
                // A steady flood the two cores carry beside the churn, the long-lived
                // connections and the backends without dropping packets at the veths' backlogs
                // (at 100k spoofed SYNs a second they do, and TCP's backed-off retransmissions
                // then outlast the clients' timeouts: a test of the VM, not of the balancer).
                rate: Some(30_000),
                duration: CHURN_TIME + Duration::from_secs(30),
                max_frames: 6_000_000,
            },
        )
    });
    let churn = Churn::start(&client_ns, web, fills * flows as u64);
    let (connections, churn_errors) = churn.stop_after(CHURN_TIME);
    // Probes to both VIPs, while the flood (if any) goes on.
    let failed_web = probe(&client_ns, web);
    let failed_web2 = probe(&client_ns, web2);
    let sent = flooding.map(Flood::stop);
    let broken = long_lived.stop();
    let leaked = leaks.stop();
    let stats = daemon.ok(&["stats"]);
    println!("{stats}");
    println!(
        "churn: {connections} connections, {} failed; probes failed: web {}/{PROBES}, web2 {}/{PROBES}; flood: {sent:?}; leaked {leaked}",
        churn_errors.len(),
        failed_web.len(),
        failed_web2.len()
    );
    if let Some(sent) = sent {
        assert!(sent.frames > 100_000, "the flood must have been a flood: {} frames", sent.frames);
    }
    assert!(
        connections >= fills * flows as u64,
        "the churn must fill the table {fills} times: {connections} connections"
    );
    assert!(
        failed_web.is_empty() && failed_web2.is_empty(),
        "new connections failed:\n{failed_web:#?}\n{failed_web2:#?}"
    );
    if flood {
        // Beside a flood the two cores drop packets at the veths' backlogs, so a churn
        // connection may time out; the probes that follow, and every long-lived connection,
        // are what must not fail.
        println!("churn connections failed beside the flood: {churn_errors:#?}");
    } else {
        assert!(churn_errors.is_empty(), "connections of the churn failed:\n{churn_errors:#?}");
    }
    assert!(broken.is_empty(), "broken long-lived connections:\n{}", broken.join("\n"));
    assert_eq!(leaked, 0, "packets reached the client side with a backend's address");
}

#[test]
fn shared_backends_take_new_connections_after_churn() {
    if !require_root("shared_backends_take_new_connections_after_churn") {
        return;
    }
    // 1024 flows (256 sets of 4 ways), as the defect was met, filled three times over. Not
    // fewer: the 24 long-lived connections are live and proven, and in 64 sets four of them
    // share a set about one run in 25, which then has no way for a new connection's reply
    // (a table too small for its live connections, not the defect).
    churn_then_probe("sh", 1024, 3, false);
}

#[test]
fn shared_backends_take_new_connections_after_churn_under_a_syn_flood() {
    if !require_root("shared_backends_take_new_connections_after_churn_under_a_syn_flood") {
        return;
    }
    // 1024 flows, as the defect was met: a table whose sets a flood's first packets do not
    // churn faster than a new connection's SYN-ACK comes back (in a 256-flow table, tens of
    // thousands of spoofed SYNs a second leave a reply entry a few milliseconds; no table can
    // tell a client's SYN from a spoofed one).
    churn_then_probe("shf", 1024, 2, true);
}
