//! A long-lived connection through a VIP: the test backend's `GET /hold/SECS` answers one dot
//! a second, so a connection broken on the way shows as a short body.
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::time::Duration;

use crate::netns::enter_named;

pub struct Hold {
    stream: TcpStream,
    head: Vec<u8>,
    secs: usize,
}

impl Hold {
    /// Opens it from `src` (inside the client namespace) to `vip` and reads the response head.
    pub fn open(client_ns: &str, vip: SocketAddrV4, src: Ipv4Addr, secs: usize) -> Hold {
        Hold::open_from(client_ns, vip, SocketAddrV4::new(src, 0), secs)
    }

    /// [`Hold::open`] from a chosen source port too (0: any), so the flow's 5-tuple is known
    /// before it is opened.
    pub fn open_from(client_ns: &str, vip: SocketAddrV4, src: SocketAddrV4, secs: usize) -> Hold {
        let _in = enter_named(client_ns);
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        socket.set_reuse_address(true).unwrap();
        socket.bind(&SocketAddr::V4(src).into()).unwrap_or_else(|e| panic!("hold: bind {src}: {e}"));
        socket.connect_timeout(&SocketAddr::V4(vip).into(), Duration::from_secs(5)).unwrap();
        let mut stream: TcpStream = socket.into();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(stream, "GET /hold/{secs} HTTP/1.1\r\nHost: vip\r\n\r\n").unwrap();
        let mut head = vec![0u8; 256];
        let n = stream.read(&mut head).unwrap();
        head.truncate(n);
        assert!(head.starts_with(b"HTTP/1.1 200"), "hold: {:?}", String::from_utf8_lossy(&head));
        Hold { stream, head, secs }
    }

    pub fn local(&self) -> SocketAddr {
        self.stream.local_addr().unwrap()
    }

    /// Reads to the end; panics unless the whole body (`secs` dots) arrived.
    pub fn finish(self, what: &str) {
        if let Err(e) = self.outcome() {
            panic!("{what}: the long-lived connection broke: {e}");
        }
    }

    /// Reads to the end: whether the whole body (`secs` dots) arrived, and if not what did.
    pub fn outcome(self) -> Result<(), String> {
        self.ending().result
    }

    /// Reads to the end: the body bytes expected, how many of them arrived intact (the dots
    /// before anything else or the end), and whether the whole body arrived.
    pub fn ending(mut self) -> Ending {
        let mut rest = Vec::new();
        let result = self.stream.read_to_end(&mut rest);
        let all = [&self.head[..], &rest[..]].concat();
        let expected = self.secs;
        let Some(split) = all.windows(4).position(|w| w == b"\r\n\r\n") else {
            return Ending { expected, intact: 0, result: Err("no end of headers".into()) };
        };
        let body = &all[split + 4..];
        let intact = body.iter().take(expected).take_while(|b| **b == b'.').count();
        let result = if result.is_ok() && body == ".".repeat(expected).as_bytes() {
            Ok(())
        } else {
            Err(format!("{result:?}, body {:?}", String::from_utf8_lossy(body)))
        };
        Ending { expected, intact, result }
    }
}

/// How a [`Hold`] ended.
#[derive(Debug)]
pub struct Ending {
    /// Body bytes the backend sends.
    pub expected: usize,
    /// Body bytes that arrived, in order and unaltered, before anything else or the end.
    pub intact: usize,
    /// Whether exactly the whole body arrived (and what did, if not).
    pub result: Result<(), String>,
}

impl Ending {
    /// Body bytes that did not arrive.
    pub fn lost(&self) -> usize {
        self.expected - self.intact
    }
}
