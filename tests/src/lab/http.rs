//! The lab's clients: bounded HTTP/1.1 exchanges from a chosen source address, the byte
//! pattern the test backend answers with, and a UDP client refused by a backend's ICMP.
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// Waits until a TCP connect to `addr` succeeds from the calling thread's namespace.
pub fn wait_for_listener(addr: SocketAddr, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        assert!(Instant::now() < deadline, "{addr} did not start listening");
        super::stop_if_interrupted();
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One HTTP/1.1 GET from source address `src` (IPv4 or IPv6), `Connection: close`; returns
/// status and body.
pub fn http_get(src: impl Into<IpAddr>, dst: impl Into<SocketAddr>, path: &str) -> std::io::Result<(u16, Vec<u8>)> {
    let dst = dst.into();
    exchange(
        SocketAddr::new(src.into(), 0),
        dst,
        format!("GET {path} HTTP/1.1\r\nHost: {dst}\r\nConnection: close\r\n\r\n").as_bytes(),
        &[],
    )
}

/// [`http_get`] from a chosen source port too (`src`), for a flow whose backend the caller
/// chose (a 5-tuple-hashed VIP).
pub fn http_get_from(src: SocketAddr, dst: SocketAddr, path: &str) -> std::io::Result<(u16, Vec<u8>)> {
    exchange(src, dst, format!("GET {path} HTTP/1.1\r\nHost: {dst}\r\nConnection: close\r\n\r\n").as_bytes(), &[])
}

/// Sends `head` and `body` from `src` (port 0: any) to `dst`, reads the response to the end.
fn exchange(src: SocketAddr, dst: SocketAddr, head: &[u8], body: &[u8]) -> std::io::Result<(u16, Vec<u8>)> {
    use std::io::{Read, Write};
    let socket = socket2::Socket::new(socket2::Domain::for_address(dst), socket2::Type::STREAM, None)?;
    socket.bind(&src.into())?;
    socket.set_read_timeout(Some(Duration::from_secs(10)))?;
    socket.set_write_timeout(Some(Duration::from_secs(10)))?;
    socket.connect_timeout(&dst.into(), Duration::from_secs(5))?;
    let mut stream: std::net::TcpStream = socket.into();
    stream.write_all(head)?;
    stream.write_all(body)?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let split =
        raw.windows(4).position(|w| w == b"\r\n\r\n").ok_or_else(|| std::io::Error::other("no end of headers"))?;
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
pub fn http_post(
    src: impl Into<IpAddr>,
    dst: impl Into<SocketAddr>,
    path: &str,
    body: &[u8],
) -> std::io::Result<(u16, Vec<u8>)> {
    let dst = dst.into();
    exchange(
        SocketAddr::new(src.into(), 0),
        dst,
        format!("POST {path} HTTP/1.1\r\nHost: {dst}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len())
            .as_bytes(),
        body,
    )
}

/// Every client asks the VIP (hashing the client address) which backend it reached, twice,
/// and must get the same answer both times; returns client → backend name.
pub fn spread(clients: &[IpAddr], vip: SocketAddr) -> HashMap<IpAddr, String> {
    let mut seen = HashMap::new();
    for &src in clients {
        for round in 0..2 {
            let (status, body) = http_get(src, vip, "/").unwrap_or_else(|e| panic!("{src} → {vip}: {e}"));
            assert_eq!(status, 200);
            let name = String::from_utf8(body).unwrap().trim().to_string();
            if round == 1 {
                assert_eq!(seen.get(&src), Some(&name), "hash=ip: client {src} must stick to one backend");
            }
            seen.insert(src, name);
        }
    }
    seen
}

/// The byte at offset `i` of the test backend's `/bytes/N` responses.
pub fn pattern_byte(i: usize) -> u8 {
    (i % 251) as u8
}

/// Asserts that a UDP socket bound to `local` and connected to `vip` (a NAT VIP whose backend has
/// nothing listening) is refused (ECONNREFUSED) within a few tries: the backend's port
/// unreachable reached it, quoting the datagram as the socket sent it. The backend's stack
/// rate-limits its errors, hence the tries.
pub fn udp_refused(local: SocketAddr, vip: SocketAddr) {
    let socket = std::net::UdpSocket::bind(local).unwrap();
    socket.connect(vip).unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    for _ in 0..5 {
        socket.send(b"query").unwrap();
        match socket.recv(&mut [0u8; 64]) {
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => continue,
            Err(e) => {
                assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{vip}: {e}");
                return;
            }
            Ok(n) => panic!("{vip}: an answer of {n} bytes where nothing listens"),
        }
    }
    panic!("{vip}: no answer at all: the port unreachable did not reach the client's socket");
}
