//! Established connections through the XDP balancer (NAT, a small connection table) under a
//! spoofed-SYN flood from a raw socket, with a backend added to the ring mid-flood: none may
//! break, and no packet may reach the client side with a backend's own address. Needs root.
use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use lb_common::ip_proto;
use lb_common::program_names;
use lb_common::stats::Counter;
use lb_common::vip::{forwarding, hash_mode};
use lb_ctl::dataplane::Dataplane;
use lb_ctl::dataplane::aya::AyaDataplane;
use lb_ctl::dataplane::load::{AttachMode, LoadOptions, attach, load_decap, load_ingress};
use lb_tests::balancer::{VipSpec, configure};
use lb_tests::lab::{Lab, backend_addr, client_addr, wait_for_listener};
use lb_tests::packets::Frame;
use lb_tests::privileges::require_root;

const RING: u32 = 65537;
const VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);
const CONNECTIONS: usize = 10;
/// The connection table: 1024 flows (256 sets of 4 ways), far fewer than the flood's sources.
const FLOWS: u32 = 1024;
const FLOOD_TIME: Duration = Duration::from_secs(8);
const FLOOD_MAX_FRAMES: u64 = 4_000_000;

fn counter(dp: &AyaDataplane, c: Counter) -> u64 {
    dp.counters().unwrap().into_iter().find(|(k, _)| *k == c).unwrap().1
}

fn mac_of(ns: &lb_tests::netns::Netns, dev: &str) -> [u8; 6] {
    let out = ns.exec(&["cat", &format!("/sys/class/net/{dev}/address")]);
    let text = String::from_utf8(out.stdout).unwrap();
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

/// One keep-alive connection: a request every 300 ms (idle in between, as keep-alive
/// connections mostly are) until `stop`; the first failure ends it.
fn keep_alive(i: usize, stop: Arc<AtomicBool>, lab_client: String, requests: Arc<AtomicU64>) -> Result<(), String> {
    let _in = lb_tests::netns::enter_named(&lab_client);
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).map_err(|e| e.to_string())?;
    socket.bind(&SocketAddr::from((client_addr(i), 0)).into()).map_err(|e| e.to_string())?;
    socket
        .connect_timeout(&SocketAddr::from((VIP, 80)).into(), Duration::from_secs(5))
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
        std::io::Read::read_exact(&mut reader, &mut body).map_err(|e| format!("body: {e}"))?;
        let name = String::from_utf8_lossy(&body).trim().to_string();
        if *backend.get_or_insert_with(|| name.clone()) != name {
            return Err(format!("moved from {backend:?} to {name}"));
        }
        requests.fetch_add(1, Relaxed);
        if last {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn established_connections_survive_a_syn_flood_and_a_ring_change() {
    if !require_root("established_connections_survive_a_syn_flood_and_a_ring_change") {
        return;
    }
    let backend_bin = env!("CARGO_BIN_EXE_lb-test-backend");
    let mut lab = Lab::new("fl", 3, CONNECTIONS);
    for i in 0..3 {
        let ns = lab.backends[i].name.clone();
        lab.spawn(&ns, &[backend_bin, "0.0.0.0:8080", &format!("backend-{i}")]);
    }
    let mut pass = load_decap().unwrap();
    {
        let _in = lab.switch.enter();
        attach(&mut pass, program_names::PASS, "p-lb", AttachMode::Native).unwrap();
    }
    let mut dp = {
        let _in = lab.lb.enter();
        let mut ebpf = load_ingress(&LoadOptions { pin_dir: None, ring_size: RING, flow_table_size: FLOWS }).unwrap();
        attach(&mut ebpf, program_names::INGRESS, "eth0", AttachMode::Native).unwrap();
        AyaDataplane::new(ebpf, RING)
    };
    let spec = |backends: usize| VipSpec {
        id: 0,
        addr: VIP,
        port: 80,
        protocol: ip_proto::TCP,
        forwarding: forwarding::NAT,
        hash: hash_mode::FLOW,
        encap_source: Ipv4Addr::new(198, 51, 100, 1),
        backends: (0..backends).map(|i| (i as u32, backend_addr(i), 8080, 100)).collect(),
    };
    configure(&mut dp, RING, &[spec(2)]);
    for i in 0..3 {
        lab.lb.exec(&["ping", "-c1", "-W2", &backend_addr(i).to_string()]);
        let _in = lab.backends[i].enter();
        wait_for_listener(SocketAddr::from((backend_addr(i), 8080)), Duration::from_secs(10));
    }
    let lb_mac = mac_of(&lab.lb, "eth0");
    let client_mac = mac_of(&lab.client, "eth0");
    let client_ns = lab.client.name.clone();

    // Watch the client side for anything from a backend's own address.
    let stop = Arc::new(AtomicBool::new(false));
    let leaked = Arc::new(AtomicU64::new(0));
    let watcher = {
        let (stop, leaked, ns) = (stop.clone(), leaked.clone(), client_ns.clone());
        std::thread::spawn(move || {
            let _in = lb_tests::netns::enter_named(&ns);
            let fd = packet_socket("eth0");
            let timeout = libc::timeval { tv_sec: 0, tv_usec: 200_000 };
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
                while !stop.load(Relaxed) {
                    let n = libc::recv(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len(), 0);
                    let from_backend = (0..3).any(|i| buf[26..30] == backend_addr(i).octets());
                    if n >= 34 && buf[12..14] == [0x08, 0x00] && from_backend {
                        leaked.fetch_add(1, Relaxed);
                    }
                }
                libc::close(fd);
            }
        })
    };

    // The long-lived connections, established before the flood.
    let requests = Arc::new(AtomicU64::new(0));
    let clients: Vec<_> = (0..CONNECTIONS)
        .map(|i| {
            let (stop, ns, requests) = (stop.clone(), client_ns.clone(), requests.clone());
            std::thread::spawn(move || keep_alive(i, stop, ns, requests))
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));

    // The flood: SYNs from many spoofed sources of 192.0.2.0/24 (65536 5-tuples, 64 times the
    // table), as fast as one thread sends, bounded in count and time. Halfway, a third backend
    // joins the ring.
    let mut x = 0x2545_f491u64;
    let pool: Vec<Vec<u8>> = (0..65536)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let src = [192, 0, 2, 100 + (x % 150) as u8];
            Frame::tcp(src, 1024 + ((x >> 8) % 60000) as u16, VIP.octets(), 80)
                .with(|f| {
                    f.src_mac = client_mac;
                    f.dst_mac = lb_mac
                })
                .bytes()
        })
        .collect();
    let flood_stop = Arc::new(AtomicBool::new(false));
    let flooder = {
        let (flood_stop, ns) = (flood_stop.clone(), client_ns.clone());
        std::thread::spawn(move || {
            let _in = lb_tests::netns::enter_named(&ns);
            let fd = packet_socket("eth0");
            let started = Instant::now();
            let mut sent = 0u64;
            let mut n = 0usize;
            while sent < FLOOD_MAX_FRAMES
                && (!n.is_multiple_of(1024) || (started.elapsed() < FLOOD_TIME && !flood_stop.load(Relaxed)))
            {
                let frame = &pool[n % pool.len()];
                n += 1;
                // SAFETY: sends our own buffer on our own socket.
                if unsafe { libc::send(fd, frame.as_ptr() as *const libc::c_void, frame.len(), 0) } > 0 {
                    sent += 1;
                }
            }
            // SAFETY: our own socket.
            unsafe { libc::close(fd) };
            (sent, started.elapsed())
        })
    };
    std::thread::sleep(FLOOD_TIME / 2);
    configure(&mut dp, RING, &[spec(3)]);
    let (sent, took) = flooder.join().unwrap();
    flood_stop.store(true, Relaxed);
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Relaxed);
    let results: Vec<Result<(), String>> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    watcher.join().unwrap();

    let broken: Vec<String> = results
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.as_ref().err().map(|e| format!("connection {i}: {e}")))
        .collect();
    println!(
        "flood: {sent} spoofed SYNs in {:.1} s ({:.0} pps); {} requests on {CONNECTIONS} connections; flow_new {}, table_full {}, set_proven {}, unrecorded {}, reverse_restored {}, leaked {}",
        took.as_secs_f64(),
        sent as f64 / took.as_secs_f64(),
        requests.load(Relaxed),
        counter(&dp, Counter::FlowNew),
        counter(&dp, Counter::FlowTableFull),
        counter(&dp, Counter::FlowSetProven),
        counter(&dp, Counter::FlowUnrecorded),
        counter(&dp, Counter::ReverseRestored),
        leaked.load(Relaxed),
    );
    assert!(sent > 10_000, "the flood must have been a flood: {sent} frames");
    assert!(broken.is_empty(), "broken connections:\n{}", broken.join("\n"));
    assert_eq!(leaked.load(Relaxed), 0, "packets reached the client side with a backend's address");
}
