//! The daemon's life on the host, as an operator meets it: a start that fails late leaves the
//! host as it found it, a start from a private mount namespace is refused before it pins into
//! a bpffs that dies with it, pins removed under a running daemon are put back while the
//! balancer keeps forwarding, a program taken off the interface is attached again, and
//! `detach` neither removes a running daemon's pins nor claims to have removed what was not
//! there. Needs root.
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::time::{Duration, Instant};

use lb_tests::lab::{Daemon, Entry, Lab, backend_addr, client_addr, http_get};
use lb_tests::netns::enter_named;
use lb_tests::privileges::require_root;

const VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);
/// An address of the client side's subnet that no host holds.
const MISSING: &str = "192.0.2.99";

/// A lab with one test backend on :8080 and the XDP_PASS program on the balancer's switch port.
fn lab(tag: &str) -> Lab {
    let mut lab = Lab::new(tag, 1, 1);
    lab.serve_test_backends(env!("CARGO_BIN_EXE_lb-test-backend"), 1);
    lab
}

fn daemon(lab: &Lab, tag: &str) -> Daemon {
    Daemon::new(&lab.lb, "eth0", tag, &["--xdp-mode", "native", "--log-level", "info"])
}

/// lb.toml: the NAT VIP `web` on the backend, and `extra` after it.
fn config(d: &Daemon, extra: &str) -> String {
    config_to_port(d, 8080, extra)
}

/// As [`config`], with `web`'s backend on `port` (8080: the one the test backend serves).
fn config_to_port(d: &Daemon, port: u16, extra: &str) -> String {
    format!(
        "[daemon]\napi_socket = \"{}\"\nflow_table_size = 65536\n\n[[vip]]\nname = \"web\"\naddress = \"{VIP}\"\n\
         port = 80\nbackends = [ {{ address = \"{}\", port = {port} }} ]\n{extra}",
        d.socket().display(),
        backend_addr(0)
    )
}

/// A proxy VIP on an address this host does not have: the file validates, the start fails
/// when the proxy listens, after the XDP program is loaded and attached.
fn proxy_vip_on_a_missing_address() -> String {
    format!(
        "\n[[vip]]\nname = \"lost\"\naddress = \"{MISSING}\"\nport = 8080\nprotocol = \"http\"\nforwarding = \"proxy\"\n\
         backends = [ {{ address = \"{}\", port = 8080 }} ]\n",
        backend_addr(0)
    )
}

/// One request to the VIP from the client namespace.
fn through_vip(client_ns: &str) -> std::io::Result<u16> {
    let _in = enter_named(client_ns);
    http_get(client_addr(0), SocketAddrV4::new(VIP, 80), "/").map(|(status, _)| status)
}

/// Waits until the VIP answers from the client namespace (`what`: the failure's message).
fn wait_for_vip(client_ns: &str, d: &Daemon, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while through_vip(client_ns).ok() != Some(200) {
        assert!(Instant::now() < deadline, "{what}:\n{}", d.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether an XDP program is on `eth0` of the balancer's namespace.
fn xdp_on_eth0(lab: &Lab) -> bool {
    let out = lab.lb.exec(&["ip", "link", "show", "dev", "eth0"]);
    String::from_utf8_lossy(&out.stdout).contains("xdp")
}

/// The id of the XDP program on `eth0` of the balancer's namespace (`ip link`'s `prog/xdp id`).
fn xdp_program_on_eth0(lab: &Lab) -> Option<u32> {
    let out = lab.lb.exec(&["ip", "-d", "link", "show", "dev", "eth0"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let at = text.find("prog/xdp id ")? + "prog/xdp id ".len();
    text[at..].split_whitespace().next()?.parse().ok()
}

/// `GET /v1/metrics` on the control socket.
fn metrics(socket: &Path) -> String {
    use std::io::{Read as _, Write as _};
    let mut stream = std::os::unix::net::UnixStream::connect(socket).expect("the control socket");
    stream.write_all(b"GET /v1/metrics HTTP/1.0\r\nHost: lb\r\n\r\n").unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    text
}

fn files_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default()
}

/// A start that fails late (a proxy VIP on an address the host lacks: found after the program
/// is attached and the maps written) leaves the host as it found it: no program on the
/// interface, no pins, no saved state, no socket or lock. And when it found a running
/// balancer's pins (a daemon killed with -9), those stay as they were: same saved ids, and
/// the balancer keeps forwarding as it did, its own program back on the interface (the failed
/// start's file moved the VIP's backend to another port: no map took it).
#[test]
fn a_start_that_fails_late_leaves_the_host_as_it_found_it() {
    if !require_root("a_start_that_fails_late_leaves_the_host_as_it_found_it") {
        return;
    }
    let lab = lab("fl");
    let cns = lab.client.name.clone();
    let mut d = daemon(&lab, "fl");
    d.write_config_text(&config(&d, &proxy_vip_on_a_missing_address()));
    let (status, log) = d.attach_expecting_failure(Entry::Nsenter);
    println!("failed start: {status}\n{log}");
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(log.contains(MISSING), "the error names the proxy VIP's address:\n{log}");
    assert!(!xdp_on_eth0(&lab), "a failed start left the XDP program on eth0:\n{log}");
    assert!(!d.pins().exists(), "a failed start left pins in {}: {:?}", d.pins().display(), files_in(d.pins()));
    assert_eq!(files_in(&d.state_dir()), Vec::<String>::new(), "a failed start left saved state");
    assert_eq!(files_in(d.socket().parent().unwrap()), Vec::<String>::new(), "a failed start left a socket or lock");
    assert!(through_vip(&cns).is_err(), "nothing forwards the VIP after a failed start");

    // A running balancer's pins, its daemon gone (kill -9): the balancer forwards.
    d.write_config_text(&config(&d, ""));
    d.start();
    wait_for_vip(&cns, &d, "the VIP never answered");
    d.kill9();
    let ids_file = files_in(&d.state_dir()).into_iter().find(|f| f.ends_with(".ids.json")).expect("saved ids");
    let saved = std::fs::read_to_string(d.state_dir().join(&ids_file)).unwrap();
    let pins = files_in(d.pins());
    let program = xdp_program_on_eth0(&lab).expect("the running balancer's program on eth0");

    d.write_config_text(&config_to_port(&d, 9090, &proxy_vip_on_a_missing_address()));
    let (status, log) = d.attach_expecting_failure(Entry::Nsenter);
    assert_eq!(status.code(), Some(1), "{log}");
    let mut after = files_in(d.pins());
    after.sort();
    let mut before = pins.clone();
    before.sort();
    assert_eq!(after, before, "the running balancer's pins stay as they were:\n{log}");
    assert_eq!(
        std::fs::read_to_string(d.state_dir().join(&ids_file)).unwrap(),
        saved,
        "a failed start rewrote the saved ids of the balancer it found"
    );
    assert_eq!(
        xdp_program_on_eth0(&lab),
        Some(program),
        "the failed start left its own program on eth0, not the running balancer's:\n{log}"
    );
    assert!(log.contains("put the balancer's program back"), "the log says the program went back:\n{log}");
    assert_eq!(through_vip(&cns).ok(), Some(200), "the balancer found running keeps forwarding:\n{log}");

    // A start that succeeds lets the program it replaced go: nothing holds it any more.
    d.write_config_text(&config(&d, ""));
    d.start();
    wait_for_vip(&cns, &d, "the VIP never answered after the restart");
    assert_ne!(xdp_program_on_eth0(&lab), Some(program), "the restart put its own program on eth0");
    let deadline = Instant::now() + Duration::from_secs(5);
    while program_loaded(program) {
        assert!(Instant::now() < deadline, "the program the restart replaced is still loaded:\n{}", d.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether the kernel still has program `id` loaded.
fn program_loaded(id: u32) -> bool {
    aya::programs::loaded_programs().filter_map(Result::ok).any(|p| p.id() == id)
}

/// `ip netns exec` gives the daemon a private /sys, whose bpffs (mounted by the daemon) goes
/// with it: the start is refused, saying how to run it, and pins nothing.
#[test]
fn a_start_under_ip_netns_exec_is_refused_with_the_way_to_run_it() {
    if !require_root("a_start_under_ip_netns_exec_is_refused_with_the_way_to_run_it") {
        return;
    }
    let lab = lab("ne");
    let mut d = daemon(&lab, "ne");
    d.write_config_text(&config(&d, ""));
    let (status, log) = d.attach_expecting_failure(Entry::IpNetnsExec);
    println!("under ip netns exec: {status}\n{log}");
    assert_eq!(status.code(), Some(1), "a daemon pinning into a private bpffs was started:\n{log}");
    assert!(log.contains("nsenter --net=/run/netns/"), "the error says how to run it:\n{log}");
    assert!(!d.pins().exists(), "pins left in {}", d.pins().display());
    assert!(!xdp_on_eth0(&lab), "the refused start left the XDP program on eth0");
}

/// `rm -rf` of the pin directory under a running daemon: the balancer keeps forwarding (the
/// daemon holds its own reference on the link), the pins come back, and the log, `status` and
/// the metrics say so. Once the daemon stops, the put-back pins keep the balancer forwarding.
#[test]
fn removed_pins_are_put_back_while_the_balancer_keeps_forwarding() {
    if !require_root("removed_pins_are_put_back_while_the_balancer_keeps_forwarding") {
        return;
    }
    let lab = lab("rp");
    let cns = lab.client.name.clone();
    let mut d = daemon(&lab, "rp");
    d.write_config_text(&config(&d, ""));
    d.start();
    let status = d.ok(&["status"]);
    assert!(status.contains(&d.pins().display().to_string()), "status shows the pin directory:\n{status}");
    wait_for_vip(&cns, &d, "the VIP never answered");

    std::fs::remove_dir_all(d.pins()).expect("rm -rf of the pins");
    assert!(xdp_on_eth0(&lab), "removing the pins took the XDP program off eth0");
    assert_eq!(through_vip(&cns).ok(), Some(200), "the VIP stopped answering when its pins were removed");

    let deadline = Instant::now() + Duration::from_secs(20);
    while !(d.pins().join("link").exists() && d.ok(&["status"]).contains("RESTORED")) {
        assert!(Instant::now() < deadline, "the pins were not put back:\n{}", d.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = d.log_text();
    assert!(log.contains("pinned again"), "the log says the pins were put back:\n{log}");
    let metrics = metrics(&d.socket());
    assert!(metrics.contains("lb_pins_restored_total 1"), "{metrics}");
    assert!(files_in(d.pins()).len() > 1, "the maps are pinned again: {:?}", files_in(d.pins()));

    let stopped = d.stop();
    assert!(stopped.success(), "{stopped}");
    assert!(xdp_on_eth0(&lab), "the put-back pins keep the program on eth0 after the stop");
    assert_eq!(through_vip(&cns).ok(), Some(200), "the balancer forwards after the stop");
}

/// `detach` run without the daemon's `--socket` (a daemon with `api_socket` of its own) sees
/// the running daemon and removes nothing; after the stop it says what it removed, and on a
/// second run that nothing was there.
#[test]
fn detach_refuses_a_running_daemon_and_says_what_it_removed() {
    if !require_root("detach_refuses_a_running_daemon_and_says_what_it_removed") {
        return;
    }
    let lab = lab("dr");
    let cns = lab.client.name.clone();
    let mut d = daemon(&lab, "dr");
    d.write_config_text(&config(&d, ""));
    d.start();
    let out = d.detach_without_socket();
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("detach while running: {:?}: {stderr}", out.status.code());
    assert!(!out.status.success(), "detach removed a running daemon's pins");
    assert!(stderr.contains("running"), "{stderr}");
    assert!(d.pins().join("link").exists(), "the running daemon's pins are still there");
    wait_for_vip(&cns, &d, "the VIP does not answer after the refused detach");

    assert!(d.stop().success());
    let out = d.detach_without_socket();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("detach after the stop: {stdout}");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("XDP program detached") && stdout.contains("pinned maps removed"), "{stdout}");
    assert!(!xdp_on_eth0(&lab), "detach took the program off");
    let out = d.detach_without_socket();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("detach again: {stdout}");
    assert!(stdout.contains("nothing to remove"), "a second detach found nothing: {stdout}");
}

/// `bpftool link detach` of the pinned link: what the kernel does to the link when its
/// interface is deleted (a driver reload, a bond or VLAN rebuilt), done on purpose.
fn detach_link(pin: &Path) {
    const BPF_OBJ_GET: libc::c_long = 7;
    const BPF_LINK_DETACH: libc::c_long = 34;
    let name = std::ffi::CString::new(pin.as_os_str().as_encoded_bytes()).unwrap();
    // union bpf_attr for BPF_OBJ_GET: pathname, bpf_fd, file_flags (and room to spare).
    let mut attr = [0u64; 4];
    attr[0] = name.as_ptr() as u64;
    // SAFETY: bpf(2) with an attribute of the size passed, alive across the call.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, BPF_OBJ_GET, attr.as_ptr(), size_of_val(&attr)) };
    assert!(fd >= 0, "opening {}: {}", pin.display(), std::io::Error::last_os_error());
    // union bpf_attr for BPF_LINK_DETACH: link_fd.
    let attr = [fd as u64, 0, 0, 0];
    // SAFETY: as above.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, BPF_LINK_DETACH, attr.as_ptr(), size_of_val(&attr)) };
    assert_eq!(rc, 0, "detaching {}: {}", pin.display(), std::io::Error::last_os_error());
    // SAFETY: our own descriptor.
    unsafe { libc::close(fd as i32) };
}

/// The program taken off the interface under a running daemon (its link detached): the daemon
/// attaches it again by the interface's name within a few seconds, pins the new link in the
/// old one's place, and says so in the log, `status` and the metrics; the VIP answers again,
/// and keeps answering after the daemon stops.
#[test]
fn a_program_taken_off_the_interface_is_attached_again() {
    if !require_root("a_program_taken_off_the_interface_is_attached_again") {
        return;
    }
    let lab = lab("ra");
    let cns = lab.client.name.clone();
    let mut d = daemon(&lab, "ra");
    d.write_config_text(&config(&d, ""));
    d.start();
    wait_for_vip(&cns, &d, "the VIP never answered");

    detach_link(&d.pins().join("link"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(xdp_on_eth0(&lab) && d.ok(&["status"]).contains("ATTACHED AGAIN 1 times")) {
        assert!(Instant::now() < deadline, "the program was not attached again:\n{}", d.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
    wait_for_vip(&cns, &d, "the VIP does not answer after the program was attached again");
    let log = d.log_text();
    assert!(log.contains("is attached again"), "the log says so:\n{log}");
    let metrics = metrics(&d.socket());
    assert!(metrics.contains("lb_xdp_attached_again_total 1"), "{metrics}");

    let stopped = d.stop();
    assert!(stopped.success(), "{stopped}");
    assert!(xdp_on_eth0(&lab), "the new pinned link keeps the program on eth0 after the stop");
    assert_eq!(through_vip(&cns).ok(), Some(200), "the balancer forwards after the stop");
}
