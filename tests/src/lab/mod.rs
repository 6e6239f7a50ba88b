//! The namespace lab every root suite, the demo and the benchmarks run in: one L2 segment, a
//! switch namespace with a bridge, and hosts (client, balancer, backends) each linked to it by
//! a veth pair whose host end is `eth0`. The balancer has one interface, as on a real
//! single-NIC host: XDP_TX sends VIP traffic back out of it.
//!
//! Everything is named with the run's prefix (`lbt-<pid>-…`, see [`crate::netns`]) and goes
//! away when the lab is dropped (also when the run panics); Ctrl-C is caught by
//! [`catch_ctrl_c`] and a run killed outright is cleaned up by the next one.
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};

use lb_common::program_names;
use lb_ctl::dataplane::load::{AttachMode, attach, load_decap};

use crate::netns::{Netns, die_with_parent};

mod daemon;
mod dsr;
mod hold;
mod http;

pub use daemon::{Daemon, Entry};
pub use dsr::DecapPins;
pub use hold::{Ending, Hold};
pub use http::{http_get, http_get_from, http_post, pattern_byte, spread, udp_refused, wait_for_listener};

pub const LB_CLIENT_SIDE: &str = "192.0.2.1";
pub const LB_BACKEND_SIDE: &str = "198.51.100.1";
/// The switch port facing the balancer.
pub const LB_PORT: &str = "p-lb";

/// The address of client `i` (0-based).
pub fn client_addr(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(192, 0, 2, 10 + i as u8)
}

/// The address of backend `i` (0-based).
pub fn backend_addr(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 51, 100, 11 + i as u8)
}

/// The balancer's IPv6 addresses (see [`Lab::enable_ipv6`]): facing the clients, the backends.
pub const LB_CLIENT_SIDE6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xc, 0, 0, 0, 0, 1);
pub const LB_BACKEND_SIDE6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xb, 0, 0, 0, 0, 1);
/// Where the lab's IPv6 VIPs live (routed to the balancer).
pub const VIP_PREFIX6: &str = "2001:db8:a::/64";

/// The IPv6 address of client `i` (0-based).
pub fn client_addr6(i: usize) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 0xdb8, 0xc, 0, 0, 0, 0, 0x10 + i as u16)
}

/// The IPv6 address of backend `i` (0-based).
pub fn backend_addr6(i: usize) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 0xdb8, 0xb, 0, 0, 0, 0, 0x11 + i as u16)
}

pub struct Lab {
    pub switch: Netns,
    pub lb: Netns,
    pub client: Netns,
    pub backends: Vec<Netns>,
    children: Vec<Child>,
    /// XDP programs attached by the lab (dropping them detaches them).
    programs: Vec<aya::Ebpf>,
}

impl Lab {
    /// Builds the lab: `backends` backends, one client namespace holding `clients` addresses.
    pub fn new(tag: &str, backends: usize, clients: usize) -> Lab {
        let switch = Netns::new(&format!("{tag}sw"));
        switch.exec(&["ip", "link", "add", "br0", "type", "bridge"]);
        switch.exec(&["ip", "link", "set", "br0", "up"]);
        let lab = Lab {
            lb: Netns::new(&format!("{tag}lb")),
            client: Netns::new(&format!("{tag}c")),
            backends: (0..backends).map(|i| Netns::new(&format!("{tag}b{i}"))).collect(),
            switch,
            children: Vec::new(),
            programs: Vec::new(),
        };
        lab.plug(&lab.lb, LB_PORT);
        lab.lb.exec(&["ip", "addr", "add", &format!("{LB_CLIENT_SIDE}/24"), "dev", "eth0"]);
        lab.lb.exec(&["ip", "addr", "add", &format!("{LB_BACKEND_SIDE}/24"), "dev", "eth0"]);
        for key in
            ["net.ipv4.ip_forward=1", "net.ipv4.conf.all.send_redirects=0", "net.ipv4.conf.eth0.send_redirects=0"]
        {
            lab.lb.exec(&["sysctl", "-qw", key]);
        }

        lab.plug(&lab.client, "p-c");
        for i in 0..clients {
            lab.client.exec(&["ip", "addr", "add", &format!("{}/24", client_addr(i)), "dev", "eth0"]);
        }
        lab.client.exec(&["ip", "route", "add", "203.0.113.0/24", "via", LB_CLIENT_SIDE]);

        for (i, b) in lab.backends.iter().enumerate() {
            lab.plug(b, &format!("p-b{i}"));
            b.exec(&["ip", "addr", "add", &format!("{}/24", backend_addr(i)), "dev", "eth0"]);
            b.exec(&["ip", "route", "add", "default", "via", LB_BACKEND_SIDE]);
            // VIPs held on lo for DSR must not be announced or answered for on eth0.
            for key in [
                "net.ipv4.conf.all.arp_ignore=1",
                "net.ipv4.conf.all.arp_announce=2",
                "net.ipv4.conf.all.rp_filter=0",
                "net.ipv4.conf.eth0.rp_filter=0",
            ] {
                b.exec(&["sysctl", "-qw", key]);
            }
        }
        lab
    }

    /// Adds IPv6 next to IPv4: the clients in 2001:db8:c::/64 and the backends in
    /// 2001:db8:b::/64, each routed through the balancer (which forwards IPv6), and the VIP
    /// prefix routed to it. Addresses skip duplicate address detection, so they are usable at
    /// once.
    pub fn enable_ipv6(&self, clients: usize) {
        let add = |host: &Netns, addr: String| {
            host.exec(&["ip", "-6", "addr", "add", &addr, "dev", "eth0", "nodad"]);
        };
        add(&self.lb, format!("{LB_CLIENT_SIDE6}/64"));
        add(&self.lb, format!("{LB_BACKEND_SIDE6}/64"));
        self.lb.exec(&["sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"]);
        for i in 0..clients {
            add(&self.client, format!("{}/64", client_addr6(i)));
        }
        self.client.exec(&["ip", "-6", "route", "add", VIP_PREFIX6, "via", &LB_CLIENT_SIDE6.to_string()]);
        self.client.exec(&["ip", "-6", "route", "add", "2001:db8:b::/64", "via", &LB_CLIENT_SIDE6.to_string()]);
        for (i, b) in self.backends.iter().enumerate() {
            add(b, format!("{}/64", backend_addr6(i)));
            b.exec(&["ip", "-6", "route", "add", "default", "via", &LB_BACKEND_SIDE6.to_string()]);
        }
    }

    /// Links `host` to the bridge: `eth0` in the host, `port` on the bridge. Two queues each
    /// (XDP on single-queue veths serialises on one core), and no checksum/segmentation
    /// offloads on the host end: frames the stack sends are complete and MTU-sized, as XDP on
    /// the other side needs.
    fn plug(&self, host: &Netns, port: &str) {
        self.switch.exec(&[
            "ip",
            "link",
            "add",
            port,
            "numtxqueues",
            "2",
            "numrxqueues",
            "2",
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            &host.name,
            "numtxqueues",
            "2",
            "numrxqueues",
            "2",
        ]);
        self.switch.exec(&["ip", "link", "set", port, "master", "br0", "up"]);
        host.exec(&["ip", "link", "set", "eth0", "up"]);
        host.exec(&["ethtool", "-K", "eth0", "tx", "off", "tso", "off", "gso", "off"]);
    }

    /// Attaches the bare XDP_PASS program (`lb_pass`, native mode) to `port` in the switch:
    /// native XDP_TX on a veth delivers only to a peer that runs an XDP program. Detached when
    /// the lab is dropped.
    pub fn pass_on_switch_port(&mut self, port: &str) {
        let mut pass = load_decap().expect("loading lb_pass");
        {
            let _in = self.switch.enter();
            attach(&mut pass, program_names::PASS, port, AttachMode::Native)
                .unwrap_or_else(|e| panic!("lb_pass on {port}: {e}"));
        }
        self.programs.push(pass);
    }

    /// Pings every backend from the balancer, so their neighbour entries exist before the
    /// first packet the XDP program forwards.
    pub fn resolve_backends(&self) {
        for i in 0..self.backends.len() {
            self.lb.exec(&["ping", "-c1", "-W2", &backend_addr(i).to_string()]);
        }
    }

    /// [`Lab::resolve_backends`] for the backends' IPv6 addresses.
    pub fn resolve_backends6(&self) {
        for i in 0..self.backends.len() {
            self.lb.exec(&["ping", "-6", "-c1", "-W2", &backend_addr6(i).to_string()]);
        }
    }

    /// Settings for load (the benchmarks): static bridge FDB entries for every host (otherwise
    /// frames to a silent receiver flood every port), TIME_WAIT reuse in the client (otherwise
    /// connect/close runs exhaust its ports), and no bridge netfilter (when the host has it).
    pub fn tune_for_load(&self) {
        let hosts = [(&self.lb, LB_PORT.to_string()), (&self.client, "p-c".to_string())]
            .into_iter()
            .chain(self.backends.iter().enumerate().map(|(i, b)| (b, format!("p-b{i}"))));
        for (host, port) in hosts {
            let mac = mac_of(host, "eth0");
            self.switch.exec(&["bridge", "fdb", "replace", &mac, "dev", &port, "master", "static"]);
        }
        self.client.exec(&["sysctl", "-qw", "net.ipv4.tcp_tw_reuse=1"]);
        self.client.exec(&["sysctl", "-qw", "net.ipv4.ip_local_port_range=1024 65000"]);
        for key in [
            "net.bridge.bridge-nf-call-iptables",
            "net.bridge.bridge-nf-call-ip6tables",
            "net.bridge.bridge-nf-call-arptables",
        ] {
            if std::path::Path::new(&format!("/proc/sys/{}", key.replace('.', "/"))).exists() {
                self.switch.exec(&["sysctl", "-qw", &format!("{key}=0")]);
            }
        }
    }

    /// Starts `args` inside namespace `ns` in the background; it is stopped when the lab is
    /// dropped (and killed when the thread that started it ends).
    pub fn spawn(&mut self, ns: &str, args: &[&str]) -> u32 {
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", ns])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        let child = die_with_parent(&mut command).spawn().unwrap_or_else(|e| panic!("spawn {args:?}: {e}"));
        let pid = child.id();
        self.children.push(child);
        pid
    }

    /// Starts the test backend `bin` (`lb-test-backend`) on :8080 in backend `i`'s namespace,
    /// named `backend-i`, and waits for its listener; returns its pid.
    pub fn start_test_backend(&mut self, bin: &str, i: usize) -> u32 {
        let ns = self.backends[i].name.clone();
        let pid = self.spawn(&ns, &[bin, "0.0.0.0:8080", &format!("backend-{i}")]);
        let _in = self.backends[i].enter();
        wait_for_listener(std::net::SocketAddr::from((backend_addr(i), 8080)), std::time::Duration::from_secs(10));
        pid
    }

    /// The first `count` backends serving (see [`Lab::start_test_backend`]), the XDP_PASS
    /// program on the balancer's switch port, and the backends' MACs known to the balancer:
    /// the lab as a daemon test finds it. Returns the backends' pids.
    pub fn serve_test_backends(&mut self, bin: &str, count: usize) -> Vec<u32> {
        let pids = (0..count).map(|i| self.start_test_backend(bin, i)).collect();
        self.pass_on_switch_port(LB_PORT);
        self.resolve_backends();
        pids
    }

    /// Stops a process started with [`Lab::spawn`].
    pub fn kill(&mut self, pid: u32) {
        if let Some(pos) = self.children.iter().position(|c| c.id() == pid) {
            stop(self.children.remove(pos));
        }
    }
}

/// SIGTERM, then SIGKILL if it is still there after 3 s: a server with worker processes (nginx)
/// stops them on SIGTERM, where SIGKILL to its master would leave them running, holding the
/// deleted namespace.
pub(crate) fn stop(mut child: Child) {
    // SAFETY: kill(2) on the pid of our own child, not reaped yet. SIGCONT: a stopped process
    // (a test's hung backend) acts on SIGTERM only once continued.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
        libc::kill(child.id() as i32, libc::SIGCONT);
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    while child.try_wait().ok().flatten().is_none() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
}

impl Drop for Lab {
    fn drop(&mut self) {
        for child in self.children.drain(..) {
            stop(child);
        }
        // Then the programs are detached and the namespaces deleted, in field order.
    }
}

/// The MAC address of `dev` in `host`.
pub fn mac_of(host: &Netns, dev: &str) -> String {
    let out = host.exec(&["cat", &format!("/sys/class/net/{dev}/address")]);
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A binary built next to the running one (`lb-test-backend` for the demo and benchmarks).
pub fn sibling_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("own path");
    exe.parent().expect("own directory").join(name)
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Catches Ctrl-C for long runs (the demo, benchmarks): instead of dying with the lab up, the
/// process notes it, and [`interrupted`] tells its next step to stop, so the lab is dropped
/// and torn down. The lab's own processes get the signal too and stop by themselves.
pub fn catch_ctrl_c() {
    let _ = ctrlc::set_handler(|| {
        INTERRUPTED.store(true, Ordering::Relaxed);
        eprintln!("\ninterrupted: tearing the lab down");
    });
}

/// Whether Ctrl-C was pressed since [`catch_ctrl_c`].
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// Ends a wait of the lab at once after Ctrl-C (by panicking, so that everything set up so
/// far is dropped and torn down), instead of at its timeout.
pub fn stop_if_interrupted() {
    if interrupted() {
        panic!("interrupted (Ctrl-C)");
    }
}
