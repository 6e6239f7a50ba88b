//! Established connections under a spoofed-SYN flood, for the flood e2e suite and
//! `lb-bench flood`: keep-alive connections from the lab's client, a flood of SYNs from many
//! spoofed sources sent from an AF_PACKET socket, and a watcher that counts packets reaching
//! the client side with a backend's own address (a NAT reply that lost its way back).
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::lab::client_addr;
use crate::netns::enter_named;
use crate::packets::Frame;

/// A MAC address as bytes, from `lab::mac_of`'s text.
pub fn mac_bytes(text: &str) -> [u8; 6] {
    let bytes: Vec<u8> = text.trim().split(':').map(|h| u8::from_str_radix(h, 16).unwrap()).collect();
    bytes.try_into().unwrap()
}

/// An AF_PACKET socket bound to `dev` of the calling thread's namespace.
fn packet_socket(dev: &str) -> i32 {
    let protocol = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: plain socket calls with valid arguments; the address is a zeroed sockaddr_ll.
    unsafe {
        let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW, protocol as i32);
        assert!(fd >= 0, "AF_PACKET socket: {}", std::io::Error::last_os_error());
        let name = std::ffi::CString::new(dev).unwrap();
        let mut addr: libc::sockaddr_ll = std::mem::zeroed();
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = protocol;
        addr.sll_ifindex = libc::if_nametoindex(name.as_ptr()) as i32;
        let rc = libc::bind(fd, &addr as *const _ as *const libc::sockaddr, size_of::<libc::sockaddr_ll>() as u32);
        assert_eq!(rc, 0, "bind AF_PACKET: {}", std::io::Error::last_os_error());
        fd
    }
}

/// Keep-alive connections from the client namespace, each from its own client address: a
/// request every 300 ms (idle in between, as keep-alive connections mostly are) until
/// stopped. A connection is broken when a request fails or its answer comes from another
/// backend than its first.
pub struct KeepAlive {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Result<(), String>>>,
    pub requests: Arc<AtomicU64>,
}

impl KeepAlive {
    /// Connections to an L4 VIP: each must stay on the backend its first request reached.
    pub fn start(client_ns: &str, target: SocketAddrV4, connections: usize) -> KeepAlive {
        Self::spawn(client_ns, target, connections, true)
    }

    /// Connections to an HTTP proxy VIP, which balances each request anew: any backend may
    /// answer, but the connection must keep answering.
    pub fn start_per_request(client_ns: &str, target: SocketAddrV4, connections: usize) -> KeepAlive {
        Self::spawn(client_ns, target, connections, false)
    }

    fn spawn(client_ns: &str, target: SocketAddrV4, connections: usize, pinned: bool) -> KeepAlive {
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(AtomicU64::new(0));
        let threads = (0..connections)
            .map(|i| {
                let (stop, ns, requests) = (stop.clone(), client_ns.to_string(), requests.clone());
                std::thread::spawn(move || keep_alive(i, target, pinned, &stop, &ns, &requests))
            })
            .collect();
        KeepAlive { stop, threads, requests }
    }

    /// Stops after each connection's next request; returns one line per broken connection.
    pub fn stop(self) -> Vec<String> {
        self.stop.store(true, Relaxed);
        let results: Vec<Result<(), String>> = self.threads.into_iter().map(|t| t.join().unwrap()).collect();
        results
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.as_ref().err().map(|e| format!("connection {i}: {e}")))
            .collect()
    }
}

fn keep_alive(
    i: usize,
    target: SocketAddrV4,
    pinned: bool,
    stop: &AtomicBool,
    client_ns: &str,
    requests: &AtomicU64,
) -> Result<(), String> {
    let _in = enter_named(client_ns);
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).map_err(|e| e.to_string())?;
    socket.bind(&SocketAddr::from((client_addr(i), 0)).into()).map_err(|e| e.to_string())?;
    socket
        .connect_timeout(&SocketAddr::V4(target).into(), Duration::from_secs(5))
        .map_err(|e| format!("connect: {e}"))?;
    let stream: TcpStream = socket.into();
    // Long enough for TCP's retransmissions to get through once the flood is over: a
    // connection the flood only starves (two cores run the flood, the balancer and the
    // backends) recovers, one the balancer broke (reset, moved, black-holed) does not.
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    let mut backend = None;
    loop {
        let last = stop.load(Relaxed);
        out.write_all(b"GET / HTTP/1.1\r\nHost: vip\r\n\r\n").map_err(|e| format!("write: {e}"))?;
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).map_err(|e| format!("read: {e}"))? == 0 {
                return Err("closed by the far end".into());
            }
            if let Some(n) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = n.trim().parse().unwrap_or(0);
            }
            if line == "\r\n" {
                break;
            }
        }
        let mut body = vec![0u8; length];
        reader.read_exact(&mut body).map_err(|e| format!("body: {e}"))?;
        let name = String::from_utf8_lossy(&body).trim().to_string();
        if pinned && *backend.get_or_insert_with(|| name.clone()) != name {
            return Err(format!("moved from {backend:?} to {name}"));
        }
        requests.fetch_add(1, Relaxed);
        if last {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Counts IPv4 frames reaching the client namespace's `eth0` with one of `sources` as their
/// source address.
pub struct LeakWatcher {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<u64>,
}

impl LeakWatcher {
    pub fn start(client_ns: &str, sources: Vec<Ipv4Addr>) -> LeakWatcher {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (stop, ns) = (stop.clone(), client_ns.to_string());
            std::thread::spawn(move || {
                let _in = enter_named(&ns);
                let fd = packet_socket("eth0");
                let timeout = libc::timeval { tv_sec: 0, tv_usec: 200_000 };
                let mut leaked = 0;
                // SAFETY: a valid timeval for SO_RCVTIMEO; reads into a local buffer; fd is ours.
                unsafe {
                    libc::setsockopt(
                        fd,
                        libc::SOL_SOCKET,
                        libc::SO_RCVTIMEO,
                        &timeout as *const _ as *const libc::c_void,
                        size_of::<libc::timeval>() as u32,
                    );
                    let mut buf = [0u8; 2048];
                    let started = std::time::Instant::now();
                    while !stop.load(Relaxed) {
                        let n = libc::recv(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len(), 0);
                        let from_backend = sources.iter().any(|s| buf[26..30] == s.octets());
                        if n >= 34 && buf[12..14] == [0x08, 0x00] && from_backend {
                            leaked += 1;
                            // What leaked, so that a rare leak can be traced to its path.
                            if leaked <= 20 {
                                eprintln!(
                                    "leaked at +{:.1} s: {}",
                                    started.elapsed().as_secs_f64(),
                                    describe_ipv4(&buf[..n as usize])
                                );
                            }
                        }
                    }
                    libc::close(fd);
                }
                leaked
            })
        };
        LeakWatcher { stop, thread }
    }

    /// Frames seen with a watched source address (each of the first 20 described on stderr).
    pub fn stop(self) -> u64 {
        self.stop.store(true, Relaxed);
        self.thread.join().unwrap()
    }
}

/// An Ethernet frame carrying IPv4, in one line: protocol, addresses, ports and TCP flags.
fn describe_ipv4(frame: &[u8]) -> String {
    use etherparse::{NetSlice, SlicedPacket, TransportSlice};
    let Ok(packet) = SlicedPacket::from_ethernet(frame) else {
        return format!("unreadable frame, {} bytes", frame.len());
    };
    let Some(NetSlice::Ipv4(ip)) = &packet.net else {
        return format!("not IPv4, {} bytes", frame.len());
    };
    let (src, dst) = (ip.header().source_addr(), ip.header().destination_addr());
    match &packet.transport {
        Some(TransportSlice::Tcp(tcp)) => format!(
            "TCP {src}:{} -> {dst}:{} flags {:#04x}, {} bytes",
            tcp.source_port(),
            tcp.destination_port(),
            tcp.slice()[13],
            frame.len()
        ),
        Some(TransportSlice::Udp(udp)) => {
            format!("UDP {src}:{} -> {dst}:{}, {} bytes", udp.source_port(), udp.destination_port(), frame.len())
        }
        _ => format!("protocol {} {src} -> {dst}, {} bytes", ip.header().protocol().0, frame.len()),
    }
}

/// How a flood is sent.
#[derive(Clone, Copy, Debug)]
pub struct FloodSpec {
    pub target: SocketAddrV4,
    /// Ethernet addresses of the client's `eth0` and the balancer's side of the link.
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    /// Frames a second; `None`: as fast as one thread sends.
    pub rate: Option<u64>,
    pub duration: Duration,
    pub max_frames: u64,
}

/// What a flood sent.
#[derive(Clone, Copy, Debug)]
pub struct FloodSent {
    pub frames: u64,
    pub took: Duration,
}

impl FloodSent {
    pub fn pps(&self) -> f64 {
        self.frames as f64 / self.took.as_secs_f64().max(1e-9)
    }
}

/// SYNs from 65,536 spoofed 5-tuples of 192.0.2.100-249 (seeded), sent from the client
/// namespace's `eth0`, bounded in count and time.
pub struct Flood {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<FloodSent>,
}

impl Flood {
    pub fn start(client_ns: &str, spec: FloodSpec) -> Flood {
        let mut x = 0x2545_f491u64;
        let pool: Vec<Vec<u8>> = (0..65536)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let src = [192, 0, 2, 100 + (x % 150) as u8];
                Frame::tcp(src, 1024 + ((x >> 8) % 60000) as u16, spec.target.ip().octets(), spec.target.port())
                    .with(|f| {
                        f.src_mac = spec.src_mac;
                        f.dst_mac = spec.dst_mac
                    })
                    .bytes()
            })
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (stop, ns) = (stop.clone(), client_ns.to_string());
            std::thread::spawn(move || send_flood(&ns, &pool, spec, &stop))
        };
        Flood { stop, thread }
    }

    /// Waits for the flood to end (its time or count is up).
    pub fn join(self) -> FloodSent {
        self.thread.join().unwrap()
    }

    /// Ends the flood now.
    pub fn stop(self) -> FloodSent {
        self.stop.store(true, Relaxed);
        self.join()
    }
}

fn send_flood(ns: &str, pool: &[Vec<u8>], spec: FloodSpec, stop: &AtomicBool) -> FloodSent {
    let _in = enter_named(ns);
    let fd = packet_socket("eth0");
    let started = Instant::now();
    let mut frames = 0u64;
    let mut n = 0usize;
    // Checked once per batch: clock reads and pacing cost nothing per frame.
    const BATCH: usize = 256;
    while frames < spec.max_frames {
        if n.is_multiple_of(BATCH) {
            let elapsed = started.elapsed();
            if elapsed >= spec.duration || stop.load(Relaxed) {
                break;
            }
            if let Some(rate) = spec.rate {
                let due = Duration::from_secs_f64(frames as f64 / rate as f64);
                if due > elapsed {
                    std::thread::sleep(due - elapsed);
                }
            }
        }
        let frame = &pool[n % pool.len()];
        n += 1;
        // SAFETY: sends our own buffer on our own socket.
        if unsafe { libc::send(fd, frame.as_ptr() as *const libc::c_void, frame.len(), 0) } > 0 {
            frames += 1;
        }
    }
    // SAFETY: our own socket.
    unsafe { libc::close(fd) };
    FloodSent { frames, took: started.elapsed() }
}

#[cfg(test)]
mod tests {
    use super::describe_ipv4;
    use crate::packets::Frame;

    #[test]
    fn a_leaked_frame_is_described_by_its_protocol_ends_and_flags() {
        let syn = Frame::tcp([198, 51, 100, 11], 8080, [192, 0, 2, 7], 45000).bytes();
        assert_eq!(
            describe_ipv4(&syn),
            format!("TCP 198.51.100.11:8080 -> 192.0.2.7:45000 flags 0x02, {} bytes", syn.len())
        );
        let udp = Frame::udp([198, 51, 100, 12], 53, [192, 0, 2, 7], 5000).bytes();
        assert_eq!(describe_ipv4(&udp), format!("UDP 198.51.100.12:53 -> 192.0.2.7:5000, {} bytes", udp.len()));
    }
}
