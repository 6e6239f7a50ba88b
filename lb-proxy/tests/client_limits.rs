//! Limits an internet-facing VIP puts on each client: concurrent connections per client
//! address (`max_connections_per_client`) and request body size (`max_body_bytes`), over real
//! sockets, clients told apart by their loopback source address.
mod common;

use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroU64};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::{TokioExecutor, TokioIo};
use lb_proxy::Mode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// A connection to `to` from the loopback address `from` (any port).
async fn connect_from(from: [u8; 4], to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((from, 0))).unwrap();
    socket.connect(to).await.unwrap()
}

/// One GET with `Connection: close` over `s`: everything until the proxy closes (or LIMIT).
async fn get_closing(mut s: TcpStream) -> String {
    s.write_all(b"GET /bytes/3 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(LIMIT, s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// One GET on a kept-alive connection: the one small response it gets.
async fn get_kept(s: &mut TcpStream) -> String {
    s.write_all(b"GET /bytes/3 HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let mut buf = [0u8; 4096];
    let n = tokio::time::timeout(LIMIT, s.read(&mut buf)).await.unwrap().unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

const A: [u8; 4] = [127, 0, 0, 1];
const B: [u8; 4] = [127, 0, 0, 2];

#[tokio::test]
async fn a_client_at_its_cap_gets_429_and_other_clients_are_served() {
    let b = backends(1).await;
    let mut spec = http_spec(&b);
    spec.options.limits.max_connections_per_client = NonZeroU32::new(2);
    let p = proxy(spec).await;
    // Client A holds two keep-alive connections, both served.
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = connect_from(A, p.addr).await;
        assert_eq!(statuses(&get_kept(&mut s).await), vec![200]);
        held.push(s);
    }
    let hits = b[0].hits();
    // A third from A: 429, closed, never reaching the backend.
    let out = get_closing(connect_from(A, p.addr).await).await;
    assert_eq!(statuses(&out), vec![429], "{out}");
    assert!(out.to_ascii_lowercase().contains("connection: close"), "{out}");
    assert_eq!(b[0].hits(), hits, "a refused connection reaches no backend");
    // Client B is not held back by A.
    assert_eq!(statuses(&get_kept(&mut connect_from(B, p.addr).await).await), vec![200]);
    // Once A closes one, A gets a place again (the proxy sees the close: bounded wait).
    drop(held.pop());
    let mut served = false;
    for _ in 0..200 {
        if statuses(&get_closing(connect_from(A, p.addr).await).await) == vec![200] {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(served, "a closed connection's place must be usable again");
    let stats = p.handle.stats().remove(0);
    assert!(stats.clients_limited >= 1 && stats.rejected >= stats.clients_limited, "{stats:?}");
    assert_eq!(stats.backends[0].errors, 0, "{stats:?}");
}

#[tokio::test]
async fn a_tcp_client_at_its_cap_is_closed_before_any_backend() {
    let b = backends(1).await;
    let mut spec = http_spec(&b);
    spec.mode = Mode::Tcp;
    spec.options.limits.max_connections_per_client = NonZeroU32::new(1);
    let p = proxy(spec).await;
    let mut first = connect_from(A, p.addr).await;
    assert_eq!(statuses(&get_kept(&mut first).await), vec![200]);
    let conns = b[0].conns.load(std::sync::atomic::Ordering::Relaxed);
    // The second from A is closed without a byte; B is relayed.
    let out = get_closing(connect_from(A, p.addr).await).await;
    assert_eq!(out, "", "a refused TCP client gets nothing but the close");
    assert_eq!(b[0].conns.load(std::sync::atomic::Ordering::Relaxed), conns, "no backend connection for it");
    assert_eq!(statuses(&get_closing(connect_from(B, p.addr).await).await), vec![200]);
    assert_eq!(p.handle.stats()[0].clients_limited, 1);
}

/// A raw HTTP/1.1 exchange on a fresh connection: the whole answer until the proxy closes.
async fn exchange(addr: SocketAddr, head: &str, body: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    // The proxy may answer and close before taking the body: a failed write is its right.
    let _ = s.write_all(body).await;
    let mut out = Vec::new();
    let r = tokio::time::timeout(LIMIT, s.read_to_end(&mut out)).await;
    assert!(r.is_ok(), "the proxy kept the connection open: {:?}", String::from_utf8_lossy(&out));
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn bodies_over_the_limit_get_413_declared_or_streamed() {
    let b = backends(1).await;
    let mut spec = http_spec(&b);
    spec.options.limits.max_body_bytes = NonZeroU64::new(1000);
    let p = proxy(spec).await;
    // A body of exactly the limit is forwarded.
    let ok = exchange(
        p.addr,
        "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\nConnection: close\r\n\r\n",
        &[b'x'; 1000],
    )
    .await;
    assert_eq!(statuses(&ok), vec![200], "{ok}");
    assert!(ok.ends_with(&"x".repeat(1000)), "echoed whole");
    let hits = b[0].hits();
    // One byte more, declared: 413 before any backend, and the connection closes.
    let out = exchange(p.addr, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1001\r\n\r\n", &[b'x'; 1001]).await;
    assert_eq!(statuses(&out), vec![413], "{out}");
    // With Expect: 100-continue, the client is told 413 instead of being asked for the body.
    let out = exchange(
        p.addr,
        "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000000\r\nExpect: 100-continue\r\n\r\n",
        b"",
    )
    .await;
    assert_eq!(statuses(&out), vec![413], "no 100 Continue first: {out}");
    assert_eq!(b[0].hits(), hits, "declared sizes are refused before any backend");
    // Chunked, growing past the limit: cut, and answered 413 (the backend had the head; it
    // answers only after 2 s, so the cut comes first however the machine is loaded).
    let chunk = format!("1f4\r\n{}\r\n", "y".repeat(500));
    let out = exchange(
        p.addr,
        "POST /slow/2000 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
        format!("{chunk}{chunk}{chunk}0\r\n\r\n").as_bytes(),
    )
    .await;
    assert_eq!(statuses(&out), vec![413], "{out}");
    let stats = p.handle.stats().remove(0);
    assert!(stats.client_errors >= 3, "{stats:?}");
    assert_eq!((stats.backends[0].errors, stats.backends[0].ejected), (0, false), "the client's fault: {stats:?}");
}

#[tokio::test]
async fn h2_bodies_over_the_limit_get_413_and_the_connection_goes_on() {
    let b = backends(1).await;
    let mut spec = http_spec(&b);
    spec.options.limits.max_body_bytes = NonZeroU64::new(1000);
    let p = proxy(spec).await;
    let stream = TcpStream::connect(p.addr).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn);
    let post = |path: &str, body| hyper::Request::post(format!("http://test.local{path}")).body(body).unwrap();
    // Declared (h2 sends content-length for a full body).
    let resp = send.send_request(post("/echo", Full::new(Bytes::from(vec![b'x'; 1001])).boxed())).await.unwrap();
    assert_eq!(resp.status(), 413);
    // Streamed without a length: three DATA frames of 500 (to a backend that answers after
    // 2 s, so the cut comes first).
    let frames = (0..3).map(|_| Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from(vec![b'y'; 500]))));
    let body = StreamBody::new(futures_util::stream::iter(frames)).boxed();
    let resp = tokio::time::timeout(LIMIT, send.send_request(post("/slow/2000", body))).await.unwrap().unwrap();
    assert_eq!(resp.status(), 413);
    // The connection still serves a body within the limit.
    let resp = send.send_request(post("/echo", Full::new(Bytes::from(vec![b'z'; 1000])).boxed())).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.into_body().collect().await.unwrap().to_bytes().len(), 1000);
    assert_eq!(p.handle.stats()[0].backends[0].errors, 0);
}

#[tokio::test]
async fn tls_clients_refused_at_a_cap_are_closed_without_plain_text() {
    let ca = common::tls::Ca::new();
    let leaf = ca.leaf("a", &["a.test"]);
    let b = backends(1).await;
    let mut spec = http_spec(&b);
    spec.options.tls = Some(common::tls::termination(&leaf, &["http/1.1"]));
    spec.options.limits.max_connections = 1;
    spec.options.limits.max_connections_per_client = NonZeroU32::new(1);
    let p = proxy(spec).await;
    // A (127.0.0.1) holds the VIP's one place.
    let held = common::tls::connect(ca.client_config(&["http/1.1"]), p.addr, "a.test").await.unwrap();
    // A's second connection is over its own cap, B's first over the VIP's.
    for from in [A, B] {
        let mut s = connect_from(from, p.addr).await;
        let mut out = Vec::new();
        let r = tokio::time::timeout(LIMIT, s.read_to_end(&mut out)).await;
        assert!(r.is_ok(), "closed at once");
        assert!(out.is_empty(), "a TLS client must not be sent plain text: {:?}", String::from_utf8_lossy(&out));
    }
    let stats = p.handle.stats().remove(0);
    assert_eq!((stats.clients_limited, stats.rejected), (1, 2), "{stats:?}");
    drop(held);
}

#[tokio::test]
async fn a_client_past_its_request_rate_gets_429_with_retry_after_and_keeps_its_connection() {
    let b = backends(1).await;
    let mut spec = http_spec(&b);
    // One a second: the burst is spent long before the next one comes, however slow the run.
    spec.options.limits.requests_per_second_per_client = NonZeroU32::new(1);
    spec.options.limits.burst_per_client = NonZeroU32::new(3);
    let p = proxy(spec).await;
    let mut a = connect_from(A, p.addr).await;
    for _ in 0..3 {
        assert_eq!(statuses(&get_kept(&mut a).await), vec![200], "the burst");
    }
    let hits = b[0].hits();
    let out = get_kept(&mut a).await;
    assert_eq!(statuses(&out), vec![429], "{out}");
    assert!(out.to_ascii_lowercase().contains("retry-after: 1\r\n"), "{out}");
    assert_eq!(b[0].hits(), hits, "a refused request reaches no backend");
    // Another client has its own rate; A, on the same connection, is served once a request's
    // interval (1 s) has passed.
    assert_eq!(statuses(&get_kept(&mut connect_from(B, p.addr).await).await), vec![200]);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(statuses(&get_kept(&mut a).await), vec![200], "the connection was kept and the rate refilled");
    let stats = p.handle.stats().remove(0);
    assert_eq!(stats.clients_limited, 1, "{stats:?}");
    assert_eq!(stats.responses.0[3], 1, "one 4xx: {stats:?}");
}

#[tokio::test]
async fn a_tcp_client_past_its_connection_rate_is_closed() {
    let b = backends(1).await;
    let mut spec = http_spec(&b);
    spec.mode = Mode::Tcp;
    spec.options.limits.requests_per_second_per_client = NonZeroU32::new(1);
    spec.options.limits.burst_per_client = NonZeroU32::new(2);
    let p = proxy(spec).await;
    for _ in 0..2 {
        assert_eq!(statuses(&get_closing(connect_from(A, p.addr).await).await), vec![200]);
    }
    assert_eq!(get_closing(connect_from(A, p.addr).await).await, "", "the third in a second is closed");
    assert_eq!(statuses(&get_closing(connect_from(B, p.addr).await).await), vec![200]);
    assert_eq!(p.handle.stats()[0].clients_limited, 1);
}
