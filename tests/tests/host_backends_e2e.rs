//! Backends named by host name, end to end: the real daemon resolves `app.lbt.test` with a
//! hosts file of the test's (bind-mounted over /etc/hosts in the daemon's own mount
//! namespace), and the test changes what the name gives while a long-lived connection streams
//! through the XDP VIP. Needs root.
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::{Duration, Instant};

use lb_tests::lab::{Daemon, Hold, Lab, backend_addr, client_addr, http_get};
use lb_tests::netns::enter_named;
use lb_tests::privileges::require_root;

const VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);
const NAME: &str = "app.lbt.test";
const CLIENTS: usize = 8;

fn vip() -> SocketAddrV4 {
    SocketAddrV4::new(VIP, 80)
}

fn backend(i: usize) -> SocketAddr {
    SocketAddr::from((backend_addr(i), 8080))
}

fn config(socket: &std::path::Path, hold: &str) -> String {
    format!(
        "[daemon]\n\
         api_socket = \"{}\"\n\
         resolve_interval = \"200ms\"\n\
         resolve_hold = \"{hold}\"\n\
         \n\
         [[vip]]\n\
         name = \"web\"\n\
         address = \"{VIP}\"\n\
         port = 80\n\
         health = {{ kind = \"http\", path = \"/health\", interval = \"200ms\", timeout = \"100ms\", rise = 2, fall = 3 }}\n\
         backends = [ {{ address = \"{NAME}\", port = 8080 }} ]\n",
        socket.display()
    )
}

/// Rewrites the hosts file in place (the daemon's bind mount follows the inode).
fn point_name_at(hosts: &std::path::Path, backends: &[usize]) {
    let lines: Vec<String> = backends.iter().map(|i| format!("{} {NAME}\n", backend_addr(*i))).collect();
    std::fs::write(hosts, format!("127.0.0.1 localhost\n{}", lines.concat())).unwrap();
}

/// Which backend answers each client, by name.
fn answers(client_ns: &str) -> Vec<String> {
    let _in = enter_named(client_ns);
    (0..CLIENTS)
        .map(|c| {
            let (status, body) = http_get(client_addr(c), vip(), "/").unwrap_or_else(|e| panic!("client {c}: {e}"));
            assert_eq!(status, 200);
            String::from_utf8_lossy(&body).trim().to_string()
        })
        .collect()
}

#[test]
fn a_backend_host_name_is_followed_without_breaking_flows() {
    if !require_root("a_backend_host_name_is_followed_without_breaking_flows") {
        return;
    }
    let mut lab = Lab::new("h", 2, CLIENTS);
    lab.serve_test_backends(env!("CARGO_BIN_EXE_lb-test-backend"), 2);
    let cns = lab.client.name.clone();

    let hosts_dir = tempfile::tempdir().unwrap();
    let hosts = hosts_dir.path().join("hosts");
    point_name_at(&hosts, &[0]);
    let mut d = Daemon::new(&lab.lb, "eth0", "h", &["--xdp-mode", "native", "--log-level", "info,lb_ctl=debug"])
        .with_hosts_file(&hosts);
    d.write_config_text(&config(&d.socket(), "30s"));
    d.start();
    d.wait_for_backend(backend(0), Duration::from_secs(5), "up", |b| b.in_ring);
    let list = d.ok(&["backends", "list"]);
    assert!(list.contains("HOST") && list.contains(NAME), "backends list names the host:\n{list}");
    assert!(answers(&cns).iter().all(|b| b == "backend-0"));

    // The name moves to backend 1 while a connection to backend 0 streams.
    let hold = Hold::open(&cns, vip(), client_addr(0), 3);
    point_name_at(&hosts, &[1]);
    let took = d.wait_for_backend(backend(1), Duration::from_secs(5), "resolved and up", |b| b.in_ring);
    println!("the new address took new flows after {} ms", took.as_millis());
    let old = d.find_backend(backend(0)).expect("the vanished address stays, drained");
    assert_eq!((old.state.as_str(), old.in_ring), ("unresolved", false), "{old:?}");
    assert!(answers(&cns).iter().all(|b| b == "backend-1"), "new flows go to the name's new address");
    hold.finish("a connection to the address the name no longer gives");

    // A name that stops resolving changes nothing.
    std::fs::write(&hosts, "127.0.0.1 localhost\n").unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !d.log_text().contains("backend host name did not resolve") {
        assert!(Instant::now() < deadline, "no warning about the failed lookup:\n{}", d.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(answers(&cns).iter().all(|b| b == "backend-1"), "a failed lookup keeps the backends");

    // A reload with a short hold: the vanished address is removed once it has passed.
    point_name_at(&hosts, &[1]);
    d.write_config_text(&config(&d.socket(), "1s"));
    d.ok(&["reload"]);
    let deadline = Instant::now() + Duration::from_secs(5);
    while d.find_backend(backend(0)).is_some() {
        assert!(Instant::now() < deadline, "the vanished address was not removed after the hold");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(d.log_text().contains("removed (held long enough)"), "{}", d.log_text());
    assert!(answers(&cns).iter().all(|b| b == "backend-1"));
}
