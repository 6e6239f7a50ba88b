//! A bounded HTTP client for the lab demo (std only), run inside the client namespace.
//!
//! `lb-test-client VIP:PORT REQUESTS SRC...` sends REQUESTS requests `GET /` in all, one new
//! connection each, taking the source addresses SRC in turn, and prints one line per request:
//! `SRC NAME` (the body: which backend answered) or `SRC error: WHAT`. Each request gives up
//! after 2 s, so the run is bounded by REQUESTS x 2 s.
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(2);

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let parsed = (|| {
        let vip: SocketAddrV4 = args.first()?.parse().ok()?;
        let requests: usize = args.get(1)?.parse().ok()?;
        let sources: Vec<Ipv4Addr> = args[2..].iter().map(|a| a.parse().ok()).collect::<Option<_>>()?;
        (!sources.is_empty()).then_some((vip, requests, sources))
    })();
    let Some((vip, requests, sources)) = parsed else {
        eprintln!("usage: lb-test-client VIP:PORT REQUESTS SRC...");
        std::process::exit(2);
    };
    for n in 0..requests {
        let src = sources[n % sources.len()];
        match get(src, vip) {
            Ok(name) => println!("{src} {name}"),
            Err(e) => println!("{src} error: {e}"),
        }
    }
}

fn get(src: Ipv4Addr, vip: SocketAddrV4) -> std::io::Result<String> {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    socket.bind(&SocketAddr::from((src, 0)).into())?;
    socket.set_read_timeout(Some(TIMEOUT))?;
    socket.set_write_timeout(Some(TIMEOUT))?;
    socket.connect_timeout(&SocketAddr::V4(vip).into(), TIMEOUT)?;
    let mut stream: TcpStream = socket.into();
    write!(stream, "GET / HTTP/1.1\r\nHost: {vip}\r\nConnection: close\r\n\r\n")?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").ok_or_else(|| std::io::Error::other("no end of headers"))?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(std::io::Error::other(format!("answer {:?}", head.lines().next().unwrap_or(""))));
    }
    Ok(body.trim().to_string())
}
