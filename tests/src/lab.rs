//! A namespace lab on one L2 segment: a switch namespace with a bridge, and hosts (client,
//! balancer, backends) each linked to it by a veth pair whose host end is `eth0`. The balancer
//! has one interface, as on a real single-NIC host: XDP_TX sends VIP traffic back out of it.
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::netns::Netns;

pub const LB_CLIENT_SIDE: &str = "192.0.2.1";
pub const LB_BACKEND_SIDE: &str = "198.51.100.1";

/// The address of client `i` (0-based).
pub fn client_addr(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(192, 0, 2, 10 + i as u8)
}

/// The address of backend `i` (0-based).
pub fn backend_addr(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 51, 100, 11 + i as u8)
}

pub struct Lab {
    pub switch: Netns,
    pub lb: Netns,
    pub client: Netns,
    pub backends: Vec<Netns>,
    children: Vec<Child>,
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
        };
        lab.plug(&lab.lb, "p-lb");
        lab.lb.exec(&["ip", "addr", "add", &format!("{LB_CLIENT_SIDE}/24"), "dev", "eth0"]);
        lab.lb.exec(&["ip", "addr", "add", &format!("{LB_BACKEND_SIDE}/24"), "dev", "eth0"]);
        for key in ["net.ipv4.ip_forward=1", "net.ipv4.conf.all.send_redirects=0", "net.ipv4.conf.eth0.send_redirects=0"] {
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
            for key in ["net.ipv4.conf.all.arp_ignore=1", "net.ipv4.conf.all.arp_announce=2", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.eth0.rp_filter=0"] {
                b.exec(&["sysctl", "-qw", key]);
            }
        }
        lab
    }

    /// Links `host` to the bridge: `eth0` in the host, `port` on the bridge. Two queues each
    /// (XDP on single-queue veths serialises on one core), and no checksum/segmentation
    /// offloads on the host end: frames the stack sends are complete and MTU-sized, as XDP on
    /// the other side needs.
    fn plug(&self, host: &Netns, port: &str) {
        self.switch.exec(&[
            "ip", "link", "add", port, "numtxqueues", "2", "numrxqueues", "2", "type", "veth", "peer", "name", "eth0",
            "netns", &host.name, "numtxqueues", "2", "numrxqueues", "2",
        ]);
        self.switch.exec(&["ip", "link", "set", port, "master", "br0", "up"]);
        host.exec(&["ip", "link", "set", "eth0", "up"]);
        host.exec(&["ethtool", "-K", "eth0", "tx", "off", "tso", "off", "gso", "off"]);
    }

    /// Starts `args` inside namespace `ns` in the background; it is killed when the lab is
    /// dropped.
    pub fn spawn(&mut self, ns: &str, args: &[&str]) -> u32 {
        let child = Command::new("ip")
            .args(["netns", "exec", ns])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {args:?}: {e}"));
        let pid = child.id();
        self.children.push(child);
        pid
    }

    /// Stops a process started with [`Lab::spawn`].
    pub fn kill(&mut self, pid: u32) {
        if let Some(pos) = self.children.iter().position(|c| c.id() == pid) {
            let mut child = self.children.remove(pos);
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Waits until a TCP connect to `addr` succeeds from the calling thread's namespace.
pub fn wait_for_listener(addr: SocketAddr, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        assert!(Instant::now() < deadline, "{addr} did not start listening");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One HTTP/1.1 GET from source address `src`, `Connection: close`; returns status and body.
pub fn http_get(src: Ipv4Addr, dst: SocketAddrV4, path: &str) -> std::io::Result<(u16, Vec<u8>)> {
    exchange(src, dst, format!("GET {path} HTTP/1.1\r\nHost: {dst}\r\nConnection: close\r\n\r\n").as_bytes(), &[])
}

/// Sends `head` and `body` from `src` to `dst`, reads the response to the end.
fn exchange(src: Ipv4Addr, dst: SocketAddrV4, head: &[u8], body: &[u8]) -> std::io::Result<(u16, Vec<u8>)> {
    use std::io::{Read, Write};
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    socket.bind(&SocketAddr::from((src, 0)).into())?;
    socket.set_read_timeout(Some(Duration::from_secs(10)))?;
    socket.set_write_timeout(Some(Duration::from_secs(10)))?;
    socket.connect_timeout(&SocketAddr::V4(dst).into(), Duration::from_secs(5))?;
    let mut stream: std::net::TcpStream = socket.into();
    stream.write_all(head)?;
    stream.write_all(body)?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no end of headers"))?;
    let head = String::from_utf8_lossy(&raw[..split]);
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line: {head}")))?;
    Ok((status, raw[split + 4..].to_vec()))
}

/// One HTTP/1.1 POST of `body` from source address `src`, `Connection: close`; returns status
/// and response body.
pub fn http_post(src: Ipv4Addr, dst: SocketAddrV4, path: &str, body: &[u8]) -> std::io::Result<(u16, Vec<u8>)> {
    exchange(src, dst, format!("POST {path} HTTP/1.1\r\nHost: {dst}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len()).as_bytes(), body)
}

/// The byte at offset `i` of the test backend's `/bytes/N` responses.
pub fn pattern_byte(i: usize) -> u8 {
    (i % 251) as u8
}
