//! TCP mode (relay, half-close, retry, PROXY header) and graceful shutdown.
mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use common::*;
use lb_proxy::{BackendSpec, Mode, ProxyProtocol, ProxyVipSpec};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A TCP backend: reads everything until the client's FIN, then answers with
/// `<id>:<bytes read>:` followed by the data reversed, and closes.
async fn tcp_backend(id: u8) -> (SocketAddr, Arc<AtomicU64>) {
    let l = TcpListener::bind(loopback()).await.unwrap();
    let addr = l.local_addr().unwrap();
    let conns = Arc::new(AtomicU64::new(0));
    let c = conns.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            c.fetch_add(1, Relaxed);
            tokio::spawn(async move {
                let mut data = Vec::new();
                if s.read_to_end(&mut data).await.is_err() {
                    return;
                }
                let mut out = format!("{id}:{}:", data.len()).into_bytes();
                out.extend(data.iter().rev());
                let _ = s.write_all(&out).await;
            });
        }
    });
    (addr, conns)
}

fn tcp_spec(backends: Vec<SocketAddr>) -> ProxyVipSpec {
    let mut spec = ProxyVipSpec::new("tcp", loopback(), Mode::Tcp);
    spec.backends = backends.into_iter().map(BackendSpec::new).collect();
    spec
}

/// Sends `data`, half-closes, and reads the whole answer.
async fn exchange(addr: SocketAddr, data: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let (mut r, mut w) = s.split();
    let send = async {
        w.write_all(data).await.unwrap();
        w.shutdown().await.unwrap();
    };
    let mut out = Vec::new();
    let recv = r.read_to_end(&mut out);
    tokio::time::timeout(LIMIT, async { tokio::join!(send, recv).1.unwrap() }).await.unwrap();
    out
}

#[tokio::test]
async fn tcp_relay_with_half_close_is_byte_exact() {
    let (a, _) = tcp_backend(7).await;
    let p = proxy(tcp_spec(vec![a])).await;
    // The backend only answers after the client's FIN has been relayed: half-close works
    // only if the proxy forwards the FIN and keeps the other direction open.
    let data = pattern(3 * 1024 * 1024);
    let out = exchange(p.addr, &data).await;
    let prefix = format!("7:{}:", data.len());
    assert!(out.starts_with(prefix.as_bytes()));
    let body = &out[prefix.len()..];
    assert!(body.iter().eq(data.iter().rev()), "relayed bytes differ");
    assert_eq!(exchange(p.addr, b"").await, b"7:0:");
}

#[tokio::test]
async fn tcp_retries_another_backend_and_spreads() {
    let (a, ca) = tcp_backend(1).await;
    let (b, cb) = tcp_backend(2).await;
    let mut spec = tcp_spec(vec![dead_addr().await, a, b]);
    spec.options.outlier.consecutive_failures = 0;
    let p = proxy(spec).await;
    for _ in 0..12 {
        let out = exchange(p.addr, b"abc").await;
        assert!(out == b"1:3:cba" || out == b"2:3:cba", "{:?}", String::from_utf8_lossy(&out));
    }
    assert_eq!(ca.load(Relaxed) + cb.load(Relaxed), 12);
    assert!(ca.load(Relaxed) >= 4 && cb.load(Relaxed) >= 4);
    assert_eq!(p.handle.stats()[0].backends[0].errors, 4);
}

#[tokio::test]
async fn tcp_proxy_protocol_header_comes_first() {
    let (a, _) = tcp_backend(1).await;
    let mut spec = tcp_spec(vec![a]);
    spec.options.proxy_protocol = ProxyProtocol::V1;
    let p = proxy(spec).await;
    let out = exchange(p.addr, b"xy").await;
    let text = String::from_utf8_lossy(&out).into_owned();
    // The backend reverses what it got: the PROXY line, then "xy".
    let got: String = text.splitn(3, ':').nth(2).unwrap().chars().rev().collect();
    let want = "PROXY TCP4 127.0.0.1 127.0.0.1 ";
    assert!(got.starts_with(want) && got.ends_with(&format!(" {}\r\nxy", p.addr.port())), "{got:?}");
}

#[tokio::test]
async fn tcp_without_backends_closes_the_client() {
    let p = proxy(tcp_spec(vec![dead_addr().await])).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    let _ = s.write_all(b"hello").await;
    let mut buf = [0u8; 16];
    // Closed (or reset, since "hello" was never read): either way no hang and no data.
    let r = tokio::time::timeout(LIMIT, s.read(&mut buf)).await.unwrap();
    assert!(matches!(r, Ok(0) | Err(_)), "{r:?}");
    assert_eq!(p.handle.stats()[0].rejected, 1);
}

#[tokio::test]
async fn graceful_shutdown_finishes_in_flight_requests_and_stops_accepting() {
    let b = backends(1).await;
    let p = proxy(http_spec(&b)).await;
    let addr = p.addr;
    let inflight = tokio::spawn(async move { fetch(addr, "/slow/500").await });
    for _ in 0..1000 {
        if p.handle.stats()[0].backends[0].active == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let handle = p.handle.clone();
    let stopping = tokio::spawn(async move { handle.shutdown(Duration::from_secs(10)).await });
    let g = tokio::time::timeout(LIMIT, inflight).await.unwrap().unwrap();
    assert_eq!((g.status, g.text().as_str()), (200, "slow"));
    tokio::time::timeout(LIMIT, stopping).await.unwrap().unwrap();
    // The listener is closed: new connections are refused.
    assert!(TcpStream::connect(addr).await.is_err());
    assert!(p.handle.stats().is_empty());
}

#[tokio::test]
async fn shutdown_cuts_what_outlives_the_grace_period() {
    let b = backends(1).await;
    let p = proxy(http_spec(&b)).await;
    let mut c = Client::connect(p.addr).await;
    let slow = tokio::spawn(async move { c.get("/slow/10000").await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    tokio::time::timeout(LIMIT, p.handle.shutdown(Duration::from_millis(200))).await.unwrap();
    let r = tokio::time::timeout(LIMIT, slow).await.unwrap().unwrap();
    assert!(r.is_err(), "the cut request fails instead of hanging: {r:?}");
}

#[tokio::test]
async fn shutdown_cuts_a_tcp_relay_both_ways() {
    let (a, _) = tcp_backend(1).await;
    let p = proxy(tcp_spec(vec![a])).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    // The backend answers only after the client's FIN: both directions wait when the stop comes.
    s.write_all(b"no FIN yet").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    tokio::time::timeout(LIMIT, p.handle.shutdown(Duration::from_millis(200))).await.unwrap();
    let mut buf = Vec::new();
    let r = tokio::time::timeout(LIMIT, s.read_to_end(&mut buf)).await;
    assert!(r.is_ok(), "a relay that outlives the grace period must be closed, each way");
    assert!(buf.is_empty(), "{buf:?}");
}

#[tokio::test]
async fn idle_tcp_relay_is_closed() {
    let (a, _) = tcp_backend(1).await;
    let mut spec = tcp_spec(vec![a]);
    spec.options.timeouts.tunnel = Duration::from_millis(300);
    let p = proxy(spec).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"some bytes, then silence").await.unwrap();
    // The backend waits for a FIN that never comes; the proxy ends the silent relay.
    let mut buf = Vec::new();
    let r = tokio::time::timeout(LIMIT, s.read_to_end(&mut buf)).await;
    assert!(r.is_ok(), "an idle relay must be closed");
    assert!(buf.is_empty());
}

/// A VIP whose listening socket is shut down under it stops accepting and says so in its
/// stats (`listening: false`), instead of looking fine.
#[tokio::test]
async fn a_vip_that_loses_its_listener_reports_it() {
    use std::os::fd::AsRawFd as _;
    let (backend, _) = tcp_backend(1).await;
    let mut spec = tcp_spec(vec![backend]);
    spec.listen = loopback();
    let listener = TcpListener::bind(spec.listen).await.unwrap();
    let fd = listener.as_raw_fd();
    let handle = lb_proxy::Proxy::start_with_listeners(vec![(spec, listener)]).unwrap();
    assert!(handle.stats()[0].listening);
    // SAFETY: `fd` is the listener the proxy holds, open until the proxy drops it; shutting
    // it down is what an outside failure would do.
    assert_eq!(unsafe { libc::shutdown(fd, libc::SHUT_RDWR) }, 0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while handle.stats()[0].listening {
        assert!(tokio::time::Instant::now() < deadline, "the lost listener was never noticed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `Proxy::start` gives every worker its own listener on the VIP's address (SO_REUSEPORT), so
/// no accepted connection crosses threads; all of them serve.
#[tokio::test]
async fn every_worker_listens_on_the_vip_address() {
    let (backend, served) = tcp_backend(1).await;
    let mut spec = tcp_spec(vec![backend]);
    spec.listen = "127.0.0.1:0".parse().unwrap();
    let handle = lb_proxy::Proxy::builder().workers(3).start(vec![spec]).await.unwrap();
    let addr = handle.local_addr(&handle.stats()[0].name).unwrap();
    // Listening sockets on the port, from /proc/net/tcp (state 0A = LISTEN).
    let port = format!(":{:04X}", addr.port());
    let tcp = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let listening = tcp.lines().filter(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 3 && f[1].ends_with(&port) && f[3] == "0A"
    });
    assert_eq!(listening.count(), 3, "a listener per worker");
    for i in 0..30u8 {
        let mut want = b"1:100:".to_vec();
        want.extend([i; 100]);
        assert_eq!(exchange(addr, &[i; 100]).await, want);
    }
    assert_eq!(served.load(std::sync::atomic::Ordering::Relaxed), 30);
    // Another program's plain listener on the address is refused, as a plain bind would be.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut spec = tcp_spec(vec![backend]);
    spec.name = "second".into();
    spec.listen = taken.local_addr().unwrap();
    assert!(handle.add_vip(spec).await.is_err(), "an address in use is refused");
}
